#!/usr/bin/env bash
# Installs what latentkv needs to build and test on a Debian machine (idempotent): a C++20
# compiler (g++, whose libgomp is the OpenMP runtime), CMake, Ninja, GoogleTest and python3. nvcc is
# used when present; nothing here installs CUDA (the CPU backend is always built). The Python
# suite's packages come from PyPI (scripts/test_python.sh).
set -euo pipefail

need=()
command -v cmake >/dev/null || need+=(cmake)
command -v ninja >/dev/null || need+=(ninja-build)
command -v g++ >/dev/null || need+=(g++)
[ -f /usr/include/gtest/gtest.h ] || need+=(libgtest-dev)
command -v python3 >/dev/null || need+=(python3)

if [ ${#need[@]} -gt 0 ]; then
  echo "setup: installing ${need[*]}"
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}"
fi
