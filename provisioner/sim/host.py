"""Starting and stopping a virtual EVK's network side: its own mount namespace, reached by ssh.

A booted virtual board is reached like a real one: ``ssh -p PORT root@127.0.0.1`` with the sim
controller key (:mod:`provisioner.sim.sshd`). The session lands in a private mount namespace that
presents the board at the real absolute paths the playbooks use (:mod:`provisioner.sim.namespace`),
with its stateful faults written into the rootfs first (:mod:`provisioner.sim.board_state`). This
module starts that namespace, waits for it, and tears it down.

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
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from provisioner.errors import SimError
from provisioner.sim import ports, qcom_scm, runtime
from provisioner.sim.board import VirtualBoard, env_number, host_dir, list_boards
from provisioner.sim.board_state import apply_faults, facts
from provisioner.sim.namespace import VOLATILE, setup_namespace, sync_back, world_python, write
from provisioner.sim.namespace import rootfs_cmdline as rootfs_cmdline
from provisioner.sim.sshd import (
    LISTENER,
    SSH_HOST,
    add_known_host,
    controller_key,
    first_boot_identity,
    install_listener,
    write_sshd_config,
)
from provisioner.sim.sshd import SIM_HOST_KEY as SIM_HOST_KEY
from provisioner.sim.sshd import inventory_hosts as inventory_hosts
from provisioner.sim.sshd import known_hosts as known_hosts
from provisioner.sim.sshd import ssh_argv as ssh_argv
from provisioner.sim.sshd import write_inventory as write_inventory

# the `x as x` imports above are re-exports: tests and bench scripts reach a board through this module
SIM_DIR = runtime.SIM_DIR
START_TIMEOUT_S = 60.0          # generous: CI machines with 2 busy cores start python slowly


# --------------------------------------------------------------------------- start / stop
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
    (hd / "facts.json").write_text(json.dumps(facts(board, time_scale), indent=1), encoding="utf-8")
    host_key = first_boot_identity(board)
    write_sshd_config(hd, key, rootfs, host_key)
    install_listener(hd)
    add_known_host(board.root, port, host_key.with_suffix(".pub").read_text().split()[:2])
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
    sync_back(board)
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
    env["EDGE_LLM_SIM_WORLD_PYTHON"] = world_python()    # probed once here, not by every agent
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
        sync_back(board)


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
    write(hd / "agent.json", json.dumps(info))
    state = setup_namespace(board)
    (hd / "overlay.json").write_text(json.dumps(state))
    sim = Path(SIM_DIR)
    write(sim / VOLATILE_LIST, "".join(f"{vu} {upper}\n" for vu, upper in VOLATILE.values()))
    write(sim / HOLDER_NAME, HOLDER, 0o755)
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
