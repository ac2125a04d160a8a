#!/usr/bin/env bash
# CI stage: the reduced AVX-512 battery (tests/avx512_battery) on every host. Where the CPU runs
# AVX-512 (as the engine decides: `avx512_battery --probe`) it runs natively; elsewhere inside the
# Bochs guest (tools/bochs/run.sh), split into one shard per core, each its own Bochs. Either way
# with SHAPEJIT_REQUIRE_ISAS=avx512, so a run that executed no AVX-512 kernel fails. Prints the
# stage's times (install, guest kernel, boot, battery) and the AVX-512 kernel and case counts.
#
#   tools/avx512_stage.sh [BUILD_DIR]    (default build; the directory must be configured)
# or, sourced: avx512_stage [BUILD_DIR]
# Outside CI (CI != true) a host without AVX-512 and without the Bochs packages skips the stage
# with the command that installs them; CI installs them (tools/install_deps.sh bochs). The guest is
# cached in SHAPEJIT_BOCHS_DIR (default ~/.cache/shapejit/bochs, see tools/bochs/prepare.sh; the
# shards' output goes to BUILD_DIR/bochs-stage); SHAPEJIT_BOCHS_SHARDS overrides the
# number of parallel Bochs instances (default: the number of cores, at most 4). Under Bochs the
# quantized GEMM kernels' test (gemm_quant_kernel_tests, SHAPEJIT_QUANT_KERNEL_CASES random keys
# per variant, default here 40) runs after the battery; natively it is part of shapejit_tests.

avx512_stage() (
  set -euo pipefail
  cd "$(dirname "${BASH_SOURCE[0]}")/.."
  local build
  build=$(realpath -m "${1:-build}")
  local battery=$build/tests/avx512_battery/avx512_battery
  local quant_kernels=$build/tests/gemm_quant_kernel_tests
  local t0 t1 t2 t3 rc=0
  t0=$(date +%s)
  echo "== avx512 stage: building avx512_battery and gemm_quant_kernel_tests"
  cmake --build "$build" --target avx512_battery gemm_quant_kernel_tests -j"$(nproc)" >/dev/null
  export SHAPEJIT_REQUIRE_ISAS=avx512

  if "$battery" --probe; then
    t1=$(date +%s)
    echo "== avx512 battery (native)"
    "$battery" || rc=$?
    echo "== avx512 stage (native): build $(( t1 - t0 )) s, battery $(( $(date +%s) - t1 )) s"
    return "$rc"
  fi

  local missing
  if [ "${CI:-}" != true ] && ! missing=$(tools/install_deps.sh --check bochs); then
    echo "== avx512 stage SKIPPED: no AVX-512 on this CPU and the Bochs packages are missing: $(echo $missing)"
    echo "   install them with: tools/install_deps.sh bochs   (CI=true installs them automatically)"
    return 0
  fi
  t1=$(date +%s)
  tools/install_deps.sh bochs
  t2=$(date +%s)
  tools/bochs/prepare.sh  # builds the guest kernel the first time (cached in SHAPEJIT_BOCHS_DIR)
  t3=$(date +%s)

  local shards=${SHAPEJIT_BOCHS_SHARDS:-$(nproc)} out=$build/bochs-stage i
  [ "$shards" -gt 4 ] && shards=4
  echo "== avx512 battery under Bochs ($shards shard(s) in parallel)"
  rm -rf "$out" && mkdir -p "$out"
  local pids=()
  for (( i = 0; i < shards; ++i )); do
    tools/bochs/run.sh -t 1500 "$battery" --shard "$i/$shards" >"$out/shard$i.out" 2>"$out/shard$i.err" &
    pids+=($!)
  done
  local status boots=() failed=0
  for (( i = 0; i < shards; ++i )); do
    status=0
    wait "${pids[$i]}" || status=$?
    echo "-- shard $i/$shards (exit status $status)"
    cat "$out/shard$i.out" "$out/shard$i.err"
    boots+=("$(sed -n 's/.*, boot \([0-9.?]*\) s.*/\1/p' "$out/shard$i.err" | tail -n 1)")
    [ "$status" = 0 ] || failed=1
  done
  local t4 quant_status=0
  t4=$(date +%s)
  echo "== quantized GEMM kernels under Bochs"
  SHAPEJIT_QUANT_KERNEL_CASES=${SHAPEJIT_QUANT_KERNEL_CASES:-40} tools/bochs/run.sh -t 1500 "$quant_kernels" \
      >"$out/quant.out" 2>"$out/quant.err" || quant_status=$?
  cat "$out/quant.out" "$out/quant.err"
  echo "-- quantized GEMM kernels (exit status $quant_status, $(( $(date +%s) - t4 )) s)"
  [ "$quant_status" = 0 ] || failed=1
  local kernels cases
  kernels=$(cat "$out"/shard*.out | awk '/^avx512 battery: isa avx512 ran/ { k += $6 } END { print k + 0 }')
  cases=$(cat "$out"/shard*.out | awk '/^avx512 battery: isa avx512 ran/ { c += $9 } END { print c + 0 }')
  echo "== avx512 stage (Bochs): install $(( t2 - t1 )) s, guest kernel $(( t3 - t2 )) s," \
       "boot ${boots[*]} s, battery $(( $(date +%s) - t3 )) s (boot included), stage $(( $(date +%s) - t0 )) s;" \
       "$kernels AVX-512 kernels, $cases cases"
  if [ "$failed" != 0 ]; then
    echo "== avx512 stage FAILED (see the shards and the quantized kernels' run above)"
    return 1
  fi
)

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  avx512_stage "$@"
fi
