"""Simulated build side of OTA: a synthetic rootfs becomes a real OSTree commit and ostreecommit.tar.xz.

Done the way meta-updater does it (github.com/uptane/meta-updater @ f0e1ccaf, the commit meta-qcom's
ci/base.lock.yml pins), with the real ``ostree`` CLI and none of the provisioner's own OTA readers:

- ``IMAGE_CMD:ostree`` (classes/image_types_ostree.bbclass): ``etc`` moves to ``usr/etc``; ``sysroot/``
  and ``ostree -> sysroot/ostree`` are created; ``usr/share/sota/branchname`` holds OSTREE_BRANCHNAME;
  ``home``, ``opt``, ``mnt``, ``media``, ``srv`` become links into ``var/rootdirs`` and ``root`` into
  ``var/roothome`` - a non-empty one is deleted with a warning ("Data in 'opt' directory is not
  preserved by OSTree"), which :func:`ostree_rootfs` returns; ``usr/local -> ../var/usrlocal``;
  ``boot/*`` is emptied; a tmpfiles.d file creates the ``var`` targets.
- ``IMAGE_CMD:ostreecommit``: ``ostree init --mode=archive-z2``, then ``ostree commit
  --tree=dir=... --skip-if-unchanged --branch=${OSTREE_BRANCHNAME} --subject="Commit-id: ${IMAGE_NAME}"
  --body="" --add-metadata-string=version=${DISTRO_VERSION}``; the ``tar`` conversion archives the
  repo folder (``-C ${OSTREE_REPO} .``) and oe-core's ``xz`` conversion compresses it, named
  ``${IMAGE_LINK_NAME}.ostreecommit.tar.xz`` = ``<image>-<machine>.rootfs.ostreecommit.tar.xz``
  (oe-core image-artifact-names.bbclass @ 06dd66e6).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tarfile
from pathlib import Path

PERSISTENT_DIRS = ("opt", "mnt", "media", "srv")        # image_types_ostree.bbclass: dirs="opt mnt media srv"
DEFAULT_DISTRO_VERSION = "2.0"


def _rmdir_helper(root: Path, rel: str, dropped: list[str]) -> None:
    """meta-updater's ostree_rmdir_helper: rmdir an empty folder, else warn and delete it."""
    p = root / rel
    if p.is_dir() and not p.is_symlink():
        if any(p.iterdir()):
            dropped.append(rel)
            shutil.rmtree(p)
        else:
            p.rmdir()


def ostree_rootfs(image_rootfs: Path, out: Path, branch: str) -> list[str]:
    """Lay ``image_rootfs`` out as IMAGE_CMD:ostree does into ``out``; returns the folders it dropped."""
    if out.exists():
        shutil.rmtree(out)
    shutil.copytree(image_rootfs, out, symlinks=True)
    # what a real IMAGE_ROOTFS has and the synthetic one lacks: base-files' top-level directories and the
    # usrmerge links (image_types_ostree.bbclass:5 REQUIRED_DISTRO_FEATURES = "usrmerge"); lib64 is the
    # loader path of the simulator's host (x86-64), whose programs the virtual sota board runs
    for d in ("dev", "proc", "sys", "run", "tmp", "boot", "var"):
        (out / d).mkdir(exist_ok=True)
    for link, target in (("bin", "usr/bin"), ("sbin", "usr/sbin"), ("lib", "usr/lib"), ("lib64", "usr/lib64")):
        if not (out / link).exists() and not (out / link).is_symlink():
            os.symlink(target, out / link)
    dropped: list[str] = []
    for rel in ("var/lib", "var/cache"):
        _rmdir_helper(out, rel, dropped)
    var = out / "var"
    if var.is_dir():
        for child in sorted(var.iterdir()):
            if child.name != "local":
                _rmdir_helper(out, f"var/{child.name}", dropped)
    (out / "sysroot").mkdir()
    os.symlink("sysroot/ostree", out / "ostree")
    (out / "usr" / "rootdirs").mkdir(parents=True, exist_ok=True)
    if (out / "etc").exists():
        shutil.move(str(out / "etc"), str(out / "usr" / "etc"))
    tmpfiles = out / "usr/etc/tmpfiles.d/00ostree-tmpfiles.conf"
    tmpfiles.parent.mkdir(parents=True, exist_ok=True)
    lines = ["d /var/rootdirs 0755 root root -"]
    (out / "usr/share/sota").mkdir(parents=True, exist_ok=True)
    (out / "usr/share/sota/branchname").write_text(branch)
    _rmdir_helper(out, "home", dropped)
    os.symlink("var/rootdirs/home", out / "home")
    for d in PERSISTENT_DIRS:
        _rmdir_helper(out, d, dropped)
        lines.append(f"d /var/rootdirs/{d} 0755 root root -")
        os.symlink(f"var/rootdirs/{d}", out / d)
    _rmdir_helper(out, "root", dropped)
    os.symlink("var/roothome", out / "root")
    lines.append("d /var/roothome 0700 root root -")
    _rmdir_helper(out, "usr/local", dropped)
    lines.append("d /var/usrlocal 0755 root root -")
    lines += [f"d /var/usrlocal/{d} 0755 root root -"
              for d in ("bin", "etc", "games", "include", "lib", "man", "sbin", "share", "src")]
    os.symlink("../var/usrlocal", out / "usr/local")
    tmpfiles.write_text("".join(f"{line}\n" for line in lines))
    boot = out / "boot"
    if boot.is_dir():
        for child in boot.iterdir():
            shutil.rmtree(child) if child.is_dir() and not child.is_symlink() else child.unlink()
    return dropped


