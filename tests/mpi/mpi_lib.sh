# Sourced by the MPI tests (after tests/cli/lib.sh, which makes $work).

P=${PIPEBENCH_CLI:?}                                                 # the pipebench under test
MPIRUN=(${PIPEBENCH_MPIRUN:?} --oversubscribe --bind-to none)        # ranks unbound, any count
PY=${PIPEBENCH_PYTHON:-python3}
export TMPDIR=$work/tmp
mkdir -p "$TMPDIR"

# broken_tiff_copy SRC DST: a copy of gen's output folder SRC whose tiff/ images have zstd strips
# that cannot be decoded (each zstd frame's magic number zeroed), for a rank that must fail.
broken_tiff_copy() {
  cp -r "$1" "$2"
  "$PY" - "$2/tiff" <<'PYEOF'
import glob, sys
for f in glob.glob(sys.argv[1] + "/*.tif"):
    d = open(f, "rb").read()
    open(f, "wb").write(d.replace(b"\x28\xb5\x2f\xfd", b"\0\0\0\0"))  # zstd frames' magic
PYEOF
}
