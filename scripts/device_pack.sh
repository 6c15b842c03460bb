#!/bin/sh
# Packs a build for a machine that has a GPU driver and CUDA libraries but not this machine's
# packages: the CLI, libpipebench.so and libpipebench-bench.so, the CUDA module, the test and
# benchmark programs, and every shared library they load that such a machine may lack (from ldd; the
# C library, the CUDA driver and runtime, cuDNN, cuBLAS and the compiler's runtime are left to the
# machine). All of it goes into one compressed archive (PACK_DIR/pack.tar.xz), to stay small enough
# to carry.
#
# usage: scripts/device_pack.sh BUILD_DIR [PACK_DIR]     (PACK_DIR default .devpack, git-ignored)
# env:   TESTS       which test programs (a find -name pattern; default test_*, all of them)
#        XZ_LEVEL    compression level (default 3)
#
# On the other machine, from the repository root:
#   . scripts/device_pack.sh --unpack [PACK_DIR] [DEST]     (DEST default /tmp/pbpack)
# unpacks into DEST (bin/, lib/, tests/, bench/) and exports PIPEBENCH_PACK=DEST, PATH, LD_LIBRARY_PATH
# (DEST/lib first, then the folders holding cuDNN and cuBLASLt if the loader does not find them)
# and PIPEBENCH_CUDA_MODULE. A build with MPI: Open MPI's libraries (libmpi, libopen-rte,
# libopen-pal) go to DEST/lib/mpi, used only when the machine has no libmpi.so.40 of its own; an
# mpirun found there (PATH, or beside its libmpi) is exported as PIPEBENCH_MPIRUN, else PIPEBENCH_MPIRUN stays
# unset (bench/mpi.sh says so).
set -u

pb_unpack() {
  pack=${1:-.devpack}
  dest=${2:-/tmp/pbpack}
  mkdir -p "$dest" || return 2
  if command -v xz >/dev/null 2>&1; then
    xz -dc "$pack/pack.tar.xz" | tar -x -C "$dest" || return 2
  else # Python's lzma is in its standard library
    python3 -c 'import lzma,sys,tarfile; tarfile.open(fileobj=lzma.open(sys.argv[1])).extractall(sys.argv[2])' \
      "$pack/pack.tar.xz" "$dest" || return 2
  fi
  extra=""
  for want in libcudnn.so.9 libcublasLt.so.13 libcublasLt.so.12; do
    ldconfig -p 2>/dev/null | grep -q "$want" && continue
    f=$(find /usr/local/cuda/lib64 /usr/local/cuda/targets /usr/lib /opt /usr/local/lib -name "$want*" \
        2>/dev/null | head -n 1)
    [ -n "$f" ] && extra="$extra:$(dirname "$f")"
  done
  # MPI: the machine's own Open MPI (its mpirun and libmpi.so.40, which must match) when it has
  # one, else the packed libraries (enough to load pipebench; ranks need an mpirun)
  mpi=""
  unset PIPEBENCH_MPIRUN
  if [ -d "$dest/lib/mpi" ]; then
    run=$(command -v mpirun 2>/dev/null)
    for d in /opt/hpcx/ompi/bin /usr/local/mpi/bin /opt/openmpi/bin /usr/lib64/openmpi/bin; do
      [ -z "$run" ] && [ -x "$d/mpirun" ] && run="$d/mpirun"
    done
    lib=""
    if [ -n "$run" ]; then
      r=$(readlink -f "$run")
      for d in "$(dirname "$r")/../lib" "$(dirname "$r")/../lib64"; do
        [ -z "$lib" ] && [ -e "$d/libmpi.so.40" ] && lib=$(cd "$d" && pwd)
      done
      [ -z "$lib" ] && ldconfig -p 2>/dev/null | grep -q 'libmpi.so.40 ' && lib=system
    fi
    if [ -n "$lib" ]; then
      export PIPEBENCH_MPIRUN="$run"
      [ "$lib" != system ] && mpi=":$lib"
    else
      mpi=":$dest/lib/mpi"
    fi
  fi
  export PIPEBENCH_PACK="$dest"
  export PATH="$dest/bin:$PATH"
  export LD_LIBRARY_PATH="$dest/lib$extra$mpi${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export PIPEBENCH_CUDA_MODULE="$dest/lib/libpipebench-cuda.so"
  return 0
}

