#!/usr/bin/env bash
# Installs the shapejit Python package the two ways a user does, and runs python/tests against each
# from a directory outside any source tree, so `import shapejit` can only find the installed copy
# (test_engine_api.py checks that through SHAPEJIT_EXPECT_PACKAGE_UNDER):
#   pip:   `pip wheel --no-build-isolation --no-index` of a clean clone (setup.py builds the
#          extension from scratch with CMake against the venv's torch), then `pip install` of
#          that wheel into a new venv. The clone must be left with no untracked files.
#   cmake: `cmake --install BUILD_DIR --prefix <another new venv>`: the package lands in that
#          venv's site-packages, where its python imports it. Only the tests of loading, the
#          engine and one op run there: the rest would repeat the pip run on the same code.
# Both new venvs see SHAPEJIT_PYTHON's packages (torch, pytest, pip) through a .pth file instead
# of installing torch again.
# Usage: tools/check_python_install.sh BUILD_DIR [SOURCE]
#   BUILD_DIR  a built release tree of this repository configured with the same SHAPEJIT_PYTHON
#              (cmake --install reads it; its libshapejit.so and jitdump serve the C ABI and ISA
#              tests)
#   SOURCE     what pip installs; default: a `git clone` of this repository (HEAD, so uncommitted
#              edits are not installed: pass a copy of the working tree to test them)
# Environment: SHAPEJIT_PYTHON (default build-venv/bin/python: tools/python_env.sh makes it);
#   SHAPEJIT_CHECK_DIR (scratch directory, default a new one under /tmp; removed on success).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
[ $# -ge 1 ] || { echo "usage: $0 BUILD_DIR [SOURCE]" >&2; exit 2; }
build=$(cd "$1" && pwd)
py=${SHAPEJIT_PYTHON:-$root/build-venv/bin/python}
work=${SHAPEJIT_CHECK_DIR:-$(mktemp -d /tmp/shapejit-python-install.XXXXXX)}
mkdir -p "$work"
work=$(cd "$work" && pwd)
for module in torch pytest pip setuptools wheel; do
  "$py" -c "import $module" 2>/dev/null ||
    { echo "$py cannot import $module: tools/python_env.sh makes a venv with it" >&2; exit 1; }
done

# A new venv at $1 that sees $py's packages (torch, pytest, pip) through a .pth file.
new_venv() {
  rm -rf "$1"
  "$py" -m venv --without-pip "$1"
  local own shared
  own=$("$1/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
  shared=$("$py" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
  echo "$shared" >"$own/shapejit-check-shared.pth"
}

# Runs "$@" as one step named $1 and prints its wall time.
step() {
  local label=$1 t0
  shift
  t0=$(date +%s)
  "$@"
  echo "   $label: $(( $(date +%s) - t0 )) s"
}

# Runs $tests with interpreter $1 against the installed package under $2; the other arguments are
# environment settings (PYTHONPATH, SHAPEJIT_LIB, SHAPEJIT_JITDUMP).
run_suite() {
  local python=$1 under=$2
  shift 2
  mkdir -p "$work/run"
  (cd "$work/run" &&
   env -u PYTHONPATH -u SHAPEJIT_TORCH_LIB "$@" SHAPEJIT_EXPECT_PACKAGE_UNDER="$under" PYTHONDONTWRITEBYTECODE=1 \
     "$python" -m pytest -q -p no:cacheprovider -rs $tests)
}

# --- pip ----------------------------------------------------------------------------------------
if [ $# -ge 2 ]; then
  source_dir=$(cd "$2" && pwd)
else
  rm -rf "$work/clone"
  git clone -q "$root" "$work/clone"
  source_dir=$work/clone
fi
tests=$source_dir/python/tests
# ccache (tools/test.sh) rewrites paths under its base directory: this clone's, so that the clone's
# random place in /tmp does not make every compiler call a miss.
[ -z "${CCACHE_BASEDIR:-}" ] || export CCACHE_BASEDIR=$source_dir
new_venv "$work/venv"
tree_state() { if [ -d "$source_dir/.git" ]; then git -C "$source_dir" status --porcelain; fi; }
before=$(tree_state)
# pip builds a wheel (what `pip install .` does inside) and installs it into a venv without
# building anything: the wheel is what a machine with the same torch and no compiler installs.
echo "== pip wheel --no-build-isolation $source_dir, installed into $work/venv"
step "pip wheel (a fresh CMake build)" \
  "$work/venv/bin/python" -m pip wheel -q --no-build-isolation --no-index --no-deps -w "$work/wheels" "$source_dir"
if [ "$(tree_state)" != "$before" ]; then
  echo "pip wheel left files in $source_dir that .gitignore does not cover:" >&2
  diff <(echo "$before") <(tree_state) >&2 || true
  exit 1
fi
wheel=$(ls "$work"/wheels/shapejit-*.whl)
echo "   $(basename "$wheel"): $(du -k "$wheel" | cut -f1) KiB"
step "pip install of the wheel" "$work/venv/bin/python" -m pip install -q --no-index "$wheel"
site=$("$work/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
extension=$site/shapejit/libshapejit_torch_ops.so
if readelf -d "$extension" | grep -E 'NEEDED.*libshapejit\.so|R(UN)?PATH'; then
  echo "$extension must be self-contained (no libshapejit.so, no RPATH)" >&2
  exit 1
fi
echo "== python/tests against the pip-installed package"
step "pytest (pip install)" run_suite "$work/venv/bin/python" "$work/venv" \
  SHAPEJIT_LIB="$build/libshapejit.so" SHAPEJIT_JITDUMP="$build/tools/jitdump"

# --- cmake --install ----------------------------------------------------------------------------
new_venv "$work/cmake-venv"
echo "== cmake --install $build --prefix $work/cmake-venv"
cmake --install "$build" --prefix "$work/cmake-venv" >/dev/null
libdir=$(sed -n 's/^CMAKE_INSTALL_LIBDIR:PATH=//p' "$build/CMakeCache.txt")
installed=$("$work/cmake-venv/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
if [ ! -f "$installed/shapejit/__init__.py" ]; then
  echo "cmake --install put no shapejit package in $installed, where the venv's python imports from:" >&2
  find "$work/cmake-venv" -name __init__.py -path '*shapejit*' >&2
  exit 1
fi
echo "   package: $installed/shapejit"
echo "== python/tests against the cmake-installed package"
tests="$source_dir/python/tests/test_engine_api.py $source_dir/python/tests/test_embedding_bag_op.py"
step "pytest (cmake --install)" run_suite "$work/cmake-venv/bin/python" "$work/cmake-venv" \
  SHAPEJIT_LIB="$work/cmake-venv/${libdir:-lib}/libshapejit.so" SHAPEJIT_JITDUMP="$work/cmake-venv/bin/jitdump"

rm -rf "$work"
echo "python install check: ok"
