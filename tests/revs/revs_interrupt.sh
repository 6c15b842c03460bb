#!/bin/bash
# SIGINT or SIGTERM to pipebench revs mid-task: the task's processes are stopped, every worktree
# is removed, the previous output stays, and the user's repository is as it was.
source "$(dirname "$0")/lib.sh"
repo="$work/repo"
new_repo "$repo"
cat >"$repo/hang.sh" <<'TASK'
#!/bin/sh
echo $$ > "$PIPEBENCH_REVS_WORKTREE/../../hang.pid"
exec sleep 60
TASK
chmod +x "$repo/hang.sh"
commit "$repo" "hang"
git -C "$repo" branch other
echo "edit" >>"$repo/hang.sh"
status_before=$(git -C "$repo" status --porcelain)
printf 'branch,experiment,command,metrics\nmain,hang,./hang.sh,out.json\nother,hang,./hang.sh,out.json\n' >"$work/t.csv"
echo '"previous results"' >"$work/out.json"

for sig in INT TERM; do
  rm -f "$TMPDIR/hang.pid"
  (cd "$repo" && exec "$PB" revs --config "$work/t.csv" --output "$work/out.json" --repeats 3) \
    >"$work/o.txt" 2>"$work/e.txt" &
  pid=$!
  # wait until the task runs (the task wrote its pid; main and other share one commit, so one worktree)
  for _ in $(seq 1 200); do [[ -s $TMPDIR/hang.pid ]] && break; sleep 0.05; done
  [[ -s $TMPDIR/hang.pid ]] && pass || fail "the task started ($sig)"
  [[ $(worktrees "$repo") == 2 ]] && pass || fail "the worktree exists while it runs ($sig)"
  kill -"$sig" "$pid"
  wait "$pid"
  rc=$?
  out=$(cat "$work/o.txt"); errout=$(cat "$work/e.txt")
  expect_rc 2 "interrupted by SIG$sig"
  expect_err 'interrupted; worktrees removed' "interruption reported ($sig)"
  [[ $(worktrees "$repo") == 1 ]] && pass || fail "only the main worktree after SIG$sig"
  task_pid=$(cat "$TMPDIR/hang.pid")
  sleep 0.2
  # dead: gone, or a zombie waiting for a reaper that is not pipebench (its shell's child)
  state=$(ps -o stat= -p "$task_pid" 2>/dev/null)
  [[ -z $state || $state == Z* ]] && pass || fail "the task's process was stopped ($sig): $state"
  [[ $(cat "$work/out.json") == '"previous results"' ]] && pass || fail "previous output kept ($sig)"
  [[ -z $(ls -d "$TMPDIR"/pipebench-revs-* 2>/dev/null) ]] && pass || fail "temporary folder removed ($sig)"
  [[ -z $(ls "$repo/.git/worktrees" 2>/dev/null) ]] && pass || fail "no worktree records left ($sig)"
done
[[ $(git -C "$repo" status --porcelain) == "$status_before" ]] && pass || fail "git status unchanged"
[[ $(git -C "$repo" rev-parse --abbrev-ref HEAD) == main ]] && pass || fail "branch unchanged"
finish
