#!/usr/bin/env bash
# Installs the shapejit Python package the two ways a user does, and runs python/tests against each
# from a directory outside any source tree, so `import shapejit` can only find the installed copy
# (test_engine_api.py checks that through SHAPEJIT_EXPECT_PACKAGE_UNDER):
#   pip:   `pip install --no-build-isolation --no-index` of a clean clone into a venv made with
#          --system-site-packages (it sees Debian's torch); setup.py builds the extension from
#          scratch with CMake. The clone must be left with no untracked files.
#   cmake: `cmake --install BUILD_DIR` under DESTDIR with the configured prefix (default
#          /usr/local); the package directory, DESTDIR stripped, must be on the interpreter's
#          sys.path, i.e. where `import shapejit` finds it once installed for real.
# Usage: tools/check_python_install.sh BUILD_DIR [SOURCE]
#   BUILD_DIR  a built release tree of this repository (cmake --install reads it; its
#              libshapejit.so and jitdump serve the pip run's C ABI and ISA tests)
#   SOURCE     what pip installs; default: a `git clone` of this repository (HEAD, so uncommitted
#              edits are not installed: pass a copy of the working tree to test them)
# Environment: SHAPEJIT_PYTHON (default /usr/bin/python3, Debian's, which has torch);
#   SHAPEJIT_CHECK_DIR (scratch directory, default a new one under /tmp; removed on success).
# Needs python3-pip, python3-setuptools and python3-wheel (no network access is used).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
[ $# -ge 1 ] || { echo "usage: $0 BUILD_DIR [SOURCE]" >&2; exit 2; }
build=$(cd "$1" && pwd)
py=${SHAPEJIT_PYTHON:-/usr/bin/python3}
work=${SHAPEJIT_CHECK_DIR:-$(mktemp -d /tmp/shapejit-python-install.XXXXXX)}
mkdir -p "$work"
work=$(cd "$work" && pwd)
for module in pip setuptools wheel; do
  "$py" -c "import $module" 2>/dev/null ||
    { echo "$py cannot import $module: apt-get install python3-pip python3-setuptools python3-wheel" >&2; exit 1; }
done

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
     "$python" -m pytest -q -p no:cacheprovider -rs "$tests")
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
rm -rf "$work/venv"
# --without-pip: the venv uses Debian's pip through the system site-packages (no python3-venv).
"$py" -m venv --without-pip --system-site-packages "$work/venv"
tree_state() { if [ -d "$source_dir/.git" ]; then git -C "$source_dir" status --porcelain; fi; }
before=$(tree_state)
echo "== pip install --no-build-isolation $source_dir (into $work/venv)"
step "pip build and install" \
  "$work/venv/bin/python" -m pip install -q --no-build-isolation --no-index "$source_dir"
if [ "$(tree_state)" != "$before" ]; then
  echo "pip install left files in $source_dir that .gitignore does not cover:" >&2
  diff <(echo "$before") <(tree_state) >&2 || true
  exit 1
fi
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
destdir=$work/destdir
rm -rf "$destdir"
echo "== cmake --install $build under DESTDIR=$destdir"
DESTDIR=$destdir cmake --install "$build" >/dev/null
prefix=$(sed -n 's/^CMAKE_INSTALL_PREFIX:PATH=//p' "$build/CMakeCache.txt")
libdir=$(sed -n 's/^CMAKE_INSTALL_LIBDIR:PATH=//p' "$build/CMakeCache.txt")
init=$(find "$destdir" -path '*/shapejit/__init__.py' -print -quit)
[ -n "$init" ] || { echo "cmake --install put no shapejit package under $destdir" >&2; exit 1; }
package_dir=${init%/shapejit/__init__.py}
installed=${package_dir#"$destdir"}
if ! "$py" -c 'import sys; sys.exit(sys.argv[1] not in sys.path)' "$installed"; then
  echo "cmake --install put the package in $installed, which $py does not search:" >&2
  "$py" -c 'import sys; print(sys.path)' >&2
  exit 1
fi
echo "   package: $installed/shapejit (prefix $prefix, on $py's sys.path)"
echo "== python/tests against the cmake-installed package"
step "pytest (cmake --install)" run_suite "$py" "$destdir" PYTHONPATH="$package_dir" \
  SHAPEJIT_LIB="$destdir$prefix/${libdir:-lib}/libshapejit.so" SHAPEJIT_JITDUMP="$destdir$prefix/bin/jitdump"

rm -rf "$work"
echo "python install check: ok"
