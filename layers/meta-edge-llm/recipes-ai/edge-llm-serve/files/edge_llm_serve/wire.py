"""The socket level: route labels, log hygiene, client keys, socket wrappers and systemd's socket.

Shared by the selector front (:mod:`.server`) and the request handlers (:mod:`.routes`).
"""

from __future__ import annotations

import io
import ipaddress
import json
import os
import select
import socket
from typing import Any

from edge_llm_serve.config import ConfigError

# ---------------------------------------------------------------------------------------------
# HTTP: a selector front reads request heads (idle sockets cost a descriptor, not a thread),
# a handler thread per complete request, Connection: close
# ---------------------------------------------------------------------------------------------

MAX_HEAD_BYTES = 16384
MODEL_ROUTE = "/v1/models/{id}"    # GET one model: one label for every id a client asks about
ROUTES = ("/health", "/livez", "/v1/models", MODEL_ROUTE, "/metrics", "/v1/chat/completions", "/v1/completions")
HEALTH_ROUTES = ("/health", "/livez")
HEALTH_SLOTS = 4       # handler slots only /health and /livez may use, on top of max_handlers
OTHER = "other"        # the metric label of every path that is not a route


def route(target: str) -> str:
    """The route a request target names (its path without the query), or ``OTHER``.

    Metrics are labelled by this, never by the client's path: one label per distinct path let
    unauthenticated requests grow the label set (and every /metrics reply) without bound.
    """
    path = target.split("?", 1)[0]
    if path.startswith("/v1/models/") and len(path) > len("/v1/models/"):
        return MODEL_ROUTE
    return path if path in ROUTES else OTHER


#: OpenAI's error object carries ``code`` as a string (or null); an error with no code of its own gets
#: the one of its HTTP status
STATUS_CODES = {400: "invalid_request", 401: "invalid_api_key", 404: "not_found", 405: "method_not_allowed",
                408: "request_timeout", 411: "length_required", 413: "request_too_large", 429: "rate_limit_exceeded",
                500: "server_error", 503: "service_unavailable"}


def status_code(status: int) -> str:
    """The error ``code`` string of an HTTP status (``http_<status>`` for one without a name here)."""
    return STATUS_CODES.get(status, f"http_{status}")


def head_route(head: bytes | bytearray) -> str:
    """The route of a raw request head's request line (RFC 9112 section 3: method SP target SP version)."""
    parts = bytes(head[:head.find(b"\r\n")]).split(b" ")
    return route(parts[1].decode("latin-1")) if len(parts) == 3 else OTHER


# C0 controls, DEL and C1 controls (a request line is decoded as Latin-1, so bytes 0x80-0x9f are C1)
# shown as \xNN, as http.server's own log_message does since Python 3.11.1 (gh-100001): a raw ESC
# or newline from a client could rewrite the operator's terminal or forge journal lines.
_CONTROL = str.maketrans({c: f"\\x{c:02x}" for c in (*range(0x20), *range(0x7F, 0xA0))})


def printable(text: str) -> str:
    """``text`` with control characters escaped, safe to write to the journal."""
    return text.translate(_CONTROL)


def client_key(addr: Any) -> str:
    """The address the per-client connection cap counts under: the IPv4 address, or the IPv6 /64
    (one host is usually given a whole /64, RFC 6177, so per-address counting would not hold it)."""
    host = str(addr[0]) if isinstance(addr, tuple) else str(addr)
    if ":" not in host:
        return host
    try:
        return str(ipaddress.ip_network(f"{host.split('%', 1)[0]}/64", strict=False))
    except ValueError:
        return host


