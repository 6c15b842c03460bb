#!/usr/bin/env python3
"""A static HTTP server for the remote benchmarks where nginx is not installed (the lent GPU
machine): ThreadingHTTPServer over one folder, HTTP/1.1 with keep-alive, answering what
pipebench's http backend and the peers ask of nginx:

- GET and HEAD of a file: Content-Length, ETag (size and mtime, as nginx makes it) and
  Last-Modified; `Range: bytes=a-b`, `bytes=a-` and `bytes=-n` give 206 with Content-Range
  (416 with `bytes */SIZE` when the range starts past the end);
- a folder without its trailing slash: 301 to `name/`; a folder with it: nginx's
  `autoindex_format json` index, [{"name", "type": "directory"|"file", "mtime", "size"}].

  python3 bench/http_server.py DIR [--port P] [--port-file F]

Prints "listening 127.0.0.1:PORT" on stdout once it accepts connections (port 0: a free one).
"""
import argparse
import email.utils
import json
import os
import posixpath
import sys
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    root = "."

    def log_message(self, *args):
        pass

    def _path(self):
        p = urllib.parse.unquote(urllib.parse.urlsplit(self.path).path)
        parts = [x for x in posixpath.normpath(p).split("/") if x not in ("", ".", "..")]
        return os.path.join(self.root, *parts), p.endswith("/")

    def _send(self, code, headers, body=b""):
        self.send_response(code)
        for k, v in headers:
            self.send_header(k, v)
        if not any(k == "Content-Length" for k, _ in headers):
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD" and body:
            self.wfile.write(body)

    def _index(self, fs):
        out = []
        for name in sorted(os.listdir(fs)):
            st = os.stat(os.path.join(fs, name))
            e = {"name": name, "type": "directory" if os.path.isdir(os.path.join(fs, name))
                 else "file", "mtime": email.utils.formatdate(st.st_mtime, usegmt=True)}
            if e["type"] == "file":
                e["size"] = st.st_size
            out.append(e)
        body = (json.dumps(out, indent=0) + "\n").encode()
        self._send(200, [("Content-Type", "application/json")], body)

    def _range(self, size):
        """(first, last) of the Range header, None without one, or "bad" when unsatisfiable."""
        h = self.headers.get("Range")
        if not h or not h.startswith("bytes=") or "," in h:
            return None
        a, _, b = h[6:].strip().partition("-")
        try:
            if a == "":
                n = int(b)
                return (max(size - n, 0), size - 1) if n > 0 and size else "bad"
            first = int(a)
            last = min(int(b), size - 1) if b else size - 1
        except ValueError:
            return None
        return "bad" if first >= size or last < first else (first, last)

    def do_GET(self):
        fs, slash = self._path()
        if os.path.isdir(fs):
            if not slash:
                loc = urllib.parse.urlsplit(self.path).path + "/"
                return self._send(301, [("Location", loc)])
            return self._index(fs)
        if not os.path.isfile(fs):
            return self._send(404, [("Content-Type", "text/plain")], b"not found\n")
        st = os.stat(fs)
        size = st.st_size
        etag = '"%x-%x"' % (int(st.st_mtime), size)
        common = [("ETag", etag), ("Accept-Ranges", "bytes"),
                  ("Last-Modified", email.utils.formatdate(st.st_mtime, usegmt=True)),
                  ("Content-Type", "application/octet-stream")]
        r = self._range(size)
        if r == "bad":
            return self._send(416, [("Content-Range", "bytes */%d" % size)] + common)
        first, last = r if r else (0, size - 1)
        n = last - first + 1 if size else 0
        self.send_response(206 if r else 200)
        for k, v in common:
            self.send_header(k, v)
        if r:
            self.send_header("Content-Range", "bytes %d-%d/%d" % (first, last, size))
        self.send_header("Content-Length", str(n))
        self.end_headers()
        if self.command == "HEAD" or n == 0:
            return
        with open(fs, "rb") as f:
            f.seek(first)
            left = n
            while left:
                b = f.read(min(left, 1 << 20))
                if not b:
                    break
                self.wfile.write(b)
                left -= len(b)

    do_HEAD = do_GET


class Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dir")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--port-file")
    a = ap.parse_args()
    Handler.root = os.path.abspath(a.dir)
    srv = Server(("127.0.0.1", a.port), Handler)
    port = srv.server_address[1]
    if a.port_file:
        tmp = a.port_file + ".tmp"
        with open(tmp, "w") as f:
            f.write("%d\n" % port)
        os.replace(tmp, a.port_file)
    print("listening 127.0.0.1:%d" % port, flush=True)
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
