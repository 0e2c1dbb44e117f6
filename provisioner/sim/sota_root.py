"""The root a virtual sota board runs in: its booted OSTree deployment, mounted as a real QLI sota board has it.

Runs inside the board's mount namespace (``provisioner.sim.namespace``) once the namespace's own mounts (``/etc``,
``/dev``, ``/sys``, ``/proc/cmdline``, ``/run``) are built; ends with ``chroot`` into the deployment, so the
board's sshd, services and every Ansible session see ``/`` = the deployment directory. That is what makes the
real ``ostree`` treat the board as booted: ostree compares the device and inode of ``/`` with the sysroot it
is given and with each deployment directory (ostreedev/ostree v2026.1 src/libostree/ostree-sysroot.c:1159-1175
and :898-930; v2022.7 :1036-1059 and :835-845), and only with ``/run/ostree-booted`` present
(``OSTREE_PATH_BOOTED``, src/libostree/ostree-sysroot.h:33). The layout, each from its source:

- ``/`` the deployment; ``/sysroot`` the physical root (image_types_ostree.bbclass:54-56 makes ``sysroot/``
  and ``ostree -> sysroot/ostree`` in the commit); ``/var`` the stateroot's ``var`` (what ostree-prepare-root
  binds there);
- ``/usr`` read-only (an overlay of lower layers only): the deployment's ``/usr`` over the host's (the
  simulator's programs - sshd, python, ostree - come from the host) and a top layer with the simulator's own
  ``systemctl`` and ``ostree`` (:func:`ostree_wrapper`); ``/usr/local -> ../var/usrlocal`` comes with the
  deployment (image_types_ostree.bbclass:108-126);
- ``/root -> var/roothome``, ``/home``, ``/opt``, ``/mnt``, ``/media``, ``/srv -> var/rootdirs/...`` come with
  the deployment (image_types_ostree.bbclass:79-106); the directories they point to are made at boot from
  ``/etc/tmpfiles.d/00ostree-tmpfiles.conf`` (its ``d`` lines, as systemd-tmpfiles would). The board's
  ``/var/rootdirs/opt`` is the virtual board's own ``rootfs/opt`` (QAIRT, runtimes, models fleet deploy put);
- ``/boot`` the ESP: image_types_ota.bbclass:124-136 moves ``loader/`` onto the ESP and keeps ``sysroot/boot``
  empty "for systemd to mount efi in /boot" (systemd-gpt-auto-generator(8) mounts the ESP at ``/boot`` when
  that directory is empty), so ``ostree admin deploy`` writes its entries where systemd-boot reads them;
- ``/etc`` the namespace's ``/etc`` (host's below, the deployment's ``etc`` directories on top, see namespace.py).

SIMULATED beyond the real layout: the host paths the simulator itself needs inside (the sim root, a Python
prefix) are bound in, creating an empty top-level mount point in the deployment if it has none (clearing and
restoring ostree's immutable bit around that mkdir); ``/proc/1/ns`` is replaced by a folder whose ``mnt`` names
the board's mount namespace, because the host's pid 1 may be unreadable and ostree reads it before changing a
booted sysroot (v2022.7 src/libostree/ostree-sysroot.c:292-316).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from pathlib import Path

TMPFILES = "etc/tmpfiles.d/00ostree-tmpfiles.conf"        # image_types_ostree.bbclass:63-64


def _mount(*args: str) -> None:
    res = subprocess.run(["mount", *args], capture_output=True, text=True, check=False)
    if res.returncode != 0:
        raise OSError(f"mount {' '.join(args)}: {res.stderr.strip()}")


def _bind(src: Path | str, dst: Path | str, *, recursive: bool = False, ro: bool = False) -> None:
    _mount("--rbind" if recursive else "--bind", str(src), str(dst))
    if ro:
        _mount("-o", "remount,bind,ro", str(dst))


def inside(root: Path, path: Path) -> Path:
    """Where absolute ``path`` lands under ``root`` once ``root`` is ``/`` (symlinks resolved within it)."""
    cur = root
    for part in path.parts[1:]:
        nxt = cur / part
        for _ in range(16):
            if not nxt.is_symlink():
                break
            target = os.readlink(nxt)
            nxt = Path(os.path.normpath(root / target.lstrip("/") if target.startswith("/") else nxt.parent / target))
        cur = nxt
    return cur


def _top_mountpoint(root: Path, name: str) -> Path:
    """``root/name`` as a directory; made (immutable bit cleared, then set again) when the deployment lacks it."""
    p = root / name
    if not p.exists() and not p.is_symlink():
        subprocess.run(["chattr", "-i", str(root)], capture_output=True, check=False)
        try:
            p.mkdir()
        finally:
            subprocess.run(["chattr", "+i", str(root)], capture_output=True, check=False)
    return p


def apply_tmpfiles(root: Path) -> None:
    """The ``d`` lines of the deployment's ostree tmpfiles.d file (systemd-tmpfiles at boot, tmpfiles.d(5))."""
    try:
        lines = (root / TMPFILES).read_text(encoding="utf-8").splitlines()
    except OSError:
        return
    for line in lines:
        f = line.split()
        if len(f) >= 3 and f[0] == "d" and f[1].startswith("/var/"):
            d = root / f[1].lstrip("/")
            if not d.is_dir():
                d.mkdir(parents=True, exist_ok=True)
                with contextlib.suppress(ValueError, OSError):
                    os.chmod(d, int(f[2], 8))


