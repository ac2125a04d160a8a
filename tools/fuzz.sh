#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, ASan + UBSan, build-fuzz/) and runs each of them.
#   tools/fuzz.sh [seconds-per-fuzzer] [fuzzer ...]
# Defaults: 600 s per fuzzer, every fuzz/*_fuzzer.cpp. tools/test.sh runs it with a short bound.
# Each fuzzer reads its checked-in seeds (fuzz/corpus/<name>/) and grows a working corpus in
# build-fuzz/corpus/<name>/ that later runs start from. A failure stops the script and leaves the
# input in build-fuzz/artifacts/; replay it with  build-fuzz/fuzz/<name> <file>.
# Env: SHAPEJIT_FUZZ_JOBS=N runs N fuzzing processes per fuzzer (libFuzzer -fork).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-600}
shift || true
fuzzers=("$@")
if [ ${#fuzzers[@]} -eq 0 ]; then
  for f in fuzz/*_fuzzer.cpp; do fuzzers+=("$(basename "$f" .cpp)"); done
fi
if ! command -v clang++ >/dev/null || ! ls /usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a >/dev/null 2>&1; then
  apt-get -o DPkg::Lock::Timeout=900 update -q >/dev/null
  apt-get -o DPkg::Lock::Timeout=900 install -y -q clang libclang-rt-14-dev >/dev/null
fi

echo "== fuzz build (clang, libFuzzer + ASan + UBSan): build-fuzz/"
cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DSHAPEJIT_FUZZ=ON -DSHAPEJIT_SANITIZE=ON \
      -DSHAPEJIT_BUILD_TESTS=OFF -DSHAPEJIT_BUILD_BENCH=OFF -DSHAPEJIT_BUILD_TOOLS=OFF -DSHAPEJIT_ORACLE=OFF >/dev/null
cmake --build build-fuzz -j"$(nproc)" --target "${fuzzers[@]}"

mkdir -p build-fuzz/artifacts
for name in "${fuzzers[@]}"; do
  work=build-fuzz/corpus/$name
  seeds=fuzz/corpus/$name
  mkdir -p "$work" "$seeds"
  log=build-fuzz/$name.log
  echo "== fuzzing $name for ${seconds} s (log: $log)"
  fork=()
  if [ "${SHAPEJIT_FUZZ_JOBS:-1}" -gt 1 ]; then fork=(-fork="$SHAPEJIT_FUZZ_JOBS"); fi
  status=0
  ASAN_OPTIONS=detect_leaks=1 build-fuzz/fuzz/"$name" "${fork[@]}" -max_total_time="$seconds" -timeout=30 \
      -rss_limit_mb=3072 -print_final_stats=1 -artifact_prefix=build-fuzz/artifacts/"$name"- \
      "$work" "$seeds" >"$log" 2>&1 || status=$?
  # The last status line carries the coverage (cov: edges, ft: features) and the corpus size.
  last=$(grep -E '^#[0-9]+' "$log" | tail -1 || true)
  execs=$(grep -o 'stat::number_of_executed_units: [0-9]*' "$log" | awk '{print $2}' || true)
  rate=$(grep -o 'stat::average_exec_per_sec:[[:space:]]*[0-9]*' "$log" | awk '{print $2}' || true)
  echo "   $name: ${execs:-?} executions (${rate:-?}/s); last status: ${last:-none}"
  if [ "$status" -ne 0 ]; then
    grep -E 'shapejit fuzz failure|ERROR: |runtime error|SUMMARY' "$log" | head -20 || true
    echo "   $name FAILED (exit $status); the input is in build-fuzz/artifacts/ (see $log)"
    exit "$status"
  fi
done
echo "== fuzzing passed"
