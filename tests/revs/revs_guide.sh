#!/bin/bash
# The branch-runner guide's workflow on a user's own repository: its two task files as written,
# the user's training and prediction scripts run through command templates (--train-cmd, and
# .pipebench/revs.json in the repository), metrics written from inside them with
# pipebench.revs.Recorder, the faster branch found faster, comma overrides as separate
# arguments, a failing branch under --skip-failed, and exit 2 when every task failed.
source "$(dirname "$0")/lib.sh"
py=${PIPEBENCH_PYTHON:-python3}
src=$(cd "$(dirname "$0")/../.." && pwd)
# the module as user code imports it (from pipebench.revs import Recorder); only revs.py of
# the package, which needs nothing beyond the standard library
mkdir -p "$work/py/pipebench"
: >"$work/py/pipebench/__init__.py"
ln -s "$src/python/pipebench/revs.py" "$work/py/pipebench/revs.py"
export PYTHONPATH="$work/py" ARGS_DIR="$work/args"
mkdir -p "$ARGS_DIR"

repo="$work/repo"
new_repo "$repo"
# train.py: FORWARD seconds in the "model forward" of the first batch; its arguments are kept
train_py() {
  cat >"$repo/train.py" <<PY
import os, sys, time
from pipebench.revs import Recorder
FORWARD = $1
args = sys.argv[1:]
opts = dict(a.split("=", 1) for a in args if "=" in a)
with open(os.path.join(os.environ["ARGS_DIR"], "train-%s.txt" % os.environ["PIPEBENCH_REVS_BRANCH"].replace("/", "_")), "w") as f:
    f.write("\n".join(args) + "\n")
if FORWARD < 0:
    sys.exit("training crashed on purpose")
with Recorder() as rec:
    with rec.time("total_training"):
        with rec.time("model_initialization"):
            time.sleep(0.01)
        with rec.time("data_setup"):
            pass
        with rec.time("epoch_breakdown.first_epoch"):
            with rec.time("epoch_breakdown.data_loading_first_batch"):
                pass
            with rec.time("epoch_breakdown.model_forward_first_batch"):
                time.sleep(FORWARD)
    rec.set("dataset_info.num_train_batches", 4)
    rec.set("dataset_info.batch_size", int(opts["data.batch_size"]))
    rec.set("final_metrics.train_loss", 0.5)
PY
}
predict_py() {
  cat >"$repo/predict.py" <<PY
import os, sys, time
from pipebench.revs import Recorder
FORWARD = $1
args = sys.argv[1:]
with open(os.path.join(os.environ["ARGS_DIR"], "infer-%s.txt" % os.environ["PIPEBENCH_REVS_BRANCH"]), "w") as f:
    f.write("\n".join(args) + "\n")
rec = Recorder()
with rec.time("total_inference"):
    with rec.time("model_initialization"):
        pass
    with rec.time("checkpoint_loading"):
        pass
    for k in ("batch_loading", "data_transfer", "post_processing"):
        rec.set_seconds("first_batch." + k, 0.001)
    with rec.time("first_batch.model_forward"):
        time.sleep(FORWARD)
    with rec.time("full_prediction"):
        time.sleep(FORWARD)
rec.set("throughput_samples_per_sec", 16 / (2 * FORWARD))
rec.set("avg_time_per_batch", 2 * FORWARD)
rec.save()
PY
}
mkdir -p "$repo/.pipebench"
cat >"$repo/.pipebench/revs.json" <<'J'
{"infer": "python3 predict.py experiment={experiment} ckpt_path={checkpoint_path} data.path={data_path} trainer={trainer} data.batch_size={batch_size} {overrides}"}
J
train_py 0.3
predict_py 0.3
commit "$repo" "slow model"
git -C "$repo" checkout -qb phase-branch-name
train_py 0.02
predict_py 0.02
commit "$repo" "fast model"
git -C "$repo" checkout -qb broken main
train_py -1
commit "$repo" "broken training"
git -C "$repo" checkout -qb badcfg main
echo '{"trian": "python3 train.py"}' >"$repo/.pipebench/revs.json"
commit "$repo" "a misspelt key"
git -C "$repo" checkout -q main
status_before=$(git -C "$repo" status --porcelain)
cd "$repo" || exit 1

