#!/usr/bin/env bash
# Real storage servers on the loopback address, for the remote tests and benchmarks.
#
#   servers.sh http-start DIR STATE   nginx serving DIR (autoindex as JSON) on a free port; HTTP
#                                     on $(cat STATE/http.port), HTTPS with HTTP/2 and a
#                                     self-signed certificate on $(cat STATE/https.port)
#   servers.sh http-stop STATE
#   servers.sh s3-start STATE         a one-node Ceph cluster (monitor, OSD on memstore) and
#                                     radosgw; endpoint in STATE/s3.endpoint, a user's keys in
#                                     STATE/s3.env (AWS_* lines to source). Slow (tens of s).
#   servers.sh s3-stop STATE
#
# Everything lives under STATE (config, pid, logs, temporary folders): no file of the system's
# own nginx or Ceph configuration is read or written. Besides DIR, nginx answers:
#   /_loop         a redirect to itself (a redirect loop)
#   /_forbidden/*  403
#   /_error/*      500
#   /_plain/*      DIR again without a folder index (listings then come from manifests)
# Exit 0 when started, 77 when the server's program is not installed (tests then skip), else 1.
set -euo pipefail

die() { echo "servers.sh: $*" >&2; exit 1; }

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

wait_port() { # port seconds
  local i
  for ((i = 0; i < $2 * 10; i++)); do
    if (exec 3<>/dev/tcp/127.0.0.1/"$1") 2>/dev/null; then return 0; fi
    sleep 0.1
  done
  return 1
}

http_start() {
  local dir state nginx
  dir=$(cd "$1" && pwd) state=$2
  nginx=$(command -v nginx || echo /usr/sbin/nginx)
  [[ -x $nginx ]] || { echo "servers.sh: nginx is not installed (scripts/setup.sh installs nginx-light)" >&2; exit 77; }
  mkdir -p "$state/nginx/tmp"
  state=$(cd "$state" && pwd)
  local user=""
  [[ $(id -u) -eq 0 ]] && user="user root root;"
  if [[ ! -f $state/nginx/cert.pem ]]; then
    openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=localhost \
      -keyout "$state/nginx/key.pem" -out "$state/nginx/cert.pem" >/dev/null 2>&1 ||
      die "openssl could not make a test certificate"
  fi
  local tries
  for tries in 1 2 3; do
    local port sport
    port=$(free_port) sport=$(free_port)
    cat >"$state/nginx/nginx.conf" <<EOF
$user
daemon on;
worker_processes 2;
pid $state/nginx/nginx.pid;
error_log $state/nginx/error.log warn;
events { worker_connections 1024; }
http {
  access_log $state/nginx/access.log;
  client_body_temp_path $state/nginx/tmp/body;
  proxy_temp_path $state/nginx/tmp/proxy;
  fastcgi_temp_path $state/nginx/tmp/fastcgi;
  uwsgi_temp_path $state/nginx/tmp/uwsgi;
  scgi_temp_path $state/nginx/tmp/scgi;
  default_type application/octet-stream;
  sendfile on;
  keepalive_requests 100000;
  keepalive_timeout 60s;
  server {
    listen 127.0.0.1:$port;
    listen 127.0.0.1:$sport ssl http2;
    ssl_certificate $state/nginx/cert.pem;
    ssl_certificate_key $state/nginx/key.pem;
    root $dir;
    location / { autoindex on; autoindex_format json; }
    location = /_loop { return 302 /_loop; }
    location /_forbidden/ { return 403; }
    location /_error/ { return 500; }
    location /_plain/ { alias $dir/; autoindex off; }
  }
}
EOF
    if "$nginx" -p "$state/nginx" -c "$state/nginx/nginx.conf" -e "$state/nginx/error.log" 2>>"$state/nginx/error.log" &&
       wait_port "$port" 10; then
      echo "$port" >"$state/http.port"
      echo "$sport" >"$state/https.port"
      echo "http://127.0.0.1:$port"
      return 0
    fi
    http_stop "$state" || true
  done
  die "nginx did not start: $(tail -3 "$state/nginx/error.log" 2>/dev/null)"
}

http_stop() {
  local pidf=$1/nginx/nginx.pid pid i
  [[ -f $pidf ]] || return 0
  pid=$(cat "$pidf")
  kill -TERM "$pid" 2>/dev/null || true
  for ((i = 0; i < 50; i++)); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  kill -KILL "$pid" 2>/dev/null || true
  rm -f "$pidf"
}

s3_start() {
  local state=$1
  command -v radosgw >/dev/null && command -v ceph-mon >/dev/null && command -v ceph-osd >/dev/null ||
    { echo "servers.sh: radosgw, ceph-mon or ceph-osd is not installed (scripts/setup.sh --s3, which make check-s3 runs, installs them)" >&2; exit 77; }
  exec "$(dirname "$0")/s3_cluster.sh" start "$state"
}

s3_stop() {
  exec "$(dirname "$0")/s3_cluster.sh" stop "$1"
}

case ${1:-} in
  http-start) [[ $# -eq 3 ]] || die "usage: servers.sh http-start DIR STATE"; http_start "$2" "$3" ;;
  http-stop) [[ $# -eq 2 ]] || die "usage: servers.sh http-stop STATE"; http_stop "$2" ;;
  s3-start) [[ $# -eq 2 ]] || die "usage: servers.sh s3-start STATE"; s3_start "$2" ;;
  s3-stop) [[ $# -eq 2 ]] || die "usage: servers.sh s3-stop STATE"; s3_stop "$2" ;;
  *) die "usage: servers.sh http-start DIR STATE | http-stop STATE | s3-start STATE | s3-stop STATE" ;;
esac
