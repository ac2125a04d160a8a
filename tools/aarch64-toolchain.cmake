# Cross build for AArch64 Linux on a Debian x86-64 host, run under qemu-user:
#   tools/install_deps.sh cross
#   cmake -S . -B build-a64 -G Ninja -DCMAKE_TOOLCHAIN_FILE=tools/aarch64-toolchain.cmake \
#         -DSHAPEJIT_ORACLE=OFF -DSHAPEJIT_BUILD_BENCH=OFF
#   cmake --build build-a64 && ctest --test-dir build-a64
# Needs g++-aarch64-linux-gnu, qemu-user and the :arm64 packages of asmjit, oneTBB and sleef
# (multiarch, so no sysroot: Debian's cross g++ searches /usr/{include,lib}/aarch64-linux-gnu).
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
# find_package looks in /usr/lib/aarch64-linux-gnu/cmake/{asmjit,TBB}; header-only packages of
# Architecture: all (doctest, CLI11) are found where the native build finds them.
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
# Debian 12 ships no aarch64-linux-gnu-pkg-config wrapper: point pkg-config at the arm64 .pc files.
set(ENV{PKG_CONFIG_LIBDIR} "/usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig")
# ctest (and doctest test discovery) run the arm64 binaries through qemu. No `-L`: with
# libc6:arm64 installed, `-L /usr/aarch64-linux-gnu` would mix the cross toolchain's ld.so with
# the multiarch libc.so.6 and the first pthread_create would spin forever.
find_program(SHAPEJIT_QEMU_AARCH64 qemu-aarch64)
if(SHAPEJIT_QEMU_AARCH64)
  set(CMAKE_CROSSCOMPILING_EMULATOR ${SHAPEJIT_QEMU_AARCH64})
else()
  message(STATUS "qemu-aarch64 not found: the arm64 binaries build but ctest cannot run them "
                 "(apt-get install qemu-user)")
endif()
