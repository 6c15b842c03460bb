#!/usr/bin/env bash
# A one-node Ceph cluster for the S3 tests, everything under STATE (tests/remote/servers.sh):
# one monitor, one OSD on BlueStore in a sparse file, no authentication inside the cluster, and
# radosgw's S3 API on a free loopback port with one user.
#   s3_cluster.sh start STATE   writes STATE/s3.endpoint and STATE/s3.env (AWS_* to source)
#   s3_cluster.sh stop STATE
set -euo pipefail
cmd=${1:-} state=${2:-}
[[ -n $cmd && -n $state ]] || { echo "usage: s3_cluster.sh start|stop STATE" >&2; exit 1; }

stop() {
  local f pid i
  for f in "$state"/ceph/run/*.pid; do
    [[ -f $f ]] || continue
    pid=$(cat "$f")
    kill "$pid" 2>/dev/null || true
  done
  for f in "$state"/ceph/run/*.pid; do
    [[ -f $f ]] || continue
    pid=$(cat "$f")
    for ((i = 0; i < 50; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
    rm -f "$f"
  done
}

if [[ $cmd == stop ]]; then stop; exit 0; fi
[[ $cmd == start ]] || { echo "usage: s3_cluster.sh start|stop STATE" >&2; exit 1; }

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}
mkdir -p "$state"
state=$(cd "$state" && pwd)
c=$state/ceph
rm -rf "$c"
mkdir -p "$c/run" "$c/log" "$c/mon.a" "$c/osd.0" "$c/rgw"
fsid=$(python3 -c 'import uuid; print(uuid.uuid4())')
monport=$(free_port) rgwport=$(free_port)
conf=$c/ceph.conf
cat >"$conf" <<EOF
[global]
fsid = $fsid
mon host = v1:127.0.0.1:$monport
ms bind msgr2 = false
auth cluster required = none
auth service required = none
auth client required = none
auth allow insecure global id reclaim = true
osd pool default size = 1
osd pool default min size = 1
mon allow pool size one = true
mon allow pool delete = true
osd crush chooseleaf type = 0
osd pool default pg autoscale mode = off
mon max pg per osd = 1000
mon warn on pool no redundancy = false
run dir = $c/run
pid file = $c/run/\$name.pid
log file = $c/log/\$name.log
admin socket = $c/run/\$name.asok
keyring = $c/keyring
osd objectstore = bluestore
bluestore block create = true
bluestore block size = 4294967296
bluestore fsck on mount = false
bluestore cache size = 134217728
osd memory target = 1073741824
osd data = $c/osd.\$id
mon data = $c/mon.\$id
osd class update on start = false
osd crush update on start = false
osd max object name len = 460
osd max object namespace len = 64
[client.rgw]
rgw frontends = beast endpoint=127.0.0.1:$rgwport tcp_nodelay=1
rgw data = $c/rgw
rgw dns name = 127.0.0.1
EOF
log() { echo "s3_cluster: $*" >&2; }
fail() { log "$*"; for f in "$c"/log/*.log; do [[ -f $f ]] && { echo "== $f" >&2; tail -5 "$f" >&2; }; done; stop; exit 1; }

ceph-authtool --create-keyring "$c/keyring" --gen-key -n mon. --cap mon 'allow *' >/dev/null
ceph-authtool "$c/keyring" --gen-key -n client.admin --cap mon 'allow *' --cap osd 'allow *' \
  --cap mgr 'allow *' >/dev/null
monmaptool --create --addv a "[v1:127.0.0.1:$monport]" --fsid "$fsid" "$c/monmap" >/dev/null
ceph-mon -c "$conf" --mkfs -i a --monmap "$c/monmap" --keyring "$c/keyring" || fail "ceph-mon --mkfs failed"
ceph-mon -c "$conf" -i a || fail "ceph-mon did not start"
C() { timeout 30 ceph -c "$conf" "$@"; }
C -s >/dev/null 2>&1 || fail "the monitor does not answer"
uuid=$(python3 -c 'import uuid; print(uuid.uuid4())')
id=$(C osd new "$uuid") || fail "ceph osd new failed"
ceph-osd -c "$conf" -i "$id" --mkfs --osd-uuid "$uuid" >/dev/null 2>&1 || fail "ceph-osd --mkfs failed"
C osd crush add-bucket localhost host >/dev/null 2>&1 || true
C osd crush move localhost root=default >/dev/null 2>&1 || true
C osd crush add "osd.$id" 1.0 host=localhost >/dev/null 2>&1 || fail "ceph osd crush add failed"
ceph-osd -c "$conf" -i "$id" || fail "ceph-osd did not start"
for ((i = 0; i < 60; i++)); do
  C osd stat 2>/dev/null | grep -q '1 up' && break
  sleep 1
done
C osd stat 2>/dev/null | grep -q '1 up' || fail "the OSD did not come up"
radosgw -c "$conf" -n client.rgw || fail "radosgw did not start"
for ((i = 0; i < 120; i++)); do
  (exec 3<>/dev/tcp/127.0.0.1/"$rgwport") 2>/dev/null && break
  sleep 0.5
done
(exec 3<>/dev/tcp/127.0.0.1/"$rgwport") 2>/dev/null || fail "radosgw does not listen on $rgwport"
key=PBTESTACCESSKEY0001 secret=pbtestsecretkey0000000000000000000000001
timeout 60 radosgw-admin -c "$conf" -n client.rgw user create --uid pbtest --display-name pbtest \
  --access-key "$key" --secret-key "$secret" >/dev/null 2>&1 || fail "radosgw-admin user create failed"
echo "http://127.0.0.1:$rgwport" >"$state/s3.endpoint"
cat >"$state/s3.env" <<EOF
export AWS_ENDPOINT_URL=http://127.0.0.1:$rgwport
export AWS_REGION=us-east-1
export AWS_ACCESS_KEY_ID=$key
export AWS_SECRET_ACCESS_KEY=$secret
EOF
echo "http://127.0.0.1:$rgwport"