# ---- the guide's training task file, verbatim, through --train-cmd
cat >"$work/train_tasks.csv" <<'CSV'
branch,experiment,trainer,max_epochs,batch_size,overrides
main,im2im/segmentation,gpu,5,8,
phase-branch-name,im2im/segmentation,gpu,5,8,custom_override=value
CSV
tmpl='python3 train.py experiment={experiment} trainer={trainer} trainer.max_epochs={max_epochs} data.batch_size={batch_size} {overrides}'
run "$PB" revs --config "$work/train_tasks.csv" --output "$work/results/train_benchmark.json" \
  --train-cmd "$tmpl" --repeats 3 --compare
expect_rc 0 "the guide's training tasks run"
r="$work/results/train_benchmark.json"
[[ $(json_get "$r" '[x["success"] for x in r]') == "[True, True]" ]] && pass || fail "both tasks succeeded"
for k in '["total_training"]["elapsed_seconds"]' '["model_initialization"]["elapsed_seconds"]' \
  '["data_setup"]["elapsed_seconds"]' '["epoch_breakdown"]["first_epoch"]["elapsed_seconds"]' \
  '["epoch_breakdown"]["data_loading_first_batch"]["elapsed_seconds"]' \
  '["epoch_breakdown"]["model_forward_first_batch"]["elapsed_seconds"]' \
  '["dataset_info"]["num_train_batches"]' '["final_metrics"]["train_loss"]' \
  '["pipebench"]["wall_seconds"]' '["pipebench"]["peak_rss_mb"]' '["total_training"]["peak_memory_mb"]'; do
  [[ $(json_get "$r" "r[1][\"metrics\"]$k > 0") == True ]] && pass || fail "guide key metrics$k"
done
[[ $(json_get "$r" 'r[0]["metrics"]["dataset_info"]["batch_size"]') == 8 ]] && pass || fail "batch size reached the script"
# the task's own total time is kept, not replaced by pipebench's wall time (which includes
# the interpreter's start)
[[ $(json_get "$r" 'r[0]["metrics"]["total_training"]["elapsed_seconds"] < r[0]["metrics"]["pipebench"]["wall_seconds"]') == True ]] && pass || fail "task's total kept"
[[ $(json_get "$r" 'sorted(r[0]["git_info"])') == "['branch', 'commit_date', 'commit_hash']" ]] && pass || fail "git_info keys"
[[ $(json_get "$r" 'r[1]["git_info"]["commit_hash"]') == $(git -C "$repo" rev-parse phase-branch-name) ]] && pass || fail "commit hash"
[[ $(json_get "$r" 'len(r[0]["samples"]["epoch_breakdown.first_epoch.elapsed_seconds"])') == 3 ]] && pass || fail "3 repeats kept"
[[ $(json_get "$r" 'r[0]["statistics"]["pipebench.wall_seconds"]["n"]') == 3 ]] && pass || fail "statistics beside the metrics"
[[ $(json_get "$r" 'r[0]["repeats"]') == 3 ]] && pass || fail "repeats recorded"
expect_out 'im2im/segmentation: phase-branch-name against main' "comparison heading"
expect_out 'epoch_breakdown\.model_forward_first_batch\.elapsed_seconds +0\.3[0-9]* +0\.02[0-9]* +[0-9.]+× faster +-9[0-9]\.[0-9] % +\[-9' "forward: speedup, change and interval"
expect_out 'total_training\.elapsed_seconds .*× faster .* faster$' "the faster branch is found faster"
# arguments as the script received them: one per override, trainer passed through unjudged
grep -qx 'custom_override=value' "$ARGS_DIR/train-phase-branch-name.txt" && pass || fail "override as an argument"
grep -qx 'trainer=gpu' "$ARGS_DIR/train-main.txt" && pass || fail "trainer passed through"
grep -qx 'experiment=im2im/segmentation' "$ARGS_DIR/train-main.txt" && pass || fail "experiment placeholder"
grep -qx 'trainer.max_epochs=5' "$ARGS_DIR/train-main.txt" && pass || fail "max_epochs placeholder"
[[ -f $work/results/images/pipebench_revs_train_benchmark.png ]] && pass || fail "plot drawn"

