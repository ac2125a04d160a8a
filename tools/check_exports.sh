#!/usr/bin/env bash
# Checks that libshapejit.so exports only its public interface: C ABI functions `shapejit_*` and
# C++ API symbols in namespace shapejit:: (including the vtable and typeinfo of its classes),
# never the internals in shapejit::jit, shapejit::rt or shapejit::ref, nor anything else (standard
# library template instances included). Prints every offender and fails if there is one.
# Usage: tools/check_exports.sh path/to/libshapejit.so
set -euo pipefail
lib=${1:?usage: check_exports.sh LIBSHAPEJIT_SO}
[ -f "$lib" ] || { echo "check_exports: library '$lib' does not exist"; exit 1; }
command -v nm >/dev/null || { echo "check_exports: nm not found (apt-get install binutils)"; exit 1; }

# Defined dynamic symbols, demangled; the name is everything after "ADDRESS TYPE ".
names=$(nm -D --defined-only -C "$lib" | sed -E 's/^[0-9a-fA-F]+ +[A-Za-z] +//')
total=$(printf '%s\n' "$names" | grep -c . || true)

# A symbol is public when it is a plain C name shapejit_*, or (after any "vtable for " style
# prefix) starts with shapejit:: outside the internal namespaces.
offenders=$(printf '%s\n' "$names" | awk '
  NF == 0 { next }
  /^shapejit_[A-Za-z0-9_]*$/ { next }
  {
    n = $0
    sub(/^(vtable for |typeinfo for |typeinfo name for |VTT for |construction vtable for |guard variable for |non-virtual thunk to |virtual thunk to )/, "", n)
    if (n ~ /^shapejit::/ && n !~ /^shapejit::(jit|rt|ref)::/ && n !~ /^shapejit::\(anonymous namespace\)/) next
    print
  }')

# The check must be able to see the interface at all: an export list that hid everything would
# otherwise pass.
for required in shapejit_version shapejit_embedding_bag 'shapejit::embedding_bag(' 'typeinfo for shapejit::Error'; do
  if ! printf '%s\n' "$names" | grep -qF -- "$required"; then
    echo "check_exports: $lib does not export '$required', part of the public interface"
    exit 1
  fi
done

if [ -n "$offenders" ]; then
  count=$(printf '%s\n' "$offenders" | grep -c .)
  echo "check_exports: $lib exports $count of $total symbols outside the C ABI (shapejit_*) and the"
  echo "C++ API (shapejit:: but not shapejit::jit/rt/ref); give them hidden visibility:"
  printf '%s\n' "$offenders" | sed -E 's/^(.{200}).+$/\1 ... (cut)/; s/^/  /'
  exit 1
fi
echo "check_exports: ok, $total symbols, all in the C ABI or the C++ API"
