"""`provisioner ota publish`: a static archive repo, deltas from what boards run, refusals in one line."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.ota.conftest import MACHINE, make_release, needs_ostree, rootfs

pytestmark = needs_ostree


def _ostree(*args: object) -> str:
    return subprocess.run(["ostree", *map(str, args)], capture_output=True, text=True, check=True).stdout


@pytest.fixture
def two_releases(tmp_path: Path) -> tuple[Path, Path]:
    work = tmp_path / "build-work"
    model = os.urandom(256 * 1024)
    r1 = make_release(tmp_path, "r1", rootfs(tmp_path / "t1", runtime=os.urandom(64 * 1024), model=model), work)
    r2 = make_release(tmp_path, "r2", rootfs(tmp_path / "t2", runtime=os.urandom(64 * 1024), model=model), work)
    return r1, r2


def test_publish_then_update_adds_a_delta_from_what_the_fleet_ran(cli, tmp_path: Path, two_releases) -> None:
    r1, r2 = two_releases
    repo = tmp_path / "srv"
    first = cli("ota", "publish", r1, "--repo", repo, "--json")
    assert first.code == 0, first.err
    c1 = json.loads(first.out)["commit"]
    assert json.loads(first.out)["deltas_from"] == []
    second = cli("ota", "publish", r2, "--repo", repo, "--json")
    assert second.code == 0, second.err
    c2 = json.loads(second.out)["commit"]
    assert json.loads(second.out)["deltas_from"] == [c1]
    assert _ostree("rev-parse", f"--repo={repo}", MACHINE).strip() == c2
    assert _ostree("rev-parse", f"--repo={repo}", "edge-llm/releases/r1").strip() == c1
    assert f"{c1}-{c2}" in _ostree("static-delta", "list", f"--repo={repo}")
    assert "mode=archive" in (repo / "config").read_text()
    assert (repo / "summary").is_file()
    index = json.loads((repo / "edge-llm-ota.json").read_text())
    assert index["releases"]["r2"] == {"commit": c2, "branch": MACHINE, "deltas_from": [c1], "signed": None}


def test_a_board_pulls_the_delta_over_static_files(cli, tmp_path: Path, two_releases) -> None:
    r1, r2 = two_releases
    repo = tmp_path / "srv"
    assert cli("ota", "publish", r1, "--repo", repo).code == 0
    board = tmp_path / "board-repo"
    _ostree("init", f"--repo={board}", "--mode=bare-user")
    _ostree("remote", "add", f"--repo={board}", "--no-gpg-verify", "fleet", f"file://{repo}")
    _ostree("pull", f"--repo={board}", "fleet", MACHINE)
    assert cli("ota", "publish", r2, "--repo", repo).code == 0
    # --require-static-deltas: ostree fails rather than fetch loose objects, so success means the delta
    pulled = subprocess.run(["ostree", "pull", f"--repo={board}", "--require-static-deltas", "fleet", MACHINE],
                            capture_output=True, text=True)
    assert pulled.returncode == 0, pulled.stderr
    assert _ostree("rev-parse", f"--repo={board}", f"fleet:{MACHINE}").strip() == \
        _ostree("rev-parse", f"--repo={repo}", MACHINE).strip()


def test_republishing_is_idempotent_and_a_release_id_names_one_commit(cli, tmp_path: Path, two_releases) -> None:
    r1, r2 = two_releases
    repo = tmp_path / "srv"
    assert cli("ota", "publish", r1, "--repo", repo).code == 0
    again = cli("ota", "publish", r1, "--repo", repo, "--json")
    assert again.code == 0 and json.loads(again.out)["deltas_from"] == []
    # r2's folder relabelled as r1: same id, other commit
    data = json.loads((r2 / "release.json").read_text())
    (r2 / "release.json").write_text(json.dumps({**data, "release": "r1"}))
    clash = cli("ota", "publish", r2, "--repo", repo)
    assert clash.code == 2 and "already published as" in clash.err and len(clash.err.strip().splitlines()) == 1


def test_refusals_are_one_line(cli, tmp_path: Path, two_releases) -> None:
    r1, _ = two_releases
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "release.json").write_text(json.dumps({"format": 1, "release": "x"}))
    res = cli("ota", "publish", plain, "--repo", tmp_path / "srv")
    assert res.code == 2 and "has no OSTree commit" in res.err
    res = cli("ota", "publish", r1, "--repo", tmp_path / "srv", "--from", "0" * 64)
    assert res.code == 2 and "--from" in res.err and "not in" in res.err
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "index.html").write_text("x")
    res = cli("ota", "publish", r1, "--repo", busy)
    assert res.code == 2 and "not an OSTree repository" in res.err
    (r1 / "ostree/ostreecommit.tar.xz").write_bytes(b"broken")
    res = cli("ota", "publish", r1, "--repo", tmp_path / "srv2")
    assert res.code == 2 and "sha256 differs" in res.err


def test_ed25519_key_file_is_refused_by_an_ostree_without_keys_file(cli, tmp_path: Path, two_releases) -> None:
    r1, _ = two_releases
    if "--keys-file" in subprocess.run(["ostree", "sign", "--help"], capture_output=True, text=True).stdout:
        pytest.skip("this ostree reads ed25519 keys from files")
    key = tmp_path / "ed25519.key"
    key.write_text("c2VjcmV0\n")
    res = cli("ota", "publish", r1, "--repo", tmp_path / "srv", "--ed25519-key-file", key)
    assert res.code == 2 and "--gpg-key-file" in res.err and "c2VjcmV0" not in res.err
    assert not (tmp_path / "srv").exists()


@pytest.mark.skipif(shutil.which("gpg") is None, reason="needs gpg")
def test_gpg_key_file_signs_commit_and_summary(cli, tmp_path: Path, two_releases) -> None:
    r1, _ = two_releases
    home = tmp_path / "gnupg"
    home.mkdir(mode=0o700)
    env = {"PATH": os.environ["PATH"], "GNUPGHOME": str(home)}
    subprocess.run(["gpg", "--batch", "--passphrase", "", "--quick-gen-key", "ota@example.com", "ed25519", "sign",
                    "never"], env=env, check=True, capture_output=True)
    key = tmp_path / "ota-signing.asc"
    key.write_bytes(subprocess.run(["gpg", "--batch", "--armor", "--export-secret-keys"], env=env, check=True,
                                   capture_output=True).stdout)
    repo = tmp_path / "srv"
    res = cli("ota", "publish", r1, "--repo", repo, "--gpg-key-file", key, "--json")
    assert res.code == 0, res.err
    commit = json.loads(res.out)["commit"]
    assert json.loads(res.out)["signed"] == "gpg" and (repo / "summary.sig").is_file()
    pub = tmp_path / "ota.pub"
    pub.write_bytes(subprocess.run(["gpg", "--batch", "--export"], env=env, check=True, capture_output=True).stdout)
    board = tmp_path / "board-repo"
    _ostree("init", f"--repo={board}", "--mode=bare-user")
    _ostree("remote", "add", f"--repo={board}", f"--gpg-import={pub}", "--set=gpg-verify-summary=true", "fleet",
            f"file://{repo}")
    _ostree("pull", f"--repo={board}", "fleet", MACHINE)      # gpg-verify is on: fails on a bad signature
    assert _ostree("rev-parse", f"--repo={board}", f"fleet:{MACHINE}").strip() == commit
    assert key.read_text() not in json.dumps(json.loads(res.out))
    subprocess.run(["gpgconf", "--homedir", str(home), "--kill", "all"], env=env, capture_output=True)


def test_ostree_gets_the_runs_path_and_none_of_its_secrets(tmp_path: Path, two_releases) -> None:
    """publish() runs ostree with the environment the CLI edge passed in, cut to PATH/locale/HOME."""
    from provisioner import context
    from provisioner.ota.publish import publish

    r1, _ = two_releases
    bindir = tmp_path / "run-bin"
    bindir.mkdir()
    seen = tmp_path / "ostree-env.txt"
    wrapper = bindir / "ostree"
    wrapper.write_text(f"#!/bin/sh\nenv >> {seen}\necho --- >> {seen}\nexec {shutil.which('ostree')} \"$@\"\n")
    wrapper.chmod(0o755)
    run_env = {"PATH": f"{bindir}:{os.defpath}", "HOME": str(tmp_path), "LANG": "C.UTF-8",
               "PROVISIONER_HTTP_TOKEN": "tok-s3cret", "PROVISIONER_CONSOLE_PASSWORD": "root-pw"}
    result = publish(r1, tmp_path / "srv", context.RunContext(run_env))
    assert result.release == "r1"
    text = seen.read_text()                            # the run's PATH found the wrapper: ostree ran through it
    assert text.count("---") >= 3 and f"PATH={bindir}:" in text
    assert "s3cret" not in text and "root-pw" not in text and "PROVISIONER_" not in text


def test_a_foreign_index_file_is_one_line(cli, tmp_path: Path, two_releases) -> None:
    """A hand-edited edge-llm-ota.json that is JSON but not our object stops publish with the file named."""
    r1, _ = two_releases
    srv = tmp_path / "srv"
    assert cli("ota", "publish", r1, "--repo", srv).code == 0
    (srv / "edge-llm-ota.json").write_text("[1, 2]\n")
    res = cli("ota", "publish", r1, "--repo", srv)
    assert res.code == 2 and "edge-llm-ota.json: not an edge-llm OTA index" in res.err


def test_a_damaged_index_stops_publish_before_anything_moves(cli, tmp_path: Path, two_releases) -> None:
    """A cut-off edge-llm-ota.json (a full disk, a bad copy) is refused, not silently replaced by an index
    that forgets every release before this one; the repository is left as it was."""
    r1, r2 = two_releases
    srv = tmp_path / "srv"
    first = cli("ota", "publish", r1, "--repo", srv, "--json")
    assert first.code == 0, first.err
    index = srv / "edge-llm-ota.json"
    damaged = index.read_bytes()[:20]
    index.write_bytes(damaged)
    res = cli("ota", "publish", r2, "--repo", srv)
    assert res.code == 2 and len(res.err.strip().splitlines()) == 1, res.err
    assert "edge-llm-ota.json: damaged" in res.err and "move it away" in res.err
    assert index.read_bytes() == damaged
    assert _ostree("rev-parse", f"--repo={srv}", MACHINE).strip() == json.loads(first.out)["commit"]
