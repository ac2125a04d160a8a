#!/usr/bin/env bash
# Installs the Debian packages shapejit needs, only those missing (fast when nothing is).
# Usage: tools/install_deps.sh [core|test|all]
#   core: build the library, tools and benchmarks; test: + oracle (libtorch) and emulators.
set -euo pipefail
level=${1:-test}

core=(cmake ninja-build g++ pkgconf libasmjit-dev libsleef-dev libtbb-dev doctest-dev
      libbenchmark-dev libcli11-dev)
test=(libtorch-dev qemu-user clang libclang-rt-14-dev)

want=("${core[@]}")
[ "$level" = core ] || want+=("${test[@]}")

missing=()
for p in "${want[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "== installing: ${missing[*]}"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO=sudo
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get -o DPkg::Lock::Timeout=900 update -q
$SUDO apt-get -o DPkg::Lock::Timeout=900 install -y -q --no-install-recommends "${missing[@]}"
