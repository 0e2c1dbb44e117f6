"""Fixtures for the virtual-board host/runtime tests: booted boards reached over real sshd.

One place starts them and one place stops them: a sim root per test module, and a
:class:`Boards` starter whose boards are all stopped when its scope ends (module-wide boards
shared by several tests, or per-test boards for faults that change the board).
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest

from provisioner.sim import host
from provisioner.sim.board import VirtualBoard
from tests.sim.test_host_support import make_board


class Boards:
    """Create booted boards in ``root`` and start their hosts; :meth:`stop_all` stops what it started."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.started: list[VirtualBoard] = []

    def start(self, board_id: str = "iq-8275-evk", faults: tuple[str, ...] = (), *,
              serve_script: str | None = None) -> VirtualBoard:
        vb = make_board(self.root, board_id, faults, serve_script=serve_script)
        self.started.append(vb)
        host.start_host(vb)
        return vb

    def stop_all(self) -> None:
        for vb in reversed(self.started):
            with contextlib.suppress(Exception):   # teardown goes on for the other boards
                host.stop_host(vb)
        self.started.clear()


@pytest.fixture(scope="module")
def host_root(tmp_path_factory):
    """The module's sim root; whatever still runs in it is stopped at the end."""
    r = tmp_path_factory.mktemp("simroot")
    yield r
    host.stop_all(r)


@pytest.fixture(scope="module")
def module_boards(host_root):
    """Boards shared by the tests of a module (e.g. one healthy board)."""
    b = Boards(host_root)
    yield b
    b.stop_all()


@pytest.fixture
def boards(host_root):
    """Boards for one test only (faults that change the board), stopped when it ends."""
    b = Boards(host_root)
    yield b
    b.stop_all()