def ostree_wrapper(sim_dir: str, real: str, python: str, cut_pull: str = "") -> str:
    """The board's ``/usr/bin/ostree``: the host's real ostree, plus what ostree 2026.1 with meta-updater's
    patches does that it does not (entry names with boot-counting tries, ``admin set-default``), done by
    :mod:`provisioner.sim.sota_boot`. ``cut_pull`` is the shell code of the ota-disconnect fault, if any."""
    sb = (f"{python} -S -c 'import sys; sys.path.insert(0, \"{sim_dir}/src\"); "
          "from provisioner.sim.sota_boot import main; sys.exit(main(sys.argv[1:]))'")
    return (
        "#!/bin/sh\n# SIMULATED: the board's ostree 2026.1 (meta-updater patches) over the host's real ostree\n"
        "# (provisioner.sim.sota_root, provisioner.sim.sota_boot)\n"
        f"real={real}\n"
        f"{cut_pull}"
        "if [ \"$1\" = admin ] && [ \"$2\" = set-default ]; then\n"
        "  for a in \"$@\"; do index=$a; done\n"
        f"  exec {sb} set-default /boot \"$index\"\n"
        "fi\n"
        "case \"$1 $2\" in\n"
        "  'admin deploy'|'admin undeploy'|'admin cleanup')\n"
        "    snap=$(mktemp /run/edge-llm-sim/.entries.XXXXXX)\n"
        f"    {sb} snapshot /boot \"$snap\"\n"
        "    \"$real\" \"$@\"; rc=$?\n"
        f"    [ $rc -eq 0 ] && {sb} name /boot \"$snap\" /ostree/repo\n"
        "    rm -f \"$snap\"; exit $rc ;;\n"
        "esac\n"
        "exec \"$real\" \"$@\"\n")


def enter(deployment: Path, sysroot: Path, esp: Path, osname: str, *, opt: Path, top_usr: Path,
          host_paths: list[Path], mntns: int) -> None:
    """Mount the board's root at ``deployment`` and chroot into it (see the module doc)."""
    d = deployment
    _mount("-t", "overlay", "overlay", "-o", f"lowerdir={top_usr}:{d / 'usr'}:/usr", str(d / "usr"))
    _bind(sysroot / "ostree/deploy" / osname / "var", d / "var")
    apply_tmpfiles(d)
    opt_in = inside(d, Path("/opt"))
    opt_in.mkdir(parents=True, exist_ok=True)
    _bind(opt, opt_in)
    for name in ("etc", "dev", "proc", "sys", "run", "tmp"):
        target = _top_mountpoint(d, name)
        _bind(f"/{name}", target, recursive=True)
    Path("/run/ostree-booted").touch()
    fake = Path("/run/edge-llm-sim/.pid1-ns")
    fake.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileNotFoundError):
        (fake / "mnt").unlink()
    os.symlink(f"mnt:[{mntns}]", fake / "mnt")
    with contextlib.suppress(OSError):
        _bind(fake, d / "proc/1/ns")
    _bind(sysroot, _top_mountpoint(d, "sysroot"))
    _bind(esp, _top_mountpoint(d, "boot"))
    for p in host_paths:
        top = Path("/", p.parts[1])
        target = inside(d, top)
        if target.parent == d:
            _bind(top, _top_mountpoint(d, top.name), recursive=True)
        else:                                    # under /var (e.g. /root -> var/roothome): only that path
            t = inside(d, p)
            t.mkdir(parents=True, exist_ok=True)
            _bind(p, t, recursive=True)
    os.chroot(d)
    os.chdir("/")


def host_paths(sim_root: Path, *pythons: str) -> list[Path]:
    """The host paths the simulator needs inside the board: its sim root and the prefixes of the Pythons it
    runs (skipped when under /usr, which the board's /usr shows)."""
    out = [sim_root.resolve()]
    for py in pythons:
        prefix = Path(os.path.realpath(py)).parents[1]
        if not prefix.is_relative_to("/usr"):
            out.append(prefix)
    uniq: list[Path] = []
    for p in out:
        if not p.exists() or p.is_relative_to("/usr") or any(p.is_relative_to(q) for q in uniq):
            continue
        uniq = [q for q in uniq if not q.is_relative_to(p)] + [p]
    return uniq


def write_top_usr(top: Path, systemctl_text: str, ostree_text: str) -> None:
    """The read-only /usr's top layer: the simulator's systemctl and ostree."""
    shutil.rmtree(top, ignore_errors=True)
    (top / "bin").mkdir(parents=True)
    for name, text in (("systemctl", systemctl_text), ("ostree", ostree_text)):
        (top / "bin" / name).write_text(text, encoding="utf-8")
        os.chmod(top / "bin" / name, 0o755)
