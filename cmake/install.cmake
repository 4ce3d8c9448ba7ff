# `cmake --install build [--prefix P]`, in three components (the Debian packages of
# cmake/packaging.cmake):
#   runtime  libtune.so.0.1                                           -> libtune0.1
#   dev      the public headers, libtune.so, the CMake package       -> libtune-dev
#            (libtune::tune) and libtune.pc
#   tools    tune, tune-train-worker, tune-example-fashion-mnist,    -> libtune-tools
#            the trials' Python module, the systemd units
# Every path is relative to the prefix given at install time, so the tree can be moved.
include(CMakePackageConfigHelpers)

set(LIBTUNE_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/libtune CACHE STRING
    "Where libtuneConfig.cmake goes (relative to the prefix)")
set(LIBTUNE_INSTALL_PKGCONFIGDIR ${CMAKE_INSTALL_LIBDIR}/pkgconfig CACHE STRING
    "Where libtune.pc goes (relative to the prefix)")
# Debian's and Ubuntu's Python looks here below /usr; elsewhere put P/lib/python3/dist-packages
# on PYTHONPATH.
set(LIBTUNE_INSTALL_PYTHONDIR lib/python3/dist-packages CACHE STRING
    "Where the trials' Python module (libtune) goes (relative to the prefix)")
set(LIBTUNE_INSTALL_SYSTEMDDIR lib/systemd/system CACHE STRING
    "Where the systemd units go (relative to the prefix)")
foreach(dir CMAKE_INSTALL_LIBDIR CMAKE_INSTALL_BINDIR CMAKE_INSTALL_INCLUDEDIR LIBTUNE_INSTALL_CMAKEDIR
            LIBTUNE_INSTALL_PKGCONFIGDIR LIBTUNE_INSTALL_PYTHONDIR LIBTUNE_INSTALL_SYSTEMDDIR)
  if(IS_ABSOLUTE "${${dir}}")
    message(FATAL_ERROR "libtune: ${dir} is ${${dir}}: give it relative to the prefix "
                        "(the prefix is chosen at install time: cmake --install build --prefix P)")
  endif()
endforeach()

# --- the library and its CMake package ------------------------------------------------
install(TARGETS libtune EXPORT libtuneTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT runtime NAMELINK_COMPONENT dev)
foreach(header IN LISTS LIBTUNE_PUBLIC_HEADERS)
  get_filename_component(dir ${header} DIRECTORY)
  install(FILES ${PROJECT_BINARY_DIR}/include/${header} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/${dir}
          COMPONENT dev)
endforeach()
install(EXPORT libtuneTargets NAMESPACE libtune:: DESTINATION ${LIBTUNE_INSTALL_CMAKEDIR} COMPONENT dev)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/libtuneConfig.cmake.in
  ${PROJECT_BINARY_DIR}/libtuneConfig.cmake INSTALL_DESTINATION ${LIBTUNE_INSTALL_CMAKEDIR})
# Before 1.0 a minor version may change the API: 0.1.x satisfies find_package(libtune 0.1).
write_basic_package_version_file(${PROJECT_BINARY_DIR}/libtuneConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/libtuneConfig.cmake ${PROJECT_BINARY_DIR}/libtuneConfigVersion.cmake
  DESTINATION ${LIBTUNE_INSTALL_CMAKEDIR} COMPONENT dev)

# pkg-config: the prefix is found from the file's own place (${pcfiledir}).
file(RELATIVE_PATH LIBTUNE_PC_TO_PREFIX /prefix/${LIBTUNE_INSTALL_PKGCONFIGDIR} /prefix)
configure_file(${PROJECT_SOURCE_DIR}/cmake/libtune.pc.in ${PROJECT_BINARY_DIR}/libtune.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/libtune.pc DESTINATION ${LIBTUNE_INSTALL_PKGCONFIGDIR} COMPONENT dev)

# --- the programs ---------------------------------------------------------------------
# They find libtune.so beside them in any prefix ($ORIGIN/../lib).
set(libtune_program_rpath "$ORIGIN/../${CMAKE_INSTALL_LIBDIR}")
if(LIBTUNE_TOOLS)
  set_target_properties(tune tune-train-worker PROPERTIES INSTALL_RPATH "${libtune_program_rpath}")
  install(TARGETS tune tune-train-worker RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT tools)
  # The trials' Python module (nodes also hand it to their trials themselves): here for
  # `import libtune` outside a trial.
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/python/libtune DESTINATION ${LIBTUNE_INSTALL_PYTHONDIR}
          COMPONENT tools FILES_MATCHING PATTERN "*.py" PATTERN "__pycache__" EXCLUDE)
  # The systemd units start P/bin/tune: written at install time, when P is known.
  install(CODE "
    foreach(unit libtune-head.service libtune-node.service)
      file(READ \"${PROJECT_SOURCE_DIR}/deploy/systemd/\${unit}\" text)
      string(REPLACE \"/usr/local/bin/tune \" \"\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_BINDIR}/tune \" text \"\${text}\")
      file(WRITE \"${PROJECT_BINARY_DIR}/systemd/\${unit}\" \"\${text}\")
      file(INSTALL DESTINATION \"\${CMAKE_INSTALL_PREFIX}/${LIBTUNE_INSTALL_SYSTEMDDIR}\" TYPE FILE
           FILES \"${PROJECT_BINARY_DIR}/systemd/\${unit}\")
    endforeach()" COMPONENT tools)
endif()
if(LIBTUNE_EXAMPLES)
  # The demo's tuning script, as tune-example-fashion-mnist (install(PROGRAMS) copies the
  # build's file as it is: its run path is set here as install(TARGETS) would).
  install(PROGRAMS $<TARGET_FILE:fashion_mnist> DESTINATION ${CMAKE_INSTALL_BINDIR}
          RENAME tune-example-fashion-mnist COMPONENT tools)
  install(CODE "file(RPATH_SET FILE \"\$ENV{DESTDIR}\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_BINDIR}/tune-example-fashion-mnist\"
                     NEW_RPATH \"${libtune_program_rpath}\")" COMPONENT tools)
endif()
