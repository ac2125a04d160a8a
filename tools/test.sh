#!/usr/bin/env bash
# Installs what is missing, builds, and runs the whole test suite through ctest:
#   0. build-venv/: pip's torch 2.13 and the Python test packages, pinned (tools/python_env.sh).
#   1. Release build (build/): unit, validation, differential, oracle (vs PyTorch 2.x) tests; on a
#      host with AVX-512 also the suite under `qemu-x86_64 -cpu max` (AVX2, no AVX-512), which
#      ctest reports as skipped elsewhere (there it would only repeat the native run).
#   2. ASan+UBSan build (build-asan/): the same unit and differential tests.
#   3. AArch64 cross build (build-a64/): the unit and differential suites on NEON, run under
#      qemu-aarch64 through ctest. CI (CI=true) installs the cross tools; elsewhere the stage is
#      skipped with the list of packages to install when they are missing.
#   4. AVX-512 battery (tests/avx512_battery): natively on AVX-512 hosts, elsewhere in a Bochs
#      guest (tools/bochs/, tools/avx512_stage.sh), requiring avx512 either way.
#   5. Hardening: ThreadSanitizer build (build-tsan/) of the thread tests, and bounded libFuzzer
#      runs of the C ABI (build-fuzz/, tools/fuzz.sh).
# Every test stage sets SHAPEJIT_REQUIRE_ISAS to the ISAs it can run (tests/support/
# generated_code_report.hpp), so a battery skipped for want of an ISA fails the stage instead of
# passing unseen, and prints which ISAs executed generated code. Each step's time is printed as
# it ends, and all of them with the total at the end.
# Caches outside the clone, kept between runs on one machine (each checks its own staleness): ccache
# for every compiler call (~/.cache/ccache; paths made relative to the clone, so another clone of
# the same sources hits) and the Bochs guest kernel (~/.cache/shapejit/bochs). Both only save time:
# a machine without them builds everything, which took ~45 min of the suite's wall time.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
jobs=$(nproc)
timings=()

# Runs "$@" as one step named $1 and records its wall time.
timed() {
  local label=$1 t0 seconds
  shift
  t0=$(date +%s)
  "$@"
  seconds=$(( $(date +%s) - t0 ))
  timings+=("$(printf '  %-40s %6d s' "$label" "$seconds")")
  echo "== $label: $seconds s"
}

# The generated ISAs this host runs, as the engine decides (jitdump list-isas of build dir $1),
# comma-separated. On x86-64 avx2 is always included: a CI host without it must fail the stage,
# not pass it with nothing required.
native_isas() {
  local isas
  isas=$("$1/tools/jitdump" list-isas | awk '$2 == "runs" && $3 == "here" { print $1 }' | paste -sd, -)
  if [ "$(uname -m)" = x86_64 ] && [[ ",$isas," != *,avx2,* ]]; then isas=${isas:+$isas,}avx2; fi
  echo "$isas"
}

# ctest in build dir $1 requiring generated code of the ISAs $2 (the isa_tally.check entry
# enforces it), then the run's line "generated code executed in N test processes: ...". Further
# arguments go to ctest.
run_ctest() {
  local dir=$1 required=$2
  shift 2
  echo "   SHAPEJIT_REQUIRE_ISAS=$required"
  SHAPEJIT_REQUIRE_ISAS=$required ctest --test-dir "$dir" --output-on-failure -j"$jobs" "$@"
  grep -h "^generated code executed in " "$dir/Testing/Temporary/LastTest.log" | tail -n 1 | sed 's/^/   /' || true
}

# Stage 1: the release build and its tests, against the venv's torch (pip's torch 2.x, the torch
# users run) for the oracle tests, the ATen benchmark rows and the PyTorch extension.
release_build() {
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DSHAPEJIT_REQUIRE_ORACLE=ON \
        -DSHAPEJIT_PYTHON="$venv_python" >/dev/null
  cmake --build build -j"$jobs"
}
release_stage() {
  echo "== release build"
  timed "release: build" release_build
  native=$(native_isas build)
  echo "== release tests (python.pytest runs in stage 1b, against both installs)"
  # The cmake --install run of stage 1b loads this build's extension with the package's own
  # modules, which is what the in-tree python.pytest checks: running it here too repeats it.
  timed "release: tests" run_ctest build "$native" -E '^python\.pytest$'

}

# Stage 2: the same tests built with AddressSanitizer and UndefinedBehaviorSanitizer.
sanitizer_build() {
  cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSHAPEJIT_SANITIZE=ON \
        -DSHAPEJIT_ORACLE=OFF -DSHAPEJIT_BUILD_BENCH=OFF >/dev/null
  cmake --build build-asan -j"$jobs"
}
sanitizer_stage() {
  echo "== sanitizer build (address, undefined)"
  timed "sanitizer: build" sanitizer_build
  echo "== sanitizer tests"
  ASAN_OPTIONS=detect_leaks=1 timed "sanitizer: tests" run_ctest build-asan "$native"
}