if [ "${1:-}" = "--unpack" ]; then
  shift
  pb_unpack "$@"
  return $? 2>/dev/null || exit $?
fi

B=${1:?usage: scripts/device_pack.sh BUILD_DIR [PACK_DIR]}
P=${2:-.devpack}
[ -x "$B/pipebench" ] || { echo "device_pack: no $B/pipebench (build first)" >&2; exit 2; }
[ -f "$B/libpipebench-cuda.so" ] || { echo "device_pack: no $B/libpipebench-cuda.so (a build with CUDA)" >&2; exit 2; }
stage=$(mktemp -d) || exit 2
trap 'rm -rf "$stage"' EXIT INT TERM
mkdir -p "$stage/bin" "$stage/lib" "$stage/tests" "$stage/bench" "$P" || exit 2

cp "$B/pipebench" "$stage/bin/" || exit 2
for f in "$B"/libpipebench.so* "$B"/libpipebench-bench.so*; do cp -P "$f" "$stage/lib/"; done
cp "$B/libpipebench-cuda.so" "$stage/lib/" || exit 2
# every test program (tests/<part>/test_*) and benchmark program (bench/*, cuda_engine_bench)
find "$B/tests" -type f -name "${TESTS:-test_*}" -perm -u+x 2>/dev/null | while read -r f; do
  cp "$f" "$stage/tests/"
done
find "$B/bench" "$B" -maxdepth 1 -type f -perm -u+x 2>/dev/null | while read -r f; do
  case $(basename "$f") in
    pipebench|*.so|*.so.*|*.sh|CMake*) ;;
    *) file -b "$f" | grep -q ELF && cp "$f" "$stage/bench/" ;;
  esac
done

# the libraries they load, less those every CUDA machine has (or must bring itself)
system='^(libc|libm|libpthread|libdl|librt|ld-linux-x86-64|linux-vdso|libcuda|libcudart|libcudnn[a-z_]*|libcublas|libcublasLt|libstdc\+\+|libgcc_s|libnvidia-[a-z-]*)\.so'
for f in "$stage"/bin/* "$stage"/lib/* "$stage"/tests/* "$stage"/bench/*; do
  LD_LIBRARY_PATH="$B${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" ldd "$f" 2>/dev/null
done | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' | sort -u | while read -r name path; do
  echo "$name" | grep -Eq "$system" && continue
  case $name in
    libpipebench*) continue ;;
    libmpi.so*|libopen-rte.so*|libopen-pal.so*) # the unpacking machine's own come first
      mkdir -p "$stage/lib/mpi"
      [ -e "$stage/lib/mpi/$name" ] || cp -L "$path" "$stage/lib/mpi/$name"
      continue ;;
  esac
  [ -e "$stage/lib/$name" ] || cp -L "$path" "$stage/lib/$name"
done

tar -C "$stage" -cf - bin lib tests bench | xz -${XZ_LEVEL:-3} -T2 >"$P/pack.tar.xz.tmp" && mv "$P/pack.tar.xz.tmp" "$P/pack.tar.xz" || exit 2
raw=$(du -sb "$stage" | cut -f1)
packed=$(stat -c %s "$P/pack.tar.xz")
echo "device_pack: $P/pack.tar.xz: $((packed / 1048576)) MiB ($((raw / 1048576)) MiB unpacked), $(ls "$stage/lib" | wc -l) libraries"
[ -d "$stage/lib/mpi" ] && echo "device_pack: built with MPI: Open MPI's libraries in lib/mpi (the machine's own mpirun and libmpi are used where found)"
if [ "$packed" -gt $((60 * 1048576)) ]; then
  echo "device_pack: over 60 MiB: too large to carry with the working tree" >&2
  exit 2
fi
exit 0
