# Fails when a source file includes a header of a layer above its own, so
# that the layers can only point down. Lowest first: base, topology,
# transports, collectives, comm; the programs on top (tools, trainer,
# integrations, perf, tests) may include any of them, and no layer may
# include theirs. The public headers ("loom/...") are for everyone.
#   cmake -DROOT=<source dir> -P cmake/check_layers.cmake
if(NOT ROOT)
  message(FATAL_ERROR "check_layers: pass -DROOT=<source dir>")
endif()
set(layers base topology transports collectives comm)

set(patterns "")
foreach(layer IN LISTS layers)
  foreach(ext h hpp cc cu cuh c)
    list(APPEND patterns "${ROOT}/${layer}/*.${ext}")
  endforeach()
endforeach()
file(GLOB_RECURSE files RELATIVE "${ROOT}" ${patterns})
set(upward "")
foreach(file IN LISTS files)
  string(REGEX MATCH "^[^/]+" top "${file}")
  list(FIND layers "${top}" mine)
  file(STRINGS "${ROOT}/${file}" lines REGEX "^[ \t]*#[ \t]*include[ \t]*\"[^\"]+\"")
  foreach(line IN LISTS lines)
    string(REGEX REPLACE "^[ \t]*#[ \t]*include[ \t]*\"([^\"]+)\".*" "\\1" header "${line}")
    string(REGEX MATCH "^[^/]+" target "${header}")
    if(NOT header MATCHES "/")
      continue()  # a header beside the file
    endif()
    list(FIND layers "${target}" theirs)
    if(theirs GREATER mine OR (theirs EQUAL -1 AND NOT target STREQUAL "loom"))
      list(APPEND upward "${file} includes ${header}")
    endif()
  endforeach()
endforeach()
if(upward)
  list(JOIN upward "\n  " text)
  message(FATAL_ERROR "includes that point up a layer (${layers}, then the programs):\n  ${text}")
endif()
