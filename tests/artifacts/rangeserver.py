"""A small HTTP file server on 127.0.0.1 with ``Range`` support, for fetch tests and bench/fetch.py.

``http.server`` alone ignores ``Range``; downloads must resume, so this handler answers
``bytes=N-`` with 206 and records what it sent. Knobs reproduce real failures: cut the connection
after N body bytes (an interrupted download), answer late (a timeout), demand a bearer token.
"""

from __future__ import annotations

import os
import re
import sys
import threading
import time
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


class RangeServer:
    """``with RangeServer(root) as srv: srv.url("file.bin")``."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.cut_after: int | None = None  # close the connection after this many body bytes (once)
        self.delay_s = 0.0
        self.token: str | None = None
        self.ranges = True  # False: ignore Range like some CDNs/proxies do (always 200, whole file)
        self.requests: list[dict] = []  # {"path", "range", "status", "sent", "auth"}
        server = self

        class Handler(SimpleHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def __init__(self, *a, **kw):
                super().__init__(*a, directory=str(server.root), **kw)

            def log_message(self, *args):  # keep test output clean
                pass

            def do_GET(self):  # noqa: N802 (http.server naming)
                rec = {"path": self.path, "range": self.headers.get("Range"), "status": None, "sent": 0,
                       "auth": self.headers.get("Authorization")}
                server.requests.append(rec)
                if server.delay_s:
                    time.sleep(server.delay_s)
                if server.token and self.headers.get("Authorization") != f"Bearer {server.token}":
                    rec["status"] = 401
                    self.send_error(401)
                    return
                path = server.root / self.path.lstrip("/").split("?", 1)[0]
                if not path.is_file():
                    rec["status"] = 404
                    self.send_error(404)
                    return
                size = path.stat().st_size
                start = 0
                m = re.match(r"bytes=(\d+)-$", self.headers.get("Range") or "") if server.ranges else None
                if m:
                    start = int(m.group(1))
                    if start >= size:
                        rec["status"] = 416
                        self.send_response(416)
                        self.send_header("Content-Range", f"bytes */{size}")
                        self.send_header("Content-Length", "0")
                        self.end_headers()
                        return
                    self.send_response(206)
                    self.send_header("Content-Range", f"bytes {start}-{size - 1}/{size}")
                    rec["status"] = 206
                else:
                    self.send_response(200)
                    rec["status"] = 200
                self.send_header("Content-Length", str(size - start))
                self.send_header("Accept-Ranges", "bytes")
                self.end_headers()
                limit = size - start
                cut = server.cut_after
                if cut is not None:
                    server.cut_after = None
                    limit = min(limit, cut)
                with open(path, "rb") as f:
                    offset = start
                    sock = self.connection
                    while rec["sent"] < limit:
                        n = os.sendfile(sock.fileno(), f.fileno(), offset, min(4 << 20, limit - rec["sent"]))
                        if n == 0:
                            break
                        offset += n
                        rec["sent"] += n
                if cut is not None:
                    self.close_connection = True
                    sock.shutdown(2)

        class Server(ThreadingHTTPServer):
            def handle_error(self, request, client_address):  # clients that hang up are expected here
                if not isinstance(sys.exc_info()[1], ConnectionError):
                    super().handle_error(request, client_address)

        self.httpd = Server(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def port(self) -> int:
        return self.httpd.server_address[1]

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.port}/{name}"

    def __enter__(self) -> RangeServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
