"""Item 5 of the hostile matrix (bench/hostile.py): unauthenticated requests against the real edge-llm-serve.

The service runs as the board runs it (its own process, the simulator's stand-in LiteRT-LM library); each
row returns what the attacker tried, what happened with the figures measured, and whether the defence holds.
Also the matrix's row type and the two formatters every row uses. Run through ``python3 bench/hostile.py``.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from provisioner.contracts import board as on_board
from provisioner.fleet.shared.onboard import SERVE_SCRIPT, serve
from provisioner.sim import cstandins
from tests.fleet.simfleet import free_port
from tests.serve.conftest import BOARDLESS, TOKEN, Board

Result = tuple[str, str, bool]          # what the attacker tried, what happened, holds


def counts(c: Counter) -> str:
    return ", ".join(f"{k} x{n}" for k, n in sorted(c.items(), key=str)) or "none"


def size(n: float) -> str:
    """Bytes in the unit that reads best (B, KiB, MiB, GiB)."""
    for unit in ("B", "KiB", "MiB"):
        if abs(n) < 1024:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.2f} GiB"


def start_service(work: Path, name: str, **cfg_extra: Any) -> Board:
    """edge-llm-serve as the board runs it (its own process) on the simulator's stand-in LiteRT-LM library."""
    mdir = work / name
    mdir.mkdir(parents=True)
    (mdir / "m.litertlm").write_bytes(b"LITERTLM")
    token = work / f"{name}.token"
    token.write_text(TOKEN + "\n")
    token.chmod(0o600)
    cfg = {"model": "gemma-4-e2b", "runtime": "litert_lm", "model_dir": str(mdir),
           "executable": str(work / "bin" / "runtime"),
           "library": str(cstandins.build(cstandins.LITERT_LM, on_board.LITERT_QAIRT)),
           "port": free_port(), "bind": "127.0.0.1", "token_file": str(token), "model_file": "m.litertlm",
           "chat_template": "gemma", **cfg_extra}
    cfg_path = work / f"{name}.json"
    cfg_path.write_text(json.dumps(cfg))
    log = work / f"{name}.log"
    env = {k: v for k, v in os.environ.items() if k != BOARDLESS} | {BOARDLESS: ""}
    with log.open("w") as err:
        proc = subprocess.Popen([sys.executable, str(SERVE_SCRIPT), "serve", "--config", str(cfg_path)],
                                stdout=subprocess.DEVNULL, stderr=err, env=env)
    board = Board(proc, cfg["port"], TOKEN, log, cfg_path)
    try:
        board.wait_ready()
    except AssertionError as exc:
        board.stop()
        raise RuntimeError(str(exc)) from None
    return board


def status_kb(pid: int, field: str) -> int:
    """A /proc/PID/status figure in kB (VmRSS, VmHWM)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field} for pid {pid}")


def exchange(port: int, data: bytes, rcvbuf: int | None = None, timeout: float = 30) -> bytes:
    """Send ``data`` on a fresh connection; the whole reply (up to the server's close)."""
    s = socket.socket()
    if rcvbuf:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.settimeout(timeout)
    with s:
        s.connect(("127.0.0.1", port))
        s.sendall(data)
        out = b""
        try:
            while chunk := s.recv(65536):
                out += chunk
        except ConnectionResetError:
            pass
        return out


def status_of(reply: bytes) -> int:
    return int(reply.split(b" ", 2)[1]) if reply.startswith(b"HTTP/1.1 ") else 0


def parse_reply(reply: bytes) -> tuple[int, int, bytes]:
    """(status, the Content-Length it announced or -1, the body bytes that arrived)."""
    head, _, body = reply.partition(b"\r\n\r\n")
    length = next((int(ln.split(b":")[1]) for ln in head.split(b"\r\n") if ln.lower().startswith(b"content-length:")),
                  -1)
    return status_of(reply), length, body


def metric_bomb(work: Path) -> Result:
    svc = start_service(work, "metrics")
    try:
        pid = svc.proc.pid
        before = status_kb(pid, "VmRSS")

        def probe(i: int) -> int:
            method, kind = ("GET", "probe") if i % 2 else ("POST", "nope")     # 401 (no token) and 404
            path = f"/{kind}-{i}-" + "p" * 16000
            return status_of(exchange(svc.port, f"{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                                                f"Content-Length: 0\r\n\r\n".encode()))

        t0 = time.monotonic()
        with ThreadPoolExecutor(4) as pool:
            statuses = Counter(pool.map(probe, range(8000)))
        secs = time.monotonic() - t0
        after = status_kb(pid, "VmRSS")
        Path(f"/proc/{pid}/clear_refs").write_text("5")           # the peak (VmHWM) starts again from now
        reply = exchange(svc.port, f"GET /metrics HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n"
                                   "Connection: close\r\n\r\n".encode(), timeout=300)
        peak = status_kb(pid, "VmHWM")
    finally:
        svc.stop()
    status, length, body = parse_reply(reply)
    labels = set(re.findall(rb'endpoint="([^"]*)"', body))
    known = {r.encode() for r in (*serve.ROUTES, serve.OTHER)} | {b"(connection cap)", b"(handler cap)"}
    leaked = b"probe-" in body or b"nope-" in body
    shown = b", ".join(sorted(labels)).decode() if len(labels) <= len(known) else "one per attacker path"
    return ("8,000 requests without a token, paths of 16,000 bytes (GET: 401, POST: 404), then one /metrics read",
            f"answers {counts(statuses)} in {secs:.1f} s; RSS {before / 1024:.0f} MB -> {after / 1024:.0f} MB, "
            f"peak {peak / 1024:.0f} MB during /metrics ({status}, {size(len(body))} of {size(length)} arrived); "
            f"{len(labels)} endpoint labels ({shown}); attacker paths in /metrics: {'YES' if leaked else 'none'}",
            not leaked and labels <= known and status == 200 and len(body) == length)


def oversized_heads(work: Path) -> Result:
    svc = start_service(work, "heads")
    try:
        got = {}
        for n in (16_385, 30_000, 60_000):
            start = b"GET /health HTTP/1.1\r\nHost: x\r\nX-Pad: "
            head = start + b"a" * (n - len(start) - 4) + b"\r\n\r\n"
            got[n] = status_of(exchange(svc.port, head))
        alive = status_of(exchange(svc.port, b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"))
    finally:
        svc.stop()
    return ("GET /health with a head of 16,385 / 30,000 / 60,000 bytes, each in one write (limit 16 KiB)",
            "answers " + ", ".join(f"{n:,} B: {c or 'no reply'}" for n, c in got.items()) + f"; /health after: {alive}",
            all(c == 431 for c in got.values()) and alive == 200)


def large_reply(work: Path) -> Result:
    wmem_max = int(Path("/proc/sys/net/ipv4/tcp_wmem").read_text().split()[2])
    n = 2 * wmem_max + (1 << 20)          # more than one send() can queue
    svc = start_service(work, "reply", max_body_bytes=n + 4096)
    try:
        body = json.dumps({"model": "m" * n, "prompt": "x"}).encode()    # the 404 names the model: a big reply
        reply = exchange(svc.port, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                         + f"Authorization: Bearer {TOKEN}\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body,
                         rcvbuf=65536)
    finally:
        svc.stop()
    status, length, payload = parse_reply(reply)
    return (f"a completion for a model named by {size(n)} of text (the 404 repeats it), read through a "
            "64 KiB receive window",
            f"status {status}; {len(payload):,} of {length:,} bytes arrived",
            length > n and len(payload) == length)
