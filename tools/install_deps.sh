#!/usr/bin/env bash
# Installs the Debian packages shapejit needs, only those missing (fast when nothing is).
# Usage: tools/install_deps.sh [--check] [core|test|bench|cross|all|bochs]
#   --check: install nothing; print the missing packages, one a line (exit 1 when any is).
#   core:  build the library, tools and benchmarks;
#   test:  + emulators, clang and ccache (torch, pytest and the other Python packages come from PyPI into a
#          venv: tools/python_env.sh);
#   bench: core + the benchmark peers (oneDNN, OpenBLAS, libxsmm, XNNPACK; ATen comes from the
#          venv's torch, tools/python_env.sh) and what
#          their CMake configs need: Debian's oneDNN is built with the OpenCL GPU runtime, so
#          its dnnl-config.cmake calls find_package(OpenCL REQUIRED), which stops the whole
#          configure step without the OpenCL loader and headers (its package does not pull them);
#   cross: the AArch64 cross build run under qemu (cross g++, qemu-user and the :arm64
#          libraries; adds the arm64 dpkg architecture once);
#   all:   test + cross.
#   bochs: the Bochs AVX-512 guest (tools/bochs/): the emulator, its BIOS images, the ISO
#          tools and what builds the guest's tiny kernel from Debian's linux-source-6.1.
set -euo pipefail
check=0
if [ "${1:-}" = --check ]; then check=1; shift; fi
level=${1:-test}

core=(cmake ninja-build g++ pkgconf libasmjit-dev libsleef-dev libtbb-dev doctest-dev
      libbenchmark-dev libcli11-dev)
test=(qemu-user clang libclang-rt-14-dev ccache)
bench=(libdnnl-dev ocl-icd-opencl-dev opencl-headers libopenblas-dev libxsmm-dev
       libxnnpack-dev libpthreadpool-dev)
# The cross build reuses doctest-dev and libcli11-dev (Architecture: all, header-only).
cross_host=(g++-aarch64-linux-gnu qemu-user)
cross_target=(libasmjit-dev:arm64 libtbb-dev:arm64 libsleef-dev:arm64)
# bochs-term satisfies bochs' need for a display library (apt would otherwise pick bochs-wx).
bochs=(bochs bochs-term bochsbios vgabios isolinux syslinux-common xorriso
       linux-source-6.1 make gcc bc bison flex libelf-dev xz-utils)

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO=sudo
export DEBIAN_FRONTEND=noninteractive
apt_get() { $SUDO apt-get -o DPkg::Lock::Timeout=900 "$@"; }

# Prints the packages of "$@" that are not installed.
missing_of() {
  local p
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || echo "$p"
  done
}

# Installs the missing packages of "$@" (one apt-get update first, unless told it is fresh).
install_missing() {
  local missing
  mapfile -t missing < <(missing_of "$@")
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "== installing: ${missing[*]}"
  [ "${apt_updated:-0}" = 1 ] || apt_get update -q
  apt_updated=1
  apt_get install -y -q --no-install-recommends "${missing[@]}"
}

# AArch64 cross stage: cross compiler and qemu first; the :arm64 libraries need the arm64
# architecture in dpkg (and an apt-get update after adding it). Installing them may upgrade a
# few amd64 packages, since Multi-Arch: same packages must match versions on both.
install_cross() {
  install_missing "${cross_host[@]}"
  if [ -n "$(missing_of "${cross_target[@]}")" ]; then
    if ! dpkg --print-foreign-architectures | grep -qx arm64; then
      echo "== adding the arm64 dpkg architecture"
      $SUDO dpkg --add-architecture arm64
      apt_updated=0
    fi
    install_missing "${cross_target[@]}"
  fi
}

if [ "$check" = 1 ]; then
  case "$level" in
    core) wanted=("${core[@]}") ;;
    test) wanted=("${core[@]}" "${test[@]}") ;;
    bench) wanted=("${core[@]}" "${bench[@]}") ;;
    cross) wanted=("${cross_host[@]}" "${cross_target[@]}") ;;
    all) wanted=("${core[@]}" "${test[@]}" "${cross_host[@]}" "${cross_target[@]}") ;;
    bochs) wanted=("${bochs[@]}") ;;
    *) echo "usage: $0 [--check] [core|test|bench|cross|all|bochs]" >&2; exit 2 ;;
  esac
  missing=$(missing_of "${wanted[@]}")
  [ -z "$missing" ] && exit 0
  echo "$missing"
  exit 1
fi

case "$level" in
  core) install_missing "${core[@]}" ;;
  test) install_missing "${core[@]}" "${test[@]}" ;;
  bench) install_missing "${core[@]}" "${bench[@]}" ;;
  cross) install_cross ;;
  all) install_missing "${core[@]}" "${test[@]}"; install_cross ;;
  bochs) install_missing "${bochs[@]}" ;;
  *) echo "usage: $0 [core|test|bench|cross|all|bochs]" >&2; exit 2 ;;
esac
