#!/bin/bash
# Bad input gives clear messages: malformed task files, a missing branch, a failing task or
# build (recorded, the others go on with --skip-failed), a hanging task (--timeout).
source "$(dirname "$0")/lib.sh"
repo="$work/repo"
new_repo "$repo"
sleep_task "$repo" 0.01
printf '#!/bin/sh\necho "something broke" >&2\nexit 4\n' >"$repo/fail.sh"
printf '#!/bin/sh\nexit 0\n' >"$repo/nometrics.sh"
chmod +x "$repo"/*.sh
commit "$repo" "tasks"
cd "$repo" || exit 1
csv() { printf "$2" >"$work/$1.csv"; }

# ---- malformed task files
csv empty ''
run "$PB" revs --config "$work/empty.csv" --output "$work/o.json"
expect_rc 2 "empty file"
expect_err 'empty.csv: the file is empty' "empty file named"
csv cols 'branch,experiment,colour\nmain,x,red\n'
run "$PB" revs --config "$work/cols.csv" --output "$work/o.json"
expect_rc 2 "unknown column"
expect_err "line 1: unknown column 'colour'" "unknown column named"
csv lack 'branch,experiment,trainer,batch_size\nmain,x,cpu,4\n'
run "$PB" revs --config "$work/lack.csv" --output "$work/o.json"
expect_rc 2 "missing column"
expect_err "lacks column 'max_epochs'" "missing column named"
csv width 'branch,experiment,command,metrics\nmain,x,./task.sh,out.json,extra\n'
run "$PB" revs --config "$work/width.csv" --output "$work/o.json"
expect_rc 2 "wrong width"
expect_err 'line 2: 5 fields, but the header has 4' "wrong width named"
csv stray 'branch,experiment,command,metrics\nmain,x,echo a"b,out.json\n'
run "$PB" revs --config "$work/stray.csv" --output "$work/o.json"
expect_rc 2 "stray quote"
expect_err 'line 2: a stray quote' "stray quote named"
csv unclosed 'branch,experiment,command,metrics\nmain,x,"echo a,out.json\n'
run "$PB" revs --config "$work/unclosed.csv" --output "$work/o.json"
expect_rc 2 "unclosed quote"
expect_err 'never closed' "unclosed quote named"
csv trainer 'branch,experiment,trainer,max_epochs,batch_size,overrides\nmain,x,tpu,1,4,\n'
run "$PB" revs --config "$work/trainer.csv" --output "$work/tr.json"
expect_rc 2 "a trainer pipebench train does not know"
expect_err "trainer 'tpu': pipebench train knows cpu and gpu" "bad trainer named"
run "$PB" revs --config "$work/none.csv" --output "$work/o.json"
expect_rc 2 "missing task file"
expect_err 'none.csv' "missing task file named"
run "$PB" revs --output "$work/o.json"
expect_rc 1 "no --config"
expect_err "try 'pipebench revs --help'" "usage hint"
run "$PB" revs --config "$work/cols.csv" --fail-on-regression
expect_rc 1 "--fail-on-regression without --compare"
[[ ! -e $work/o.json ]] && pass || fail "no output from bad input"

# ---- a missing branch: stop with exit 2, or record it with --skip-failed
csv branch 'branch,experiment,command,metrics\nnope,x,./task.sh,out.json\nmain,x,./task.sh,out.json\n'
run "$PB" revs --config "$work/branch.csv" --output "$work/b.json" --repeats 1
expect_rc 2 "missing branch stops"
expect_err "branch or commit 'nope' not found" "missing branch named"
expect_err 'task 1 \(nope, line 2\)' "task and line named"
[[ $(json_get "$work/b.json" 'r[1]["success"]') == False ]] && pass || fail "later task not run"
run "$PB" revs --config "$work/branch.csv" --output "$work/b.json" --repeats 1 --skip-failed
expect_rc 0 "missing branch skipped"
[[ $(json_get "$work/b.json" '[x["success"] for x in r]') == "[False, True]" ]] && pass || fail "second task ran"
[[ $(json_get "$work/b.json" 'r[0]["error"]') == *"'nope' not found"* ]] && pass || fail "error recorded"

# ---- failing tasks with --skip-failed
csv fail 'branch,experiment,command,metrics\nmain,bad,./fail.sh,out.json\nmain,nom,./nometrics.sh,out.json\nmain,ok,./task.sh,out.json\n'
run "$PB" revs --config "$work/fail.csv" --output "$work/f.json" --repeats 2 --skip-failed
expect_rc 0 "--skip-failed continues"
expect_err 'task 1 \(main, bad, line 2\) failed: run 1 of 2: exit status 4: something broke' "failure and its stderr"
expect_err 'wrote no metrics file out.json' "missing metrics file"
expect_err '2 task\(s\) failed' "failure count"
[[ $(json_get "$work/f.json" '[x["success"] for x in r]') == "[False, False, True]" ]] && pass || fail "success flags"
[[ $(json_get "$work/f.json" 'r[0]["error"]') == *"something broke"* ]] && pass || fail "error text recorded"
[[ $(json_get "$work/f.json" 'len(r[2]["samples"]["pipebench.wall_seconds"])') == 2 ]] && pass || fail "good task ran twice"
run "$PB" revs --config "$work/fail.csv" --output "$work/f2.json" --repeats 2
expect_rc 2 "without --skip-failed: exit 2"
expect_err 'stopped at the first failed task' "stop explained"

# ---- a build that fails
csv build 'branch,experiment,command,metrics\nmain,x,./task.sh,out.json\n'
run "$PB" revs --config "$work/build.csv" --output "$work/bf.json" --build-cmd 'echo no compiler >&2; exit 3' --skip-failed
expect_rc 2 "failed build of the only task: every task failed"
expect_err 'every task failed \(1 of 1\)' "all-failed said"
expect_err 'build failed \(echo no compiler' "build failure named"
expect_err 'no compiler' "build output quoted"
run "$PB" revs --config "$work/build.csv" --output "$work/bf.json" --build-cmd 'touch built.txt' --repeats 1
expect_rc 0 "build command runs"

# ---- a hanging task is stopped by --timeout
csv hang 'branch,experiment,command,metrics\nmain,hang,sleep 30,out.json\nmain,ok,./task.sh,out.json\n'
start=$(date +%s)
run "$PB" revs --config "$work/hang.csv" --output "$work/h.json" --repeats 1 --timeout 1 --skip-failed
took=$(( $(date +%s) - start ))
expect_rc 0 "timeout recorded, next task runs"
expect_err 'no result after 1 s \(--timeout\), stopped' "timeout named"
(( took < 15 )) && pass || fail "stopped quickly (took ${took}s)"
[[ $(json_get "$work/h.json" '[x["success"] for x in r]') == "[False, True]" ]] && pass || fail "timeout success flags"

[[ $(worktrees "$repo") == 1 ]] && pass || fail "only the main worktree remains"
[[ -z $(git -C "$repo" status --porcelain) ]] && pass || fail "working tree clean"
finish