# ---- the guide's inference task file, verbatim; the template from .pipebench/revs.json
cat >"$work/inference_tasks.csv" <<'CSV'
branch,experiment,checkpoint_path,data_path,trainer,batch_size,overrides
main,im2im/segmentation,path/to/checkpoint.ckpt,path/to/data,gpu,16,
phase-branch-name,im2im/segmentation,path/to/checkpoint.ckpt,path/to/data,gpu,16,
CSV
run "$PB" revs --config "$work/inference_tasks.csv" --output "$work/results/inference_benchmark.json" \
  --skip-failed --compare --repeats 3
expect_rc 0 "the guide's inference tasks run"
r="$work/results/inference_benchmark.json"
for k in '["total_inference"]["elapsed_seconds"]' '["first_batch"]["model_forward"]["elapsed_seconds"]' \
  '["first_batch"]["batch_loading"]["elapsed_seconds"]' '["full_prediction"]["elapsed_seconds"]' \
  '["throughput_samples_per_sec"]' '["avg_time_per_batch"]'; do
  [[ $(json_get "$r" "r[0][\"metrics\"]$k > 0") == True ]] && pass || fail "inference key metrics$k"
done
grep -qx 'ckpt_path=path/to/checkpoint.ckpt' "$ARGS_DIR/infer-main.txt" && pass || fail "checkpoint placeholder"
grep -qx 'data.path=path/to/data' "$ARGS_DIR/infer-main.txt" && pass || fail "data placeholder"
expect_out 'throughput_samples_per_sec .*× faster .* faster' "higher throughput read as faster"
expect_out 'full_prediction\.elapsed_seconds .*× faster .* faster' "full prediction faster"

# a revision's .pipebench/revs.json with an unknown key is that task's error, named
printf 'branch,experiment,checkpoint_path,data_path,trainer,batch_size,overrides\nmain,seg,c.ckpt,d,cpu,2,\nbadcfg,seg,c.ckpt,d,cpu,2,\n' >"$work/badcfg.csv"
run "$PB" revs --config "$work/badcfg.csv" --output "$work/badcfg.json" --skip-failed --repeats 1
expect_rc 0 "a bad revs.json fails its task only"
expect_err "task 2 \(badcfg, seg, line 3\) failed: .*\.pipebench/revs.json \(for revision [0-9a-f]+\): 'trian' is not one of the keys" "bad key named"

# ---- comma-separated overrides: quoted, they arrive as separate arguments; unquoted, an error
printf 'branch,experiment,trainer,max_epochs,batch_size,overrides\nmain,im2im/segmentation,cpu,1,8,"model.lr=0.1,data.num_workers=2, data.sizes=[1,2]"\n' >"$work/over.csv"
run "$PB" revs --config "$work/over.csv" --output "$work/over.json" --train-cmd "$tmpl" --repeats 1
expect_rc 0 "quoted overrides"
grep -qx 'model.lr=0.1' "$ARGS_DIR/train-main.txt" && grep -qx 'data.num_workers=2' "$ARGS_DIR/train-main.txt" &&
  grep -qx 'data.sizes=\[1,2\]' "$ARGS_DIR/train-main.txt" && pass || fail "one argument per override"
printf 'branch,experiment,trainer,max_epochs,batch_size,overrides\nmain,im2im/segmentation,cpu,1,8,model.lr=0.1,data.num_workers=2\n' >"$work/unquoted.csv"
run "$PB" revs --config "$work/unquoted.csv" --output "$work/unq.json" --train-cmd "$tmpl"
expect_rc 2 "unquoted overrides list"
expect_err 'unquoted.csv: line 2: 7 fields, but the header has 6: a comma-separated overrides list must be quoted' "told to quote"
run "$PB" revs --config "$work/over.csv" --output "$work/unq.json" --train-cmd 'python3 train.py {epochs}'
expect_rc 2 "unknown placeholder"
expect_err 'unknown placeholder \{epochs\}' "placeholder named"

