"""The network side of a virtual EVK: socket-activated sshd in the board's own mount namespace.

A booted virtual board is reached like a real one: ``ssh -p PORT root@127.0.0.1`` with the sim
controller key. The session lands in a private mount namespace (``unshare -m --propagation
private``) that presents the board at the real absolute paths the playbooks use, while the rest
of the host stays untouched:

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

The namespace's first process is an *agent* (``python -m provisioner.sim.host agent ROOT SERIAL``):
it builds the mounts and starts the enabled services, then replaces itself (``exec``, same pid)
with a small shell script, the *holder* (:data:`HOLDER`), that keeps the namespace alive for ~1-2 MB
instead of a Python interpreter's ~21 MB per board: it runs the board's ssh socket (restarting it
if it dies), reaps orphans (child subreaper) and stops services and the socket on SIGTERM.

sshd is socket-activated, as on a QLI image (openembedded-core 06dd66e6,
``meta/recipes-connectivity/openssh/openssh/sshd.socket``: ``ListenStream=22``, ``Accept=yes``;
``sshd@.service``: ``ExecStart=-@SBINDIR@/sshd -i``, ``StandardInput=socket``): an idle board runs
no sshd at all, only ``sshd-socket`` (``clib/sshd_socket.c``, a few hundred kB), which hands each
accepted connection to a fresh ``sshd -i`` inside the board's namespace. Sessions are children of
that listener, so daemons they leave behind are reparented to the holder, the board's subreaper,
exactly as before; with ControlPersist a run holds one connection (one ``sshd -i``) per board.

Mirroring ``download_mode``
between the board's sysfs and ``board.json`` is done by the one supervisor of the sim root
(:func:`mirror_download_mode`), not by a poller per board. Mounts die with the namespace's last
process, so teardown is "kill every process in that mount namespace": the agent's pid and
namespace inode are recorded in ``boards/<serial>/host/agent.json``, which makes :func:`stop_host`
work even after the CLI that started the board was killed.
"""

from __future__ import annotations

import contextlib
import ctypes  # at module level: after the mounts the host's /root (maybe this stdlib) is hidden
import functools
import hashlib
import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from provisioner import catalog, layout
from provisioner.errors import SimError
from provisioner.sim import cstandins, ostree_board, ports, qcom_scm, real_litert, runtime, sota_root, systemctl
from provisioner.sim.board import VirtualBoard, env_number, list_boards, sim_root, ufs_serial

SSH_HOST = "127.0.0.1"
SIM_DIR = runtime.SIM_DIR
FASTRPC_DEV_NUM = (60, 0)              # a char major reserved for local/experimental use: no driver behind it
PROTECTED_USERS = ("root", "sshd", "nobody", "_apt")
PROTECTED_GROUPS = ("root", "nogroup", "_ssh", "shadow", "tty")
LISTENER = "sshd-socket"        # the board's socket unit (clib/sshd_socket.c), copied into its host dir
STATEFUL_FAULTS = ("memlock", "no-fastrpc-group", "qairt-mismatch", "truncated-model", "wrong-soc-model")
START_TIMEOUT_S = 60.0          # generous: CI machines with 2 busy cores start python slowly


# --------------------------------------------------------------------------- controller key
def ssh_dir(root: str | os.PathLike[str] | None) -> Path:
    return sim_root(root) / "ssh"


def controller_key(root: str | os.PathLike[str] | None) -> Path:
    """The sim controller's private key ``<root>/ssh/id_ed25519`` (generated once, no passphrase)."""
    d = ssh_dir(root)
    d.mkdir(parents=True, exist_ok=True)
    os.chmod(d, 0o700)
    key = d / "id_ed25519"
    with systemctl.locked(d / ".lock"):
        if not key.is_file() or not key.with_suffix(".pub").is_file():
            for p in (key, key.with_suffix(".pub")):
                p.unlink(missing_ok=True)
            _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "edge-llm-sim-controller", "-f", str(key)])
    return key


def ssh_paths(root: str | os.PathLike[str] | None) -> dict[str, Path]:
    """{"key": controller private key, "known_hosts": file listing every board's host key}."""
    return {"key": controller_key(root), "known_hosts": known_hosts(root)}


def known_hosts(root: str | os.PathLike[str] | None) -> Path:
    return ssh_dir(root) / "known_hosts"


def ssh_argv(board: VirtualBoard, *command: str) -> list[str]:
    """argv that runs ``command`` on ``board`` over real ssh (as the fleet would)."""
    board.reload()
    if not board.ssh:
        raise SimError(f"board {board.serial} has no ssh address (not booted?)", "boot it with `provisioner sim`")
    return ["ssh", "-i", str(controller_key(board.root)), "-p", str(board.ssh["port"]),
            "-o", f"UserKnownHostsFile={known_hosts(board.root)}", "-o", "StrictHostKeyChecking=yes",
            "-o", "BatchMode=yes", "-o", "ConnectTimeout=5", "-o", "LogLevel=ERROR",
            f"root@{board.ssh['host']}", *command]


