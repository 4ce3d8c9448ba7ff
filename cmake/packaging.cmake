# Debian packages with CPack, one per install component (cmake/install.cmake):
#
#   cmake --workflow --preset packages      # build-packages/libtune*.deb
#
#   libtune0.1     the shared library (its dependencies from dpkg-shlibdeps)
#   libtune-dev    headers, CMake package, pkg-config file; needs nlohmann-json3-dev
#   libtune-tools  tune, tune-train-worker, tune-example-fashion-mnist, the Python
#                  module, the systemd units (installed, not enabled or started)
#
# The only maintainer scripts are CPack's ldconfig calls for the library.
set(libtune_soname_version ${PROJECT_VERSION_MAJOR}.${PROJECT_VERSION_MINOR})

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME libtune)
set(CPACK_PACKAGE_VENDOR libtune)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
# Each package's first description line is its own synopsis (a summary set here would
# be every package's first line).
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_COMPONENTS_ALL runtime dev tools)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_MAINTAINER "libtune developers <libtune@localhost>")
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_ENABLE_COMPONENT_DEPENDS ON)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS_POLICY ">=")
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)

set(libtune_about "libtune tunes hyperparameters on a cluster of GPU machines, as Ray Tune does:
placement groups, trials isolated on their GPUs, schedulers and searches,
checkpoints and failover.")
set(CPACK_COMPONENT_RUNTIME_DESCRIPTION "distributed hyperparameter tuning on GPUs - shared library
${libtune_about}
This package holds libtune.so.${libtune_soname_version}.")
set(CPACK_DEBIAN_RUNTIME_PACKAGE_NAME libtune${libtune_soname_version})
set(CPACK_DEBIAN_RUNTIME_PACKAGE_SECTION libs)

set(CPACK_COMPONENT_DEV_DESCRIPTION "distributed hyperparameter tuning on GPUs - development files
${libtune_about}
This package holds the C++ API's headers (tune/tune.hpp), the CMake package
(find_package(libtune), target libtune::tune) and the pkg-config file (libtune.pc).")
set(CPACK_COMPONENT_DEV_DEPENDS runtime)
set(CPACK_DEBIAN_DEV_PACKAGE_NAME libtune-dev)
set(CPACK_DEBIAN_DEV_PACKAGE_SECTION libdevel)
set(CPACK_DEBIAN_DEV_PACKAGE_DEPENDS "nlohmann-json3-dev (>= 3)")

set(CPACK_COMPONENT_TOOLS_DESCRIPTION "distributed hyperparameter tuning on GPUs - command-line tool
${libtune_about}
This package holds tune (start a head or a node, tune run, status, groups, users),
the training worker, the Fashion-MNIST example, the trials' Python module
(import libtune) and the systemd units libtune-head.service and libtune-node.service
(installed, not enabled).")
set(CPACK_COMPONENT_TOOLS_DEPENDS runtime)
set(CPACK_DEBIAN_TOOLS_PACKAGE_NAME libtune-tools)
set(CPACK_DEBIAN_TOOLS_PACKAGE_SECTION science)
# Trials written in Python import the module with the system's Python.
set(CPACK_DEBIAN_TOOLS_PACKAGE_DEPENDS "python3")
set(CPACK_DEBIAN_TOOLS_PACKAGE_RECOMMENDS "dataset-fashion-mnist")
if(LIBTUNE_HAVE_CUDA)
  # The training worker and the example link cuBLAS and cuDNN, which Debian does not
  # package (dpkg-shlibdeps finds no package for them): NVIDIA's apt repository has them.
  set(CPACK_DEBIAN_TOOLS_PACKAGE_SUGGESTS
      "libcublas-${CUDAToolkit_VERSION_MAJOR}-${CUDAToolkit_VERSION_MINOR}, libcudnn9-cuda-${CUDAToolkit_VERSION_MAJOR}")
endif()
# libtune-tools' programs need libtune.so of libtune0.1 (the component dependency
# above): dpkg-shlibdeps, which runs in a component's staging folder, finds it in the
# runtime component's beside it.
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS_PRIVATE_DIRS ../runtime${CPACK_PACKAGING_INSTALL_PREFIX}/${CMAKE_INSTALL_LIBDIR})

include(CPack)
