"""Virtual boards' service ports: each board its own block, also across sim roots (two rehearsals)."""

from __future__ import annotations

import shutil
import socket

import pytest

from provisioner.sim import ports
from provisioner.sim.board import VirtualBoard


@pytest.fixture(autouse=True)
def claims(tmp_path, monkeypatch):
    monkeypatch.setenv("PROVISIONER_SIM_PORTS", str(tmp_path / "claims"))


def _board(root, serial: str) -> VirtualBoard:
    return VirtualBoard.create(root, "iq-8275-evk", serial, f"1-{int(serial[-1], 16) + 1}.1")


def test_boards_of_two_rehearsals_never_share_a_port(tmp_path):
    a = [_board(tmp_path / "rehearsal-a", f"0AA94EF{i}") for i in range(3)]
    b = [_board(tmp_path / "rehearsal-b", f"0AA94EF{i}") for i in range(3)]   # same serials, other root
    bases = [ports.serve_port_base(vb) for vb in a + b]
    blocks = [set(range(p, p + ports.BLOCK)) for p in bases]
    assert all(not (x & y) for i, x in enumerate(blocks) for y in blocks[i + 1:])
    assert 8080 not in bases and 18080 not in bases
    assert ports.serve_port_base(a[0]) == bases[0]          # kept: inventories stay valid across reboots


def test_a_block_in_use_is_not_handed_out(tmp_path, monkeypatch):
    # two adjacent free blocks in the allocator's own range (below the ephemeral ports, where the suite's
    # ssh connections come and go); a port of the first is then taken, so only the second may be handed out
    busy = next(b for b in range(ports.LOW, ports.HIGH - 2 * ports.BLOCK, ports.BLOCK)
                if all(ports.port_free(b + i) for i in range(2 * ports.BLOCK)))
    with socket.socket() as s:
        s.bind(("127.0.0.1", busy + 3))
        monkeypatch.setattr(ports, "LOW", busy)
        monkeypatch.setattr(ports, "HIGH", busy + 3 * ports.BLOCK)
        base = ports.serve_port_base(_board(tmp_path / "r", "0BB94EF1"))
    assert base == busy + ports.BLOCK


def test_a_claim_of_a_deleted_board_is_taken_again(tmp_path, monkeypatch):
    old = _board(tmp_path / "old", "0CC94EF1")
    base = ports.serve_port_base(old)
    monkeypatch.setattr(ports, "LOW", base)
    monkeypatch.setattr(ports, "HIGH", base + ports.BLOCK + 1)
    live = _board(tmp_path / "new", "0CC94EF2")
    with pytest.raises(OSError):
        ports.serve_port_base(live)                         # the one block is held by a live board
    shutil.rmtree(old.dir)
    assert ports.serve_port_base(live) == base
