#!/usr/bin/env bash
# Installs what KokkosMLA needs on Debian 12 / Ubuntu (CPU, Serial backend):
# Kokkos and Kokkos Kernels (Trilinos build), OpenBLAS, GoogleTest, Google
# Benchmark, CMake and C++/Fortran compilers. Installs only what is missing; safe to rerun.
set -euo pipefail
packages=(build-essential gfortran cmake git
          libtrilinos-kokkos-dev libtrilinos-kokkos-kernels-dev
          libopenblas-dev libgtest-dev libbenchmark-dev libopenmpi-dev openmpi-bin)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]} == 0)); then
  echo "setup: all packages present"
  exit 0
fi
echo "setup: installing ${missing[*]}"
sudo=""
if [[ $(id -u) -ne 0 ]]; then sudo="sudo"; fi
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
