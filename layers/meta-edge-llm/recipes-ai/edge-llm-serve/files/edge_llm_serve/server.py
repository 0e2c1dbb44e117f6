"""The selector front: idle sockets wait in a selector (no thread), complete requests go to handler threads."""

from __future__ import annotations

import collections
import queue
import selectors
import socket
import sys
import threading
import time
from typing import Any

from edge_llm_serve.config import DEFAULTS
from edge_llm_serve.metrics import Metrics
from edge_llm_serve.routes import make_handler
from edge_llm_serve.scheduler import Scheduler
from edge_llm_serve.wire import (
    HEALTH_ROUTES,
    HEALTH_SLOTS,
    MAX_HEAD_BYTES,
    _quick_reply,
    client_key,
    close_after_reply,
    head_route,
)


class Service:
    """The listening socket, its selector loop, and the app state the handlers share."""

    def __init__(self, cfg: dict[str, Any], scheduler: Scheduler, metrics: Metrics, token: str,
                 sock: socket.socket | None = None) -> None:
        self.cfg, self.scheduler, self.metrics, self.token = cfg, scheduler, metrics, token
        self.max_connections = int(cfg.get("max_connections") or DEFAULTS["max_connections"])
        self.max_client_connections = int(cfg.get("max_client_connections") or DEFAULTS["max_client_connections"])
        self.max_handlers = int(cfg.get("max_handlers") or DEFAULTS["max_handlers"])
        self.head_timeout = float(cfg.get("idle_timeout_s") or DEFAULTS["idle_timeout_s"])
        self.read_timeout = float(cfg.get("read_timeout_s") or DEFAULTS["read_timeout_s"])
        self.body_timeout = float(cfg.get("body_timeout_s") or DEFAULTS["body_timeout_s"])
        self.sock = sock or socket.create_server((cfg["bind"], int(cfg["port"])),
                                                 backlog=int(cfg.get("backlog") or DEFAULTS["backlog"]))
        self.sock.setblocking(False)
        self.server_address = self.sock.getsockname()
        self._sel = selectors.DefaultSelector()
        self._sel.register(self.sock, selectors.EVENT_READ, None)
        self._pending: dict[int, tuple[socket.socket, bytearray, float, Any]] = {}
        self._handlers = 0
        self._per_client: collections.Counter[str] = collections.Counter()   # open connections by client_key
        self._hlock = threading.Lock()
        self._stop = threading.Event()
        self.handler_class = make_handler(self)
        # Requests go to handler threads that wait for them (one more is started only when none is idle):
        # starting a thread per request made every request wait for the new thread to be scheduled and
        # for this loop to be scheduled again after it, on a busy CPU a good part of the time to first token.
        self._work: queue.SimpleQueue = queue.SimpleQueue()
        self._idle = 0

    @property
    def connections(self) -> int:
        return len(self._pending) + self._handlers

    def serve_forever(self) -> None:
        while not self._stop.is_set():
            for key, _ in self._sel.select(timeout=0.25):
                if key.data is None:
                    self._accept()
                else:
                    self._read(key.fileobj)
            now = time.monotonic()
            for fd, (conn, _, deadline, addr) in list(self._pending.items()):
                if now > deadline:
                    self._drop(fd)
                    self._release(addr)
                    _quick_reply(conn, 408, "Request Timeout",
                                 f"no complete request head within {self.head_timeout:g} s", "invalid_request_error")

    def shutdown(self) -> None:
        self._stop.set()

    def server_close(self) -> None:
        for fd in list(self._pending):
            self._pending[fd][0].close()
            self._drop(fd)
        self._sel.close()
        self.sock.close()

    def _drop(self, fd: int) -> None:
        conn = self._pending.pop(fd)[0]
        try:
            self._sel.unregister(conn)
        except (KeyError, ValueError):
            pass

    def _release(self, addr: Any) -> None:
        """A connection from ``addr`` is closed (or about to be): it leaves its client's count."""
        key = client_key(addr)
        with self._hlock:
            self._per_client[key] -= 1
            if self._per_client[key] <= 0:
                del self._per_client[key]

    def _accept(self) -> None:
        while True:
            try:
                conn, addr = self.sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:   # EMFILE: leave it in the backlog until descriptors free up
                return
            key = client_key(addr)
            with self._hlock:   # one client may not hold every connection: the others still get in
                full = (self.connections >= self.max_connections
                        or self._per_client[key] >= self.max_client_connections)
                if not full:
                    self._per_client[key] += 1
            if full:
                self.metrics.request("(connection cap)", 503)
                _quick_reply(conn, 503, "Service Unavailable", "too many open connections; retry later",
                             "server_error", "Retry-After: 1\r\n")
                continue
            conn.setblocking(False)
            self._pending[conn.fileno()] = (conn, bytearray(), time.monotonic() + self.head_timeout, addr)
            self._sel.register(conn, selectors.EVENT_READ, addr)

    def _read(self, conn: socket.socket) -> None:
        fd = conn.fileno()
        _, buf, _, addr = self._pending[fd]
        try:
            data = conn.recv(65536)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self._drop(fd)
            self._release(addr)
            if buf:   # half-closed mid-head: the client can still read a reply (RFC 9112 section 9.6)
                _quick_reply(conn, 400, "Bad Request", "the request head ended before the empty line that ends it",
                             "invalid_request_error")
            else:
                conn.close()
            return
        buf += data
        end = buf.find(b"\r\n\r\n")
        # Checked on every read, complete head or not: a whole oversized head can arrive in one recv().
        if (len(buf) if end < 0 else end + 4) > MAX_HEAD_BYTES:
            self._drop(fd)
            self._release(addr)
            _quick_reply(conn, 431, "Request Header Fields Too Large",
                         f"request head over {MAX_HEAD_BYTES} bytes", "invalid_request_error")
            return
        if end < 0:
            return
        self._drop(fd)
        # /health and /livez may also use HEALTH_SLOTS of their own: requests that hold every
        # ordinary slot (slow bodies, long generations) cannot turn the readiness probe into a 503.
        limit = self.max_handlers + (HEALTH_SLOTS if head_route(buf) in HEALTH_ROUTES else 0)
        with self._hlock:
            busy = self._handlers >= limit
            if not busy:
                self._handlers += 1
        if busy:
            self._release(addr)
            self.metrics.request("(handler cap)", 503)
            _quick_reply(conn, 503, "Service Unavailable", "too many requests in progress; retry later",
                         "server_error", "Retry-After: 1\r\n")
            return
        with self._hlock:
            spawn = self._idle == 0
            if not spawn:
                self._idle -= 1
        self._work.put((conn, bytes(buf), addr))
        if spawn:
            threading.Thread(target=self._worker, daemon=True).start()

    def _worker(self) -> None:
        """A handler thread: one request at a time, then waits for the next (never more of them than
        requests handled at once, which max_handlers bounds)."""
        while True:
            conn, head, addr = self._work.get()
            self._handle(conn, head, addr)
            with self._hlock:
                self._idle += 1

    def _handle(self, conn: socket.socket, head: bytes, addr: Any) -> None:
        try:
            try:    # a streamed token is one small write: send it now, not after the last one's ACK (Nagle)
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass        # not TCP
            conn.setblocking(True)
            conn.settimeout(self.read_timeout)
            self.handler_class(conn, addr, self, head)
        except Exception as exc:  # noqa: BLE001 - one request's failure must not reach the loop
            sys.stderr.write(f"edge-llm-serve: request failed: {type(exc).__name__}\n")
        finally:
            with self._hlock:
                self._handlers -= 1
            self._release(addr)
            close_after_reply(conn)