def inventory_hosts(root: str | os.PathLike[str] | None) -> dict[str, dict[str, Any]]:
    """Ansible host vars for every board with an ssh address, keyed by hostname."""
    out: dict[str, dict[str, Any]] = {}
    key = controller_key(root)
    for b in list_boards(root):
        if not b.ssh:
            continue
        out[b.data.get("hostname") or b.serial.lower()] = {
            "ansible_host": b.ssh["host"], "ansible_port": int(b.ssh["port"]), "ansible_user": "root",
            "ansible_ssh_private_key_file": str(key),
            "ansible_ssh_common_args": f"-o UserKnownHostsFile={known_hosts(root)} -o StrictHostKeyChecking=yes",
            "ansible_python_interpreter": f"{SIM_DIR}/{runtime.PYTHON_LINK}",
            "ansible_pipelining": True,
            "board_serial": b.serial, "board_type": b.board_id,
        }
    return out


def write_inventory(root: str | os.PathLike[str] | None, path: str | os.PathLike[str] | None = None,
                    group: str = "boards") -> Path:
    """Write an Ansible YAML inventory of the booted boards (default ``<root>/ssh/inventory.yml``)."""
    import yaml
    target = Path(path) if path else ssh_dir(root) / "inventory.yml"
    data = {"all": {"children": {group: {"hosts": inventory_hosts(root)}}}}
    tmp = target.with_name(f".{target.name}.tmp")
    tmp.write_text(yaml.safe_dump(data, sort_keys=True), encoding="utf-8")
    os.replace(tmp, target)
    return target


# --------------------------------------------------------------------------- start / stop
def host_dir(board: VirtualBoard) -> Path:
    return board.dir / "host"


def start_host(board: VirtualBoard, *, time_scale: float | None = None,
               timeout_s: float = START_TIMEOUT_S) -> tuple[str, int]:
    """Start a booted board's namespace and its ssh socket; returns the (host, port) to ssh to.

    Idempotent: a running host is left alone. With the ``unreachable`` fault the address is
    allocated and recorded but nothing listens (connection refused), like a board whose network
    never came up. ``time_scale`` makes the runtime stand-ins sleep that fraction of the time the
    real runtime would take (0 = answer instantly; default ``$PROVISIONER_SIM_TIME_SCALE`` or 0.1).
    """
    if time_scale is None:
        time_scale = env_number("PROVISIONER_SIM_TIME_SCALE", 0.1)
    board.reload()
    rootfs = board.rootfs_dir
    if not (rootfs / "etc").is_dir():
        raise SimError(f"board {board.serial} has no root filesystem at {rootfs}",
                       "flash an image and boot the board first (`provisioner sim`)")
    hd = host_dir(board)
    hd.mkdir(parents=True, exist_ok=True)
    running = _agent_info(board)
    if running and _alive_in_ns(running):
        return SSH_HOST, int(running["port"])
    _cleanup_ns(board)
    key = controller_key(board.root)
    port = _pick_port(hd, board)
    apply_faults(board)
    (hd / "facts.json").write_text(json.dumps(_facts(board, time_scale), indent=1), encoding="utf-8")
    host_key = first_boot_identity(board)
    _write_sshd_config(hd, key, rootfs, host_key)
    _install_listener(hd)
    _add_known_host(board.root, port, host_key.with_suffix(".pub").read_text().split()[:2])
    if board.has_fault("unreachable"):
        board.update(ssh={"host": SSH_HOST, "port": port})
        return SSH_HOST, port
    log = open(hd / "agent.log", "ab")  # noqa: SIM115 - handed to the child
    try:
        proc = subprocess.Popen(
            ["unshare", "-m", "--propagation", "private", sys.executable, "-m", "provisioner.sim.host", "agent",
             str(board.root), board.serial],
            stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True,
            cwd="/", env=_agent_env())
    finally:
        log.close()
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        info = _agent_info(board)
        if info and info.get("ready") and _port_open(port):
            break
        if proc.poll() is not None:
            raise SimError(f"virtual board {board.serial}: ssh namespace failed to start (exit {proc.returncode}): "
                           f"{_log_tail(hd)}",
                           "see " + str(hd / "agent.log"))
        time.sleep(0.05)
    else:
        _kill_ns(board)
        raise SimError(f"virtual board {board.serial}: its ssh socket did not come up within {timeout_s:.0f} s: "
                       f"{_log_tail(hd)}", "see " + str(hd / "agent.log"))
    with board.transaction() as data:
        data["ssh"] = {"host": SSH_HOST, "port": port}
        data.setdefault("pids", {})["host_agent"] = proc.pid
    return SSH_HOST, port


def stop_host(board: VirtualBoard) -> None:
    """Stop the board's sshd, services and namespace; write back what Ansible changed in /etc etc.

    Safe to call when nothing runs, and after the process that started the board was killed.
    """
    board.reload()
    _kill_ns(board)
    _sync_back(board)
    with contextlib.suppress(SimError, FileNotFoundError), board.transaction() as data:
        data["ssh"] = None
        (data.get("pids") or {}).pop("host_agent", None)


def stop_all(root: str | os.PathLike[str] | None) -> None:
    """Stop every board host under ``root`` (what `provisioner sim down` and test teardown call)."""
    for b in list_boards(root):
        stop_host(b)


teardown_all = stop_all


