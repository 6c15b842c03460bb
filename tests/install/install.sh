#!/usr/bin/env bash
# An installed pipebench works with the source and build trees out of reach: `cmake --install`
# into a temporary prefix, `pip install` of ./python into a temporary folder, then, in a mount
# namespace where the source tree (and every build folder in it) is hidden under an empty
# tmpfs, `infer --framework torch`, a Track 2 run with its torch DataLoader peer, and the Python
# API from a clean folder. Without the right to make a mount namespace (not root, or refused)
# the same commands run with PIPEBENCH_SOURCE_DIR and PIPEBENCH_PYTHON_DIR unset and a skip line says
# the trees were reachable.
. "$(dirname "$0")/../cli/lib.sh"
build=${PIPEBENCH_BUILD_DIR:?PIPEBENCH_BUILD_DIR names the build folder}
src=${PIPEBENCH_SOURCE_TREE:?PIPEBENCH_SOURCE_TREE names the source tree}
py=${PIPEBENCH_PYTHON:-/usr/bin/python3}
lim=500
prefix=$work/prefix
site=$work/site

run cmake --install "$build" --prefix "$prefix"
expect_rc 0 "cmake --install"
for f in bin/pipebench lib/libpipebench.so lib/libpipebench-bench.so include/pipebench/infer.h include/pipebench/core.h \
  lib/pkgconfig/pipebench.pc share/pipebench/python/pipebench_torch_infer.py \
  share/pipebench/python/pipebench_peer.py share/pipebench/python/pipebench/__init__.py \
  share/pipebench/python/pipebench_track3_torch.py \
  share/pipebench/lance/pb_lance.js; do
  [[ -e $prefix/$f ]] && pass || fail "installed: $f missing"
done
if [[ -e $build/libpipebench-cuda.so ]]; then
  [[ -e $prefix/lib/libpipebench-cuda.so ]] && pass || fail "the CUDA module was built, not installed"
fi
grep -q "^prefix=$prefix\$" "$prefix/lib/pkgconfig/pipebench.pc" && pass || fail "pipebench.pc names its prefix"
# a program built against the installed headers and library through pkg-config
if command -v pkg-config >/dev/null && command -v cc >/dev/null; then
  printf '#include <stdio.h>\n#include "pipebench/core.h"\nint main(void){printf("%%s\\n", pb_version());return 0;}\n' >"$work/v.c"
  run sh -c "cc '$work/v.c' -o '$work/v' \$(PKG_CONFIG_PATH='$prefix/lib/pkgconfig' pkg-config --cflags --libs pipebench) && '$work/v'"
  expect_rc 0 "a program built with pkg-config --cflags --libs pipebench runs"
fi

run "$py" -m pip install --no-index --no-deps --disable-pip-version-check --target "$site" "$src/python"
expect_rc 0 "pip install ./python with no index (nothing downloaded)"
[[ -e $site/pipebench/bench.py ]] && pass || fail "pip installed the package"

# The checks, run where the trees may be hidden. Writes one line per check: "ok NAME" or
# "FAIL NAME: why".
cat >"$work/checks.sh" <<'SH'
set -u
prefix=$1 site=$2 py=$3 lim=$4 hidden=$5
unset PIPEBENCH_SOURCE_DIR PIPEBENCH_PYTHON_DIR PIPEBENCH_LIB PIPEBENCH_LIBRARY PYTHONPATH
export PATH="$prefix/bin:$PATH"
clean=$(mktemp -d)
cd "$clean" || exit 1
say() { if [[ $2 -eq 0 ]]; then echo "ok $1"; else echo "FAIL $1: $3"; fi; }
if [[ $hidden == 1 ]]; then
  [[ -z $(ls -A "$SRC_TREE") ]]; say "source tree hidden" $? "$SRC_TREE is still visible"
fi
out=$(timeout "$lim" pipebench infer --framework torch --batch-sizes 1 --iterations 1 --warmup 0 \
  --threads 1 --output-dir "$clean/raw" 2>&1)
rc=$?
say "installed infer --framework torch" $rc "exit $rc: $out"
grep -qE "^pytorch +embed +batch +1: mean" <<<"$out"; say "a pytorch row" $? "$out"
ls "$clean"/raw/benchmark_results_*.csv >/dev/null 2>&1; say "the CSV" $? "none in $clean/raw"
out=$(pipebench gen --out "$clean/ds" --rows 8 --size 16x16 --formats tiff 2>&1)
say "gen" $? "$out"
out=$(timeout "$lim" pipebench run --data "$clean/ds" --out "$clean/run" --tracks 2 --formats tiff \
  --batch-sizes 4 --workers 0 --caches none --repeats 1 2>&1)
rc=$?
say "installed Track 2 with its torch peer" $rc "exit $rc: $out"
grep -qi "torch" "$clean/run/data/pipebench_track2.csv" 2>/dev/null
say "the torch DataLoader's rows" $? "no torch rows in $clean/run/data/pipebench_track2.csv"
out=$(PYTHONPATH="$site" timeout "$lim" "$py" - "$clean/api" <<'PY' 2>&1
import os, sys
from pipebench import (BenchmarkConfig, PipebenchError, read_results, run_benchmark_suite,
                       run_inference_benchmark, library_path)
lib = library_path()
assert lib.startswith(os.environ["PREFIX"]), "library from " + lib
config = BenchmarkConfig(framework="pytorch", model_name="embed", batch_sizes=[1, 2],
                         warmup_iterations=0, measurement_iterations=2, dtype="float32",
                         device_prefer=None, data_source="synthetic",
                         csv_output_dir=sys.argv[1], verbose=False, threads=1)
rows = run_inference_benchmark(config)
assert [r["batch_size"] for r in rows] == [1, 2], rows
assert all(r["framework"] == "pytorch" for r in rows), rows
df = read_results(rows[0]["csv_path"])
assert len(df) == 2, df
try:
    run_inference_benchmark(BenchmarkConfig(framework="pytorch", device_prefer="mps"))
    raise SystemExit("mps was not refused")
except PipebenchError as e:
    assert "mps" in str(e), e
print("api ok")
PY
)
rc=$?
say "the Python API from a clean folder" $rc "exit $rc: $out"
rm -rf "$clean"
SH

export SRC_TREE=$src PREFIX=$prefix
checks=(bash "$work/checks.sh" "$prefix" "$site" "$py" "$lim")
if unshare --mount true 2>/dev/null; then
  # the tmpfs over the source tree lives in this namespace only: others see nothing of it
  run unshare --mount bash -c 'mount -t tmpfs -o size=1m,mode=0555 none "$SRC_TREE" && exec "$@" 1' _ "${checks[@]}"
else
  echo "skip: no mount namespace here; the source and build trees stay reachable (only unset)"
  run "${checks[@]}" 0
fi
res=$out
while IFS= read -r line; do
  case $line in
    ok\ *) pass ;;
    FAIL\ *) rc=0 out=$line errout=""; fail "${line#FAIL }" ;;
  esac
done <<<"$res"
[[ $(grep -c '^ok ' <<<"$res") -ge 8 ]] && pass || { out=$res; fail "not every check ran"; }
[[ -n ${PIPEBENCH_INSTALL_VERBOSE:-} ]] && printf '%s\n' "$res"
finish
