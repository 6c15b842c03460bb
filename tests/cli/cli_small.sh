#!/usr/bin/env bash
# pipebench run on datasets smaller than a timer group or a batch: every track ends, measures
# what there is and says so (each command also runs under its own timeout, so a hang fails).
. "$(dirname "$0")/lib.sh"
pb=${PIPEBENCH_CLI:?}
py=${PIPEBENCH_PYTHON:-/usr/bin/python3}
lim=90

run "$pb" gen --out "$work/ds" --rows 2 --size 8x8 --formats raw
expect_rc 0 "gen 2 images"

run timeout $lim "$pb" run --data "$work/ds" --out "$work/r1" --tracks 1 --samples 3 --no-peer
expect_rc 0 "track 1 on 2 images ends"
expect_err "an epoch holds only 2 images" "track 1 says the epoch is short"
[[ -s $work/r1/data/pipebench_track1.csv ]] && pass || fail "track 1 table"
if "$py" - "$work/r1/data/pipebench_track1.csv" <<'PY'
import csv, sys
rows = list(csv.DictReader(l for l in open(sys.argv[1]) if not l.startswith("#")))
assert rows and all(1 <= int(r["timer_group"]) <= 2 for r in rows), rows
assert all(int(r["num_intervals"]) == 3 for r in rows), rows
PY
then pass; else fail "track 1 groups within one epoch"; fi

run timeout $lim "$pb" run --data "$work/ds" --out "$work/r3" --tracks 3 --no-peer
expect_rc 0 "track 3 on 2 images (batch 16) ends"
expect_err "fewer than batch 16: measured with batch 2" "track 3 says the batch shrank"
if "$py" - "$work/r3/data/pipebench_track3.csv" <<'PY'
import csv, sys
rows = list(csv.DictReader(l for l in open(sys.argv[1]) if not l.startswith("#")))
assert rows and all(int(r["batch_size"]) == 2 and int(r["num_steps"]) > 0 for r in rows), rows
PY
then pass; else fail "track 3 rows at batch 2"; fi

run timeout $lim "$pb" run --data "$work/ds" --out "$work/r4" --tracks 4 --samples 3 --no-peer
expect_rc 0 "track 4 on 2 images ends"

run timeout $lim "$pb" run --data "$work/ds" --out "$work/r2" --tracks 2 --batch-sizes 4 \
  --workers 0 --caches none --repeats 1 --no-peer
expect_rc 0 "track 2 with a batch larger than the dataset ends"

# One image, every track with small settings.
run "$pb" gen --out "$work/one" --rows 1 --size 8x8 --formats raw
run timeout $lim "$pb" run --data "$work/one" --out "$work/rone" --repeats 1 --samples 2 \
  --batch-sizes 2 --workers 0 --caches none --transforms none --steps 2 --no-peer
expect_rc 0 "every track on 1 image ends"
finish
