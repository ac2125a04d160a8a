#!/usr/bin/env bash
# Installs what is missing, builds, and runs the whole test suite through ctest:
#   1. Release build (build/): unit, validation, differential, oracle (vs PyTorch) tests,
#      plus the suite again under `qemu-x86_64 -cpu max` (AVX2, no AVX-512).
#   2. ASan+UBSan build (build-asan/): the same unit and differential tests.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
jobs=$(nproc)

tools/install_deps.sh test

echo "== release build"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DSHAPEJIT_REQUIRE_ORACLE=ON >/dev/null
cmake --build build -j"$jobs"
echo "== release tests"
ctest --test-dir build --output-on-failure -j"$jobs"

echo "== sanitizer build (address, undefined)"
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSHAPEJIT_SANITIZE=ON \
      -DSHAPEJIT_ORACLE=OFF -DSHAPEJIT_BUILD_BENCH=OFF >/dev/null
cmake --build build-asan -j"$jobs"
echo "== sanitizer tests"
ASAN_OPTIONS=detect_leaks=1 ctest --test-dir build-asan --output-on-failure -j"$jobs"

echo "== tools/test.sh passed in $(( $(date +%s) - start )) s"
