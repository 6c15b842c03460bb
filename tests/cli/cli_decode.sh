#!/usr/bin/env bash
# run --decode (track 3's JPEG decode on the GPU) where no GPU can be used (made certain by
# pointing PIPEBENCH_CUDA_MODULE at a file that is not there): gpu is refused with one line and
# exit 2, writing nothing; auto decodes on the CPU and says why; an unknown value is a usage error.
. "$(dirname "$0")/lib.sh"
pb=${PIPEBENCH_CLI:?}
py=${PIPEBENCH_PYTHON:-/usr/bin/python3}
lim=120
nogpu="env PIPEBENCH_CUDA_MODULE=$work/no-such-module.so"

"$py" - "$work/tree" <<'PY' || { fail "PIL wrote the tree"; finish; }
import os, sys
from PIL import Image
root = sys.argv[1]
for k, (w, h) in enumerate([(40, 30), (30, 44), (36, 36), (50, 32), (28, 40), (44, 30)]):
    d = os.path.join(root, "c%d" % (k % 2))
    os.makedirs(d, exist_ok=True)
    Image.new("RGB", (w, h), (20 * k, 100, 200 - 10 * k)).save(os.path.join(d, "i%d.jpg" % k))
PY
small=(--data "$work/tree" --formats imagefolder --steps 2 --repeats 1 --t3-batch 2 --t3-workers 1
       --no-peer --tracks 3)

run timeout $lim $nogpu "$pb" run "${small[@]}" --out "$work/rg" --decode gpu
expect_rc 2 "--decode gpu without a GPU"
expect_err "^pipebench run: track 3: --decode gpu: JPEG decoding on the GPU is unavailable here \(no GPU: PIPEBENCH_CUDA_MODULE=" \
  "says why in one line"
[[ $(grep -c . <<<"$errout") -eq 1 ]] && pass || fail "one line on stderr, not: $errout"
[[ ! -e $work/rg/data ]] && pass || fail "a refused --decode gpu writes nothing"

run timeout $lim $nogpu "$pb" run "${small[@]}" --out "$work/ra" --decode auto
expect_rc 0 "--decode auto without a GPU"
expect_err "--decode auto: decoding on the CPU \(no GPU: PIPEBENCH_CUDA_MODULE=" "auto says it decodes on the CPU and why"
if "$py" - "$work/ra/data" <<'PY'
import csv, sys
rows = list(csv.DictReader(l for l in open(sys.argv[1] + "/pipebench_track3.csv") if not l.startswith("#")))
assert rows and all(r["decode"] == "cpu" for r in rows), [r.get("decode") for r in rows]
PY
then pass; else fail "track 3 rows say the images were decoded on the cpu"; fi

run timeout $lim $nogpu "$pb" run "${small[@]}" --out "$work/rb" --decode fpga
expect_rc 1 "an unknown --decode is a usage error"
expect_err "--decode must be" "names the choices"
finish
