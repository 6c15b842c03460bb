# Sourced by the two-build comparisons (bench/loader_ab.sh, bench/loader_epochs_ab.sh): their
# arguments (ab_setup) and running either build (run_build).
# Needs A and B (the two pipebench programs) set by the caller; LIB_A / LIB_B, where set, are
# folders put first on LD_LIBRARY_PATH for that build, so each runs with its own library.

run_build() { # run_build A|B ARGS...: pipebench ARGS with build A's or B's program and library
  local which=$1 lib bin
  shift
  if [[ $which == A ]]; then lib=${LIB_A:-}; bin=$A; else lib=${LIB_B:-}; bin=$B; fi
  LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$bin" "$@"
}

ab_setup() { # ab_setup NAME ARGS...: A, B and out (ARGS, OUT default $TMPDIR/NAME), rounds (ROUNDS, 3); out emptied
  local name=$1 usage
  shift
  usage="usage: bench/$name.sh PIPEBENCH_A PIPEBENCH_B [OUT]"
  A=${1:?$usage}
  B=${2:?$usage}
  out=${3:-${TMPDIR:-/tmp}/$name}
  rounds=${ROUNDS:-3}
  rm -rf "$out" && mkdir -p "$out"
}