# Stage 3: the AArch64 (NEON) cross build under qemu.
cross_build() {
  cmake -S . -B build-a64 -G Ninja -DCMAKE_BUILD_TYPE=Release \
        -DCMAKE_TOOLCHAIN_FILE=tools/aarch64-toolchain.cmake \
        -DSHAPEJIT_ORACLE=OFF -DSHAPEJIT_BUILD_BENCH=OFF >/dev/null
  cmake --build build-a64 -j"$jobs"
}
cross_stage() {
  local missing
  if [ "${CI:-}" = true ]; then
    timed "cross: install" tools/install_deps.sh cross
  elif ! missing=$(tools/install_deps.sh --check cross); then
    echo "== cross (AArch64/NEON under qemu) tests SKIPPED: missing $(echo $missing)"
    echo "   install them with: tools/install_deps.sh cross   (CI=true installs them automatically)"
    return 0
  fi
  echo "== cross build (aarch64, tools/aarch64-toolchain.cmake)"
  timed "cross: build" cross_build
  echo "== cross tests (qemu-aarch64)"
  timed "cross: tests" run_ctest build-a64 neon
}

# Stage 4 (hardening): a ThreadSanitizer build of the test binary running the thread-stress,
# kernel-cache, partition, engine-task, group-call and prepared-call tests (clang, TBB headers uninstrumented: tests/tsan_ignorelist.txt;
# suppressions, if any: tests/tsan.supp), then libFuzzer on the C ABI for a bounded time
# (tools/fuzz.sh; SHAPEJIT_CI_FUZZ_SECONDS per fuzzer, default 45).
tsan_build() {
  cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
        -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
        -DCMAKE_CXX_FLAGS="-fsanitize=thread -fsanitize-ignorelist=$PWD/tests/tsan_ignorelist.txt" \
        -DCMAKE_EXE_LINKER_FLAGS=-fsanitize=thread \
        -DSHAPEJIT_ORACLE=OFF -DSHAPEJIT_BUILD_BENCH=OFF -DSHAPEJIT_BUILD_TOOLS=OFF >/dev/null
  cmake --build build-tsan -j"$jobs" --target shapejit_tests
}
tsan_tests() {
  # One process, which applies SHAPEJIT_REQUIRE_ISAS itself and prints what ran. These tests
  # reach generated code through the API only, so they run the engine's choice: the best ISA.
  SHAPEJIT_REQUIRE_ISAS=${native%%,*} \
  TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$PWD/tests/tsan.supp" \
    build-tsan/tests/shapejit_tests --no-intro=true \
    --source-file='*/stress_threads_test.cpp,*/kernel_cache_test.cpp,*/partition_test.cpp,*/engine_tasks_test.cpp,*/kernel_cache_remembered_test.cpp,*/embag_parallel_check_test.cpp,*/embag_group_test.cpp,*/embag_prepared_test.cpp'
}
hardening_stage() {
  echo "== thread sanitizer build (build-tsan/, shapejit_tests only)"
  timed "hardening: tsan build" tsan_build
  echo "== thread sanitizer tests"
  timed "hardening: tsan tests" tsan_tests
  timed "hardening: fuzzing" tools/fuzz.sh "${SHAPEJIT_CI_FUZZ_SECONDS:-45}"
}

timed "install (test packages)" tools/install_deps.sh test
if command -v ccache >/dev/null; then
  # CMake (3.17+) takes the launcher from these variables when a build directory is configured.
  export CMAKE_C_COMPILER_LAUNCHER=ccache CMAKE_CXX_COMPILER_LAUNCHER=ccache
  export CCACHE_BASEDIR=$PWD CCACHE_NOHASHDIR=true CCACHE_MAXSIZE=${CCACHE_MAXSIZE:-8G}
  ccache --zero-stats >/dev/null
fi
# The Python environment (pip's torch 2.13 and the test packages, pinned): build-venv/.
timed "install (python venv, tools/python_env.sh)" tools/python_env.sh
venv_python=$PWD/build-venv/bin/python
release_stage
# Stage 1b: the Python package as users install it, each install running python/tests from outside
# the source tree against pip's torch: pip (a fresh CMake build of a clean clone, into a venv) and
# cmake --install of build/ into another venv (tools/check_python_install.sh).
CMAKE_BUILD_PARALLEL_LEVEL=$jobs SHAPEJIT_PYTHON=$venv_python \
  timed "python packages (pip, cmake --install)" tools/check_python_install.sh build
sanitizer_stage
cross_stage
# Stage 5: the AVX-512 battery, natively where the CPU has AVX-512, else under Bochs.
timed "avx512: battery (native, else Bochs)" tools/avx512_stage.sh build
hardening_stage

echo "== times"
printf '%s\n' "${timings[@]}"
if command -v ccache >/dev/null; then
  echo "== ccache (this run)"
  ccache --show-stats | sed -n '/^Cacheable calls/,/^ *Misses/p' | sed 's/^/   /'
fi
echo "== tools/test.sh passed in $(( $(date +%s) - start )) s"
