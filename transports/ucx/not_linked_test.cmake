# cmake -DREADELF=<readelf> -P not_linked_test.cmake FILE...
# Fails when a FILE lists a UCX library (libucp, libucs, libuct, libucm) as
# NEEDED: UCX is dlopen'ed when selected (transports/ucx/ucx_api.cc), so
# nothing that ships may make the dynamic loader pull it in.
# The files are the arguments after the script's path.
math(EXPR last "${CMAKE_ARGC} - 1")
set(first ${CMAKE_ARGC})
foreach(i RANGE ${last})
  if(CMAKE_ARGV${i} STREQUAL "-P")
    math(EXPR first "${i} + 2")
  endif()
endforeach()
if(first GREATER last)
  message(FATAL_ERROR "no file to check (usage: cmake -DREADELF=readelf -P ${CMAKE_SCRIPT_MODE_FILE} FILE...)")
endif()
set(files "")
foreach(i RANGE ${first} ${last})
  list(APPEND files "${CMAKE_ARGV${i}}")
endforeach()

set(failed FALSE)
foreach(f IN LISTS files)
  execute_process(COMMAND ${READELF} -d ${f}
    OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${READELF} -d ${f} failed (${rc}): ${err}")
  endif()
  # " 0x0000000000000001 (NEEDED)  Shared library: [libc.so.6]"
  string(REGEX MATCHALL "\\(NEEDED\\)[^\n]*\\[[^]\n]*\\]" lines "${out}")
  set(needed "")
  foreach(line IN LISTS lines)
    string(REGEX REPLACE ".*\\[([^]]*)\\]$" "\\1" name "${line}")
    list(APPEND needed ${name})
  endforeach()
  # Every one of them needs libc: none found means the output was not read.
  if(NOT needed MATCHES "libc\\.so")
    message(FATAL_ERROR "no NEEDED entry read from ${f}:\n${out}")
  endif()
  message(STATUS "${f}: NEEDED ${needed}")
  foreach(name IN LISTS needed)
    if(name MATCHES "^libuc[pstm]")
      message(SEND_ERROR "${f} has ${name} as NEEDED: UCX must be dlopen'ed when selected, not linked")
      set(failed TRUE)
    endif()
  endforeach()
endforeach()
if(failed)
  message(FATAL_ERROR "a UCX library is linked")
endif()
