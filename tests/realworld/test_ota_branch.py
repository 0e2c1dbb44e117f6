"""update-os's board-type rule against meta-updater's own sota.bbclass at the pin (uptane/meta-updater @ f0e1ccaf)."""

from __future__ import annotations

from provisioner import catalog
from provisioner.fleet.update_os import release_mismatch


def test_a_boards_branch_is_its_machine_as_sota_bbclass_defaults_it(realworld):
    text = (realworld / "upstream/meta-updater-f0e1cca/classes/sota.bbclass").read_text()
    lines = [ln.strip() for ln in text.splitlines()]
    assert 'SOTA_HARDWARE_ID ??= "${MACHINE}"' in lines
    assert 'OSTREE_BRANCHNAME ?= "${SOTA_HARDWARE_ID}"' in lines
    boards = sorted(catalog.boards().values(), key=lambda b: b.id)
    for board in boards:
        assert release_mismatch(board.id, board.id, board.kas_machine) is None
        for other in (b for b in boards if b.id != board.id):
            assert release_mismatch(board.id, board.id, other.kas_machine)        # another machine's branch
            assert release_mismatch(board.id, other.id, other.kas_machine)        # another board's release
