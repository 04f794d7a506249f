#!/usr/bin/env bash
# Configures and builds KokkosMLA (library, tests, benchmark, example) in build/.
# Extra arguments go to CMake, e.g. -DKokkos_ROOT=/opt/kokkos-cuda.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release "$@"
cmake --build build --parallel "$(nproc)"
