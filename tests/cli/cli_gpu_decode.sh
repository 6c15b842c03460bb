#!/usr/bin/env bash
# run --decode gpu on a machine with a GPU and libnvjpeg (label gpu): baseline JPEGs go to nvJPEG,
# a progressive JPEG and a PNG are decoded by the CPU workers in the same batches, and the rows
# say so (decode "mixed (gpu N, cpu M)"); auto takes the GPU and crops a share of each batch on
# the CPU, saying how many; a truncated JPEG stops the run with exit 2 and a message naming the
# file.
. "$(dirname "$0")/lib.sh"
pb=${PIPEBENCH_CLI:?}
py=${PIPEBENCH_PYTHON:-/usr/bin/python3}
lim=300

"$py" - "$work/tree" "$work/bad" <<'PY' || { fail "PIL wrote the trees"; finish; }
import os, sys
import numpy as np
from PIL import Image
def img(w, h, k):
    y, x = np.mgrid[0:h, 0:w]
    a = np.stack([(x * (3 + c) + y * (2 + k) + 40 * c) % 256 for c in range(3)], -1)
    return Image.fromarray(a.astype(np.uint8))
for root in sys.argv[1:]:
    for k in range(8):
        d = os.path.join(root, "c%d" % (k % 2))
        os.makedirs(d, exist_ok=True)
        w, h = 300 + 17 * k, 260 - 5 * k
        if k == 3:
            img(w, h, k).save(os.path.join(d, "prog%d.jpg" % k), quality=90, progressive=True)
        elif k == 6:
            img(w, h, k).save(os.path.join(d, "p%d.png" % k))
        else:
            img(w, h, k).save(os.path.join(d, "i%d.jpg" % k), quality=90)
for k in (0, 1, 2, 4, 5, 7): # every baseline JPEG of the second tree cut in half
    bad = os.path.join(sys.argv[2], "c%d" % (k % 2), "i%d.jpg" % k)
    data = open(bad, "rb").read()
    open(bad, "wb").write(data[: len(data) // 2])
PY
small=(--formats imagefolder --steps 4 --repeats 1 --t3-batch 4 --t3-workers 2 --no-peer
       --tracks 3 --device cuda --model resnet50)

run timeout $lim "$pb" run "${small[@]}" --data "$work/tree" --out "$work/rg" --decode gpu
expect_rc 0 "--decode gpu"
if "$py" - "$work/rg/data" <<'PY'
import csv, re, sys
rows = list(csv.DictReader(l for l in open(sys.argv[1] + "/pipebench_track3.csv") if not l.startswith("#")))
print([(r["decode"], r["images_per_sec"], r["accelerator_utilisation"]) for r in rows])
assert rows and all(re.fullmatch(r"mixed \(gpu \d+, cpu \d+\)", r["decode"]) for r in rows), rows
for r in rows:
    assert 0 < float(r["accelerator_utilisation"]) <= 1, r
PY
then pass; else fail "rows say the decode was mixed, with honest AU"; fi

run timeout $lim "$pb" run "${small[@]}" --data "$work/tree" --out "$work/ra" --decode auto
expect_rc 0 "--decode auto with a GPU"
if grep -q "decoding on the CPU" <<<"$errout"; then fail "auto took the GPU: $errout"; else pass; fi
if grep -qE "decode: [0-9]+ images on the GPU, [0-9]+ on the CPU \([0-9]+%; [1-9][0-9]* as its share" \
  <<<"$errout"; then pass; else fail "auto cropped a share on the CPU and said so: $errout"; fi

run timeout $lim "$pb" run "${small[@]}" --data "$work/bad" --out "$work/rb" --decode gpu
expect_rc 2 "a truncated JPEG"
expect_err "bad/c[01]/i[0-9]\.jpg: truncated JPEG" "names the file"
finish
