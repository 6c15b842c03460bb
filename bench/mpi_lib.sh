# Sourced by bench/mpi.sh and bench/mpi_infer.sh: how they start N ranks on this host.
# Needs MPIRUN (the mpirun to use) and cores (this machine's CPU count) set by the caller.

mpirun_n() { # mpirun_n N ARGS...: N ranks, unbound, oversubscribed when N exceeds the cores
  local n=$1
  shift
  local extra=(--bind-to none)
  ((n > cores)) && extra+=(--oversubscribe)
  [[ $(id -u) == 0 ]] && extra+=(--allow-run-as-root)
  "$MPIRUN" "${extra[@]}" -np "$n" "$@"
}
