#!/usr/bin/env bash
# Runs an x86-64 Linux program inside a tiny Linux guest under Bochs, whose CPU models execute
# AVX-512 (no QEMU does), and returns its output and exit status: for running AVX-512 code on a
# host without AVX-512. Functional testing only: the emulator runs ~50 M instructions/s, and
# time inside the guest is not wall time.
#
# Usage: tools/bochs/run.sh [options] PROGRAM [ARGS...]
#   -c MODEL  Bochs CPU model (default tigerlake; corei7_icelake_u, corei7_skylake_x also have AVX-512)
#   -r FLAGS  CPU flags the guest kernel must report, comma-separated
#             (default avx512f,avx512bw,avx512dq,avx512vl; "" checks none)
#   -t SECS   wall-clock limit of the whole run, boot included (default 1800)
#   -b SECS   wall-clock limit of the boot alone (default 180)
#   -f PATH   also copy PATH (file or directory) into the guest, at the same absolute path (repeatable)
#   -e N=V    set an environment variable in the guest (repeatable); the host's SHAPEJIT_* variables
#             are passed on by themselves (except SHAPEJIT_BOCHS_*)
#   -m MIB    guest memory (default 1024)
#   -v        show the kernel's boot messages on stderr
#   -T        prefix each output line with the host's wall-clock seconds since Bochs started
#   -k        keep the run's work directory (its path is printed)
# PROGRAM may be static or dynamic: a dynamic program's libraries (as ldd resolves them on the host)
# are copied to the same paths in the guest, so build-tree binaries such as build/tests/shapejit_tests
# run as they are. Programs and files keep their absolute host paths; the program starts in the
# host's current directory (empty in the guest), with stdin from /dev/null.
# stdout: the program's output (stdout and stderr interleaved, as on a console).
# stderr: this script's messages and a summary "bochs run: ..." line with boot and run times.
# Exit status: the program's; 124 when a limit was reached; 125 when the guest did not boot,
# failed the CPU flag check, or Bochs stopped before the program reported its exit status
# (each with a message on stderr saying so: never a silent pass).
# The guest (kernel, busybox, boot loader) is prepared on first use by tools/bochs/prepare.sh and
# cached in SHAPEJIT_BOCHS_DIR (default ~/.cache/shapejit/bochs, shared by every checkout).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
cache=${SHAPEJIT_BOCHS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/shapejit/bochs}
guest=$cache/guest
model=tigerlake required=avx512f,avx512bw,avx512dq,avx512vl
limit=1800 boot_limit=180 megs=1024 verbose=0 keep=0 stamps=0
extra=() envs=()
usage() { sed -n '7,29p' "$0" >&2; exit 2; }
while getopts "c:r:t:b:f:e:m:vTkh" opt; do
  case $opt in
    c) model=$OPTARG ;; r) required=$OPTARG ;; t) limit=$OPTARG ;; b) boot_limit=$OPTARG ;;
    f) extra+=("$OPTARG") ;; e) envs+=("$OPTARG") ;; m) megs=$OPTARG ;; v) verbose=1 ;; T) stamps=1 ;; k) keep=1 ;;
    *) usage ;;
  esac
