"""What a board checks of a published commit: no signature (its ostree cannot), only the commit id.

The board's ostree is built without gpgme and without ed25519 (provisioner.ota.publish says where, and
tests/realworld/test_ota_board_ostree.py checks it against meta-updater's bbappend), so publish says plainly
that boards do not check a signature, signed or not. What a board does check is shown here with the real
ostree: pulling ``branch@<commit>`` over HTTP refuses an object that does not hash to what the commit names.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from tests.fleet.artserver import ArtifactServer
from tests.ota.conftest import MACHINE, make_release, needs_ostree, rootfs

pytestmark = needs_ostree


def _release(tmp_path: Path) -> Path:
    tree = rootfs(tmp_path / "t1", runtime=os.urandom(64 * 1024), model=os.urandom(64 * 1024))
    return make_release(tmp_path, "r1", tree, tmp_path / "build-work")


def test_publish_says_boards_check_no_signature(cli, tmp_path: Path) -> None:
    rel = _release(tmp_path)
    text = cli("ota", "publish", rel, "--repo", tmp_path / "srv")
    assert text.code == 0, text.err
    assert "boards do not check signatures" in text.out and "commit id" in text.out
    again = cli("ota", "publish", rel, "--repo", tmp_path / "srv", "--json")
    data = json.loads(again.out)
    assert data["boards_verify"] is False and data["note"].startswith("boards do not check signatures")


def test_a_board_refuses_an_object_that_does_not_match_the_commit_id(cli, tmp_path: Path) -> None:
    repo = tmp_path / "srv"
    assert cli("ota", "publish", _release(tmp_path), "--repo", repo, "--json").code == 0
    commit = json.loads((repo / "edge-llm-ota.json").read_text())["releases"]["r1"]["commit"]
    # someone who can write the web server's files swaps one file object's bytes for another's
    objs = sorted((repo / "objects").rglob("*.filez"), key=lambda p: p.stat().st_size)
    objs[-1].write_bytes(objs[0].read_bytes())
    board = tmp_path / "board"
    ostree = ["ostree", f"--repo={board}"]
    subprocess.run([*ostree, "init", "--mode=bare-user"], check=True)
    server = ArtifactServer(repo)
    try:
        subprocess.run([*ostree, "remote", "add", "--no-gpg-verify", "fleet", server.url], check=True)
        pull = subprocess.run([*ostree, "pull", "fleet", f"{MACHINE}@{commit}"], capture_output=True, text=True)
    finally:
        server.close()
    assert pull.returncode != 0
    assert "Corrupted file object" in pull.stderr, pull.stderr
