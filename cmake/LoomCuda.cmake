# CUDA support: the LOOM_WITH_CUDA switch, the CUDA language and
# architectures, and the CUDA folders (loom::cuda, loom::reduce_cuda, perf/gpu).
#
# Include once from the top-level CMakeLists.txt, after LoomDeps.cmake and
# LoomTargets.cmake and before the folders that may consume LOOM_HAVE_CUDA:
#   include(cmake/LoomCuda.cmake)
# The CPU build never needs CUDA: with LOOM_WITH_CUDA=auto and no nvcc,
# nothing here is built and LOOM_HAVE_CUDA is OFF.
#
# Results for consumers:
#   LOOM_HAVE_CUDA        ON when the CUDA folders are built (CMake variable)
#   loom::cuda            host-side runtime wrapper, IPC cache, staging plans;
#                         carries the compile definition LOOM_HAVE_CUDA=1
#   loom::reduce_cuda     device reduction kernels (CudaReduceInto, CudaScaleForAvg)
#   loom_cuda_library()   like loom_library() but for targets with .cu sources
#   loom_gpu_test()       a GoogleTest that needs a GPU: label "gpu", and the
#                         test itself skips (GTEST_SKIP) when no device is found

set(LOOM_WITH_CUDA "auto" CACHE STRING "Build the CUDA parts: auto (when nvcc is found), on, off")
set_property(CACHE LOOM_WITH_CUDA PROPERTY STRINGS auto on off)
string(TOLOWER "${LOOM_WITH_CUDA}" _loom_with_cuda)
if(NOT _loom_with_cuda MATCHES "^(auto|on|off)$")
  message(FATAL_ERROR "LOOM_WITH_CUDA must be auto, on or off (got '${LOOM_WITH_CUDA}')")
endif()

set(LOOM_HAVE_CUDA OFF)
if(NOT _loom_with_cuda STREQUAL "off")
  # Architectures before enable_language: otherwise CMake probes with nvcc's
  # default. sm_80 (A100) and sm_90 (H100/H200) as machine code, plus
  # compute_90 PTX so newer GPUs JIT-compile it.
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
    set(CMAKE_CUDA_ARCHITECTURES "80-real;90-real;90-virtual")
  endif()
  include(CheckLanguage)
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    # Not on PATH in a plain shell; the default toolkit location is enough.
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    enable_language(CUDA)
    find_package(CUDAToolkit)
  endif()
  if(CMAKE_CUDA_COMPILER AND CUDAToolkit_FOUND)
    set(LOOM_HAVE_CUDA ON)
  elseif(_loom_with_cuda STREQUAL "on")
    message(FATAL_ERROR "LOOM_WITH_CUDA=on but no CUDA compiler/toolkit was found "
                        "(set CMAKE_CUDA_COMPILER or CUDAToolkit_ROOT, or use LOOM_WITH_CUDA=auto)")
  endif()
endif()

if(NOT LOOM_HAVE_CUDA)
  return()
endif()

# C++20 in device code too. CMake 3.25 does not know nvcc's C++20 flag (3.26
# does) and, with CMAKE_CXX_STANDARD 20 set, would refuse every CUDA target.
if(NOT CMAKE_CUDA20_STANDARD_COMPILE_OPTION)
  set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
  set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
endif()
set(CMAKE_CUDA_STANDARD 20)
set(CMAKE_CUDA_STANDARD_REQUIRED ON)
set(CMAKE_CUDA_EXTENSIONS OFF)

# nvcc's own diagnostics as errors, and the host compiler's through -Xcompiler.
# -Wpedantic is left out of the host pass: nvcc's generated stubs use GCC line
# directives that it flags. --fmad=false is the device twin of
# -ffp-contract=off: one rounding per operation, as the CPU kernels.
set(LOOM_CUDA_FLAGS --fmad=false -Xcompiler=-Wall,-Wextra,-Wno-missing-field-initializers)
if(LOOM_WERROR)
  list(APPEND LOOM_CUDA_FLAGS -Werror=all-warnings -Xcompiler=-Werror)
endif()

# Directory-wide options (LoomTargets.cmake's -ffp-contract=off, sanitizer
# flags) are GCC/Clang spellings that nvcc rejects; keep them for C and C++.
function(_loom_cuda_guard_options target)
  get_target_property(opts ${target} COMPILE_OPTIONS)
  if(NOT opts)
    return()
  endif()
  set(guarded "")
  foreach(opt IN LISTS opts)
    if(opt MATCHES "^\\$<")
      list(APPEND guarded "${opt}")
    else()
      list(APPEND guarded "$<$<COMPILE_LANGUAGE:C,CXX>:${opt}>")
    endif()
  endforeach()
  set_target_properties(${target} PROPERTIES COMPILE_OPTIONS "${guarded}")
endfunction()

function(_loom_cuda_target_flags target)
  _loom_cuda_guard_options(${target})
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:${LOOM_WARNING_FLAGS}>
    $<$<COMPILE_LANGUAGE:CUDA>:${LOOM_CUDA_FLAGS}>)
endfunction()

# loom_cuda_library(NAME ALIAS alias SOURCES ... [DEPS ...] [PRIVATE_DEPS ...])
function(loom_cuda_library name)
  cmake_parse_arguments(ARG "" "ALIAS" "SOURCES;DEPS;PRIVATE_DEPS" ${ARGN})
  add_library(${name} STATIC ${ARG_SOURCES})
  if(ARG_ALIAS)
    add_library(${ARG_ALIAS} ALIAS ${name})
  endif()
  target_include_directories(${name} PUBLIC
    $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}>
    $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/comm/include>
    $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
  _loom_cuda_target_flags(${name})
  # Device code is linked into the static library itself, so C++ consumers
  # link it with the host linker and need no CUDA-aware link step.
  set_target_properties(${name} PROPERTIES CUDA_SEPARABLE_COMPILATION OFF)
  target_link_libraries(${name} PUBLIC ${ARG_DEPS} PRIVATE ${ARG_PRIVATE_DEPS})
endfunction()

# loom_gpu_test(NAME SOURCES ... DEPS ... [TIMEOUT s]): label "gpu"; the
# program must GTEST_SKIP when no device is present (cuda_runtime.h's
# CudaDeviceCount() == 0), so CI without a GPU reports it as skipped.
function(loom_gpu_test name)
  cmake_parse_arguments(ARG "" "TIMEOUT" "SOURCES;DEPS" ${ARGN})
  if(NOT LOOM_HAVE_GTEST)
    return()
  endif()
  add_executable(${name} ${ARG_SOURCES})
  _loom_cuda_target_flags(${name})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} GTest::gtest GTest::gtest_main)
  add_test(NAME ${name} COMMAND ${name})
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 300)
  endif()
  # A test binary whose every case skipped prints "[  SKIPPED ]" and no
  # "[  PASSED  ] N" with N > 0: ctest then shows it as skipped, not passed.
  set_tests_properties(${name} PROPERTIES LABELS "gpu" TIMEOUT ${ARG_TIMEOUT}
    SKIP_REGULAR_EXPRESSION "\\[  PASSED  \\] 0 tests")
endfunction()

add_subdirectory(${PROJECT_SOURCE_DIR}/transports/cuda ${PROJECT_BINARY_DIR}/transports/cuda)
add_subdirectory(${PROJECT_SOURCE_DIR}/collectives/reduce/cuda
                 ${PROJECT_BINARY_DIR}/collectives/reduce/cuda)
add_subdirectory(${PROJECT_SOURCE_DIR}/perf/gpu ${PROJECT_BINARY_DIR}/perf/gpu)
