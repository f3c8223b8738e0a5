#!/usr/bin/env bash
# Compares a built libinfokv.so with the committed ABI baseline of the released libinfokv.so.0
# (packaging/abi/libinfokv.abi, written by abidw from a build with debug info, limited to the public headers).
# Fails on an incompatible change (a removed function, a changed signature or public struct layout) unless the
# SONAME changed too; additions pass and are listed. Needs abigail-tools.
#   check a build:          bash packaging/abi/check_abi.sh BUILD/libinfokv.so.0.1.0
#   new baseline (release): bash packaging/abi/check_abi.sh --update BUILD/libinfokv.so.0.1.0
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
BASE="$ROOT/packaging/abi/libinfokv.abi"
HEADERS="$ROOT/capi/include/infokv"
if [ "${1:-}" = "--update" ]; then
  abidw --headers-dir "$HEADERS" --drop-private-types --exported-interfaces-only --no-corpus-path --short-locs "$2" |
    sed "s/ comp-dir-path='[^']*'//" >"$BASE" || exit 1
  echo "wrote $BASE"
  exit 0
fi
LIB=$1
[ -f "$BASE" ] || { echo "check_abi: no baseline $BASE" >&2; exit 1; }
command -v abidiff >/dev/null || { echo "check_abi: abidiff missing (apt install abigail-tools)" >&2; exit 1; }
abidiff --headers-dir2 "$HEADERS" --drop-private-types --exported-interfaces-only "$BASE" "$LIB" >/tmp/infokv-abidiff.$$ 2>&1
rc=$?
cat /tmp/infokv-abidiff.$$
rm -f /tmp/infokv-abidiff.$$
# abidiff's status is a bit field: 1 error, 2 usage error, 4 ABI change, 8 incompatible change
if [ $((rc & 3)) -ne 0 ]; then echo "check_abi: abidiff failed ($rc)" >&2; exit 1; fi
if [ $((rc & 8)) -ne 0 ]; then
  old=$(sed -n "s/.*soname='\([^']*\)'.*/\1/p" "$BASE" | head -n 1)
  new=$(objdump -p "$LIB" | awk '/SONAME/ {print $2}')
  if [ "$old" = "$new" ]; then
    echo "FAIL: incompatible ABI change with the same SONAME ($new): bump the SONAME (the major version) or keep the ABI" >&2
    exit 1
  fi
  echo "check_abi: incompatible change, and the SONAME moved from $old to $new: allowed"
fi
[ $((rc & 4)) -ne 0 ] && echo "check_abi: compatible additions (listed above)"
echo "check_abi: ok against $(basename "$BASE")"
