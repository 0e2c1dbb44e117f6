"""Collecting a finished build: the flash bundle, the layer commits kas checked out, the versions.

The release directory itself is written by :mod:`provisioner.image.release`; this module finds
what goes into it in the build folders.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import yaml

from provisioner.contracts.release import OSTREE_TARBALL_SUFFIX, ostree_tarball_name
from provisioner.errors import BuildError
from provisioner.image.bitbake_log import BitbakeProgress


def versions(progress: BitbakeProgress) -> dict[str, str | None]:
    """Tool and distro versions of this build (provisioner, kas, bitbake, distro) for release.json."""
    from provisioner import __version__

    try:
        from kas import __version__ as kas_version
    except ImportError:  # pragma: no cover - kas is a dependency
        kas_version = None
    c = progress.config
    return {"provisioner": __version__, "kas": kas_version, "bitbake": c.get("BB_VERSION"),
            "distro": c.get("DISTRO"), "distro_version": c.get("DISTRO_VERSION"), "target_sys": c.get("TARGET_SYS")}


def find_bundle(build_dir: Path, machine: str, image: str | None) -> Path:
    """The ``.qcomflash.tar.gz`` bitbake wrote for ``machine`` (the newest if several images were built)."""
    found: list[Path] = []
    for tmp in sorted(build_dir.glob("tmp*")):
        deploy = tmp / "deploy" / "images" / machine
        found += [p for p in deploy.glob("*.qcomflash.tar.gz") if p.is_file() or p.is_symlink()]
    if image:
        mine = [p for p in found if p.name.startswith(f"{image}-{machine}")]
        found = mine or found
    if not found:
        raise BuildError(f"no .qcomflash.tar.gz in {build_dir}/tmp/deploy/images/{machine}/",
                         "the image must inherit image_types_qcom with IMAGE_FSTYPES += \"qcomflash\"")
    return max(found, key=lambda p: p.stat().st_mtime).resolve()


def find_ostree_commit(build_dir: Path, machine: str, image: str) -> Path:
    """The ``<image>-<machine>.rootfs.ostreecommit.tar.xz`` a sota build wrote (link name, else the newest dated)."""
    name = ostree_tarball_name(image, machine)
    found: list[Path] = []
    for tmp in sorted(build_dir.glob("tmp*")):
        deploy = tmp / "deploy" / "images" / machine
        if (deploy / name).is_file():
            return (deploy / name).resolve()
        found += [p for p in deploy.glob(f"{image}-{machine}.rootfs-*{OSTREE_TARBALL_SUFFIX}") if p.is_file()]
    if not found:
        raise BuildError(f"image.ota is ostree but {build_dir}/tmp/deploy/images/{machine}/{name} was not written",
                         "the sota distro writes it with BUILD_OSTREE_REPO_TARBALL = \"1\" (meta-qcom-distro "
                         "qcom-distro-sota.inc); check that render chained ci/qcom-distro-sota.yml and the log's "
                         "do_image_ostreecommit")
    return max(found, key=lambda p: p.name).resolve()


def layer_commits(work_dir: Path) -> dict[str, str]:
    """``{repo: HEAD commit}`` of every git checkout kas made in the work folder."""
    out: dict[str, str] = {}
    if not work_dir.is_dir():
        return out
    for d in sorted(work_dir.iterdir()):
        if not (d / ".git").exists():
            continue
        r = subprocess.run(["git", "-C", str(d), "rev-parse", "HEAD"], capture_output=True, text=True,
                           stdin=subprocess.DEVNULL)
        if r.returncode == 0 and r.stdout.strip():
            out[d.name] = r.stdout.strip()
    return out


def write_actual_lock(work_dir: Path, dest_dir: Path, kas_file: Path) -> Path | None:
    """A kas lock (``overrides: repos: X: commit:``) of what was really checked out, or None."""
    commits = layer_commits(work_dir)
    if not commits:
        return None
    dest_dir.mkdir(parents=True, exist_ok=True)
    path = dest_dir / f"{kas_file.stem}.lock.yml"
    data = {"header": {"version": 14}, "overrides": {"repos": {k: {"commit": v} for k, v in commits.items()}}}
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text("# written by provisioner build: the layer commits this release was built from\n"
                   + yaml.safe_dump(data, sort_keys=True), encoding="utf-8")
    os.replace(tmp, path)
    return path


