"""Each virtual board's own service ports on the shared loopback.

Real boards each have their own address, so every board serves on 8080 + i. Virtual boards share
the host's network namespace, so two boards (or two rehearsals at once) asking for the same
port would collide. Each board therefore gets a block of :data:`BLOCK` ports of its own: chosen
among free ports, claimed machine-wide by a file named after the block in :func:`claims_dir`
(created with ``O_EXCL``, so two processes cannot take the same block), kept across reboots in
``board.json`` (``serve_port_base``), and released when the board's directory is gone (a claim
whose owner directory no longer exists is stale and may be taken).
"""

from __future__ import annotations

import contextlib
import os
import random
import socket
import tempfile
from pathlib import Path

from provisioner.sim.board import VirtualBoard

BLOCK = 10                      # model i of a board listens on base + i
LOW, HIGH = 20000, 32000        # below the kernel's usual ephemeral range (32768-60999)
HOST = "127.0.0.1"


def claims_dir() -> Path:
    d = Path(os.environ.get("PROVISIONER_SIM_PORTS") or Path(tempfile.gettempdir()) / "edge-llm-sim-ports")
    d.mkdir(parents=True, exist_ok=True)
    return d


def port_free(port: int, host: str = HOST) -> bool:
    """Whether ``port`` can be bound on ``host`` now (SO_REUSEADDR, so TIME_WAIT does not count)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def _owner(claim: Path) -> str | None:
    try:
        return claim.read_text(encoding="utf-8").strip()
    except OSError:
        return None


def _claim(base: int, owner: str) -> bool:
    claim = claims_dir() / str(base)
    for _ in range(2):
        try:
            fd = os.open(claim, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            held = _owner(claim)
            if held == owner:
                return True
            if held and Path(held).is_dir():
                return False
            with contextlib.suppress(FileNotFoundError):
                claim.unlink()           # stale: its board directory is gone
            continue
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(owner + "\n")
        return True
    return False


def serve_port_base(board: VirtualBoard) -> int:
    """The first port of ``board``'s block (allocated and claimed on first use, then kept)."""
    board.reload()
    owner = str(board.dir.resolve())
    prev = board.data.get("serve_port_base")
    if isinstance(prev, int) and _claim(prev, owner):
        return prev
    rng = random.Random()
    for _ in range(400):
        base = rng.randrange(LOW, HIGH - BLOCK, BLOCK)
        if all(port_free(base + i) for i in range(BLOCK)) and _claim(base, owner):
            board.update(serve_port_base=base)
            return base
    raise OSError("no free block of service ports on the loopback")