done
shift $((OPTIND - 1))
[ $# -ge 1 ] || usage

fail() { echo "bochs run: FAILED: $*" >&2; }
name=$1; shift
program=$name
[[ $name == */* ]] || program=$(type -P "$name") || program=""
[ -f "$program" ] || { fail "no such program: $name"; exit 125; }
program=$(realpath "$program")

"$here/prepare.sh" -q || { fail "preparing the guest failed (tools/bochs/prepare.sh)"; exit 125; }

mkdir -p "$cache/runs"
work=$(mktemp -d "$cache/runs/run.XXXXXX")
bochs_pid=""
cleanup() {
  [ -n "$bochs_pid" ] && kill "$bochs_pid" 2>/dev/null
  if [ "$keep" = 1 ]; then echo "bochs run: work directory kept: $work" >&2; else rm -rf "$work"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- the job's initramfs piece: program, files, libraries, /run/job.sh ----------------------------
quote() { printf "'%s'" "${1//\'/\'\\\'\'}"; }
token=$(od -An -N8 -tx8 /dev/urandom | tr -d ' \n')
list=$work/job.list
declare -A listed=()
add_dirs() {  # parent directories of $1, outermost first
  local d=${1%/*} parts=() p
  while [ -n "$d" ]; do parts=("$d" "${parts[@]}"); d=${d%/*}; done
  for p in "${parts[@]}"; do
    [ -n "${listed[$p]:-}" ] && continue
    listed[$p]=1; echo "dir $p 0755 0 0" >> "$list"
  done
}
libdirs=()
add_file() {  # add_file GUEST_PATH HOST_FILE: the file, and the libraries of a dynamic ELF
  local at=$1 from=$2 mode
  [ -n "${listed[$at]:-}" ] && return 0
  # gen_init_cpio's list is split at blanks
  [[ $at$from == *[[:space:]]* ]] && { fail "a path with blanks cannot go into the guest: $from"; exit 125; }
  add_dirs "$at"
  listed[$at]=1
  mode=$(stat -L -c %a "$from")
  echo "file $at $from $mode 0 0" >> "$list"
  [ "$(head -c 4 "$from" | od -An -c | tr -d ' ')" = '177ELF' ] || return 0
  local deps line lib
  deps=$(ldd "$from" 2>&1) || return 0  # "not a dynamic executable": nothing to add
  if grep -q 'not found' <<<"$deps"; then fail "libraries of $from not found on the host:"; grep 'not found' <<<"$deps" >&2; exit 125; fi
  while read -r line; do  # (read strips the leading tab)
    case $line in
      *' => /'*) lib=${line#*=> }; lib=${lib%% (*} ;;
      /*) lib=${line%% (*} ;;
      *) continue ;;
    esac
    libdirs+=("${lib%/*}")
    add_file "$lib" "$lib"
  done <<<"$deps"
}
: > "$list"
add_file "$program" "$program"
for x in "${extra[@]}"; do
  [ -e "$x" ] || { fail "no such file: $x"; exit 125; }
  while IFS= read -r -d '' f; do add_file "$f" "$f"; done < <(find "$(realpath "$x")" -type f -print0)
done
{
  echo "JOB_TOKEN=$token"
  echo "run_job() {"
  [ ${#libdirs[@]} -gt 0 ] && echo "  export LD_LIBRARY_PATH=$(quote "$(printf '%s\n' "${libdirs[@]}" | sort -u | paste -sd:)")"
  while IFS= read -r var; do
    case $var in SHAPEJIT_BOCHS_*) continue ;; esac
    echo "  export $var=$(quote "${!var}")"
  done < <(compgen -e | grep '^SHAPEJIT_')
  for kv in "${envs[@]}"; do
    [[ $kv == [A-Za-z_]*=* ]] || { fail "-e wants NAME=VALUE, got: $kv"; exit 2; }
    echo "  export ${kv%%=*}=$(quote "${kv#*=}")"
  done
  echo "  mkdir -p $(quote "$PWD") && cd $(quote "$PWD")"
  printf '  %s' "$(quote "$program")"
  for a in "$@"; do printf ' %s' "$(quote "$a")"; done
  echo
  echo "}"
} > "$work/job.sh"
echo "file /run/job.sh $work/job.sh 0644 0 0" >> "$list"
mkdir -p "$work/iso"
"$guest/gen_init_cpio" "$list" > "$work/job.cpio" || { fail "gen_init_cpio failed on $list"; exit 125; }
cat "$guest/base.cpio" "$work/job.cpio" > "$work/iso/initrd"

# --- boot medium -------------------------------------------------------------------------------
# Bochs 2.7 workarounds on the kernel command line:
#  - xsavec, xsaves, pku: Bochs reports CPUID leaf 0xD inconsistently for these, Linux's XSAVE
#    self-check then fails and it turns XSAVE off, and AVX and AVX-512 with it. Without them the
#    check passes and the guest enables the AVX-512 state.
#  - fsrm: Bochs leaves the fast-strings enable clear, so Linux drops ERMS but keeps FSRM, and
#    Linux 6.1's memmove, which takes FSRM to imply ERMS, then corrupts short copies (the boot
#    hangs on the tigerlake and icelake models).
cmdline="console=ttyS0 mitigations=off nokaslr clearcpuid=xsavec,xsaves,pku,fsrm"
[ "$verbose" = 1 ] || cmdline+=" quiet"
cp "$guest/bzImage" "$work/iso/vmlinuz"
cp "$guest/isolinux.bin" "$guest/ldlinux.c32" "$work/iso/"
printf 'DEFAULT guest\nPROMPT 0\nTIMEOUT 0\nLABEL guest\n  KERNEL /vmlinuz\n  INITRD /initrd\n  APPEND %s\n' \
  "$cmdline" > "$work/iso/isolinux.cfg"
xorriso -as mkisofs -quiet -o "$work/boot.iso" -b isolinux.bin -c boot.cat -no-emul-boot \
  -boot-load-size 4 -boot-info-table "$work/iso" >"$work/xorriso.log" 2>&1 \
  || { cat "$work/xorriso.log" >&2; fail "xorriso could not write the boot ISO"; exit 125; }

# Debian's Bochs has no headless display; VNC (rfb) with timeout=0 does not wait for a viewer,
# and its socket is kept in a private network namespace. The virtual clock advances with
# instructions (sync=none), so the guest's time says nothing about the host's.
cat > "$work/bochsrc" <<EOF
megs: $megs
cpu: model=$model, count=1, ips=50000000, reset_on_triple_fault=0, ignore_bad_msrs=1
romimage: file=/usr/share/bochs/BIOS-bochs-latest, options=fastboot
vgaromimage: file=/usr/share/vgabios/vgabios.bin
pci: enabled=1, chipset=i440fx
display_library: rfb, options="timeout=0"
ata0-master: type=cdrom, path=$work/boot.iso, status=inserted
ata1: enabled=0
boot: cdrom
clock: sync=none, time0=946684800
com1: enabled=1, mode=file, dev=$work/serial.txt
log: $work/bochs.log
panic: action=fatal
error: action=report
info: action=report
debug: action=ignore
mouse: enabled=0
speaker: enabled=0
EOF
# Debian builds bochs-bin with its debugger, which waits at a prompt before the first instruction.
printf 'continue\nquit\n' > "$work/debugger.rc"

# --- run ---------------------------------------------------------------------------------------
namespace=()
if unshare -n true 2>/dev/null; then namespace=(unshare -n)
elif unshare -rn true 2>/dev/null; then namespace=(unshare -rn)
else echo "bochs run: warning: no private network namespace; Bochs' VNC server listens on port 5900" >&2
fi
: > "$work/serial.txt"
start=$(date +%s.%N)
"${namespace[@]}" bochs-bin -q -f "$work/bochsrc" -rc "$work/debugger.rc" </dev/null >"$work/bochs.out" 2>&1 &
bochs_pid=$!
elapsed() { awk -v a="$(date +%s.%N)" -v b="$start" 'BEGIN { printf "%.1f", a - b }'; }
cpu_seconds() { awk -v hz="$(getconf CLK_TCK)" '{ printf "%.1f", ($14 + $15) / hz }' "/proc/$bochs_pid/stat" 2>/dev/null || echo "?"; }
show_boot_log() {
  echo "bochs run: last lines of the guest's console:" >&2
  tail -n 25 "$work/boot.log" 2>/dev/null | sed 's/^/  | /' >&2
  echo "bochs run: Bochs' own messages:" >&2
  grep -a -h -E '^[0-9]+[ep]\[|>>PANIC<<' "$work/bochs.out" "$work/bochs.log" 2>/dev/null \
    | grep -v -E 'MSR|bxevent_callback' | tail -n 8 | sed 's/^/  | /' >&2
}

status=125 phase=boot reason="" boot_wall="?" boot_cpu="?" run_start="" pending="" held_blank=0
exec 3< <(tail -n +1 -s 0.1 -F --pid="$bochs_pid" "$work/serial.txt" 2>/dev/null)
while :; do
  if IFS= read -r -t 1 chunk <&3; then
    line=$pending$chunk pending=""
  else
    rc=$?
    if [ "$rc" -gt 128 ]; then  # no complete line yet: keep what arrived, check the limits
      pending+=$chunk
      t=$(elapsed)
      if [ "$phase" = boot ] && awk -v t="$t" -v l="$boot_limit" 'BEGIN { exit !(t > l) }'; then
        reason="the guest did not boot within $boot_limit s"; status=124; break
      fi
      if awk -v t="$t" -v l="$limit" 'BEGIN { exit !(t > l) }'; then
        reason="time limit of $limit s reached (phase: $phase)"; status=124; break
      fi
      continue
    fi
    [ -n "$pending$chunk" ] && line=$pending$chunk pending="" || break  # end of file: Bochs stopped
  fi
  line=${line%$'\r'}
  case $line in
    "@@BOOTED-$token"*)
      boot_wall=$(elapsed) boot_cpu=$(cpu_seconds) phase=flags
      echo "${line/-$token/}" >> "$work/boot.log"; [ "$verbose" = 1 ] && echo "${line/-$token/}" >&2 ;;
    "@@FLAGS-$token"*)
      flags=" ${line#*"$token"} "
      echo "guest flags:$flags" >> "$work/boot.log"
      missing=""
      for f in ${required//,/ }; do [[ $flags == *" $f "* ]] || missing+=" $f"; done
      if [ -n "$missing" ]; then reason="the guest CPU ($model) lacks:$missing"; break; fi
      phase=run run_start=$(elapsed) run_cpu_start=$(cpu_seconds) ;;
    "@@EXIT-$token="*)
      status=${line#*=} phase=done
      [[ $status =~ ^[0-9]+$ ]] || { reason="unreadable exit marker: $line"; status=125 phase=garbled; }
      break ;;
    *)
      if [ "$phase" = run ]; then
        # A blank line may be the guest's separator before the exit marker: hold it back.
        [ "$held_blank" = 1 ] && echo && held_blank=0
        if [ -z "$line" ]; then held_blank=1
        elif [ "$stamps" = 1 ]; then printf '[%7s s] %s\n' "$(elapsed)" "$line"
        else printf '%s\n' "$line"; fi
      else
        printf '%s\n' "$line" >> "$work/boot.log"; [ "$verbose" = 1 ] && printf '%s\n' "$line" >&2
      fi
      if [[ $line == *"Kernel panic"* ]]; then reason="the guest kernel panicked"; phase=panic; fi ;;
  esac
  [ "$phase" = panic ] && { sleep 1; break; }
done
total=$(elapsed)
end_cpu=$(cpu_seconds)
kill "$bochs_pid" 2>/dev/null
wait "$bochs_pid" 2>/dev/null
bochs_pid=""
exec 3<&-

run_wall="?" run_cpu="?"
if [ -n "$run_start" ]; then
  run_wall=$(awk -v a="$total" -v b="$run_start" 'BEGIN { printf "%.1f", a - b }')
  run_cpu=$(awk -v a="$end_cpu" -v b="$run_cpu_start" 'BEGIN { if (a + 0 == a && b + 0 == b) printf "%.1f", a - b; else printf "?" }')
fi
if [ "$phase" != done ]; then
  [ -z "$reason" ] && reason="Bochs stopped before the program reported its exit status (phase: $phase)"
  fail "$reason"
  show_boot_log
  [ "$status" = 0 ] && status=125
fi
echo "bochs run: model $model, boot ${boot_wall} s (${boot_cpu} s CPU), program ${run_wall} s (${run_cpu} s CPU), total ${total} s, exit status $status" >&2
exit "$status"
