# `cpack -G DEB` in the build directory: loom_<version>_<arch>.deb with what
# `cmake --install` puts under /usr (the CLI, libloom.so, libloom_nccl.so,
# NCCL's names for it, headers, CMake and pkg-config files, man pages, bash
# completion). Depends: comes from dpkg-shlibdeps, so it names the runtime
# libraries the binaries link and nothing else. UCX is dlopen'ed when
# NCCL_NET=UCX selects it, never linked, so libucx0 is no Depends but a
# Suggests: Debian policy 7.2 keeps Recommends for what all but unusual
# installations have, and UCX is opt-in. The PyTorch extension (component
# `torch`) stays out: it would make the package depend on PyTorch.
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME loom)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_CONTACT "loom developers <loom@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
    "collective communication runtime with NCCL's API (host and CUDA buffers)")
set(CPACK_PACKAGE_DESCRIPTION
    "loom runs all-reduce and the other collectives between processes over shared memory, TCP, UCX, InfiniBand verbs and CUDA IPC. It provides NCCL's C API (libloom_nccl.so, also as libnccl.so.2 under /usr/lib/loom/nccl), a C++ API (libloom.so), and the loom command: run, perf, topo, doctor, info.")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION net)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
if(LOOM_HAVE_UCX)
  # The API version loom calls (ucp_init_version) is the headers' major.minor.
  string(REGEX MATCH "^[0-9]+\\.[0-9]+" _loom_ucx_api "${UCX_VERSION}")
  set(CPACK_DEBIAN_PACKAGE_SUGGESTS "libucx0 (>= ${_loom_ucx_api})")
endif()
# Every component but `torch`, in one package named loom.
get_cmake_property(_loom_components COMPONENTS)
list(REMOVE_ITEM _loom_components torch)
set(CPACK_COMPONENTS_ALL ${_loom_components})
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_GROUPING ALL_COMPONENTS_IN_ONE)
# Debug information stays in the build tree.
set(CPACK_STRIP_FILES ON)
include(CPack)
