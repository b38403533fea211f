# cmake --install: headers, libraries, the loom CLI, a CMake package
# (find_package(loom) -> loom::loom, loom::nccl) and pkg-config files.
include(CMakePackageConfigHelpers)

install(FILES
  comm/include/loom/loom.hpp comm/include/loom/status.hpp comm/include/loom/types.hpp
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/loom)

# The C++ API ships as libloom.so (comm/CMakeLists.txt): Boost inside,
# hwloc linked privately, UCX, CUDA and verbs loaded at run time, so a
# consumer needs loom's headers only.
# Users write loom::loom and loom::nccl, as inside this tree.
set(LOOM_INSTALLED_TARGETS "")
if(TARGET loom_shared)
  set_target_properties(loom_shared PROPERTIES EXPORT_NAME loom)
  list(APPEND LOOM_INSTALLED_TARGETS loom_shared)
endif()
if(TARGET loom_nccl)
  set_target_properties(loom_nccl PROPERTIES EXPORT_NAME nccl)
  list(APPEND LOOM_INSTALLED_TARGETS loom_nccl)
endif()
install(TARGETS ${LOOM_INSTALLED_TARGETS} EXPORT loomTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
if(TARGET loom_nccl)
  # The NCCL-named view: <libdir>/loom/nccl/libnccl.so{,.2} lead to loom's
  # library and include/loom/nccl/nccl.h is its header, so `-lnccl` builds
  # against loom and LD_LIBRARY_PATH=<libdir>/loom/nccl runs an NCCL program
  # on it. A directory of its own, so putting it on the path hides no other library.
  install(FILES comm/include/loom/nccl.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/loom/nccl)
  install(CODE "set(_loom_nccl_view \"\$ENV{DESTDIR}\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_LIBDIR}/loom/nccl\")")
  install(CODE [[
    file(MAKE_DIRECTORY "${_loom_nccl_view}")
    message(STATUS "Installing: ${_loom_nccl_view}/libnccl.so.2 -> ../../libloom_nccl.so.2")
    file(CREATE_LINK ../../libloom_nccl.so.2 "${_loom_nccl_view}/libnccl.so.2" SYMBOLIC)
    file(CREATE_LINK libnccl.so.2 "${_loom_nccl_view}/libnccl.so" SYMBOLIC)
    # A program linked with -lnccl against this view records the library's
    # own soname, libloom_nccl.so.2: found here too, with the same path.
    file(CREATE_LINK ../../libloom_nccl.so.2 "${_loom_nccl_view}/libloom_nccl.so.2" SYMBOLIC)
  ]])
endif()
install(EXPORT loomTargets NAMESPACE loom:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/loom)

file(WRITE ${CMAKE_CURRENT_BINARY_DIR}/loomConfig.cmake.in [=[
@PACKAGE_INIT@
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
Libs: -L\${libdir} -lloom
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
