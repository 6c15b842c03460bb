#!/usr/bin/env bash
# libpipebench links neither PLplot nor MPI (nor anything that brings them): those belong to the
# benchmark programs (libpipebench-bench). Usage: deps.sh libpipebench.so
set -u
lib=$1
fail=0
bad='plplot|libmpi|open-rte|open-pal|libpmix|libcsirocsa|libqsastime'
needed=$(readelf -d "$lib" | awk '/NEEDED/ {print $NF}' | tr -d '[]')
[ -n "$needed" ] || { echo "FAIL: readelf -d $lib shows no NEEDED entry"; exit 1; }
if echo "$needed" | grep -E "$bad"; then
  echo "FAIL: $lib names the above directly (readelf -d)"; fail=1
fi
if ldd "$lib" | grep -E "$bad"; then
  echo "FAIL: $lib loads the above (ldd)"; fail=1
fi
[ $fail = 0 ] && echo "ok: $lib needs $(echo "$needed" | tr '\n' ' ')"
exit $fail
