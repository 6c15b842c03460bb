# Sourced by the two-build comparisons (perf/loader_ab.sh, perf/loader_epochs_ab.sh).
# Needs A and B (the two pipebench programs) set by the caller; LIB_A / LIB_B, where set, are
# folders put first on LD_LIBRARY_PATH for that build, so each runs with its own library.

run_build() { # run_build A|B ARGS...: pipebench ARGS with build A's or B's program and library
  local which=$1 lib bin
  shift
  if [[ $which == A ]]; then lib=${LIB_A:-}; bin=$A; else lib=${LIB_B:-}; bin=$B; fi
  LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$bin" "$@"
}
