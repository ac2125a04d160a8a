#!/usr/bin/env bash
# Installs what is missing, builds, and runs the whole test suite through ctest:
#   1. Release build (build/): unit, validation, differential, oracle (vs PyTorch) tests,
#      plus the suite again under `qemu-x86_64 -cpu max` (AVX2, no AVX-512).
#   2. ASan+UBSan build (build-asan/): the same unit and differential tests.
#   3. AArch64 cross build (build-a64/): the unit and differential suites on NEON, run under
#      qemu-aarch64 through ctest. CI (CI=true) installs the cross tools; elsewhere the stage is
#      skipped with the list of packages to install when they are missing.
#   4. Hardening: ThreadSanitizer build (build-tsan/) of the thread tests, and bounded libFuzzer
#      runs of the C ABI (build-fuzz/, tools/fuzz.sh).
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

# Stage 3: the AArch64 (NEON) cross build under qemu. Times install, build and test separately,
# so the cost of the stage stays visible.
cross_stage() {
  local t0 t1 t2 missing
  t0=$(date +%s)
  if [ "${CI:-}" = true ]; then
    tools/install_deps.sh cross
  elif ! missing=$(tools/install_deps.sh --check cross); then
    echo "== cross (AArch64/NEON under qemu) tests SKIPPED: missing $(echo $missing)"
    echo "   install them with: tools/install_deps.sh cross   (CI=true installs them automatically)"
    return 0
  fi
  t1=$(date +%s)
  echo "== cross build (aarch64, tools/aarch64-toolchain.cmake)"
  cmake -S . -B build-a64 -G Ninja -DCMAKE_BUILD_TYPE=Release \
        -DCMAKE_TOOLCHAIN_FILE=tools/aarch64-toolchain.cmake \
        -DSHAPEJIT_ORACLE=OFF -DSHAPEJIT_BUILD_BENCH=OFF >/dev/null
  cmake --build build-a64 -j"$jobs"
  t2=$(date +%s)
  echo "== cross tests (qemu-aarch64)"
  ctest --test-dir build-a64 --output-on-failure -j"$jobs"
  echo "== cross stage: install $(( t1 - t0 )) s, build $(( t2 - t1 )) s, tests $(( $(date +%s) - t2 )) s"
}
cross_stage

# Stage 4 (hardening): a ThreadSanitizer build of the test binary running the thread-stress,
# kernel-cache and partition tests (clang, TBB headers uninstrumented: tests/tsan_ignorelist.txt;
# suppressions, if any: tests/tsan.supp), then libFuzzer on the C ABI for a bounded time
# (tools/fuzz.sh; SHAPEJIT_CI_FUZZ_SECONDS per fuzzer, default 45).
hardening_stage() {
  local t0 t1 t2
  t0=$(date +%s)
  echo "== thread sanitizer build (build-tsan/, shapejit_tests only)"
  cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
        -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
        -DCMAKE_CXX_FLAGS="-fsanitize=thread -fsanitize-ignorelist=$PWD/tests/tsan_ignorelist.txt" \
        -DCMAKE_EXE_LINKER_FLAGS=-fsanitize=thread \
        -DSHAPEJIT_ORACLE=OFF -DSHAPEJIT_BUILD_BENCH=OFF -DSHAPEJIT_BUILD_TOOLS=OFF >/dev/null
  cmake --build build-tsan -j"$jobs" --target shapejit_tests
  echo "== thread sanitizer tests"
  TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$PWD/tests/tsan.supp" \
    build-tsan/tests/shapejit_tests --no-intro=true \
    --source-file='*/stress_threads_test.cpp,*/kernel_cache_test.cpp,*/partition_test.cpp'
  t1=$(date +%s)
  tools/fuzz.sh "${SHAPEJIT_CI_FUZZ_SECONDS:-45}"
  t2=$(date +%s)
  echo "== hardening stage: tsan $(( t1 - t0 )) s, fuzzing $(( t2 - t1 )) s"
}
hardening_stage

echo "== tools/test.sh passed in $(( $(date +%s) - start )) s"
