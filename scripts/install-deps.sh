#!/bin/sh
# Installs what loom needs to build and test on Debian 12 (run as root).
set -eu
export DEBIAN_FRONTEND=noninteractive
if [ "$(id -u)" != 0 ]; then echo "install-deps.sh: run as root (apt-get)" >&2; exit 2; fi
apt-get update -qq
# clang with its libFuzzer runtime (libclang-rt-14-dev, which clang only
# recommends): scripts/fuzz.sh.
apt-get install -y -qq --no-install-recommends \
  build-essential cmake ninja-build pkg-config git ca-certificates \
  libboost-dev libhwloc-dev libibverbs-dev libucx-dev \
  libgtest-dev libgmock-dev libbenchmark-dev \
  clang libclang-rt-14-dev iproute2 iptables procps python3 >/dev/null
# The torch.distributed backend (integrations/pytorch, ctest label torch):
# Debian's CPU PyTorch, its C++ headers and CMake config, and pybind11.
apt-get install -y -qq --no-install-recommends \
  python3-torch libtorch-dev pybind11-dev python3-dev >/dev/null
echo "install-deps.sh: done"
