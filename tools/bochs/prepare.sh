#!/usr/bin/env bash
# Prepares the Bochs guest that runs x86-64 programs on an emulated AVX-512 CPU (tools/bochs/run.sh),
# from Debian packages only, and caches it so that a later run costs only the boot:
#   1. installs the packages (tools/install_deps.sh bochs: bochs, BIOS images, isolinux, xorriso,
#      linux-source-6.1 and the kernel's build tools);
#   2. unpacks busybox from busybox-static without installing it (it would replace a host busybox);
#   3. builds a tiny LZ4 kernel from linux-source-6.1 with tools/bochs/kernel.config (several minutes
#      of CPU, once: rebuilt only when that file, the source package or the compiler changes);
#   4. writes the initramfs piece every run shares (busybox, /init, device nodes) with the kernel's
#      own gen_init_cpio, so no step needs root beyond apt-get.
# Usage: tools/bochs/prepare.sh [-j JOBS] [-q]
#   -j JOBS  parallel jobs of the kernel build (default: SHAPEJIT_BOCHS_JOBS, else nproc)
#   -q       print nothing when everything is already prepared
# The cache is SHAPEJIT_BOCHS_DIR (default: ~/.cache/shapejit/bochs, or under XDG_CACHE_HOME: one per
# machine user, so a new clone or CI run reuses the kernel; the stamp below decides when it is stale,
# and a lock keeps concurrent runs from building it twice). Prints the time of each
# step it ran; exits non-zero with the reason when a step fails.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
cache=${SHAPEJIT_BOCHS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/shapejit/bochs}
guest=$cache/guest
jobs=${SHAPEJIT_BOCHS_JOBS:-$(nproc)}
quiet=0
while getopts "j:q" opt; do
  case $opt in
    j) jobs=$OPTARG ;;
    q) quiet=1 ;;
    *) sed -n '2,16p' "$0" >&2; exit 2 ;;
  esac
done

say() { [ "$quiet" = 1 ] || echo "bochs prepare: $*"; }
die() { echo "bochs prepare: error: $*" >&2; exit 1; }
now() { date +%s.%N; }
since() { awk -v a="$(now)" -v b="$1" 'BEGIN { printf "%.1f", a - b }'; }

mkdir -p "$guest" "$cache/debs" "$cache/logs"
# One preparation at a time: parallel runs (the stage's shards) wait here for the first one.
exec 9>"$cache/prepare.lock"
flock 9

# --- 1. packages ------------------------------------------------------------------------------
t=$(now)
if ! "$repo/tools/install_deps.sh" --check bochs >/dev/null; then
  "$repo/tools/install_deps.sh" bochs
  say "packages installed in $(since "$t") s"
fi
command -v bochs-bin >/dev/null || die "bochs-bin not found after installing the bochs packages"

# --- 2. busybox and the boot loader -------------------------------------------------------------
if [ ! -x "$guest/busybox" ]; then
  t=$(now)
  rm -rf "$cache/debs/busybox" && mkdir -p "$cache/debs/busybox"
  # As root, apt's download sandbox user could not write here: tell apt to stay root.
  sandbox=(); [ "$(id -u)" = 0 ] && sandbox=(-o APT::Sandbox::User=root)
  (cd "$cache/debs" && rm -f busybox-static_*.deb && apt-get "${sandbox[@]}" download -q busybox-static >/dev/null) \
    || die "apt-get download busybox-static failed"
  dpkg-deb -x "$cache"/debs/busybox-static_*.deb "$cache/debs/busybox"
  file_info=$(file -b "$cache/debs/busybox/bin/busybox" 2>/dev/null || echo unknown)
  case $file_info in *"statically linked"*|unknown) ;; *) die "busybox-static's busybox is not static: $file_info" ;; esac
  cp "$cache/debs/busybox/bin/busybox" "$guest/busybox.tmp" && mv "$guest/busybox.tmp" "$guest/busybox"
  say "busybox unpacked in $(since "$t") s"
fi
for f in /usr/lib/ISOLINUX/isolinux.bin /usr/lib/syslinux/modules/bios/ldlinux.c32; do
  [ -f "$f" ] || die "missing $f (packages isolinux and syslinux-common)"
  cmp -s "$f" "$guest/$(basename "$f")" || cp "$f" "$guest/"
done

