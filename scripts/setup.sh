#!/usr/bin/env bash
# Installs everything pipebench needs on Debian 12 and is quick when it is all there already.
#   Debian packages: compilers, CMake, libtiff, c-blosc, zstd, lz4, zlib, cJSON, oneDNN, cmocka,
#                    PLplot (cairo), libjpeg-turbo (TurboJPEG), libpng, Python with numpy, torch,
#                    torchvision, PIL, tifffile, zarr; OpenMPI (libopenmpi-dev, openmpi-bin) for runs
#                    across ranks (docs/scaling.md); procps (pgrep, for the tests that check
#                    that no process of a stopped run is left).
#                    Remote storage (docs/remote.md): libcurl (http/https/s3 reads), nginx-light
#                    (the HTTP server the tests start on the loopback address), python3-fsspec
#                    and python3-aiohttp (zarr-python over HTTP, bench/remote_peers.sh's peer).
#   With --s3 only (`make check-s3`): Ceph's radosgw with a monitor and an OSD for the S3
#                    tests' single-node cluster (CTest label s3). A few hundred MB that `make run`
#                    and `make check` do not need; a failed install is reported and the S3 tests
#                    then skip.
#   DuckDB's C library: from the npm registry, pinned, checksum-verified, unpacked into
#                    third_party/duckdb (ignored by git).
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
want_s3=0
[[ ${1:-} == --s3 ]] && want_s3=1

DUCKDB_VERSION=1.4.4
DUCKDB_BINDINGS=@duckdb/node-bindings-linux-x64@1.4.4-r.1
DUCKDB_BINDINGS_SHA256=8ac460b152cd05a95065a414879bb09e40534b1fb7a80a7afe6969b6ce039029
DUCKDB_SOURCE=duckdb@1.4.4
DUCKDB_SOURCE_SHA256=5bb967dcbcd517670ba5f169f238fb9d6787e53752c60ebe24386169d76941ed

PACKAGES=(build-essential cmake pkg-config git ca-certificates nodejs npm
  libtiff-dev libblosc-dev libzstd-dev zlib1g-dev liblz4-dev libcjson-dev
  libturbojpeg0-dev libpng-dev python3-pil
  libdnnl-dev libcmocka-dev libplplot-dev plplot-driver-cairo libopenmpi-dev openmpi-bin
  clang libclang-rt-14-dev
  python3 python3-numpy python3-zarr python3-tifffile python3-torch python3-torchvision
  python3-pandas procps
  libcurl4-openssl-dev nginx-light python3-fsspec python3-aiohttp)
S3_PACKAGES=(radosgw ceph-mon ceph-osd ceph-mgr)

log() { printf 'setup: %s\n' "$*" >&2; }

missing=()
for p in "${PACKAGES[@]}"; do
  # node and npm may come from outside Debian on some machines; accept any working copy.
  if [[ $p == nodejs ]] && command -v node >/dev/null; then continue; fi
  if [[ $p == npm ]] && command -v npm >/dev/null; then continue; fi
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if ((${#missing[@]})); then
  log "installing ${#missing[@]} Debian packages: ${missing[*]}"
  SUDO=; [[ $(id -u) -eq 0 ]] || SUDO=sudo
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -q
  $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
else
  log "Debian packages present"
fi

s3_missing=()
((want_s3)) && for p in "${S3_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || s3_missing+=("$p")
done
if ((${#s3_missing[@]})); then
  log "installing the S3 test server (Ceph radosgw): ${s3_missing[*]}"
  SUDO=; [[ $(id -u) -eq 0 ]] || SUDO=sudo
  # policy-rc.d-less machines would start Ceph's system services; the tests start their own.
  if ! DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${s3_missing[@]}"; then
    log "radosgw not installed: the S3 tests (label s3) will skip"
  fi
fi

dd="$top/third_party/duckdb"
if [[ -f $dd/.version && $(cat "$dd/.version") == "$DUCKDB_VERSION" && -f $dd/lib/libduckdb.so && -f $dd/include/duckdb.h ]]; then
  log "DuckDB $DUCKDB_VERSION present"
else
  log "fetching DuckDB $DUCKDB_VERSION C library from the npm registry"
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  (cd "$tmp" && npm pack --silent "$DUCKDB_BINDINGS" "$DUCKDB_SOURCE" >/dev/null)
  check() {
    local f=$1 want=$2 got
    got=$(sha256sum "$f" | cut -d' ' -f1)
    if [[ $got != "$want" ]]; then
      log "checksum mismatch for $(basename "$f"): got $got, want $want"; exit 1
    fi
  }
  check "$tmp"/duckdb-node-bindings-linux-x64-*.tgz "$DUCKDB_BINDINGS_SHA256"
  check "$tmp"/duckdb-"$DUCKDB_VERSION".tgz "$DUCKDB_SOURCE_SHA256"
  rm -rf "$dd.new"; mkdir -p "$dd.new/lib" "$dd.new/include"
  tar -xzf "$tmp"/duckdb-node-bindings-linux-x64-*.tgz -C "$tmp" package/libduckdb.so
  mv "$tmp/package/libduckdb.so" "$dd.new/lib/"
  tar -xzf "$tmp"/duckdb-"$DUCKDB_VERSION".tgz -C "$tmp" package/src/duckdb/src/include/duckdb.h
  mv "$tmp/package/src/duckdb/src/include/duckdb.h" "$dd.new/include/"
  echo "$DUCKDB_VERSION" > "$dd.new/.version"
  rm -rf "$dd"; mv "$dd.new" "$dd"
  log "DuckDB $DUCKDB_VERSION unpacked into third_party/duckdb"
fi

# The Lance engine (@lancedb/lancedb with apache-arrow, pinned with their integrity hashes by
# lib/formats/lance/helper/package-lock.json) for the lance format's Node helper, into
# third_party/lance (ignored by git). Optional: without Node, or when the registry cannot be
# reached, Lance is skipped and everything else works (its tests say why they skip).
lance_src="$top/lib/formats/lance/helper"
ld="$top/third_party/lance"
lance_stamp=$(cat "$lance_src/package.json" "$lance_src/package-lock.json" | sha256sum | cut -d' ' -f1)
if [[ -f $ld/.stamp && $(cat "$ld/.stamp") == "$lance_stamp" && -f $ld/node_modules/@lancedb/lancedb/package.json ]]; then
  log "Lance engine (lancedb-node) present"
elif ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  log "Lance skipped: Node.js and npm are not installed (the lance format needs them)"
else
  rm -rf "$ld.new"; mkdir -p "$ld.new"
  cp "$lance_src/package.json" "$lance_src/package-lock.json" "$ld.new/"
  # --omit=optional: lancedb's optional embedding packages are not needed (its native module
  # for this platform is a direct dependency); no install scripts run.
  if (cd "$ld.new" && npm ci --ignore-scripts --omit=optional --no-audit --no-fund --loglevel=error >npm.log 2>&1) &&
     (cd "$ld.new" && NODE_PATH="$ld.new/node_modules" node -e 'require("@lancedb/lancedb"); require("apache-arrow")' >>npm.log 2>&1); then
    echo "$lance_stamp" > "$ld.new/.stamp"
    rm -rf "$ld"; mv "$ld.new" "$ld"
    log "Lance engine (lancedb-node) installed into third_party/lance"
  else
    log "Lance skipped: installing @lancedb/lancedb failed ($(tail -1 "$ld.new/npm.log" 2>/dev/null)); see $ld.new/npm.log"
  fi
fi
