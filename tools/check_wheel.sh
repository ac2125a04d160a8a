#!/usr/bin/env bash
# Builds a wheel of this repository with PYTHON (default: python3) against the torch it runs, then
# installs it into a fresh venv that has the same torch and no build step (binary only, the
# shapejit wheel from the wheel directory alone) and imports and runs it from outside the tree.
# Checks that the wheel requires the torch minor release it was built against (torch==X.Y.*).
# Usage: PYTHON=/path/to/python tools/check_wheel.sh [SCRATCH_DIR]   (default: build-wheel-check/)
# SHAPEJIT_CMAKE_BUILD_DIR (setup.py) reuses a configured build of the extension instead of a
# fresh CMake build; the fresh venv's torch comes from pip's configured sources, pinned to the
# exact version PYTHON runs (so a +cpu build stays one).
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
py=${PYTHON:-python3}
scratch=$(mkdir -p "${1:-$src/build-wheel-check}" && cd "${1:-$src/build-wheel-check}" && pwd)
rm -rf "$scratch/wheels" "$scratch/venv" "$scratch/run"
mkdir -p "$scratch/wheels" "$scratch/run"
start=$(date +%s)

torch_version=$("$py" -c 'import torch; print(torch.__version__)')
torch_dir=$("$py" -c 'import os, torch; print(os.path.dirname(torch.__file__))')
# The torch directory on CMAKE_PREFIX_PATH too, so CMake links this torch's libraries and no
# other libtorch on the system (harmless once setup.py adds it itself).
export SHAPEJIT_CMAKE_ARGS="${SHAPEJIT_CMAKE_ARGS:-} -DCMAKE_PREFIX_PATH=$("$py" -c 'import torch.utils; print(torch.utils.cmake_prefix_path)');$torch_dir"
(cd "$src" && "$py" -m pip wheel --no-build-isolation --no-deps . -w "$scratch/wheels")
wheel=$(ls "$scratch"/wheels/shapejit-*.whl)
built=$(date +%s)

# The pin: Requires-Dist of the wheel's METADATA.
want="torch==$(echo "$torch_version" | sed -E 's/^([0-9]+)\.([0-9]+).*/\1.\2/').*"
"$py" - "$wheel" "$want" <<'PY'
import sys, zipfile
wheel, want = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as z:
    meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
    requires = [l.split(":", 1)[1].strip() for l in z.read(meta).decode().splitlines() if l.startswith("Requires-Dist:")]
    libs = [n for n in z.namelist() if n.endswith("libshapejit_torch_ops.so")]
if requires != [want]:
    sys.exit("check_wheel: {} requires {}, expected [{!r}]".format(wheel, requires, want))
if not libs:
    sys.exit("check_wheel: {} holds no libshapejit_torch_ops.so".format(wheel))
print("check_wheel: {} requires {}".format(wheel, want))
PY

"$py" -m venv "$scratch/venv"
"$scratch/venv/bin/pip" install --quiet --only-binary=:all: "torch==$torch_version"
venv_torch=$(date +%s)
# No index: the wheel directory is the only source, torch is already there, nothing is built.
"$scratch/venv/bin/pip" install --no-index --only-binary=:all: --find-links "$scratch/wheels" shapejit
cd "$scratch/run"
env -u PYTHONPATH -u SHAPEJIT_TORCH_LIB "$scratch/venv/bin/python" - "$scratch/venv" <<'PY'
import sys
from pathlib import Path
import torch
import shapejit
venv = Path(sys.argv[1]).resolve()
assert venv in Path(shapejit.__file__).resolve().parents, "imported {} instead of the venv's".format(shapejit.__file__)
assert venv in Path(shapejit.library_path).resolve().parents, shapejit.library_path
weight = torch.arange(12, dtype=torch.float32).reshape(4, 3)
out = shapejit.EmbeddingBag.from_pretrained(weight, mode="sum")(torch.tensor([0, 3, 1]), torch.tensor([0, 2]))
assert out.tolist() == [[9.0, 11.0, 13.0], [3.0, 4.0, 5.0]], out
print("check_wheel: shapejit {} runs in the fresh venv (torch {})".format(shapejit.__version__, torch.__version__))
PY
done=$(date +%s)
echo "check_wheel: ok (wheel built in $((built - start)) s, venv torch in $((venv_torch - built)) s, install and run in $((done - venv_torch)) s)"
