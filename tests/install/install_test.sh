#!/bin/bash
# Installs the build tree into a temporary prefix, then builds the examples in
# docs/examples against it with find_package(loom) and with pkg-config, and
# runs them on 2 ranks with the installed `loom run`.
#   install_test.sh BUILD_DIR SOURCE_DIR
set -eu
build=$1 src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
# A consumer needs loom's headers and libraries only: nothing installed names
# Boost, hwloc, UCX or CUDA, and the example's headers come from the C++
# library and the prefix alone.
if grep -lE 'Boost|hwloc|ucx|ucp|CUDA|cudart' "$tmp/prefix"/lib/cmake/loom/*.cmake \
    "$tmp/prefix"/lib/pkgconfig/*.pc; then
  echo "FAIL: the installed package files above name a private dependency"; exit 1
fi
if c++ -std=c++20 -M -I"$tmp/prefix/include" "$src/docs/examples/hello.cc" |
    grep -E 'boost|hwloc|ucp|ucs|cuda'; then
  echo "FAIL: loom's installed headers pull in a private dependency (above)"; exit 1
fi
export NCCL_SOCKET_IFNAME=lo
# CMake package
cmake -S "$src/docs/examples" -B "$tmp/ex" -DCMAKE_PREFIX_PATH="$tmp/prefix" >/dev/null
cmake --build "$tmp/ex" >/dev/null
"$tmp/prefix/bin/loom" run -np 2 -- "$tmp/ex/hello"
LD_LIBRARY_PATH="$tmp/prefix/lib" "$tmp/prefix/bin/loom" run -np 2 -- "$tmp/ex/hello_nccl"
# pkg-config (relocated prefix: the .pc files find it themselves)
export PKG_CONFIG_PATH="$tmp/prefix/lib/pkgconfig"
cc -std=c99 "$src/docs/examples/hello_nccl.c" $(pkg-config --cflags --libs loom-nccl) \
  -Wl,-rpath,"$tmp/prefix/lib" -o "$tmp/hello_nccl_pc"
c++ -std=c++20 "$src/docs/examples/hello.cc" $(pkg-config --cflags --libs loom) \
  -Wl,-rpath,"$tmp/prefix/lib" -o "$tmp/hello_pc"
"$tmp/prefix/bin/loom" run -np 2 -- "$tmp/hello_nccl_pc"
"$tmp/prefix/bin/loom" run -np 2 -- "$tmp/hello_pc"
# The NCCL-named view: `-lnccl` against it, and LD_LIBRARY_PATH to it at run time.
cc -std=c11 -I"$tmp/prefix/include/loom/nccl" "$src/tests/c_api/nccl_dropin.c" \
  -L"$tmp/prefix/lib/loom/nccl" -lnccl -o "$tmp/dropin"
LD_LIBRARY_PATH="$tmp/prefix/lib/loom/nccl" "$tmp/prefix/bin/loom" run -np 3 -- "$tmp/dropin" "$tmp/id"
echo "PASS: install"
