"""`ota publish` refuses a commit that carries a secret, and the rehearsal's image never bakes the board's token.

A published repository is static files anyone who reaches the URL can read, so a token or private key in
the commit is handed to them: publish names the file and publishes nothing.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.ota.conftest import MACHINE, make_release, needs_ostree, rootfs

pytestmark = needs_ostree

TOKEN = "0123456789abcdef0123456789abcdef"


def _ssh_key(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)
    return path


def _launched_rootfs(tree: Path) -> Path:
    """A board rootfs after `fleet launch`: the API token in /etc/edge-llm/serve, 0600 (as launch writes it)."""
    rootfs(tree, runtime=os.urandom(1024), model=os.urandom(1024))
    token = tree / "etc/edge-llm/serve/api-token"
    token.parent.mkdir(parents=True)
    token.write_text(TOKEN + "\n")
    token.chmod(0o600)
    return tree


def _plant(tree: Path, case: str) -> str:
    """Put one secret in the image tree; return the path the commit holds it under."""
    if case == "token":
        _launched_rootfs(tree)
        return "/usr/etc/edge-llm/serve/api-token"            # meta-updater moves /etc to /usr/etc
    if case == "host key":
        rootfs(tree, runtime=b"r", model=b"m")
        _ssh_key(tree / "etc/ssh/ssh_host_ed25519_key")
        (tree / "etc/ssh/ssh_host_ed25519_key").write_text("not PEM: the name alone says what it is\n")
        return "/usr/etc/ssh/ssh_host_ed25519_key"
    if case == "identity":
        rootfs(tree, runtime=b"r", model=b"m")
        _ssh_key(tree / "usr/share/factory/.ssh/id_ed25519")
        return "/usr/share/factory/.ssh/id_ed25519"
    rootfs(tree, runtime=b"r", model=b"m")                  # a key under a name that says nothing
    _ssh_key(tree / "usr/share/edge-llm/k").rename(tree / "usr/share/edge-llm/backup.dat")
    return "/usr/share/edge-llm/backup.dat"


@pytest.mark.parametrize("case", ["token", "host key", "identity", "key by content"])
def test_publish_refuses_a_commit_holding_a_secret_and_names_the_file(cli, tmp_path: Path, case: str) -> None:
    where = _plant(tmp_path / "tree", case)
    release = make_release(tmp_path, "r1", tmp_path / "tree", tmp_path / "work")
    repo = tmp_path / "srv"
    res = cli("ota", "publish", release, "--repo", repo)
    assert res.code == 2, res.out + res.err
    assert len(res.err.strip().splitlines()) == 1 and where in res.err, res.err
    assert TOKEN not in res.err and "PRIVATE KEY" not in res.err
    # nothing of the commit reached the served folder: no object, no ref, no index entry
    objects = [p for p in (repo / "objects").rglob("*") if p.is_file()] if (repo / "objects").is_dir() else []
    assert objects == [] and not (repo / "edge-llm-ota.json").exists()


def test_public_keys_are_not_secrets(cli, tmp_path: Path) -> None:
    tree = rootfs(tmp_path / "tree", runtime=b"r", model=b"m")
    key = _ssh_key(tmp_path / "keys/id_ed25519")
    (tree / "etc/ssh").mkdir(parents=True)
    (tree / "etc/ssh/ssh_host_ed25519_key.pub").write_text(key.with_suffix(".pub").read_text())
    (tree / "usr/share/edge-llm/authorized_keys").write_text(key.with_suffix(".pub").read_text())
    release = make_release(tmp_path, "r1", tree, tmp_path / "work")
    res = cli("ota", "publish", release, "--repo", tmp_path / "srv")
    assert res.code == 0, res.err


def test_the_token_paths_publish_knows_are_the_ones_the_fleet_and_the_service_use() -> None:
    """publish (stage 4) cannot import the fleet (stage 5): the token's path is checked equal here."""
    from provisioner.contracts.board import TOKEN_FILE
    from provisioner.fleet.shared.serve_config import TOKEN_DIR_NAME
    from provisioner.ota import secrets

    assert secrets.TOKEN_FILES == (TOKEN_FILE,)
    assert secrets.CONTROLLER_TOKEN_DIR == TOKEN_DIR_NAME
    layer = Path(__file__).resolve().parents[2] / "layers/meta-edge-llm"
    service = layer / "recipes-ai/edge-llm-serve/files/edge_llm_serve/config.py"     # the service's DEFAULTS
    assert f'"token_file": "{TOKEN_FILE}"' in service.read_text()


def test_the_rehearsals_release_of_a_launched_board_holds_no_token_and_publishes(cli, tmp_path: Path) -> None:
    """The rehearsal commits the rootfs of boards `fleet launch` already ran on; the token launch wrote is the
    board's own state, not the image's, so the release publishes and the token is nowhere in the repo."""
    from provisioner.rehearse_ota import image_tree

    tree = image_tree(_launched_rootfs(tmp_path / "board-rootfs"), tmp_path / "image", "r1", {})
    release = make_release(tmp_path, "r1", tree, tmp_path / "work")
    repo = tmp_path / "srv"
    res = cli("ota", "publish", release, "--repo", repo, "--json")
    assert res.code == 0, res.err
    commit = json.loads(res.out)["commit"]
    listing = subprocess.run(["ostree", f"--repo={repo}", "ls", "-R", commit], capture_output=True, text=True,
                             check=True).stdout
    assert "api-token" not in listing and f"{MACHINE}" == json.loads(res.out)["branch"]


def test_an_ostree_board_keeps_the_token_launch_wrote_in_its_etc(tmp_path: Path) -> None:
    """What the image no longer carries, the board's deployment has: the token in its /etc, private to the
    service user as launch left it (on a real board launch writes into the deployment's /etc, and
    `ostree admin deploy` carries it on: the /etc 3-way merge, ostree-admin-deploy(1))."""
    from provisioner.rehearse_ota import image_tree, keep_board_etc
    from provisioner.sim.ostree_image import build_commit

    board = _launched_rootfs(tmp_path / "board-rootfs")
    os.chown(board / "etc/edge-llm/serve/api-token", 4242, 4242)
    tree = image_tree(board, tmp_path / "image", "r1", {})
    _, commit, _ = build_commit(tree, tmp_path / "work", tmp_path / "deploy", image="img", machine=MACHINE)
    sysroot = tmp_path / "sysroot"
    sysroot.mkdir()
    for args in (["admin", "init-fs", str(sysroot)], ["admin", f"--sysroot={sysroot}", "os-init", "nodistro"],
                 [f"--repo={sysroot}/ostree/repo", "pull-local", str(tmp_path / "work/ostree_repo"), commit],
                 ["admin", f"--sysroot={sysroot}", "deploy", "--os=nodistro", commit]):
        subprocess.run(["ostree", *args], check=True, capture_output=True)
    deploy_dir = sysroot / "ostree/deploy/nodistro/deploy"
    try:
        keep_board_etc(board, deploy_dir)
        token = next(deploy_dir.glob("*.0")) / "etc/edge-llm/serve/api-token"
        st = token.stat()
        assert token.read_text().strip() == TOKEN
        assert (st.st_mode & 0o777, st.st_uid, st.st_gid) == (0o600, 4242, 4242)
    finally:
        subprocess.run(["chattr", "-R", "-i", str(sysroot)], check=False, capture_output=True)