def _ostree(*args: str) -> str:
    proc = subprocess.run(["ostree", *args], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"sim ostree {' '.join(args[:2])}: {proc.stderr.strip()}")
    return proc.stdout


def commit_tree(ostree_root: Path, repo: Path, *, branch: str, image_name: str,
                version: str = DEFAULT_DISTRO_VERSION) -> str:
    """IMAGE_CMD:ostreecommit: commit ``ostree_root`` to ``branch`` in the archive repo; returns the id."""
    if not (repo / "config").is_file():
        repo.mkdir(parents=True, exist_ok=True)
        _ostree(f"--repo={repo}", "init", "--mode=archive-z2")
    # the real build runs under pseudo, so the tree is root's; --owner-* gives the same result unprivileged
    return _ostree(f"--repo={repo}", "commit", f"--tree=dir={ostree_root}", "--skip-if-unchanged",
                   f"--branch={branch}", f"--subject=Commit-id: {image_name}", "--body=",
                   f"--add-metadata-string=version={version}", "--owner-uid=0", "--owner-gid=0").strip()


def write_tarball(repo: Path, deploy_dir: Path, *, image: str, machine: str) -> Path:
    """The ``tar`` + ``xz`` conversions of the repo folder, under the link name bitbake gives it."""
    deploy_dir.mkdir(parents=True, exist_ok=True)
    out = deploy_dir / f"{image}-{machine}.rootfs.ostreecommit.tar.xz"
    with tarfile.open(out, "w:xz", preset=6) as tf:
        tf.add(repo, arcname=".")
    return out


def build_commit(image_rootfs: Path, work: Path, deploy_dir: Path, *, image: str, machine: str,
                 branch: str | None = None, version: str = DEFAULT_DISTRO_VERSION,
                 datetime: str = "20260101000000") -> tuple[Path, str, list[str]]:
    """Whole simulated path: (tarball, commit id, dropped folders). ``branch`` defaults to the machine.

    ``work/ostree_repo`` persists between calls like the deploy folder's ``ostree_repo``, so a second
    build commits on top of the first (parent set) and the tarball holds both, as a real rebuild does.
    """
    branch = branch or machine                        # OSTREE_BRANCHNAME ?= SOTA_HARDWARE_ID ??= MACHINE
    image_name = f"{image}-{machine}.rootfs-{datetime}"
    dropped = ostree_rootfs(image_rootfs, work / "ostree-rootfs", branch)
    commit = commit_tree(work / "ostree-rootfs", work / "ostree_repo", branch=branch, image_name=image_name,
                         version=version)
    return write_tarball(work / "ostree_repo", deploy_dir, image=image, machine=machine), commit, dropped
