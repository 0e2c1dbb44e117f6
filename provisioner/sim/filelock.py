"""The simulator's one file lock: an exclusive ``flock`` for a block, on the boards and on the host.

Its own module because both sides need it and the board side may import only the standard library
(the service manager stand-in runs under the board's python as root): the host side takes it for the
controller key and known_hosts, the stand-in C libraries' build, the board's service state.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """An exclusive flock on ``path`` (created with its folder) for the block: the one lock helper of the
    simulator, on the boards (stdlib only) and on the host."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


