"""OSTree helpers for the update-os tests: commits of the synthetic rootfs, a published repo, OTA boards.

Built with the real ``ostree`` CLI, the way meta-updater's image_types_ostree.bbclass lays a commit
out (``/etc`` moved to ``/usr/etc``, the kernel under ``/usr/lib/modules/<version>/``). Tests only.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

from provisioner.sim import host, ostree_board
from tests.fleet.simfleet import SimFleet

BRANCH = "iq-8275-evk"
SIM_VARS = {"edge_llm_update_os_sysroot": "/run/edge-llm-sim/sysroot",
            "edge_llm_update_os_reboot_command": "/run/edge-llm-sim/reboot",
            "edge_llm_update_os_reboot_timeout": 40}


def ostree(*args: str) -> str:
    return subprocess.run(["ostree", *args], check=True, capture_output=True, text=True).stdout.strip()


def commit_tree(rootfs: Path, work: Path, repo: Path, build_id: str, extra: dict[str, bytes] | None = None) -> str:
    """Commit ``rootfs`` (BUILD_ID set, ``extra`` files added) to the archive repo ``repo``."""
    tree = work / f"tree-{build_id}"
    shutil.rmtree(tree, ignore_errors=True)
    shutil.copytree(rootfs, tree, symlinks=True)
    (tree / "usr").mkdir(exist_ok=True)
    osr = tree / "etc/os-release"
    if osr.is_symlink():
        osr.unlink()
    text = osr.read_text() if osr.is_file() else 'ID=qcom-distro\n'
    lines = [ln for ln in text.splitlines() if not ln.startswith("BUILD_ID=")] + [f'BUILD_ID="{build_id}"']
    osr.write_text("\n".join(lines) + "\n")
    shutil.move(str(tree / "etc"), str(tree / "usr/etc"))
    shutil.rmtree(tree / "opt", ignore_errors=True)       # /opt stays the board's (not in the commit)
    kdir = tree / "usr/lib/modules/6.6.0-qli"
    kdir.mkdir(parents=True, exist_ok=True)
    (kdir / "vmlinuz").write_bytes(b"synthetic kernel\n" * 64)
    for rel, data in (extra or {}).items():
        (tree / rel).parent.mkdir(parents=True, exist_ok=True)
        (tree / rel).write_bytes(data)
    if not (repo / "config").exists():
        ostree(f"--repo={repo}", "init", "--mode=archive")
    return ostree(f"--repo={repo}", "commit", f"--branch={BRANCH}", f"--tree=dir={tree}",
                  f"--subject=Commit-id: {build_id}", f"--add-metadata-string=version={build_id}")


def publish(repo: Path, from_commit: str, to_commit: str) -> None:
    ostree(f"--repo={repo}", "static-delta", "generate", f"--from={from_commit}", f"--to={to_commit}")
    ostree(f"--repo={repo}", "summary", "-u")


def release_dir(path: Path, build_id: str, commit: str) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "release.json").write_text(json.dumps({"release": build_id, "ota": {
        "kind": "ostree", "branch": BRANCH, "commit": commit}}))
    return path


def make_ota_boards(fleet: SimFleet, repo: Path, commit: str) -> None:
    """Turn every board of ``fleet`` into an OSTree board running ``commit`` (a sota flash)."""
    for b in fleet.boards.values():
        host.stop_host(b)
        ostree_board.init_sysroot(b, repo, BRANCH, commit)
        host.start_host(b, time_scale=0.0)


def full_commit_size(repo: Path, commit: str, work: Path) -> int:
    """Bytes a board without a delta would fetch: every object of ``commit``, as stored in an archive repo."""
    alone = work / f"full-{commit[:12]}"
    if not (alone / "config").exists():
        ostree(f"--repo={alone}", "init", "--mode=archive")
        ostree(f"--repo={alone}", "pull-local", str(repo), commit)
    return sum(f.stat().st_size for f in (alone / "objects").rglob("*") if f.is_file())


def deployments(fleet: SimFleet, name: str) -> list[str]:
    """Checksums of the board's deployments (what `ostree admin status` lists)."""
    d = ostree_board.sysroot(fleet.boards[name]) / "ostree/deploy" / ostree_board.OSNAME / "deploy"
    return sorted(p.name.split(".")[0] for p in d.iterdir() if p.is_dir()) if d.is_dir() else []


def booted(fleet: SimFleet, name: str) -> str:
    b = fleet.boards[name].reload()
    return ((b.data.get("ostree") or {}).get("booted") or {}).get("checksum", "")