# --- 3. the kernel -------------------------------------------------------------------------------
src_tar=/usr/src/linux-source-6.1.tar.xz
[ -f "$src_tar" ] || die "missing $src_tar (package linux-source-6.1)"
stamp="kernel.config $(sha256sum < "$here/kernel.config" | cut -c1-16)"
stamp+=" linux-source $(dpkg-query -W -f='${Version}' linux-source-6.1)"
stamp+=" gcc $(gcc -dumpfullversion)"
if [ ! -f "$guest/bzImage" ] || [ ! -x "$guest/gen_init_cpio" ] || [ "$(cat "$guest/kernel.stamp" 2>/dev/null)" != "$stamp" ]; then
  t=$(now)
  rm -f "$guest/kernel.stamp" "$guest/base.cpio"
  # Source (~1.3 GB, ~75,000 files) and objects go to a tmpfs when one has room: on disk, unpacking
  # and deleting them took minutes of I/O on a busy machine.
  work_root=$cache
  shm_free=$(df -Pk /dev/shm 2>/dev/null | awk 'NR == 2 { print $4 }')
  [ "${shm_free:-0}" -gt $((3 * 1024 * 1024)) ] && work_root=/dev/shm
  kdir=$(mktemp -d "$work_root/shapejit-kernel.XXXXXX")
  trap 'rm -rf "$kdir"' EXIT
  trap 'exit 130' INT TERM  # so that the EXIT trap cleans up on a signal too
  mkdir -p "$kdir/obj"
  say "unpacking $src_tar"
  tar -xJf "$src_tar" -C "$kdir"
  ksrc=$kdir/linux-source-6.1
  t_unpack=$(since "$t")
  t=$(now)
  log=$cache/logs/kernel-build.log
  say "building the guest kernel with -j$jobs (log: $log)"
  {
    make -C "$ksrc" O="$kdir/obj" tinyconfig
    "$ksrc/scripts/kconfig/merge_config.sh" -m -O "$kdir/obj" "$kdir/obj/.config" "$here/kernel.config"
    make -C "$ksrc" O="$kdir/obj" olddefconfig
  } >"$log" 2>&1 || { grep -E 'rror|can.t' "$log" | head -n 10 >&2; die "kernel configuration failed; see $log"; }
  # Every requested option must be in the final configuration (Kconfig drops what it cannot meet).
  while IFS= read -r line; do
    case $line in ''|'#'*) continue ;; esac
    name=${line%%=*} value=${line#*=}
    if [ "$value" = n ]; then
      grep -qx "$name=[ym]" "$kdir/obj/.config" && die "kernel option $name is still enabled"
    else
      grep -qx "$line" "$kdir/obj/.config" || die "kernel option $line did not survive olddefconfig"
    fi
  done < "$here/kernel.config"
  nice make -C "$ksrc" O="$kdir/obj" -j"$jobs" bzImage >>"$log" 2>&1 \
    || { tail -n 30 "$log" >&2; die "kernel build failed; see $log"; }
  [ -x "$kdir/obj/usr/gen_init_cpio" ] || make -C "$ksrc" O="$kdir/obj" usr/gen_init_cpio >>"$log" 2>&1 \
    || die "building usr/gen_init_cpio failed; see $log"
  cp "$kdir/obj/arch/x86/boot/bzImage" "$guest/bzImage"
  cp "$kdir/obj/usr/gen_init_cpio" "$guest/gen_init_cpio"
  cp "$kdir/obj/.config" "$guest/kernel.full-config"
  rm -rf "$kdir"  # only the files above are needed
  echo "$stamp" > "$guest/kernel.stamp"
  say "kernel built in $(since "$t") s (unpacking took $t_unpack s): $(stat -c %s "$guest/bzImage") bytes"
fi

# --- 4. the shared initramfs piece ---------------------------------------------------------------
if [ ! -f "$guest/base.cpio" ] || [ "$here/guest_init.sh" -nt "$guest/base.cpio" ] \
   || [ "$guest/busybox" -nt "$guest/base.cpio" ]; then
  list=$cache/base.list
  {
    for d in /bin /dev /proc /sys /tmp /run /lib /lib64 /usr /usr/lib /etc; do echo "dir $d 0755 0 0"; done
    echo "nod /dev/console 0600 0 0 c 5 1"
    echo "nod /dev/null 0666 0 0 c 1 3"
    echo "file /bin/busybox $guest/busybox 0755 0 0"
    echo "slink /bin/sh busybox 0777 0 0"
    echo "file /init $here/guest_init.sh 0755 0 0"
  } > "$list"
  "$guest/gen_init_cpio" "$list" > "$guest/base.cpio.tmp" || die "gen_init_cpio failed on $list"
  mv "$guest/base.cpio.tmp" "$guest/base.cpio"
  say "initramfs base written ($(stat -c %s "$guest/base.cpio") bytes)"
fi
say "guest ready in $guest"