# ---- a failing branch is reported with --skip-failed; every task failed: exit 2
printf 'branch,experiment,trainer,max_epochs,batch_size,overrides\nmain,im2im/segmentation,cpu,1,8,\nbroken,im2im/segmentation,cpu,1,8,\n' >"$work/fail.csv"
run "$PB" revs --config "$work/fail.csv" --output "$work/fail.json" --train-cmd "$tmpl" --repeats 1 --skip-failed
expect_rc 0 "one failed branch skipped"
expect_err 'task 2 \(broken, im2im/segmentation, line 3\) failed: run 1 of 1: exit status 1: training crashed on purpose' "failure reported"
[[ $(json_get "$work/fail.json" '[x["success"] for x in r]') == "[True, False]" ]] && pass || fail "failure recorded"
printf 'branch,experiment,trainer,max_epochs,batch_size,overrides\nbroken,im2im/segmentation,cpu,1,8,\nnosuch,im2im/segmentation,cpu,1,8,\n' >"$work/allfail.csv"
run "$PB" revs --config "$work/allfail.csv" --output "$work/allfail.json" --train-cmd "$tmpl" --repeats 1 --skip-failed
expect_rc 2 "every task failed"
expect_err 'every task failed \(2 of 2\)' "all-failed said"
[[ $(json_get "$work/allfail.json" '[x["success"] for x in r]') == "[False, False]" ]] && pass || fail "all-failed output written"

# ---- peak RSS of the whole process tree: two workers of ~80 MB each count together
printf '%s\n' 'import time' 'b = b"x" * (80 << 20)' 'time.sleep(1.2)' >"$work/hold.py"
printf 'branch,experiment,command,metrics\nmain,tree,"python3 %s & python3 %s & wait; echo {} > m.json",m.json\n' "$work/hold.py" "$work/hold.py" >"$work/tree.csv"
run "$PB" revs --config "$work/tree.csv" --output "$work/tree.json" --repeats 1
expect_rc 0 "two workers"
[[ $(json_get "$work/tree.json" 'r[0]["metrics"]["pipebench"]["peak_rss_mb"] > 140') == True ]] && pass || fail "tree RSS summed ($(json_get "$work/tree.json" 'r[0]["metrics"]["pipebench"]'))"

# ---- the Lightning callback, where Lightning is installed
if "$py" -c 'import lightning' 2>/dev/null; then
  "$py" - <<'PY' && pass || fail "Lightning callback fills the training keys"
import json, os, tempfile
import torch, lightning as L
from pipebench.revs import Recorder, MetricsCallback
path = os.path.join(tempfile.mkdtemp(), "m.json")
cb = MetricsCallback(Recorder(path))
class M(L.LightningModule):
    def __init__(self):
        super().__init__(); self.l = torch.nn.Linear(4, 1)
    def training_step(self, b, i):
        loss = self.l(b[0]).pow(2).mean(); self.log("train_loss", loss); return loss
    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)
ds = torch.utils.data.TensorDataset(torch.randn(16, 4))
L.Trainer(max_epochs=1, callbacks=[cb], logger=False, enable_checkpointing=False,
          enable_progress_bar=False).fit(M(), torch.utils.data.DataLoader(ds, batch_size=4))
m = json.load(open(path))
assert m["epoch_breakdown"]["first_epoch"]["elapsed_seconds"] > 0
assert m["dataset_info"]["num_train_batches"] == 4 and m["total_training"]["elapsed_seconds"] > 0
PY
fi

[[ $(git -C "$repo" status --porcelain) == "$status_before" ]] && pass || fail "user's tree untouched"
[[ $(git -C "$repo" rev-parse --abbrev-ref HEAD) == main ]] && pass || fail "branch unchanged"
[[ $(worktrees "$repo") == 1 ]] && pass || fail "only the main worktree remains"
finish
