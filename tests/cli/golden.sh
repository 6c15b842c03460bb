#!/usr/bin/env bash
# Golden CLI cases: every tests/cli/golden/*.case holds a command line and the exit code,
# stdout and stderr it must give, byte for byte after two substitutions.
#
#   golden.sh [NAME...]        run every case, or the named ones (NAME without .case)
#   PIPEBENCH_GOLDEN_UPDATE=1 golden.sh [NAME...]
#                              run them and rewrite each case's expected exit code and output
#                              from what the command gave (check the diff before committing)
#
# A case file, in this order:
#   # comments                 what the case is about
#   setup: COMMAND             any number; run first, each must exit 0, output ignored
#   run: COMMAND               exactly one: the command checked
#   mask: REGEX                any number; each match (extended regex) in stdout and stderr
#                              becomes *** (for timings, versions, hashes)
#   exit: N                    the exit code wanted
#   --- stdout
#   the expected stdout
#   --- stderr
#   the expected stderr (to the end of the file)
#
# Commands run with bash in a fresh empty folder, also named by $WORK, with `pipebench` on the
# PATH ($PIPEBENCH_CLI), LC_ALL=C and TZ=UTC, stdin from /dev/null and a 120 s limit. The temporary
# folder's absolute path is written $WORK in the output. An output that does not end in a
# newline is compared as if it did.
set -u
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
pb=${PIPEBENCH_CLI:?PIPEBENCH_CLI must name the pipebench binary}
cases_dir=${PIPEBENCH_GOLDEN_DIR:-$here/golden}
update=${PIPEBENCH_GOLDEN_UPDATE:-0}

root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
mkdir "$root/bin"
ln -s "$(readlink -f "$pb")" "$root/bin/pipebench"

passed=0
failed=0
d=$'\001' # sed delimiter no regex or path here contains

# ere_escape STRING: STRING as an extended regex matching itself.
ere_escape() { printf '%s' "$1" | sed 's/[][\.^$*+?(){}|/]/\\&/g'; }

# normalize FILE WORK MASKFILE: substitutions applied to a command's output, in place.
normalize() {
  local f=$1 w re script
  w=$(ere_escape "$2")
  script="s${d}${w}${d}\$WORK${d}g"
  while IFS= read -r re; do
    script+=$'\n'"s${d}${re}${d}***${d}g"
  done <"$3"
  sed -E -e "$script" "$f" >"$f.n" && mv "$f.n" "$f"
  # a last line without a newline gets one
  if [[ -s $f && $(tail -c 1 "$f" | od -An -c | tr -d ' ') != '\n' ]]; then echo >>"$f"; fi
}

# run_case FILE: 0 if the case holds (or was updated), 1 if not.
run_case() {
  local file=$1 name work hdr setup=() cmd="" want_rc="" nrun=0 line rc
  name=$(basename "$file" .case)
  work="$root/$name"
  hdr="$root/$name.hdr"
  mkdir -p "$work"
  # split the file: header, expected stdout, expected stderr
  awk -v h="$hdr" -v o="$root/$name.want_out" -v e="$root/$name.want_err" '
    BEGIN { f = h; printf "" > h; printf "" > o; printf "" > e }
    $0 == "--- stdout" && f == h { f = o; next }
    $0 == "--- stderr" && f != e { f = e; next }
    { print > f }' "$file"
  : >"$root/$name.masks"
  while IFS= read -r line; do
    case $line in
      setup:*) setup+=("${line#setup:}") ;;
      run:*) cmd=${line#run:}; nrun=$((nrun + 1)) ;;
      mask:*) line=${line#mask:}; printf '%s\n' "${line# }" >>"$root/$name.masks" ;;
      exit:*) want_rc=${line#exit:}; want_rc=${want_rc// /} ;;
      '#'* | '') ;;
      *) echo "FAIL $name: unknown line in the header: $line"; return 1 ;;
    esac
  done <"$hdr"
  if [[ $nrun -ne 1 ]]; then echo "FAIL $name: needs exactly one run: line"; return 1; fi
  if ! grep -qx -- '--- stderr' "$file" && [[ $update != 1 ]]; then
    echo "FAIL $name: no '--- stdout' and '--- stderr' sections"
    return 1
  fi
  if [[ ! $want_rc =~ ^[0-9]+$ && $update != 1 ]]; then echo "FAIL $name: needs exit: N"; return 1; fi

  local s
  for s in "${setup[@]+"${setup[@]}"}"; do
    if ! (cd "$work" && WORK=$work PATH="$root/bin:$PATH" LC_ALL=C TZ=UTC \
          timeout 120 bash -c "$s") </dev/null >"$root/$name.setup" 2>&1; then
      echo "FAIL $name: setup failed:$s"
      sed 's/^/  /' "$root/$name.setup" | head -20
      return 1
    fi
  done
  (cd "$work" && WORK=$work PATH="$root/bin:$PATH" LC_ALL=C TZ=UTC \
    timeout 120 bash -c "$cmd") </dev/null >"$root/$name.out" 2>"$root/$name.err"
  rc=$?
  normalize "$root/$name.out" "$work" "$root/$name.masks"
  normalize "$root/$name.err" "$work" "$root/$name.masks"

  if [[ $update == 1 ]]; then
    {
      grep -v '^exit:' "$hdr"
      echo "exit: $rc"
      echo "--- stdout"
      cat "$root/$name.out"
      echo "--- stderr"
      cat "$root/$name.err"
    } >"$root/$name.new"
    if cmp -s "$root/$name.new" "$file"; then
      echo "ok $name"
    else
      cp "$root/$name.new" "$file"
      echo "updated $name"
    fi
    return 0
  fi

  local ok=0
  if [[ $rc != "$want_rc" ]]; then
    echo "FAIL $name: exit code $rc, wanted $want_rc"
    ok=1
  fi
  if ! diff -u --label "$name: wanted stdout" --label "$name: got stdout" \
      "$root/$name.want_out" "$root/$name.out" >"$root/$name.diff"; then
    echo "FAIL $name: stdout differs"
    head -60 "$root/$name.diff"
    ok=1
  fi
  if ! diff -u --label "$name: wanted stderr" --label "$name: got stderr" \
      "$root/$name.want_err" "$root/$name.err" >"$root/$name.diff"; then
    echo "FAIL $name: stderr differs"
    head -60 "$root/$name.diff"
    ok=1
  fi
  [[ $ok == 0 ]] && echo "ok $name"
  return $ok
}

files=()
if [[ $# -gt 0 ]]; then
  for n in "$@"; do files+=("$cases_dir/${n%.case}.case"); done
else
  shopt -s nullglob
  files=("$cases_dir"/*.case)
fi
if [[ ${#files[@]} -eq 0 ]]; then
  echo "no cases in $cases_dir"
  exit 1
fi
for f in "${files[@]}"; do
  if [[ ! -f $f ]]; then
    echo "FAIL $(basename "$f"): no such case"
    failed=$((failed + 1))
  elif run_case "$f"; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
  fi
done
echo "$passed passed, $failed failed"
[[ $failed -eq 0 ]]
