"""The board's view inside its own mount namespace: mounts built at start, changes written back at stop.

A session on a virtual board lands in a private mount namespace (``unshare -m --propagation
private``) that presents the board at the real absolute paths the playbooks use, while the rest
of the host stays untouched. :func:`setup_namespace` runs inside that namespace (as its first
process, :mod:`provisioner.sim.host`'s agent) and builds:

=================================  ==============================================================
``/etc``                           overlay: host /etc below, the board's ``os-release``, hostname,
                                   merged ``passwd``/``group``/``shadow`` (``llm``, ``fastrpc``) on
                                   top; ``/etc/edge-llm``, ``/etc/security/limits.d`` and
                                   ``/etc/systemd`` are the board rootfs's own directories (writes
                                   persist like on the UFS)
``/opt``                           the board's ``rootfs/opt`` (QAIRT, LiteRT-LM, models)
``/root``                          the board's own ``rootfs/root`` (never the host's dotfiles)
``/usr/bin``, ``/usr/lib``         overlays adding ``systemctl`` (stand-in), ``edge-llm-serve``,
                                   ``libcdsprpc.so`` from the rootfs
``/dev``                           tmpfs with the usual nodes + ``/dev/fastrpc-cdsp`` (char dev,
                                   ``fastrpc:fastrpc`` 0660); the host ``/dev`` is never written
``/sys/devices/soc0``              ``machine``, ``soc_id``... from the catalog
``/sys/firmware/devicetree/base``  ``compatible`` (NUL-separated), ``model`` (``/proc/device-tree``
                                   is a symlink to it on DT kernels)
``/sys/module/qcom_scm/...``       ``download_mode`` (writable; the agent mirrors it into
                                   board.json so the console agrees)
``/proc/cmdline``                  with ``qcom_scm.download_mode=N``
``/run``                           tmpfs: ``/run/sshd``, ``/run/systemd/system``, and
                                   ``/run/edge-llm-sim/`` (facts.json, read-only board dir, sim
                                   sources, python, service-manager state)
=================================  ==============================================================

Two limits of the host show through. ``/proc/device-tree`` exists only if the host kernel has a
device tree (procfs entries cannot be added; on DT kernels it is a symlink into the
``/sys/firmware/devicetree/base`` served here), so checks should accept either path. And where the
host withholds CAP_SYS_RESOURCE (containers), RLIMIT_MEMLOCK cannot be raised above the host's
ceiling: the limit the board would set is then carried in ``EDGE_LLM_SIM_MEMLOCK`` (see
:mod:`provisioner.sim.limits`) and judged by the runtime stand-ins, while ``ulimit -l unlimited`` in
a shell fails as it would for a non-root user.

After the namespace is gone, :func:`sync_back` copies what was changed through the overlays into the
rootfs, so the board keeps it across reboots like its UFS would.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

from provisioner import catalog
from provisioner.contracts import board as on_board
from provisioner.errors import SimError
from provisioner.sim import ostree_board, qcom_scm, real_litert, runtime, sota_root, systemctl
from provisioner.sim.accounts import merge_accounts, read_db, sync_accounts, write_db
from provisioner.sim.board import VirtualBoard, host_dir

SIM_DIR = runtime.SIM_DIR
FASTRPC_DEV_NUM = (60, 0)              # a char major reserved for local/experimental use: no driver behind it


def sync_back(board: VirtualBoard) -> None:
    """After the namespace is gone: copy what was changed through the overlays into the rootfs."""
    hd = host_dir(board)
    state_path = hd / "overlay.json"
    try:
        state = json.loads(state_path.read_text())
    except (OSError, ValueError):
        return
    r = board.rootfs_dir
    upper_etc = hd / "etc-upper"
    if (r / "etc").is_dir() and upper_etc.is_dir():
        sync_accounts(upper_etc, r / "etc", state.get("board_only", {}), state.get("shells", {}))
    generated = state.get("generated", {})
    for upper, target in (("etc-upper", "etc"), ("usrbin-upper", "usr/bin"), ("usrlib-upper", "usr/lib")):
        base = hd / upper
        if not base.is_dir():
            continue
        for dirpath, _dirs, files in os.walk(base):
            for fname in files:
                src = Path(dirpath) / fname
                rel = src.relative_to(base)
                key = f"{target}/{rel}"
                if target == "etc" and str(rel) in ("passwd", "group", "shadow", "gshadow", "passwd-", "group-",
                                                    "shadow-", "gshadow-", ".pwd.lock"):
                    continue
                try:
                    st = src.lstat()
                except OSError:
                    continue
                if stat.S_ISCHR(st.st_mode):       # overlay whiteout: deleted in the namespace
                    (r / target / rel).unlink(missing_ok=True)
                    continue
                if not stat.S_ISREG(st.st_mode):
                    continue
                if generated.get(key) == _sha(src):
                    continue
                dst = r / target / rel
                dst.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, dst)
    for upper in ("etc-upper", "etc-work", "usrbin-upper", "usrbin-work", "usrlib-upper", "usrlib-work"):
        _rmtree(hd / upper)
    state_path.unlink(missing_ok=True)


def _rmtree(p: Path) -> None:
    if p.exists():
        for dirpath, dirs, _files in os.walk(p):
            for d in dirs:
                with contextlib.suppress(OSError):
                    os.chmod(Path(dirpath) / d, 0o700)
        shutil.rmtree(p, ignore_errors=True)


def _sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


# --------------------------------------------------------------------------- mount helpers (inside the ns)
def _mount(*args: str) -> None:
    run(["mount", *args])


def _bind(src: str | Path, dst: str | Path, ro: bool = False) -> None:
    _mount("--bind", str(src), str(dst))
    if ro:
        _mount("-o", "remount,bind,ro", str(dst))


def run(argv: list[str]) -> None:
    res = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True, check=False)
    if res.returncode != 0:
        raise SimError(f"{' '.join(argv[:4])} failed: {res.stdout.strip()[:300]}")


def write(path: Path, text: str | bytes, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    os.chmod(path, mode)


@functools.cache
def world_python() -> str:
    """An interpreter every board user may execute (/usr/bin/python3 when it is recent enough)."""
    for cand in ("/usr/bin/python3", "/usr/local/bin/python3"):
        if os.access(cand, os.X_OK):
            try:
                out = subprocess.run([cand, "-c", "import sys; print(sys.version_info >= (3, 9))"],
                                     capture_output=True, text=True, timeout=10).stdout.strip()
            except (OSError, subprocess.TimeoutExpired):
                continue
            if out == "True":
                return cand
    return sys.executable


def _os_release(rootfs: Path) -> bytes:
    """/etc/os-release of the rootfs (Yocto makes it a symlink to ../usr/lib/os-release)."""
    p = rootfs / "etc/os-release"
    for _ in range(5):
        if not p.is_symlink():
            break
        target = os.readlink(p)
        rel = target.lstrip("/") if target.startswith("/") else os.path.relpath(p.parent / target, rootfs)
        p = rootfs / os.path.normpath(rel)
    try:
        return p.read_bytes()
    except OSError:
        return b'NAME="Qualcomm Linux"\nID=qcom-distro\n'


VOLATILE: dict[str, tuple[Path, Path]] = {}     # overlay name -> (tmpfs upper, board-dir upper); see HOLDER


def _overlay(lower: str, upper: Path, work: Path) -> None:
    """Overlay ``lower`` with ``upper`` kept in the board dir (so changes can be written back).

    If that file system cannot hold an overlay upper (e.g. it is itself an overlay), the upper
    lives on the namespace's tmpfs and the holder copies it back when it stops.
    """
    _rmtree(work)
    work.mkdir(parents=True, exist_ok=True)
    try:
        _mount("-t", "overlay", "overlay", "-o", f"lowerdir={lower},upperdir={upper},workdir={work}", lower)
        return
    except SimError:
        _rmtree(work)
    base = Path(SIM_DIR) / ".ovl" / upper.name
    vu, vw = base / "upper", base / "work"
    vw.mkdir(parents=True)
    run(["cp", "-a", str(upper), str(vu)])
    _mount("-t", "overlay", "overlay", "-o", f"lowerdir={lower},upperdir={vu},workdir={vw}", lower)
    VOLATILE[upper.name] = (vu, upper)


def root_home(board: VirtualBoard) -> Path:
    """The board's own ``/root`` (its rootfs's; a per-board dir if the image made it a symlink, as
    an OSTree commit does with ``root -> var/roothome``).

    Bound over ``/root`` in the namespace so a login runs the board's dotfiles, never the host's:
    the host root's ``~/.bashrc`` (pyenv, cargo...) is sourced by bash for every command sshd runs,
    and a reboot that kills such a shell halfway can leave the host's locks behind. A real board
    has its own ``/root``; it persists across reboots like the UFS does.
    """
    home = board.rootfs_dir / "root"
    if home.is_symlink() or (home.exists() and not home.is_dir()):
        home = host_dir(board) / "roothome"
    home.mkdir(parents=True, exist_ok=True)
    os.chmod(home, 0o700)
    return home


def _bind_root_home(board: VirtualBoard) -> None:
    """Serve the board's own home at ``/root``. The namespace's processes run the world python
    (:func:`world_python`); if that interpreter itself lives under the host's ``/root`` (pyenv),
    its prefix is bound back read-only at the same path so it keeps working."""
    py = Path(os.path.realpath(os.environ.get("EDGE_LLM_SIM_WORLD_PYTHON") or world_python()))
    keep = py.parents[1] if py.is_relative_to("/root") and len(py.parents) > 2 else None
    stage = Path(SIM_DIR) / ".hostroot"
    if keep:
        stage.mkdir(exist_ok=True)
        _bind(keep, stage, ro=True)
    _bind(root_home(board), "/root")
    if keep:
        keep.mkdir(parents=True, exist_ok=True)     # a mount point in the board's home
        _bind(stage, keep, ro=True)
        subprocess.run(["umount", "-l", str(stage)], check=False)


def setup_namespace(board: VirtualBoard) -> dict[str, Any]:
    """Build the board's view (runs inside the new mount namespace, as root). Returns overlay state."""
    hd = host_dir(board)
    r = ostree_board.booted_root(board) or board.rootfs_dir    # an OSTree board serves its booted deployment
    b = catalog.board(board.board_id)
    generated: dict[str, str] = {}
    # /run: private tmpfs with the sim control area
    _mount("-t", "tmpfs", "-o", "mode=0755", "edge-llm-run", "/run")
    sim = Path(SIM_DIR)
    for d in ("/run/sshd", "/run/systemd/system", "/run/user", "/run/lock", SIM_DIR, f"{SIM_DIR}/board",
              f"{SIM_DIR}/src", f"{SIM_DIR}/site", f"{SIM_DIR}/systemd", f"{SIM_DIR}/.hostsys"):
        Path(d).mkdir(parents=True, exist_ok=True)
        os.chmod(d, 0o755)
    os.chmod("/run/lock", 0o1777)
    _bind(board.dir, sim / "board", ro=True)
    _bind(Path(__file__).resolve().parents[2], sim / "src", ro=True)
    import site
    sp = next((p for p in site.getsitepackages() if Path(p).is_dir()), None)
    if sp:
        _bind(sp, sim / "site", ro=True)
    os.symlink(os.environ.get("EDGE_LLM_SIM_WORLD_PYTHON") or world_python(), sim / runtime.PYTHON_LINK)
    found = real_litert.locate()        # Google's runtime and the tiny model, where facts.json says they are
    if not isinstance(found, str):
        for src, name in zip(found, (real_litert.BOARD_LIB_DIR, real_litert.BOARD_MODEL_DIR), strict=True):
            (sim / name).mkdir(mode=0o755)
            _bind(src.parent, sim / name, ro=True)
        typed = real_litert.typed_dir(found[1])           # made when the board's facts were written
        if typed.is_dir():
            (sim / real_litert.BOARD_TYPED_DIR).mkdir(mode=0o755)
            _bind(typed, sim / real_litert.BOARD_TYPED_DIR, ro=True)
    shutil.copyfile(hd / "facts.json", sim / runtime.FACTS_NAME)
    os.chmod(sim / runtime.FACTS_NAME, 0o644)
    ota = ostree_board.sysroot(board)
    sota = ostree_board.booted_root(board) is not None
    if sota:
        write(sim / "reboot", ostree_board.reboot_script(board), 0o755)
        write(sim / "boot_id", ostree_board.boot_id(board) + "\n", 0o444)
        _bind(sim / "boot_id", "/proc/sys/kernel/random/boot_id", ro=True)
    login = sim / "login-shell"
    write(login, f"#!{SIM_DIR}/{runtime.PYTHON_LINK} -S\n# pam_limits stand-in (provisioner.sim.limits)\n"
                  f"import sys\nsys.path.insert(0, '{SIM_DIR}/src')\nfrom provisioner.sim.limits import login_shell\n"
                  "login_shell()\n", 0o755)

    # /etc overlay: host /etc below, the board's identity and accounts on top
    upper = hd / "etc-upper"
    _rmtree(upper)
    upper.mkdir(parents=True)
    board_only = merge_accounts(Path("/etc"), r / "etc", upper)
    shells: dict[str, str] = {}
    for db in ("passwd",):
        rows = read_db(upper / db)
        for row in rows:
            if len(row) >= 7 and not row[6].endswith(("nologin", "false", "sync")) and row[6]:
                shells[row[0]] = row[6] if os.path.exists(row[6]) else "/bin/sh"
                row[6] = str(login)
        write_db(upper / db, rows)
    (sim / "shells.json").write_text(json.dumps(shells))
    os.chmod(sim / "shells.json", 0o644)
    write(upper / "os-release", _os_release(r))
    write(upper / "hostname", (board.data.get("hostname") or board.serial.lower()) + "\n")
    for rel in ("os-release", "hostname"):
        generated[f"etc/{rel}"] = _sha(upper / rel)
    # the board's own /etc directories, written through to its rootfs (its booted deployment's /etc on a sota
    # board, where `ostree admin deploy` merges them from: the remote update-os adds lives in etc/ostree)
    own = ("edge-llm", "security/limits.d", "systemd") + (("ostree",) if sota else ())
    for sub in ("edge-llm", "security/limits.d", "systemd/system", "systemd/system.conf.d", *own[3:]):
        (r / "etc" / sub).mkdir(parents=True, exist_ok=True)
        (upper / sub).mkdir(parents=True, exist_ok=True)
    _overlay("/etc", upper, hd / "etc-work")
    for sub in own:
        _bind(r / "etc" / sub, f"/etc/{sub}")

    # /opt and /usr
    opt = board.rootfs_dir / "opt"          # /opt is not in an OSTree commit: it stays the board's own
    opt.mkdir(exist_ok=True)
    _bind(opt, "/opt")
    for target, name in (("/usr/bin", "usrbin"), ("/usr/lib", "usrlib")):
        up = hd / f"{name}-upper"
        _rmtree(up)
        up.mkdir(parents=True)
        src = r / target.lstrip("/")
        if src.is_dir():
            for f in src.iterdir():
                if f.is_file() and not f.is_symlink():
                    shutil.copy2(f, up / f.name)
                    generated[f"{target.lstrip('/')}/{f.name}"] = _sha(up / f.name)
                elif f.is_symlink():
                    os.symlink(os.readlink(f), up / f.name)
        if target == "/usr/bin":
            write(up / "systemctl", systemctl.executable_text(), 0o755)
            generated["usr/bin/systemctl"] = _sha(up / "systemctl")
        _overlay(target, up, hd / f"{name}-work")

    # /dev: a private tmpfs; never touch the host's
    _bind("/dev", sim / ".hostsys", ro=False)
    _mount("-t", "tmpfs", "-o", "mode=0755", "edge-llm-dev", "/dev")
    for node, (maj, mnr), mode in (("null", (1, 3), 0o666), ("zero", (1, 5), 0o666), ("full", (1, 7), 0o666),
                                   ("random", (1, 8), 0o666), ("urandom", (1, 9), 0o666), ("tty", (5, 0), 0o666)):
        os.mknod(f"/dev/{node}", stat.S_IFCHR | mode, os.makedev(maj, mnr))
        os.chmod(f"/dev/{node}", mode)
    for d in ("pts", "shm"):
        Path(f"/dev/{d}").mkdir()
    with contextlib.suppress(SimError):
        _bind(sim / ".hostsys" / "shm", "/dev/shm")
    # A private devpts instance, as a container gets: the bind above is not recursive, so the host's
    # /dev/pts would be an empty directory here and every pty request (ssh -tt, which Ansible's
    # reboot module uses to read the boot id) would fail.
    _mount("-t", "devpts", "-o", "newinstance,ptmxmode=0666,mode=0620", "edge-llm-pts", "/dev/pts")
    os.chmod("/dev/shm", 0o1777)
    os.symlink("pts/ptmx", "/dev/ptmx")
    for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1"),
                         ("stderr", "/proc/self/fd/2")):
        os.symlink(target, f"/dev/{name}")
    fastrpc_uid = fastrpc_gid = 0
    with contextlib.suppress(KeyError):
        import grp
        fastrpc_gid = grp.getgrnam(on_board.FASTRPC_GROUP).gr_gid
    with contextlib.suppress(KeyError):
        import pwd
        fastrpc_uid = pwd.getpwnam(on_board.FASTRPC_OWNER).pw_uid
    os.mknod(on_board.FASTRPC_DEVICE, stat.S_IFCHR | on_board.FASTRPC_MODE, os.makedev(*FASTRPC_DEV_NUM))
    os.chown(on_board.FASTRPC_DEVICE, fastrpc_uid, fastrpc_gid)    # what fastrpc's udev rule sets
    os.chmod(on_board.FASTRPC_DEVICE, on_board.FASTRPC_MODE)
    subprocess.run(["umount", "-l", str(sim / ".hostsys")], check=False)

    # /sys: soc0, device tree, qcom_scm parameter
    hostsys = sim / ".hostsys"
    _bind("/sys/devices", hostsys)
    _mount("-t", "tmpfs", "-o", "mode=0755", "edge-llm-devices", "/sys/devices")
    for entry in sorted(os.listdir(hostsys)):
        if (hostsys / entry).is_dir() and not (hostsys / entry).is_symlink():
            Path("/sys/devices", entry).mkdir()
            _bind(hostsys / entry, Path("/sys/devices", entry))
    subprocess.run(["umount", "-l", str(hostsys)], check=False)
    soc0 = Path("/sys/devices/soc0")
    for name, val in (("machine", b.soc0_machine), ("soc_id", str(b.soc_id)), ("family", "Snapdragon"),
                      ("revision", "1.0"), ("serial_number", str(int(board.serial, 16))), ("vendor", "Qualcomm")):
        write(soc0 / name, val + "\n", 0o444)
    fw = Path("/sys/firmware")
    _bind(fw, hostsys)
    _mount("-t", "tmpfs", "-o", "mode=0755", "edge-llm-firmware", str(fw))
    for entry in sorted(os.listdir(hostsys)):
        if (hostsys / entry).is_dir():
            (fw / entry).mkdir()
            _bind(hostsys / entry, fw / entry)
    subprocess.run(["umount", "-l", str(hostsys)], check=False)
    dt = fw / "devicetree/base"
    write(dt / "compatible", b"".join(c.encode() + b"\0" for c in b.dt_compatible), 0o444)
    write(dt / "model", b.dt_model.encode() + b"\0", 0o444)
    write(dt / "serial-number", board.serial.lower().encode() + b"\0", 0o444)
    mod = hd / "sys-module"
    _rmtree(mod)
    param = mod / "qcom_scm/parameters/download_mode"
    write(param, qcom_scm.show(int(board.data.get("download_mode", 1)), qcom_scm.names(board.data)), 0o644)
    _bind(mod, "/sys/module")

    # /proc/cmdline: the flashed image's kernel command line
    dm = int(board.data.get("download_mode", 1))
    cmdline = hd / "cmdline"
    # an OSTree board's kernel gets the booted BLS entry's options (ostree=..., what deploy carried)
    base = ostree_board.booted_cmdline(board) if sota else rootfs_cmdline(r)
    if "qcom_scm.download_mode=" not in base:
        base += f" qcom_scm.download_mode={dm}"
    write(cmdline, base + "\n", 0o444)
    _bind(cmdline, on_board.KERNEL_CMDLINE, ro=True)
    _bind_root_home(board)          # last: the host's /root (and whatever lives there) is hidden from here on
    if sota:                        # a sota board runs in its booted deployment (provisioner.sim.sota_root)
        shutil.copy2(ostree_board.OSTREE, sim / "ostree.real")
        py = f"{SIM_DIR}/{runtime.PYTHON_LINK}"
        sota_root.write_top_usr(sim / "sota-usr", systemctl.executable_text(),
                                sota_root.ostree_wrapper(SIM_DIR, f"{SIM_DIR}/ostree.real", py,
                                                         ostree_board.cut_pull(board)))
        sota_root.enter(r, ota, ostree_board.esp(board), ostree_board.OSNAME, opt=opt, top_usr=sim / "sota-usr",
                        host_paths=sota_root.host_paths(board.root, os.path.realpath(sim / runtime.PYTHON_LINK)),
                        mntns=os.stat("/proc/self/ns/mnt").st_ino)
    return {"board_only": board_only, "shells": shells, "generated": generated}


def rootfs_cmdline(rootfs: Path) -> str:
    for rel in ("etc/kernel/cmdline", "boot/cmdline"):
        with contextlib.suppress(OSError):
            text = (rootfs / rel).read_text().strip()
            if text:
                return " ".join(text.split())      # the image's own line, download_mode included
    return "root=PARTLABEL=system rw rootwait console=ttyMSM0,115200n8 earlycon pcie_pme=nomsi"

