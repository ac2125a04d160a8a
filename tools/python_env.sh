#!/usr/bin/env bash
# Makes (or brings up to date) the Python virtual environment shapejit builds against and is tested
# with: pip's torch 2.13 (CPU build), the test and benchmark packages of tools/requirements-torch.txt
# and TorchRec (tools/requirements-torchrec.txt), every version pinned. The CMake build reads torch's
# libtorch and CMake files from it (SHAPEJIT_PYTHON), so the C++ oracle, the ATen benchmark rows and
# the PyTorch extension all use the torch users run, not Debian's python3-torch 1.13 (built without FBGEMM).
#
#   tools/python_env.sh [VENV]     default VENV: build-venv (beside build/, ignored by git)
#
# The venv is made from $SHAPEJIT_BASE_PYTHON (default: python3 on PATH), which must be Python
# 3.11 with the venv module: torch 2.13's CPU wheel for 3.11 lies on the CI machines' disk (another
# version would be downloaded). Prints the venv's python on the last line.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv=${1:-$root/build-venv}
base=${SHAPEJIT_BASE_PYTHON:-python3}
requirements=$root/tools/requirements-torch.txt
requirements_no_deps=$root/tools/requirements-torchrec.txt

if ! "$base" -c 'import sys, venv; sys.exit(sys.version_info[:2] != (3, 11))' 2>/dev/null; then
  echo "$base is not a Python 3.11 with the venv module ($("$base" --version 2>&1 || true));" \
       "set SHAPEJIT_BASE_PYTHON to one" >&2
  exit 1
fi
stamp=$venv/.shapejit-requirements
if [ -x "$venv/bin/python" ] && [ -f "$stamp" ] && cmp -s "$stamp" <(cat "$requirements" "$requirements_no_deps"); then
  echo "$venv/bin/python"
  exit 0
fi
[ -x "$venv/bin/python" ] || "$base" -m venv "$venv"
echo "== installing tools/requirements-torch.txt into $venv" >&2
# --only-binary: every pinned package exists as a wheel; a source build here would be a mistake.
"$venv/bin/python" -m pip install -q --disable-pip-version-check --only-binary=:all: -r "$requirements" >&2
"$venv/bin/python" -m pip install -q --disable-pip-version-check --only-binary=:all: --no-deps \
  -r "$requirements_no_deps" >&2
cat "$requirements" "$requirements_no_deps" > "$stamp"
echo "$venv/bin/python"
