# Helpers for the revs tests: the CLI test helpers plus scratch git repositories.
# shellcheck source=../cli/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../cli/lib.sh"
rc=0 out= errout=
PB=${PIPEBENCH_CLI:?PIPEBENCH_CLI must name the pipebench binary}
export TMPDIR="$work/tmp"; mkdir -p "$TMPDIR"
# git must not read the user's or the system's configuration
export HOME="$work" GIT_CONFIG_NOSYSTEM=1 GIT_AUTHOR_DATE="2024-01-02T03:04:05Z" \
  GIT_COMMITTER_DATE="2024-01-02T03:04:05Z"
unset GIT_DIR GIT_WORK_TREE

# new_repo DIR: a repository with user.name/email set locally and branch main checked out
new_repo() {
  git init -q -b main "$1"
  git -C "$1" config user.name "pipebench test"
  git -C "$1" config user.email "test@pipebench.invalid"
}

# sleep_task DIR SECONDS: (re)writes task.sh, which sleeps and writes the metrics JSON
sleep_task() {
  cat >"$1/task.sh" <<TASK
#!/bin/sh
sleep $2
printf '{"total_time_s": $2, "first_epoch_time_s": $2, "final_loss": 0.25}\n' > "\$PIPEBENCH_REVS_METRICS"
TASK
  chmod +x "$1/task.sh"
}

# commit DIR MESSAGE: commits everything
commit() { git -C "$1" add -A && git -C "$1" commit -qm "$2"; }

# json_get FILE PYTHON-EXPRESSION-OF-r: prints the expression's value for the loaded JSON r
json_get() { "${PIPEBENCH_PYTHON:-python3}" -c "import json,sys; r=json.load(open(sys.argv[1])); print($2)" "$1"; }

worktrees() { git -C "$1" worktree list --porcelain | grep -c '^worktree '; }