def host_running(board: VirtualBoard) -> bool:
    info = _agent_info(board)
    return bool(info and _alive_in_ns(info))


def _agent_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "PYTHONPATH", "LANG", "PROVISIONER_DEBUG")}
    src = str(Path(__file__).resolve().parents[2])
    env["EDGE_LLM_SIM_PARENT_MNTNS"] = str(os.stat("/proc/self/ns/mnt").st_ino)
    env["EDGE_LLM_SIM_WORLD_PYTHON"] = _world_python()    # probed once here, not by every agent
    env["PYTHONPATH"] = src + (":" + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def _agent_info(board: VirtualBoard) -> dict[str, Any] | None:
    try:
        return json.loads((host_dir(board) / "agent.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _ns_inode(pid: int) -> int | None:
    try:
        return os.stat(f"/proc/{pid}/ns/mnt").st_ino
    except OSError:
        return None


def _alive_in_ns(info: dict[str, Any]) -> bool:
    pid = int(info.get("pid") or 0)
    return bool(pid) and _ns_inode(pid) == info.get("mntns")


def _ns_pids(inode: int, board: VirtualBoard) -> list[int]:
    """The processes in ``board``'s mount namespace ``inode``.

    The kernel reuses a freed namespace's inode number for the next one, so a recorded inode alone may
    name another board's namespace by now (its agent was killed and a new board started since): a
    process counts only when its view of ``SIM_DIR/board`` is this board's folder (setup_namespace
    binds it there), read through ``/proc/<pid>/root``, which resolves in that process's namespace."""
    try:
        mine = os.stat(board.dir)
    except OSError:
        return []
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit() or _ns_inode(int(d)) != inode:
            continue
        try:
            seen = os.stat(f"/proc/{d}/root{SIM_DIR}/board")
        except OSError:
            continue
        if (seen.st_dev, seen.st_ino) == (mine.st_dev, mine.st_ino):
            out.append(int(d))
    return out


def _kill_ns(board: VirtualBoard) -> None:
    """SIGTERM the agent (it stops services and sshd), then SIGKILL whatever is left in the namespace."""
    info = _agent_info(board)
    if not info:
        return
    inode = info.get("mntns")
    pid = int(info.get("pid") or 0)
    if inode and _ns_inode(pid) == inode:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and _ns_inode(pid) == inode:
            time.sleep(0.05)
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)       # reap it if we started it (no zombie left behind)
    if inode:
        for _ in range(50):
            pids = _ns_pids(inode, board)
            if not pids:
                break
            for p in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(p, signal.SIGKILL)
            time.sleep(0.05)
    (host_dir(board) / "agent.json").unlink(missing_ok=True)


def _cleanup_ns(board: VirtualBoard) -> None:
    if _agent_info(board):
        _kill_ns(board)
        _sync_back(board)


def _log_tail(hd: Path, n: int = 3) -> str:
    try:
        lines = [ln for ln in (hd / "agent.log").read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return "no log"
    return " | ".join(lines[-n:]) or "no output"


def _port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex((SSH_HOST, port)) == 0


def _pick_port(hd: Path, board: VirtualBoard) -> int:
    """Keep a board's port across reboots (inventories stay valid) unless something else took it."""
    prev = None
    with contextlib.suppress(OSError, ValueError):
        prev = int((hd / "port").read_text())
    if not prev and board.ssh:
        prev = int(board.ssh.get("port") or 0)
    taken = {int(b.ssh["port"]) for b in list_boards(board.root) if b.ssh and b.serial != board.serial}
    if prev and prev not in taken and ports.port_free(prev, SSH_HOST):
        port = prev
    else:
        while True:
            with socket.socket() as s:
                s.bind((SSH_HOST, 0))
                port = s.getsockname()[1]
            if port not in taken:
                break
    (hd / "port").write_text(str(port))
    return port


#: the host key type a QLI image's sshd gets: oe-core 06dd66e6 openssh_10.3p1.bb sets
#: PACKAGECONFIG ??= "systemd-sshd-socket-mode hostkey-ecdsa", so sshd_config names only the ECDSA key
SIM_HOST_KEY = "etc/ssh/ssh_host_ecdsa_key"


def first_boot_identity(board: VirtualBoard) -> Path:
    """What a real board does at every boot, simulated: sshd_check_keys generates a host key that
    does not exist yet (so the first boot after a flash makes a new one; the image ships none), and
    an image with the edge-llm-identity service gets its console identity lines in /run.
    Returns the host key's path."""
    rootfs = board.rootfs_dir
    key = rootfs / SIM_HOST_KEY
    if not key.is_file():
        key.parent.mkdir(parents=True, exist_ok=True)
        for p in (key, key.with_suffix(".pub")):
            p.unlink(missing_ok=True)
        _run(["ssh-keygen", "-q", "-t", "ecdsa", "-N", "", "-C", f"root@{board.serial.lower()}", "-f", str(key)])
    if (rootfs / layout.IDENTITY_SCRIPT.lstrip("/")).is_file():
        run_file = rootfs / layout.IDENTITY_RUN_FILE.lstrip("/")
        run_file.parent.mkdir(parents=True, exist_ok=True)
        pub = key.with_suffix(".pub").read_text().split()
        run_file.write_text(f"edge-llm id serial {int(board.serial, 16)}\n"
                            f"edge-llm id ufs-serial {ufs_serial(board)}\n"
                            f"edge-llm id hostkey {pub[0]} {pub[1]}\n\n", encoding="utf-8")
    return key


def _install_listener(hd: Path) -> None:
    """Put the compiled socket listener in the board's host dir (visible inside its namespace,
    unlike the build cache under the host's /root); replaced only when the build changed."""
    built = cstandins.program(LISTENER)
    dest = hd / LISTENER
    with contextlib.suppress(OSError):
        if dest.read_bytes() == built.read_bytes():
            return
    tmp = hd / f".{LISTENER}.tmp"
    shutil.copyfile(built, tmp)
    os.chmod(tmp, 0o755)
    os.replace(tmp, dest)


def _write_sshd_config(hd: Path, key: Path, rootfs: Path, host_key: Path) -> None:
    """The config each per-connection ``sshd -i`` reads (no Port/ListenAddress: the socket listens)."""
    shutil.copyfile(key.with_suffix(".pub"), hd / "authorized_keys")
    image_keys = rootfs / "root/.ssh/authorized_keys"     # keys baked into the image work too, as on hardware
    os.chmod(hd / "authorized_keys", 0o600)
    (hd / "sshd_config").write_text("\n".join([
        "# sshd -i of one edge-llm virtual board, started per connection by its sshd-socket (provisioner.sim.host)",
        f"HostKey {host_key}",
        f"AuthorizedKeysFile {hd / 'authorized_keys'} {image_keys}",
        "PermitRootLogin prohibit-password",
        "PubkeyAuthentication yes",
        "PasswordAuthentication no",
        "KbdInteractiveAuthentication no",
        "UsePAM no",
        "StrictModes no",
        "PrintMotd no",
        "PrintLastLog no",
        "PidFile none",
        "MaxSessions 100",
        "AcceptEnv LANG LC_*",
        "Subsystem sftp internal-sftp",
        "LogLevel ERROR",
        "",
    ]), encoding="utf-8")


def _add_known_host(root: Path, port: int, key: list[str]) -> None:
    kh = known_hosts(root)
    with systemctl.locked(ssh_dir(root) / ".lock"):
        lines = []
        with contextlib.suppress(OSError):
            lines = [ln for ln in kh.read_text().splitlines() if not ln.startswith(f"[{SSH_HOST}]:{port} ")]
        lines.append(f"[{SSH_HOST}]:{port} {key[0]} {key[1]}")
        tmp = kh.with_name(".known_hosts.tmp")
        tmp.write_text("\n".join(lines) + "\n")
        os.replace(tmp, kh)


def _facts(board: VirtualBoard, time_scale: float) -> dict[str, Any]:
    b = catalog.board(board.board_id)
    models = {}
    for mid, m in catalog.models().items():
        models[mid] = {"kind": m.kind, "file": m.file, "size": m.size, "qairt": m.qairt, "npu_only": m.npu_only,
                       "boards": list(m.boards), "runtime": m.runtime}
    return {"serial": board.serial, "board": b.as_dict(), "models": models, "os": "qli",
            "time_scale": time_scale, "system_qairt": _system_qairt(),
            "real_litert": real_litert.board_facts(real_litert.locate(), SIM_DIR)}


def _system_qairt() -> str:
    try:
        return catalog.release("qli-2.0").system_qairt
    except Exception:  # noqa: BLE001 - only used for the qairt-mismatch fault
        return "2.47.0.260601"


# --------------------------------------------------------------------------- faults as board state
def apply_faults(board: VirtualBoard) -> list[str]:
    """Turn stateful faults into the board state that causes them in reality (once per fault).

    ``memlock``: the limits.d file and the systemd memlock drop-in are missing (and the serve unit
    sets no LimitMEMLOCK). ``no-fastrpc-group``: ``llm`` is not in group ``fastrpc``.
    ``qairt-mismatch``: the QNN libraries and skels under /opt/qairt/<ver> come from another
    QAIRT release (the system's).
    ``truncated-model``: model files are cut short. ``wrong-soc-model``: Genie HTP configs carry
    ``soc_model: 0``. Runtime faults (no-burst, soc-config-14001, slow) are read live by the
    stand-ins. Returns the faults applied now.
    """
    board.reload()
    hd = host_dir(board)
    hd.mkdir(parents=True, exist_ok=True)
    done_path = hd / "faults-applied.json"
    r = board.rootfs_dir
    ident = _rootfs_identity(r)
    try:
        saved = json.loads(done_path.read_text())
        done = set(saved["faults"]) if saved.get("rootfs") == ident else set()   # a reflash starts clean
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        done = set()
    applied = []
    for fault in board.faults:
        if fault not in STATEFUL_FAULTS or fault in done:
            continue
        if fault == "memlock":
            for rel in (layout.LIMITS_FILE, layout.SYSTEMD_MEMLOCK_DROPIN):
                _rootfs_path(r, rel).unlink(missing_ok=True)
            unit_dir = _rootfs_path(r, layout.SERVE_UNIT_DIR)
            for f in [unit_dir / layout.SERVE_UNIT, *unit_dir.glob(layout.SERVE_UNIT + ".d/*.conf")]:
                if f.is_file():
                    text = f.read_text()
                    f.write_text("".join(ln for ln in text.splitlines(True) if not ln.startswith("LimitMEMLOCK")))
        elif fault == "no-fastrpc-group":
            g = r / "etc/group"
            if g.is_file():
                out = []
                for ln in g.read_text().splitlines():
                    parts = ln.split(":")
                    if len(parts) == 4 and parts[0] == layout.FASTRPC_GROUP:
                        parts[3] = ""
                    out.append(":".join(parts))
                g.write_text("\n".join(out) + "\n")
        elif fault == "qairt-mismatch":
            system = _system_qairt()
            qroot = _rootfs_path(r, layout.QAIRT_ROOT)
            libs = [*qroot.glob("*/lib/aarch64-*/*.so"), *qroot.glob("*/lib/hexagon-*/unsigned/*.so")] \
                if qroot.is_dir() else []
            for lib in libs:
                if lib.is_file() and lib.name.startswith(("libQnn", "libGenie")):
                    lib.write_bytes(runtime.stub_library(lib.name, system))
        elif fault == "truncated-model":
            mroot = _rootfs_path(r, layout.MODELS_ROOT)
            for f in mroot.glob("*/*/*") if mroot.is_dir() else []:
                if f.parent.is_symlink():          # `current` points at a version dir already handled
                    continue
                if f.is_file() and (f.suffix == ".litertlm" or (f.suffix == ".bin" and "part_1_of" in f.name)):
                    size = f.stat().st_size
                    with open(f, "r+b") as fh:
                        fh.truncate(max(1, size * 6 // 10))
        elif fault == "wrong-soc-model":
            mroot = _rootfs_path(r, layout.MODELS_ROOT)
            for f in mroot.glob("*/*/htp_backend_ext_config.json") if mroot.is_dir() else []:
                if f.parent.is_symlink():
                    continue
                with contextlib.suppress(ValueError, OSError):
                    cfg = json.loads(f.read_text())
                    for dev in cfg.get("devices", []):
                        dev["soc_model"] = 0
                    f.write_text(json.dumps(cfg, indent=2) + "\n")
        applied.append(fault)
        done.add(fault)
    done_path.write_text(json.dumps({"rootfs": ident, "faults": sorted(done)}))
    return applied


def _rootfs_identity(rootfs: Path) -> list[int]:
    """Changes when the rootfs is extracted anew (a flash), not when files inside it change."""
    try:
        st = rootfs.stat()
        return [st.st_ino, st.st_dev]
    except OSError:
        return [0, 0]


def _rootfs_path(rootfs: Path, abs_path: str) -> Path:
    return rootfs / abs_path.lstrip("/")


# --------------------------------------------------------------------------- passwd/group merge
def _read_db(path: Path) -> list[list[str]]:
    try:
        return [ln.split(":") for ln in path.read_text(errors="replace").splitlines() if ln and ":" in ln]
    except OSError:
        return []


def _write_db(path: Path, rows: list[list[str]], mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(":".join(r) + "\n" for r in rows))
    os.chmod(path, mode)


def merge_accounts(host_etc: Path, board_etc: Path, out_etc: Path) -> dict[str, Any]:
    """Write passwd/group/shadow/gshadow for the namespace: the host's accounts (sshd, root) plus the
    board's own (``llm``, ``fastrpc``...). Board ids win over host ids that are not needed to log in.
    Returns {"users": [...], "groups": [...]} of board-only names (what is written back on stop)."""
    hp, bp = _read_db(host_etc / "passwd"), _read_db(board_etc / "passwd")
    hg, bg = _read_db(host_etc / "group"), _read_db(board_etc / "group")
    host_users = {r[0] for r in hp}
    host_groups = {r[0] for r in hg}
    b_users = [r for r in bp if len(r) >= 7 and r[0] not in host_users]
    b_groups = [r for r in bg if len(r) >= 4 and r[0] not in host_groups]
    b_uids = {r[2] for r in b_users}
    b_gids = {r[2] for r in b_groups}
    users = [r for r in hp if r[0] in PROTECTED_USERS or r[2] not in b_uids] + b_users
    groups = []
    board_members = {r[0]: r[3] for r in bg if len(r) >= 4}
    for r in hg:
        if r[0] not in PROTECTED_GROUPS and r[2] in b_gids:
            continue
        if r[0] in board_members and board_members[r[0]]:
            extra = [m for m in board_members[r[0]].split(",") if m and m not in host_users]
            mem = [m for m in r[3].split(",") if m] + [m for m in extra if m not in r[3].split(",")]
            r = r[:3] + [",".join(mem)]
        groups.append(r)
    groups += b_groups
    hs, bs = _read_db(host_etc / "shadow"), _read_db(board_etc / "shadow")
    b_shadow = {r[0]: r for r in bs}
    shadow = [r for r in hs if r[0] in {u[0] for u in users}]
    shadow += [b_shadow.get(r[0], [r[0], "*", "19000", "0", "99999", "7", "", "", ""]) for r in b_users]
    gshadow = [r for r in _read_db(host_etc / "gshadow") if r[0] in {g[0] for g in groups}]
    gshadow += [[r[0], "!", "", r[3]] for r in b_groups]
    _write_db(out_etc / "passwd", users)
    _write_db(out_etc / "group", groups)
    _write_db(out_etc / "shadow", shadow, 0o640)
    _write_db(out_etc / "gshadow", gshadow, 0o640)
    return {"users": [r[0] for r in b_users], "groups": [r[0] for r in b_groups]}


def _sync_accounts(upper_etc: Path, board_etc: Path, board_only: dict[str, Any], shells: dict[str, str]) -> None:
    """Write the board-only accounts as changed in the namespace (e.g. ``usermod -aG fastrpc llm``)
    back into the rootfs, so the change survives a reboot like it would on the UFS."""
    for db, names_key in (("passwd", "users"), ("group", "groups"), ("shadow", "users"), ("gshadow", "groups")):
        up = upper_etc / db
        if not up.is_file():
            continue
        ns_rows = {r[0]: r for r in _read_db(up)}
        board_rows = _read_db(board_etc / db)
        known = {r[0] for r in board_rows}
        names = set(board_only.get(names_key, []))
        # accounts created in the namespace that the host does not have are board accounts too
        host_names = {r[0] for r in _read_db(Path("/etc") / db)}
        names |= {n for n in ns_rows if n not in host_names}
        out = []
        for r in board_rows:
            if r[0] in names and r[0] in ns_rows:
                r = list(ns_rows[r[0]])
            elif r[0] in names and r[0] not in ns_rows:
                continue           # deleted in the namespace
            elif db == "group" and r[0] in ns_rows and len(r) >= 4:
                host_mem = {m for m in ns_rows[r[0]][3].split(",") if m}
                r = r[:3] + [",".join(sorted(host_mem))] if r[3] != ns_rows[r[0]][3] else r
            if db == "passwd" and r[0] in shells and len(r) >= 7:
                r = r[:6] + [shells[r[0]]]
            out.append(r)
        for n in sorted(names - known):
            if n in ns_rows:
                r = list(ns_rows[n])
                if db == "passwd" and n in shells and len(r) >= 7:
                    r = r[:6] + [shells[n]]
                out.append(r)
        if board_rows or out:
            _write_db(board_etc / db, out, 0o640 if "shadow" in db else 0o644)


def _sync_back(board: VirtualBoard) -> None:
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
        _sync_accounts(upper_etc, r / "etc", state.get("board_only", {}), state.get("shells", {}))
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


# --------------------------------------------------------------------------- the agent (inside the ns)
def _mount(*args: str) -> None:
    _run(["mount", *args])


def _bind(src: str | Path, dst: str | Path, ro: bool = False) -> None:
    _mount("--bind", str(src), str(dst))
    if ro:
        _mount("-o", "remount,bind,ro", str(dst))


def _run(argv: list[str]) -> None:
    res = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True, check=False)
    if res.returncode != 0:
        raise SimError(f"{' '.join(argv[:4])} failed: {res.stdout.strip()[:300]}")


def _write(path: Path, text: str | bytes, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    os.chmod(path, mode)


@functools.cache
def _world_python() -> str:
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
    _run(["cp", "-a", str(upper), str(vu)])
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
    (:func:`_world_python`); if that interpreter itself lives under the host's ``/root`` (pyenv),
    its prefix is bound back read-only at the same path so it keeps working."""
    py = Path(os.path.realpath(os.environ.get("EDGE_LLM_SIM_WORLD_PYTHON") or _world_python()))
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
    os.symlink(os.environ.get("EDGE_LLM_SIM_WORLD_PYTHON") or _world_python(), sim / runtime.PYTHON_LINK)
    found = real_litert.locate()        # Google's runtime and the tiny model, where facts.json says they are
    if not isinstance(found, str):
        for src, name in zip(found, (real_litert.BOARD_LIB_DIR, real_litert.BOARD_MODEL_DIR), strict=True):
            (sim / name).mkdir(mode=0o755)
            _bind(src.parent, sim / name, ro=True)
    shutil.copyfile(hd / "facts.json", sim / runtime.FACTS_NAME)
    os.chmod(sim / runtime.FACTS_NAME, 0o644)
    ota = ostree_board.sysroot(board)
    sota = ostree_board.booted_root(board) is not None
    if sota:
        _write(sim / "reboot", ostree_board.reboot_script(board), 0o755)
        _write(sim / "boot_id", ostree_board.boot_id(board) + "\n", 0o444)
        _bind(sim / "boot_id", "/proc/sys/kernel/random/boot_id", ro=True)
    login = sim / "login-shell"
    _write(login, f"#!{SIM_DIR}/{runtime.PYTHON_LINK} -S\n# pam_limits stand-in (provisioner.sim.limits)\n"
                  f"import sys\nsys.path.insert(0, '{SIM_DIR}/src')\nfrom provisioner.sim.limits import login_shell\n"
                  "login_shell()\n", 0o755)

    # /etc overlay: host /etc below, the board's identity and accounts on top
    upper = hd / "etc-upper"
    _rmtree(upper)
    upper.mkdir(parents=True)
    board_only = merge_accounts(Path("/etc"), r / "etc", upper)
    shells: dict[str, str] = {}
    for db in ("passwd",):
        rows = _read_db(upper / db)
        for row in rows:
            if len(row) >= 7 and not row[6].endswith(("nologin", "false", "sync")) and row[6]:
                shells[row[0]] = row[6] if os.path.exists(row[6]) else "/bin/sh"
                row[6] = str(login)
        _write_db(upper / db, rows)
    (sim / "shells.json").write_text(json.dumps(shells))
    os.chmod(sim / "shells.json", 0o644)
    _write(upper / "os-release", _os_release(r))
    _write(upper / "hostname", (board.data.get("hostname") or board.serial.lower()) + "\n")
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
            _write(up / "systemctl", systemctl.executable_text(), 0o755)
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
        fastrpc_gid = grp.getgrnam(layout.FASTRPC_GROUP).gr_gid
    with contextlib.suppress(KeyError):
        import pwd
        fastrpc_uid = pwd.getpwnam(layout.FASTRPC_OWNER).pw_uid
    os.mknod(layout.FASTRPC_DEVICE, stat.S_IFCHR | layout.FASTRPC_MODE, os.makedev(*FASTRPC_DEV_NUM))
    os.chown(layout.FASTRPC_DEVICE, fastrpc_uid, fastrpc_gid)    # what fastrpc's udev rule sets
    os.chmod(layout.FASTRPC_DEVICE, layout.FASTRPC_MODE)
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
        _write(soc0 / name, val + "\n", 0o444)
    fw = Path("/sys/firmware")
    _bind(fw, hostsys)
    _mount("-t", "tmpfs", "-o", "mode=0755", "edge-llm-firmware", str(fw))
    for entry in sorted(os.listdir(hostsys)):
        if (hostsys / entry).is_dir():
            (fw / entry).mkdir()
            _bind(hostsys / entry, fw / entry)
    subprocess.run(["umount", "-l", str(hostsys)], check=False)
    dt = fw / "devicetree/base"
    _write(dt / "compatible", b"".join(c.encode() + b"\0" for c in b.dt_compatible), 0o444)
    _write(dt / "model", b.dt_model.encode() + b"\0", 0o444)
    _write(dt / "serial-number", board.serial.lower().encode() + b"\0", 0o444)
    mod = hd / "sys-module"
    _rmtree(mod)
    param = mod / "qcom_scm/parameters/download_mode"
    _write(param, qcom_scm.show(int(board.data.get("download_mode", 1)), qcom_scm.names(board.data)), 0o644)
    _bind(mod, "/sys/module")

    # /proc/cmdline: the flashed image's kernel command line
    dm = int(board.data.get("download_mode", 1))
    cmdline = hd / "cmdline"
    # an OSTree board's kernel gets the booted BLS entry's options (ostree=..., what deploy carried)
    base = ostree_board.booted_cmdline(board) if sota else rootfs_cmdline(r)
    if "qcom_scm.download_mode=" not in base:
        base += f" qcom_scm.download_mode={dm}"
    _write(cmdline, base + "\n", 0o444)
    _bind(cmdline, "/proc/cmdline", ro=True)
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


def _read_download_mode(param: Path, by_name: bool) -> int | None:
    """The mode in the board's parameter file: what the kernel shows, or what was just written to it."""
    try:
        text = param.read_text()
    except OSError:
        return None
    return qcom_scm.store(text, by_name)


HOLDER_NAME = "agent"           # the holder script, in the namespace's /run/edge-llm-sim
VOLATILE_LIST = "volatile"      # "<tmpfs upper> <board-dir upper>" lines the holder copies back on stop
SHELL = "/bin/sh"

# The namespace's long-lived process once the mounts are built. A shell costs ~1-2 MB where the
# Python agent it replaces cost ~21 MB per board; it keeps the namespace alive, reaps orphans
# (PR_SET_CHILD_SUBREAPER survives the exec; the shell's wait collects any child), restarts the
# ssh socket (LISTENER) if it dies, and on SIGTERM stops services (Python only if a service runner
# is alive), the socket, and copies tmpfs overlay uppers back. Nothing in it polls: it sleeps in
# `wait` until a child exits or a signal comes. Arguments: sim root, serial (both name the board in
# `ps`), host dir, namespace inode, address, port, python.
HOLDER = r"""# edge-llm virtual board: holds the board's mount namespace (provisioner.sim.host)
hd=$3 mntns=$4 addr=$5 port=$6 py=$7 sim=${0%/*}
stopping= sock=
trap 'stopping=1' TERM INT HUP
while [ -z "$stopping" ]; do
    "$hd/@LISTENER@" "$addr" "$port" /usr/sbin/sshd -i -e -f "$hd/sshd_config" </dev/null &
    sock=$!
    printf '{"pid": %s, "mntns": %s, "ready": true, "listener": %s, "port": %s}\n' "$$" "$mntns" "$sock" "$port" \
        >"$hd/.agent.json.tmp" && mv -f "$hd/.agent.json.tmp" "$hd/agent.json"
    wait "$sock"
    while [ -z "$stopping" ] && kill -0 "$sock" 2>/dev/null; do wait "$sock"; done
    if [ -z "$stopping" ]; then
        echo "agent: the ssh socket exited; restarting it" >&2
        sleep 0.2
    fi
done
for f in "$sim"/systemd/runners/*; do
    if [ -e "$f" ]; then
        "$py" -S -c 'import sys; sys.path.insert(0, sys.argv[1])
from provisioner.sim.systemctl import lifecycle
lifecycle("shutdown")' "$sim/src"
        break
    fi
done
kill -TERM "$sock" 2>/dev/null && wait "$sock"
if [ -s "$sim/volatile" ]; then
    while read -r vu upper; do
        rm -rf "$upper" && cp -a "$vu" "$upper"
    done <"$sim/volatile"
fi
exit 0
""".replace("@LISTENER@", LISTENER)


def agent_main(root: str, serial: str) -> int:
    """The namespace's first process: build the mounts, boot the services, then exec the holder."""
    board = VirtualBoard.load(root, serial)
    hd = host_dir(board)
    mntns = os.stat("/proc/self/ns/mnt").st_ino
    host_ns = int(os.environ.get("EDGE_LLM_SIM_PARENT_MNTNS") or 0)
    if mntns == host_ns:
        print("agent: not in a private mount namespace; refusing to mount anything", file=sys.stderr)
        return 1
    info: dict[str, Any] = {"pid": os.getpid(), "mntns": mntns, "ready": False}
    _write(hd / "agent.json", json.dumps(info))
    state = setup_namespace(board)
    (hd / "overlay.json").write_text(json.dumps(state))
    sim = Path(SIM_DIR)
    _write(sim / VOLATILE_LIST, "".join(f"{vu} {upper}\n" for vu, upper in VOLATILE.values()))
    _write(sim / HOLDER_NAME, HOLDER, 0o755)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(36, 1, 0, 0, 0)          # PR_SET_CHILD_SUBREAPER (kept across exec): orphaned services stay ours
    # Services start from a fresh interpreter that imports only the service manager: its runners
    # (double-forked, so reparented to this process) do not carry this agent's heap.
    py = str(sim / runtime.PYTHON_LINK)     # the world python: this interpreter may live under the hidden /root
    subprocess.run([py, "-S", "-c", "import sys; sys.path.insert(0, sys.argv[1])\n"
                    "from provisioner.sim.systemctl import lifecycle\nlifecycle('boot')", f"{SIM_DIR}/src"],
                   stdin=subprocess.DEVNULL, cwd="/", check=False)
    port = (hd / "port").read_text().strip()
    sys.stdout.flush()
    sys.stderr.flush()
    for sig in (signal.SIGPIPE, signal.SIGXFSZ):     # Python ignores these; sshd and services must not inherit that
        signal.signal(sig, signal.SIG_DFL)
    os.execv(SHELL, [SHELL, str(sim / HOLDER_NAME), root, serial, str(hd), str(mntns), SSH_HOST, port, py])
    return 1     # not reached


def download_mode_param(board: VirtualBoard) -> Path:
    """Host-side path of the board's ``/sys/module/qcom_scm/parameters/download_mode`` (bind-mounted)."""
    return host_dir(board) / "sys-module/qcom_scm/parameters/download_mode"


def mirror_download_mode(board: VirtualBoard, last: int | None) -> int | None:
    """Keep ``download_mode`` in the board's sysfs and in ``board.json`` in step; returns the value to
    pass as ``last`` next time (None: first look after the host started, board.json wins).

    A write on the board (``echo 1 > /sys/module/qcom_scm/parameters/download_mode`` over ssh) goes
    to board.json, so the console's crash handling agrees; a change recorded in board.json (the
    serial console) shows up in the board's sysfs. The supervisor calls this on every poll of a
    board whose host runs, instead of one polling process per board. ``board`` must be freshly
    reloaded by the caller.
    """
    param = download_mode_param(board)
    by_name = qcom_scm.names(board.data)
    cur = _read_download_mode(param, by_name)
    if cur is None:
        return last
    if last is not None and cur != last:              # written on the board: tell board.json
        with contextlib.suppress(SimError, OSError):
            board.update(download_mode=cur)
            _show_download_mode(param, cur, by_name)
        return cur
    want = int(board.data.get("download_mode") or 0)
    if want != cur:                                   # written elsewhere: show it on the board
        with contextlib.suppress(OSError):
            param.write_text(qcom_scm.show(want, by_name))
        return want
    with contextlib.suppress(OSError):
        _show_download_mode(param, cur, by_name)
    return cur


def _show_download_mode(param: Path, mode: int, by_name: bool) -> None:
    """After a write (``echo 1``), the parameter reads back the kernel's own spelling (``full``)."""
    shown = qcom_scm.show(mode, by_name)
    if param.read_text() != shown:
        param.write_text(shown)


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "agent":
        try:
            sys.exit(agent_main(sys.argv[2], sys.argv[3]))
        except Exception as exc:  # noqa: BLE001 - the parent reads the log tail
            print(f"agent failed: {type(exc).__name__}: {exc}", file=sys.stderr)
            sys.exit(1)
    print("usage: python -m provisioner.sim.host agent ROOT SERIAL", file=sys.stderr)
    sys.exit(2)