class _SendAll(io.RawIOBase):
    """The response stream: every write sends all of its bytes.

    socket.send() may send only part of the data ("Applications are responsible for checking that
    all data has been sent", Python's socket docs), and a raw SocketIO.write() is one send(): a large
    reply lost its tail. sendall() loops until everything is sent or the socket's timeout passes.
    """

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._held: list[bytes] | None = None

    def writable(self) -> bool:
        return True

    def hold(self) -> None:
        """Keep what is written (the response head) until :meth:`release`: head and first bytes of
        the body then leave in one send(), one segment, one wake-up of the client."""
        self._held = []

    def release(self) -> None:
        held, self._held = self._held, None
        if held:
            self._sock.sendall(b"".join(held))

    def write(self, b: Any) -> int:
        if self._held is not None:
            self._held.append(bytes(b))
        else:
            self._sock.sendall(b)
        with memoryview(b) as view:
            return view.nbytes


class _Prefixed(io.RawIOBase):
    """A socket's byte stream with the already-read request head in front of it."""

    def __init__(self, head: bytes, sock: socket.socket) -> None:
        self._head = memoryview(head)
        self._sock = sock

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        if self._head:
            n = min(len(b), len(self._head))
            b[:n] = self._head[:n]
            self._head = self._head[n:]
            return n
        return self._sock.recv_into(b)


def client_gone(sock: socket.socket) -> bool:
    """True when the peer closed its end (readable with nothing to read), without consuming data."""
    try:
        r, _, _ = select.select([sock], [], [], 0)
        if not r:
            return False
        return sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


def close_after_reply(sock: socket.socket) -> None:
    """Close a connection whose reply is sent, reading first what the client has already sent.

    A close with received data still unread sends a reset (RFC 1122 section 4.2.2.13), and the
    reset can destroy the reply before the client reads it: a client refused by a connection cap
    got "connection reset" instead of its 503. RFC 9112 section 9.6 asks a server to half-close and
    read on; only what has already arrived is read here, because the selector thread must not wait.
    """
    try:
        sock.shutdown(socket.SHUT_WR)
        sock.setblocking(False)
        for _ in range(16):
            if not sock.recv(65536):
                break
    except OSError:
        pass
    finally:
        sock.close()


def _quick_reply(sock: socket.socket, status: int, reason: str, message: str, kind: str,
                 extra: str = "") -> None:
    body = json.dumps({"error": {"message": message, "type": kind, "param": None,
                                 "code": status_code(status)}}).encode()
    try:
        sock.setblocking(True)
        sock.settimeout(1)
        sock.sendall(f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\nContent-Length: {len(body)}"
                     f"\r\nConnection: close\r\n{extra}\r\n".encode() + body)
    except OSError:
        sock.close()
        return
    close_after_reply(sock)


#: sd_listen_fds(3): the first descriptor systemd passes to a socket-activated service
SD_LISTEN_FDS_START = 3


def activation_socket(cfg: dict[str, Any]) -> socket.socket | None:
    """The listening socket systemd passed (``edge-llm-serve@<model>.socket``), or None to bind one ourselves.

    With the socket unit, the service manager holds the port from boot on and across every restart of this
    service, so no other local user can take it in between (systemd.socket(5)). The protocol is
    sd_listen_fds(3): LISTEN_PID is our pid and LISTEN_FDS counts descriptors from fd 3; the variables are
    removed so the runtime's children never see them. The socket must listen on the configured port: a
    socket unit and a config that disagree would serve where no client (and no health check) looks.
    """
    if os.environ.get("LISTEN_PID") != str(os.getpid()):
        return None
    count = os.environ.get("LISTEN_FDS", "")
    for key in ("LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"):
        os.environ.pop(key, None)
    if count != "1":
        raise ConfigError(f"systemd passed {count or 'no'} sockets (LISTEN_FDS); the socket unit must have one "
                          "ListenStream=")
    sock = socket.socket(fileno=SD_LISTEN_FDS_START)
    os.set_inheritable(sock.fileno(), False)
    if sock.type != socket.SOCK_STREAM or not sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN):
        raise ConfigError("the socket systemd passed is not a listening stream socket (ListenStream=)")
    port = sock.getsockname()[1]
    if port != int(cfg["port"]):
        raise ConfigError(f"the socket unit listens on port {port}, the config says {cfg['port']}: "
                          "rerun fleet launch so both say the same")
    return sock
