"""A real HTTP artifact server on 127.0.0.1 for deploy tests: Range requests, an access log, throttling.

The virtual boards share the host's network namespace, so they reach it at 127.0.0.1 like a board
reaches the fleet's artifact mirror. The access log is how tests prove "a second run transfers
nothing" and "an interrupted download resumes with a Range request".
"""

from __future__ import annotations

import os
import re
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


@dataclass
class Hit:
    path: str
    range: str | None
    status: int
    sent: int


class ArtifactServer:
    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.log: list[Hit] = []
        self.throttle: dict[str, float] = {}      # URL path -> seconds to sleep per 64 KiB chunk
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802
                rel = self.path.split("?", 1)[0].lstrip("/")
                path = (server.root / rel).resolve()
                if server.root.resolve() not in path.parents or not path.is_file():
                    self.send_error(404)
                    server._record(self.path, None, 404, 0)
                    return
                size = path.stat().st_size
                start = 0
                rng = self.headers.get("Range")
                status = 200
                if rng:
                    m = re.match(r"bytes=(\d+)-$", rng)
                    if not m or int(m.group(1)) > size:
                        self.send_error(416)
                        server._record(self.path, rng, 416, 0)
                        return
                    start = int(m.group(1))
                    status = 206
                self.send_response(status)
                self.send_header("Content-Length", str(size - start))
                self.send_header("Accept-Ranges", "bytes")
                if status == 206:
                    self.send_header("Content-Range", f"bytes {start}-{size - 1}/{size}")
                self.end_headers()
                sent = 0
                delay = server.throttle.get("/" + rel, 0.0)
                try:
                    with open(path, "rb") as fh:
                        fh.seek(start)
                        while chunk := fh.read(65536):
                            self.wfile.write(chunk)
                            sent += len(chunk)
                            if delay:
                                self.wfile.flush()
                                time.sleep(delay)
                except (BrokenPipeError, ConnectionResetError):
                    pass
                server._record(self.path, rng, status, sent)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def _record(self, path: str, rng: str | None, status: int, sent: int) -> None:
        with self._lock:
            self.log.append(Hit(path, rng, status, sent))

    def mark(self) -> int:
        with self._lock:
            return len(self.log)

    def since(self, mark: int) -> list[Hit]:
        with self._lock:
            return list(self.log[mark:])

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def free_bytes(path: str) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize
