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
c++ -std=c++20 "$src/docs/examples/hello.cc" $(pkg-config --cflags --libs loom) -o "$tmp/hello_pc"
"$tmp/prefix/bin/loom" run -np 2 -- "$tmp/hello_nccl_pc"
"$tmp/prefix/bin/loom" run -np 2 -- "$tmp/hello_pc"
echo "PASS: install"
