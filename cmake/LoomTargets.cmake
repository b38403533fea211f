# Helpers shared by every folder's CMakeLists.txt.

set(LOOM_WARNING_FLAGS -Wall -Wextra -Wpedantic -Wno-missing-field-initializers)
if(LOOM_WERROR)
  list(APPEND LOOM_WARNING_FLAGS -Werror)
endif()

# Bit-identical results across ranks and layouts: no contraction into FMA.
add_compile_options(-ffp-contract=off)

if(LOOM_SANITIZE)
  add_compile_options(-fsanitize=${LOOM_SANITIZE} -fno-omit-frame-pointer -fno-sanitize-recover=all)
  add_link_options(-fsanitize=${LOOM_SANITIZE})
  if(LOOM_SANITIZE MATCHES "thread" AND CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    # GCC 12 warns (-Wtsan) that TSan does not model atomic_thread_fence,
    # which Boost.Asio's handler invocation uses; loom's own code has none.
    add_compile_options(-Wno-tsan)
  endif()
  if(LOOM_SANITIZE MATCHES "thread")
    # UCX's memory hooks (libucm, installed when a selected UCX transport
    # loads libucp) patch libc's madvise, which glibc calls on an exiting
    # thread after TSan has torn that thread down: a test that loaded UCX
    # would crash at exit. ctest sets this in its own environment, so every
    # test that may select UCX inherits it.
    file(WRITE ${CMAKE_BINARY_DIR}/loom_tsan_env.cmake "set(ENV{UCX_MEM_EVENTS} no)\n")
    set_property(DIRECTORY ${PROJECT_SOURCE_DIR} APPEND PROPERTY TEST_INCLUDE_FILES
                 ${CMAKE_BINARY_DIR}/loom_tsan_env.cmake)
  endif()
endif()

if(LOOM_FUZZ)
  # Coverage for libFuzzer in every object; the fuzz targets link its driver.
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    message(FATAL_ERROR "LOOM_FUZZ needs clang (CXX=clang++), not ${CMAKE_CXX_COMPILER_ID}")
  endif()
  add_compile_options(-fsanitize=fuzzer-no-link)
endif()

# loom_library(NAME alias SOURCES... [DEPS ...])
function(loom_library name)
  cmake_parse_arguments(ARG "" "ALIAS" "SOURCES;DEPS;PRIVATE_DEPS" ${ARGN})
  add_library(${name} STATIC ${ARG_SOURCES})
  if(ARG_ALIAS)
    add_library(${ARG_ALIAS} ALIAS ${name})
  endif()
  target_include_directories(${name} PUBLIC
    $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}>
    $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/comm/include>
    $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
  target_compile_options(${name} PRIVATE ${LOOM_WARNING_FLAGS})
  target_link_libraries(${name} PUBLIC ${ARG_DEPS} PRIVATE ${ARG_PRIVATE_DEPS})
endfunction()

# loom_test(NAME SOURCES... DEPS ... LABELS ... [TIMEOUT s])
function(loom_test name)
  cmake_parse_arguments(ARG "" "TIMEOUT" "SOURCES;DEPS;LABELS" ${ARGN})
  if(NOT LOOM_HAVE_GTEST)
    return()
  endif()
  add_executable(${name} ${ARG_SOURCES})
  target_compile_options(${name} PRIVATE ${LOOM_WARNING_FLAGS})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} GTest::gtest GTest::gtest_main)
  add_test(NAME ${name} COMMAND ${name})
  if(NOT ARG_LABELS)
    set(ARG_LABELS unit)
  endif()
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 120)
  endif()
  set_tests_properties(${name} PROPERTIES LABELS "${ARG_LABELS}" TIMEOUT ${ARG_TIMEOUT})
endfunction()
