# The Python wheel's install rules (python/pyproject.toml: scikit-build-core configures
# the whole project with LIBTUNE_WHEEL=ON and installs into the wheel's platlib):
#
#   libtune/__init__.py, ...   the Python package (python/libtune)
#   libtune/bin/tune           the CLI (run path $ORIGIN/../lib)
#   libtune/lib/libtune.so.0.1 the engine: one file, named by its SONAME (a wheel holds
#                              no symbolic links, so no libtune.so.0.1.0 beside it)
#
# and nothing else of cmake/install.cmake (no headers, CMake package, pkg-config file,
# training worker, example or systemd units). python/build-wheel.sh then repairs the
# wheel with auditwheel, which copies the shared libraries these link (CAF, Boost,
# yaml-cpp, RE2, SQLite, OpenSSL, ...) into the wheel's libtune.libs/. docs/install.md,
# "pip install (wheel)".
if(NOT LIBTUNE_TOOLS)
  message(FATAL_ERROR "libtune: LIBTUNE_WHEEL needs the tune program: configure with -DLIBTUNE_TOOLS=ON")
endif()

set(LIBTUNE_WHEEL_DIR libtune CACHE STRING "The Python package's folder in the wheel (relative to the platlib)")

# The library's file is its SONAME (libtune.so.0.1): VERSION equal to SOVERSION makes
# CMake write one file and no SONAME link.
set_target_properties(libtune PROPERTIES VERSION ${PROJECT_VERSION_MAJOR}.${PROJECT_VERSION_MINOR})
set_target_properties(tune PROPERTIES INSTALL_RPATH "$ORIGIN/../lib")

# install(TARGETS): stripped by scikit-build-core's `cmake --install --strip` (Release
# builds carry no debug information to begin with).
install(TARGETS libtune LIBRARY DESTINATION ${LIBTUNE_WHEEL_DIR}/lib NAMELINK_SKIP COMPONENT wheel)
install(TARGETS tune RUNTIME DESTINATION ${LIBTUNE_WHEEL_DIR}/bin COMPONENT wheel)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/python/libtune/ DESTINATION ${LIBTUNE_WHEEL_DIR} COMPONENT wheel
        FILES_MATCHING PATTERN "*.py" PATTERN "__pycache__" EXCLUDE)
