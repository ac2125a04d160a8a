#!/usr/bin/env bash
# Installs what is missing, builds, runs the seed workload and a few other modes through the
# library, prints the comparison table and the generated assembly of the seed kernel.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/install_deps.sh core
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)" --target shapejit_demo shapejit $( [ -f tools/jitdump.cpp ] && echo jitdump ) >/dev/null
SHAPEJIT_NUM_THREADS=${SHAPEJIT_NUM_THREADS:-1} build/tools/shapejit_demo
if [ -x build/tools/jitdump ]; then
  echo
  echo "== the seed kernel as generated for this machine (build/tools/jitdump embedding-bag --dim 128 --mode sum)"
  build/tools/jitdump embedding-bag --dim 128 --mode sum --index i64 --offset i64
fi
