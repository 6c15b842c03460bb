#!/bin/bash
# revs --compare finds a slower branch and its direction, calls identical branches the same,
# and leaves the user's working tree, index and branch as they were.
source "$(dirname "$0")/lib.sh"
repo="$work/repo"
new_repo "$repo"
sleep_task "$repo" 0.05
commit "$repo" "fast"
git -C "$repo" branch same            # identical content under another name
git -C "$repo" checkout -qb slow
sleep_task "$repo" 0.25
commit "$repo" "slow"
git -C "$repo" checkout -qb zero main # a task that reports zero times: no ratio to show
sleep_task "$repo" 0
commit "$repo" "zero"
git -C "$repo" branch zero2
git -C "$repo" checkout -q main
# user state: a modified tracked file, an untracked file, a staged file
echo "local edit" >>"$repo/task.sh"
echo "scratch" >"$repo/untracked.txt"
echo "staged" >"$repo/staged.txt" && git -C "$repo" add staged.txt
status_before=$(git -C "$repo" status --porcelain)
branch_before=$(git -C "$repo" rev-parse --abbrev-ref HEAD)

printf 'branch,experiment,command,metrics\nmain,sleep,./task.sh,out.json\nslow,sleep,./task.sh,out.json\n' >"$work/slow.csv"
cd "$repo" || exit 1
run "$PB" revs --config "$work/slow.csv" --output "$work/res/slow.json" --compare --repeats 5
expect_rc 0 "compare without --fail-on-regression"
expect_out '^sleep: slow against main \(5/5 repeats\)' "pair named"
expect_out 'pipebench\.wall_seconds .*× slower .*slower \(regression\)' "slow branch flagged slower"
expect_out 'epoch_breakdown\.first_epoch\.elapsed_seconds .*slower' "first-epoch time from the metrics JSON"
expect_out '^results: ' "results path printed"
[[ -f $work/res/slow.json ]] && pass || fail "output JSON written"
[[ $(json_get "$work/res/slow.json" 'len(r)') == 2 ]] && pass || fail "two runs recorded"
[[ $(json_get "$work/res/slow.json" 'all(x["success"] for x in r)') == True ]] && pass || fail "runs succeeded"
[[ $(json_get "$work/res/slow.json" 'len(r[1]["samples"]["pipebench.wall_seconds"])') == 5 ]] && pass || fail "5 samples per run"
[[ $(json_get "$work/res/slow.json" 'r[0]["git_info"]["commit_hash"]') == $(git -C "$repo" rev-parse main) ]] && pass || fail "commit hash recorded"
[[ $(json_get "$work/res/slow.json" 'r[1]["git_info"]["commit_date"]') == 2024-01-02T03:04:05* ]] && pass || fail "commit date recorded"
[[ $(json_get "$work/res/slow.json" 'r[0]["metrics"]["epoch_breakdown"]["first_epoch"]["elapsed_seconds"]') == 0.05 ]] && pass || fail "metrics JSON mapped"
[[ $(json_get "$work/res/slow.json" 'r[0]["metrics"]["total_training"]["peak_memory_mb"] > 0') == True ]] && pass || fail "peak memory measured"

run "$PB" revs --config "$work/slow.csv" --output "$work/res/slow2.json" --compare --repeats 5 --fail-on-regression
expect_rc 3 "--fail-on-regression exits 3"
expect_err 'significant slowdown' "regression explained"

# the slow branch as baseline: main is faster, not a regression
run "$PB" revs --compare --output "$work/res/slow.json" --baseline slow --fail-on-regression
expect_rc 0 "compare an existing file against another baseline"
expect_out '^sleep: main against slow' "pair named"
expect_out 'pipebench\.wall_seconds .*× faster .*faster' "faster direction"

printf 'branch,experiment,command,metrics\nmain,sleep,./task.sh,out.json\nsame,sleep,./task.sh,out.json\n' >"$work/same.csv"
run "$PB" revs --config "$work/same.csv" --output "$work/res/same.json" --compare --repeats 5 --fail-on-regression
expect_rc 0 "identical branches are no regression"
expect_out 'pipebench\.wall_seconds .*no significant change' "identical branches: no change"

printf 'branch,experiment,command,metrics\nzero,sleep,./task.sh,out.json\nzero2,sleep,./task.sh,out.json\n' >"$work/zero.csv"
run "$PB" revs --config "$work/zero.csv" --output "$work/res/zero.json" --compare --repeats 3
expect_rc 0 "metrics of zero on both sides"
expect_out 'total_training\.elapsed_seconds +0 +0 +- +- +- ' "a zero against a zero shows no change, no ratio"
[[ $out != *nan* ]] && pass || fail "no nan in the comparison"

run "$PB" revs --compare --output "$work/res/same.json" --baseline nope
expect_rc 2 "unknown baseline"
expect_err "no run of the baseline branch 'nope'" "unknown baseline named"

[[ $(git -C "$repo" status --porcelain) == "$status_before" ]] && pass || fail "git status unchanged"
[[ $(git -C "$repo" rev-parse --abbrev-ref HEAD) == "$branch_before" ]] && pass || fail "branch unchanged"
[[ $(worktrees "$repo") == 1 ]] && pass || fail "only the main worktree remains"
[[ -z $(ls "$TMPDIR"/pipebench-revs-* 2>/dev/null) ]] && pass || fail "temporary folders removed"
finish
