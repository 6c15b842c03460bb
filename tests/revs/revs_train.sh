#!/bin/bash
# Training tasks: pipebench train of each revision (here the binary under test, given with
# --binary, so no build is needed), an experiment from the revision's configs/ or a preset,
# overrides as options; the train metrics are mapped into the output's groups.
source "$(dirname "$0")/lib.sh"
repo="$work/repo"
new_repo "$repo"
mkdir -p "$repo/configs"
printf '# a tiny run\nnum-images=16\nthreads=1\n' >"$repo/configs/tiny.conf"
echo "readme" >"$repo/README"
commit "$repo" "configs"
cd "$repo" || exit 1
printf 'branch,experiment,trainer,max_epochs,batch_size,overrides\nmain,tiny,cpu,2,8,"lr=0.05; seed=7"\nmain,nosuch,cpu,1,8,\nmain,tiny,ddp,1,8,\n' >"$work/train.csv"
run "$PB" revs --config "$work/train.csv" --output "$work/t.json" --binary "$PB" --repeats 1 --skip-failed
expect_rc 0 "train tasks"
expect_err "experiment 'nosuch': no configs/nosuch" "unknown experiment named"
expect_err "trainer 'ddp': pipebench train knows cpu and gpu" "ddp refused clearly"
r="$work/t.json"
[[ $(json_get "$r" '[x["success"] for x in r]') == "[True, False, False]" ]] && pass || fail "success flags"
[[ $(json_get "$r" 'r[0]["metrics"]["dataset_info"]["num_samples"]') == 16 ]] && pass || fail "config file applied"
[[ $(json_get "$r" 'r[0]["metrics"]["settings"]["seed"]') == 7 ]] && pass || fail "overrides applied"
[[ $(json_get "$r" 'r[0]["metrics"]["dataset_info"]["epochs"]') == 2 ]] && pass || fail "max_epochs applied"
for k in '["total_training"]["elapsed_seconds"]' '["total_training"]["peak_memory_mb"]' \
  '["epoch_breakdown"]["first_epoch"]["elapsed_seconds"]' '["epoch_breakdown"]["data_loading_first_batch"]["elapsed_seconds"]' \
  '["epoch_breakdown"]["model_forward_first_batch"]["elapsed_seconds"]' '["dataset_info"]["throughput_samples_per_sec"]' \
  '["final_metrics"]["final_loss"]' '["pipebench"]["wall_seconds"]'; do
  [[ $(json_get "$r" "r[0][\"metrics\"]$k > 0") == True ]] && pass || fail "metric $k"
done
[[ $(json_get "$r" 'r[0]["gpu_memory"]') == "not available"* ]] && pass || fail "GPU memory said unavailable"
[[ $(worktrees "$repo") == 1 ]] && pass || fail "only the main worktree remains"
finish
