#!/usr/bin/env bash
# Installs the build tree into a scratch prefix, then builds and runs tests/consumer against it
# with find_package(shapejit) and with pkg-config. Usage: tools/check_install.sh BUILD_DIR
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "$1" && pwd)
prefix="$build/install-check/prefix"
rm -rf "$build/install-check"
cmake --install "$build" --prefix "$prefix" >/dev/null
cmake -S "$src/tests/consumer" -B "$build/install-check/consumer" -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$build/install-check/consumer" >/dev/null
LD_LIBRARY_PATH="$prefix/lib" "$build/install-check/consumer/consumer_c"
LD_LIBRARY_PATH="$prefix/lib" "$build/install-check/consumer/consumer_cpp"
# pkg-config, by hand with each compiler's default standard: the C consumer with the module
# shapejit (-Werror: no C++ flag may reach a C compiler), the C++ consumer with shapejit-cpp,
# which must bring -std=c++20 itself.
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
cc -Werror "$src/tests/consumer/consumer.c" $(pkg-config --cflags --libs shapejit) -o "$build/install-check/consumer_pc"
LD_LIBRARY_PATH="$prefix/lib" "$build/install-check/consumer_pc"
c++ "$src/tests/consumer/consumer.cpp" $(pkg-config --cflags --libs shapejit-cpp) -o "$build/install-check/consumer_cpp_pc"
LD_LIBRARY_PATH="$prefix/lib" "$build/install-check/consumer_cpp_pc"
if [ -f "$src/tools/jitdump.cpp" ]; then test -x "$prefix/bin/jitdump" || { echo "jitdump was not installed"; exit 1; }; fi
echo "install check: ok"
