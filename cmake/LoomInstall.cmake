# cmake --install: headers, libraries, the loom CLI, a CMake package
# (find_package(loom) -> loom::loom, loom::nccl) and pkg-config files.
include(CMakePackageConfigHelpers)

install(FILES
  comm/include/loom/loom.hpp comm/include/loom/status.hpp comm/include/loom/types.hpp
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/loom)

# The static C++ library is the set of per-folder archives; install them all
# and export them so find_package(loom) resolves loom::loom's dependencies.
set(LOOM_EXPORTED_TARGETS loom_base loom_topology loom_reduce loom_patterns loom_transports loom_ib
    loom_ipc_cache loom_collectives loom_loom)
if(TARGET loom_ucx)
  list(APPEND LOOM_EXPORTED_TARGETS loom_ucx)
endif()
# Users write loom::loom and loom::nccl, as inside this tree.
set_target_properties(loom_loom PROPERTIES EXPORT_NAME loom)
if(TARGET loom_nccl)
  set_target_properties(loom_nccl PROPERTIES EXPORT_NAME nccl)
endif()
install(TARGETS ${LOOM_EXPORTED_TARGETS} EXPORT loomTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
if(TARGET loom_nccl)
  install(TARGETS loom_nccl EXPORT loomTargets
    LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
    ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
endif()
install(EXPORT loomTargets NAMESPACE loom:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/loom)

file(WRITE ${CMAKE_CURRENT_BINARY_DIR}/loomConfig.cmake.in [=[
@PACKAGE_INIT@
include(CMakeFindDependencyMacro)
find_dependency(Threads)
find_dependency(Boost)
if(@LOOM_HAVE_HWLOC@)
  find_dependency(PkgConfig)
  pkg_check_modules(HWLOC REQUIRED IMPORTED_TARGET hwloc)
endif()
if(@LOOM_HAVE_UCX@)
  find_dependency(PkgConfig)
  pkg_check_modules(UCX REQUIRED IMPORTED_TARGET ucx)
endif()
if(@LOOM_HAVE_CUDA@)
  # loom::loom links loom_cuda (device buffers), which links the static CUDA
  # runtime: the consumer needs the toolkit's libraries, not nvcc.
  if(NOT CUDAToolkit_ROOT AND EXISTS "@CUDAToolkit_LIBRARY_ROOT@")
    set(CUDAToolkit_ROOT "@CUDAToolkit_LIBRARY_ROOT@")
  endif()
  find_dependency(CUDAToolkit)
endif()
include("${CMAKE_CURRENT_LIST_DIR}/loomTargets.cmake")
]=])
configure_package_config_file(${CMAKE_CURRENT_BINARY_DIR}/loomConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/loomConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/loom)
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/loomConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/loomConfig.cmake
              ${CMAKE_CURRENT_BINARY_DIR}/loomConfigVersion.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/loom)

set(LOOM_PC_REQUIRES "")
if(LOOM_HAVE_HWLOC)
  set(LOOM_PC_REQUIRES "hwloc")
endif()

# pkg-config: `pkg-config --cflags --libs loom` (C++ API, static archives) and
# `loom-nccl` (the NCCL-compatible shared library).
set(LOOM_PC_LIBS "")
set(LOOM_PC_ARCHIVES loom_loom loom_collectives)
if(TARGET loom_ucx)
  list(APPEND LOOM_PC_ARCHIVES loom_ucx)
  string(APPEND LOOM_PC_REQUIRES " ucx")
endif()
if(TARGET loom_cuda)
  # CudaDeviceOps (in loom_reduce_cuda) uses the runtime wrapper in loom_cuda.
  list(APPEND LOOM_PC_ARCHIVES loom_reduce_cuda loom_cuda)
endif()
foreach(t ${LOOM_PC_ARCHIVES} loom_transports loom_ib loom_ipc_cache loom_reduce loom_topology loom_base)
  string(APPEND LOOM_PC_LIBS " -l${t}")
endforeach()
if(TARGET loom_cuda)
  # The static CUDA runtime and what it needs (cudart_static is not in pkg-config).
  string(APPEND LOOM_PC_LIBS " -L${CUDAToolkit_LIBRARY_DIR} -lcudart_static -ldl")
endif()
# The prefix is found from the .pc file's own location, so `cmake --install
# --prefix X` works without reconfiguring.
file(RELATIVE_PATH LOOM_PC_UP "/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/")
file(WRITE ${CMAKE_CURRENT_BINARY_DIR}/loom.pc
"prefix=\${pcfiledir}/${LOOM_PC_UP}
libdir=\${prefix}/${CMAKE_INSTALL_LIBDIR}
includedir=\${prefix}/${CMAKE_INSTALL_INCLUDEDIR}

Name: loom
Description: loom collective-communication runtime (C++ API)
Version: ${PROJECT_VERSION}
Cflags: -I\${includedir}
Libs: -L\${libdir}${LOOM_PC_LIBS} -lpthread -lrt
Requires: ${LOOM_PC_REQUIRES}
")
file(WRITE ${CMAKE_CURRENT_BINARY_DIR}/loom-nccl.pc
"prefix=\${pcfiledir}/${LOOM_PC_UP}
libdir=\${prefix}/${CMAKE_INSTALL_LIBDIR}
includedir=\${prefix}/${CMAKE_INSTALL_INCLUDEDIR}

Name: loom-nccl
Description: loom's NCCL-compatible C API (loom/nccl.h, libloom_nccl.so)
Version: ${PROJECT_VERSION}
Cflags: -I\${includedir}
Libs: -L\${libdir} -lloom_nccl
")
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/loom.pc ${CMAKE_CURRENT_BINARY_DIR}/loom-nccl.pc
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
