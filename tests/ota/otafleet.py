"""OSTree helpers for the update-os tests: releases built and published the way a user does it.

A release's commit comes from the simulated build (:func:`provisioner.sim.ostree_image.build_commit`,
meta-updater's IMAGE_CMD:ostree/ostreecommit with the real ``ostree``), is collected into the release
folder as ``build`` does, and goes into the served repository through ``provisioner ota publish``
(which adds the static delta from the commit the branch named before). Tests only.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from provisioner import context
from provisioner.rehearse_ota import image_tree as rehearse_image_tree
from provisioner.rehearse_ota import keep_board_etc
from provisioner.sim import host, ostree_board
from tests.fleet.artserver import ArtifactServer
from tests.fleet.simfleet import SimFleet

BRANCH = "iq-8275-evk"           # OSTREE_BRANCHNAME ?= SOTA_HARDWARE_ID ??= MACHINE (meta-updater sota.bbclass)
IMAGE = "qcom-multimedia-image"
SIM_VARS = {"edge_llm_update_os_reboot_command": "/run/edge-llm-sim/reboot",
            "edge_llm_update_os_reboot_timeout": 40}


def ostree(*args: str) -> str:
    return subprocess.run(["ostree", *args], check=True, capture_output=True, text=True).stdout.strip()


def image_tree(rootfs: Path, work: Path, build_id: str, extra: dict[str, bytes] | None = None) -> Path:
    """The image rootfs a sota build would commit from the board's rootfs, with this BUILD_ID and ``extra``
    files: :func:`provisioner.rehearse_ota.image_tree` (the kernel where meta-updater puts it, no /opt, and
    nothing that is the board's own: the host key it made at first boot, a token launch wrote)."""
    return rehearse_image_tree(rootfs, work / f"image-{build_id}", build_id, extra or {})


def build_release(base: Path, build_id: str, tree: Path) -> tuple[Path, str]:
    """A release folder as `build` leaves it (release.json ``ota`` + the tarball); (folder, commit).
    Successive builds share ``base/build`` like the deploy folder's ostree_repo (the new commit's parent
    is the previous one)."""
    from provisioner.ota.commit import collect
    from provisioner.sim.ostree_image import build_commit

    tarball, commit, _ = build_commit(tree, base / "build", base / f"deploy-{build_id}", image=IMAGE,
                                      machine=BRANCH)
    rel = base / f"rel-{build_id}"
    rel.mkdir(parents=True, exist_ok=True)
    ota = collect(tarball, rel, BRANCH, env=context.current().env)
    (rel / "release.json").write_text(json.dumps({"format": 1, "release": build_id, "board": BRANCH, "ota": ota}))
    return rel, commit


def publish(release: Path, repo: Path) -> str:
    """``provisioner ota publish RELEASE --repo DIR``, as a user runs it; returns its output."""
    proc = subprocess.run([sys.executable, "-m", "provisioner", "ota", "publish", str(release), "--repo", str(repo)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def make_ota_boards(fleet: SimFleet, repo: Path, commit: str, skip: tuple[str, ...] = ()) -> None:
    """Turn every board of ``fleet`` into an OSTree board running ``commit`` (a sota flash). The board keeps
    its own /etc (owners, and a token launch wrote), as the rehearsal's boards do
    (provisioner.rehearse_ota.keep_board_etc says why), so its service does not restart in a loop."""
    for name, b in fleet.boards.items():
        if name in skip:                 # stays a board flashed without OSTree
            continue
        host.stop_host(b)
        ostree_board.init_sysroot(b, repo, BRANCH, commit)
        keep_board_etc(b.rootfs_dir, ostree_board.sysroot(b) / "ostree/deploy" / ostree_board.OSNAME / "deploy")
        host.start_host(b, time_scale=0.0)


def full_commit_size(repo: Path, commit: str, work: Path) -> int:
    """Bytes a board without a delta would fetch: every object of ``commit``, as stored in an archive repo."""
    alone = work / f"full-{commit[:12]}"
    if not (alone / "config").exists():
        ostree(f"--repo={alone}", "init", "--mode=archive")
        ostree(f"--repo={alone}", "pull-local", str(repo), commit)
    return sum(f.stat().st_size for f in (alone / "objects").rglob("*") if f.is_file())


def unfreeze(path: Path) -> None:
    """``chattr -R -i``: ``ostree admin deploy`` makes deployments immutable, so pytest's tmp (and a
    bench's work dir) could never be removed; call at teardown."""
    subprocess.run(["chattr", "-R", "-i", str(path)], check=False, capture_output=True)


@contextlib.contextmanager
def serving(fleet: SimFleet, base: Path, repo: Path) -> Iterator[ArtifactServer]:
    """``repo`` served over HTTP to a started OTA fleet; at the end the server closes, the boards stop
    and ``base`` is unfrozen, whatever the test did."""
    server = ArtifactServer(repo)
    try:
        yield server
    finally:
        server.close()
        fleet.stop()
        unfreeze(base)


def deployments(fleet: SimFleet, name: str) -> list[str]:
    """Checksums of the board's deployments (what `ostree admin status` lists)."""
    d = ostree_board.sysroot(fleet.boards[name]) / "ostree/deploy" / ostree_board.OSNAME / "deploy"
    return sorted(p.name.split(".")[0] for p in d.iterdir() if p.is_dir()) if d.is_dir() else []


def booted(fleet: SimFleet, name: str) -> str:
    b = fleet.boards[name].reload()
    return ((b.data.get("ostree") or {}).get("booted") or {}).get("checksum", "")


def record(fleet: SimFleet, name: str) -> dict:
    """The board's update-os record (its /var/lib/edge-llm/update-os.json, in the stateroot's /var)."""
    var = ostree_board.sysroot(fleet.boards[name]) / "ostree/deploy" / ostree_board.OSNAME / "var"
    f = var / "lib/edge-llm/update-os.json"
    return json.loads(f.read_text()) if f.is_file() else {}
