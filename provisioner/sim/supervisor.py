"""One background process per sim root that plays the "hardware" of every virtual board.

It owns each board's console pty (master side), drives boot sequences (``booting`` -> boot log
-> root filesystem extracted from the flashed LUN0 -> sshd started -> ``booted`` -> getty) and
reacts to power events other processes record in ``board.json`` (qdl's final reset, ``sim
edl``, ``reboot edl`` on the console, a cDSP crash). A single asyncio loop serves all boards, so
64 boards cost one Python process, not 64.

It survives the CLI that started it (own session, pidfile ``<root>/supervisor.pid``, log
``<root>/supervisor.log``) and on SIGTERM stops every board's sshd and removes its console
links. State lives on disk, so a restarted supervisor picks up where the last one stopped.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import fcntl
import os
import shutil
import signal
import subprocess
import sys
import termios
import time
import tty
from pathlib import Path
from typing import Any

from provisioner.errors import SimError
from provisioner.sim import console as con
from provisioner.sim import host
from provisioner.sim.board import VirtualBoard, boards_dir, env_number, list_boards, sim_root

POLL_S = 0.2
PIDFILE = "supervisor.pid"
LOGFILE = "supervisor.log"
SLOW_FACTOR = 4.0


def console_lag() -> float:
    """Seconds before a board reacts to console input (``PROVISIONER_SIM_CONSOLE_LAG_S``, default 0):
    a stalled board or a starved station host, where prompts arrive long after they were asked for."""
    return env_number("PROVISIONER_SIM_CONSOLE_LAG_S", 0.0)


def boot_scale() -> float:
    """Multiplier for boot delays (``PROVISIONER_SIM_BOOT_SCALE``; 0 = as fast as possible)."""
    return env_number("PROVISIONER_SIM_BOOT_SCALE", 1.0)


# ---------------------------------------------------------------------------------------------- host
def _start_host(board: VirtualBoard) -> dict[str, Any]:
    """Start the board's sshd (``provisioner.sim.host``) and return where it listens.

    Called from worker threads, so it works on its own handle of the board.
    """
    address, port = host.start_host(VirtualBoard.load(board.root, board.serial))
    return {"host": address, "port": int(port)}


def _mirror_download_mode(board: VirtualBoard, last: int | None) -> int | None:
    """download_mode between the board's sysfs (ssh side) and board.json (console side), see host.py."""
    return host.mirror_download_mode(board, last)


def _stop_host(board: VirtualBoard) -> None:
    try:
        host.stop_host(board)
    except Exception as exc:  # noqa: BLE001 - teardown must go on for the other boards
        print(f"{board.serial}: stop_host failed: {exc}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------- rootfs
def _ext4_size(lun: Path, offset: int) -> int | None:
    with open(lun, "rb") as fh:
        fh.seek(offset + 1024)
        sb = fh.read(1024)
    if len(sb) < 1024 or sb[56:58] != b"\x53\xef":
        return None
    blocks = int.from_bytes(sb[4:8], "little")
    block_size = 1024 << int.from_bytes(sb[24:28], "little")
    return blocks * block_size


def extract_rootfs(board: VirtualBoard) -> str | None:
    """Extract the flashed ``rootfs`` partition into ``boards/<serial>/rootfs``; None if OK, else why not.

    Skipped when the tree already matches the last flash (a reboot does not change the disk).
    """
    board.reload()
    part = board.partitions().get("rootfs")
    if not part:
        return "no rootfs partition (board never flashed)"
    flashed = board.data.get("flashed")
    if board.rootfs_dir.is_dir() and board.data.get("rootfs_from") == flashed:
        return None
    ss = board.sector_size
    lun = board.lun_path(part["lun"])
    offset = part["start_sector"] * ss
    size = _ext4_size(lun, offset)
    if size is None or size > part["num_sectors"] * ss:
        return "rootfs partition holds no ext4 file system"
    img = board.dir / ".rootfs.img"
    with open(lun, "rb") as src, open(img, "wb") as dst:
        src.seek(offset)
        left = size
        while left > 0:
            chunk = src.read(min(left, 1 << 20))
            if not chunk:
                break
            if chunk.count(0) == len(chunk):
                dst.seek(len(chunk), os.SEEK_CUR)     # keep the copy sparse
            else:
                dst.write(chunk)
            left -= len(chunk)
        dst.truncate(size)
    new = board.dir / ".rootfs.new"
    shutil.rmtree(new, ignore_errors=True)
    new.mkdir()
    try:
        res = subprocess.run(["debugfs", "-R", f"rdump / {new}", str(img)], capture_output=True, text=True,
                             check=False, timeout=120)
        if res.returncode != 0 or not (new / "etc").is_dir():
            shutil.rmtree(new, ignore_errors=True)
            return f"debugfs could not read the rootfs: {res.stderr.strip()[-200:]}"
        old = board.dir / ".rootfs.old"
        if board.rootfs_dir.exists():
            shutil.rmtree(old, ignore_errors=True)
            os.replace(board.rootfs_dir, old)
        os.replace(new, board.rootfs_dir)
        shutil.rmtree(old, ignore_errors=True)
    finally:
        with contextlib.suppress(FileNotFoundError):
            img.unlink()
    board.update(rootfs_from=flashed)
    return None


# ---------------------------------------------------------------------------------------------- one board
class BoardHardware:
    """Console pty + boot sequencing of one board inside the supervisor's loop."""

    def __init__(self, sup: Supervisor, board: VirtualBoard) -> None:
        self.sup = sup
        self.board = board
        self.master, self.slave = os.openpty()
        tty.setraw(self.slave)
        os.set_blocking(self.master, False)
        self.pty = os.ttyname(self.slave)
        os.chmod(self.pty, 0o660)
        link_tmp = board.dir / ".console.tmp"
        with contextlib.suppress(FileNotFoundError):
            link_tmp.unlink()
        link_tmp.symlink_to(self.pty)
        os.replace(link_tmp, board.console_link)
        self.log = open(board.log_path, "ab", buffering=0)  # noqa: SIM115 - closed in close()
        self.shell = con.Shell(board, self.write, {"power": self.power, "crash": self.crash,
                                                     "later": self.sup.loop.call_later})
        self.task: asyncio.Task[None] | None = None
        self.host_up = False
        self.dm_last: int | None = None       # download_mode last seen on both sides (None: host just started)
        self.crash_shown = False
        self.mtime = 0
        board.reload()
        self.seen = (board.state, board.data.get("power_seq", 0))
        with board.transaction() as data:
            data["console"] = self.pty
            data.setdefault("pids", {})["supervisor"] = os.getpid()
        sup.loop.add_reader(self.master, self.on_input)
        if board.state == "booting":
            self.start_boot()
        elif board.state == "booted":
            self.task = sup.loop.create_task(self.resume())

    # ---------------------------------------------------------------- io
    def write(self, data: bytes) -> None:
        self.log.write(data)
        for _ in range(2):
            try:
                os.write(self.master, data)
                return
            except BlockingIOError:
                # Nobody is reading the console: like a UART with no listener, old output is lost.
                termios.tcflush(self.slave, termios.TCIFLUSH)
            except OSError:
                return

    def lines(self, lines: list[str]) -> None:
        self.write(("\r\n".join(lines) + "\r\n").encode())

    def on_input(self) -> None:
        try:
            data = os.read(self.master, 4096)
        except (BlockingIOError, OSError):
            return
        if not data:
            return
        lag = console_lag()
        if lag:
            self.sup.loop.call_later(lag, self._feed, data)
        else:
            self._feed(data)

    def _feed(self, data: bytes) -> None:
        try:
            self.shell.feed(data)
        except Exception as exc:  # noqa: BLE001 - a bad line must not kill the supervisor
            print(f"{self.board.serial}: console error: {exc!r}", file=sys.stderr, flush=True)
            self.write(b"-sh: internal error\r\n")

    # ---------------------------------------------------------------- power events
    def power(self, target: str, event: str | None = None) -> None:
        """A power event requested from the console (``reboot``, ``reboot edl``)."""
        self.board.set_state(target, event=event)
        self.sync()

    def crash(self) -> None:
        """cDSP fatal error: ramdump (05c6:900e) with download_mode=1, else a reboot."""
        self.board.reload()
        dm = int(self.board.data.get("download_mode") or 0)
        self.lines(con.crash_lines(self.board, dm))
        self.crash_shown = True
        self.power("ramdump" if dm else "booting", event="cdsp-crash")

    def sync(self) -> None:
        """React to a state change made by any process (qdl reset, CLI, console)."""
        try:
            self.board.reload()
        except SimError:
            return
        seq = self.board.data.get("seq", 0)
        if seq == self.mtime:          # nothing written since the last look
            return
        self.mtime = seq
        key = (self.board.state, self.board.data.get("power_seq", 0))
        if key == self.seen:
            return
        self.seen = key
        state = self.board.state
        if state == "booted":
            return           # only this supervisor moves a board to booted
        if self.task is not None:
            self.task.cancel()
            self.task = None
        self.shell.reset()
        if self.host_up or self.board.data.get("ssh"):
            self.sup.loop.run_in_executor(None, self._stop_host)
        if self.board.data.get("event") == "cdsp-crash" and not self.crash_shown:
            self.lines(con.crash_lines(self.board, 1 if state == "ramdump" else 0))
        self.crash_shown = False
        if state == "booting":
            self.start_boot()

    def mirror(self) -> None:
        """Each poll, while the board's host runs (the board was just reloaded by sync())."""
        if self.host_up:
            self.dm_last = _mirror_download_mode(self.board, self.dm_last)

    def _stop_host(self) -> None:
        """Runs in a worker thread: uses its own board handle, never the loop's."""
        try:
            b = VirtualBoard.load(self.board.root, self.board.serial)
        except SimError:
            return
        _stop_host(b)
        self.host_up = False
        with contextlib.suppress(SimError):
            if b.reload().data.get("ssh") and b.state != "booted":
                b.update(ssh=None)

    # ---------------------------------------------------------------- boot
    def start_boot(self) -> None:
        self.task = self.sup.loop.create_task(self.boot(self.seen))

    async def _sleep(self, s: float) -> None:
        scale = boot_scale() * (SLOW_FACTOR if self.board.has_fault("slow") else 1.0)
        if scale > 0:
            await asyncio.sleep(s * scale)

    async def boot(self, key: tuple[str, int]) -> None:
        b = self.board
        self.write(con.GARBAGE + b"\r\n")
        for line in con.boot_banner(b):
            self.lines([line])
            await self._sleep(0.02)
        await self._sleep(0.2)
        problem = await asyncio.to_thread(extract_rootfs, b)
        if self.seen != key:
            return
        if problem:
            self.lines(["Loading Image Done : 2312 ms", "[    0.000000] Booting Linux on physical CPU 0x0000000000",
                        f"[    2.104512] VFS: Unable to mount root fs ({problem})",
                        "[    2.104600] Kernel panic - not syncing: VFS: Unable to mount root fs on "
                        "unknown-block(0,0)"])
            return
        cmdline = con.read_cmdline(b)
        fields: dict[str, Any] = {"build_id": con.os_release(b.rootfs_dir).get("BUILD_ID")}
        dm = con.cmdline_download_mode(cmdline)
        if dm is not None:
            fields["download_mode"] = dm
        b.update(**fields)
        for line in con.kernel_lines(b, cmdline):
            self.lines([line])
            await self._sleep(0.02)
        self.lines(con.systemd_lines(b))
        ssh = None
        try:
            # With the ``unreachable`` fault host.start_host records an address nothing listens on.
            ssh = await asyncio.to_thread(_start_host, b)
            self.host_up = ssh is not None
            self.dm_last = None
        except Exception as exc:  # noqa: BLE001 - the board boots without network, as a real one would
            print(f"{b.serial}: start_host failed: {exc}", file=sys.stderr, flush=True)
            self.lines(["[FAILED] Failed to start sshd.service - OpenSSH Daemon."])
        if self.seen != key:
            if self.host_up:
                await asyncio.to_thread(self._stop_host)
            return
        b.set_state("booted", ssh=ssh)
        self.seen = (b.state, b.data.get("power_seq", 0))
        self.mtime = b.data.get("seq", 0)
        await self._sleep(0.1)
        if not b.has_fault("no-prompt"):
            self.shell.start_getty()

    async def resume(self) -> None:
        """A restarted supervisor found this board booted: bring its network and getty back."""
        b = self.board
        try:
            ssh = await asyncio.to_thread(_start_host, b)
            self.host_up = ssh is not None
            self.dm_last = None
            b.update(ssh=ssh)
        except Exception as exc:  # noqa: BLE001
            print(f"{b.serial}: start_host failed: {exc}", file=sys.stderr, flush=True)
        self.mtime = b.reload().data.get("seq", 0)
        if not b.has_fault("no-prompt"):
            self.shell.start_getty()

    def close(self, stop_host: bool = True) -> None:
        if self.task is not None:
            self.task.cancel()
        with contextlib.suppress(Exception):
            self.sup.loop.remove_reader(self.master)
        if stop_host:
            _stop_host(self.board)
        for fd in (self.master, self.slave):
            with contextlib.suppress(OSError):
                os.close(fd)
        with contextlib.suppress(OSError):
            if self.board.console_link.is_symlink():
                self.board.console_link.unlink()
        with contextlib.suppress(Exception):
            if (self.board.dir / "board.json").exists():
                self.board.update(console=None, ssh=None)
        self.log.close()


# ---------------------------------------------------------------------------------------------- supervisor
class Supervisor:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.loop = asyncio.get_event_loop()
        self.boards: dict[str, BoardHardware] = {}
        self.stopping = asyncio.Event()

    def scan(self) -> None:
        present = set()
        bdir = boards_dir(self.root)
        if bdir.is_dir():
            for d in bdir.iterdir():
                if (d / "board.json").is_file():
                    present.add(d.name)
        for serial in sorted(present - set(self.boards)):
            try:
                self.boards[serial] = BoardHardware(self, VirtualBoard.load(self.root, serial))
            except (SimError, OSError) as exc:
                print(f"{serial}: cannot attach: {exc}", file=sys.stderr, flush=True)
        for serial in sorted(set(self.boards) - present):
            self.boards.pop(serial).close(stop_host=True)
        for hw in list(self.boards.values()):
            try:
                hw.sync()
                hw.mirror()
            except Exception as exc:  # noqa: BLE001
                print(f"{hw.board.serial}: sync failed: {exc!r}", file=sys.stderr, flush=True)

    async def run(self) -> None:
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            self.loop.add_signal_handler(sig, self.stopping.set)
        self.scan()
        _write_pidfile(self.root, os.getpid())
        print(f"supervisor {os.getpid()} serving {len(self.boards)} board(s) in {self.root}", flush=True)
        while not self.stopping.is_set():
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.stopping.wait(), POLL_S)
            if not self.stopping.is_set():
                self.scan()
        for hw in self.boards.values():
            if hw.task is not None:
                hw.task.cancel()
        await asyncio.to_thread(self._close_all)
        with contextlib.suppress(FileNotFoundError):
            pidfile = self.root / PIDFILE
            if _read_pid(self.root) == os.getpid():
                pidfile.unlink()

    def _close_all(self) -> None:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=16) as pool:     # stopping 64 sshds one by one takes long
            list(pool.map(lambda hw: hw.close(stop_host=True), list(self.boards.values())))
        self.boards.clear()


def _write_pidfile(root: Path, pid: int) -> None:
    tmp = root / f".{PIDFILE}.tmp"
    tmp.write_text(f"{pid}\n", encoding="ascii")
    os.replace(tmp, root / PIDFILE)


def _read_pid(root: Path) -> int | None:
    try:
        return int((Path(root) / PIDFILE).read_text().strip())
    except (OSError, ValueError):
        return None


def _is_supervisor(pid: int) -> bool:
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return b"provisioner.sim.supervisor" in cmd


def running_pid(root: Path | str | None = None) -> int | None:
    """PID of this root's live supervisor, or None."""
    pid = _read_pid(sim_root(root))
    return pid if pid and _is_supervisor(pid) else None


def ensure_running(root: Path | str | None = None, timeout_s: float = 15.0) -> int:
    """Start the supervisor for ``root`` unless it runs already; returns its PID."""
    root_p = sim_root(root)
    root_p.mkdir(parents=True, exist_ok=True)
    lock_fd = os.open(root_p / ".supervisor.lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(lock_fd, fcntl.LOCK_EX)
        pid = running_pid(root_p)
        if pid:
            return pid
        with contextlib.suppress(FileNotFoundError):
            (root_p / PIDFILE).unlink()
        env = dict(os.environ, PROVISIONER_SIM_ROOT=str(root_p))
        pkg_parent = str(Path(__file__).resolve().parents[2])
        env["PYTHONPATH"] = pkg_parent + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        log = open(root_p / LOGFILE, "ab")  # noqa: SIM115 - handed to the child
        try:
            proc = subprocess.Popen([sys.executable, "-m", "provisioner.sim.supervisor", "--root", str(root_p)],
                                    stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env,
                                    start_new_session=True, close_fds=True)
        finally:
            log.close()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if _read_pid(root_p) == proc.pid:
                return proc.pid
            if proc.poll() is not None:
                break
            time.sleep(0.05)
        tail = (root_p / LOGFILE).read_text(errors="replace").splitlines()[-5:]
        with contextlib.suppress(ProcessLookupError):
            if proc.poll() is None:
                proc.kill()
        raise SimError(f"the sim supervisor did not start: {' | '.join(tail) or 'no output'}",
                       f"see {root_p / LOGFILE}")
    finally:
        fcntl.flock(lock_fd, fcntl.LOCK_UN)
        os.close(lock_fd)


def stop(root: Path | str | None = None, timeout_s: float = 15.0) -> bool:
    """SIGTERM the supervisor (it stops every sshd); SIGKILL after ``timeout_s``. True if one ran."""
    root_p = sim_root(root)
    pid = running_pid(root_p)
    if not pid:
        return False
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and _is_supervisor(pid):
        time.sleep(0.05)
    if _is_supervisor(pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        for _ in range(100):
            if not _is_supervisor(pid):
                break
            time.sleep(0.02)
    with contextlib.suppress(FileNotFoundError):
        (root_p / PIDFILE).unlink()
    return True


def wait_for_state(board: VirtualBoard, states: tuple[str, ...] | str, timeout_s: float = 60.0) -> VirtualBoard:
    """Poll ``board.json`` until the board is in one of ``states`` (SimError on timeout)."""
    if isinstance(states, str):
        states = (states,)
    deadline = time.monotonic() + timeout_s
    while True:
        board.reload()
        if board.state in states:
            return board
        if time.monotonic() > deadline:
            raise SimError(f"board {board.serial} stayed '{board.state}', expected {'/'.join(states)} "
                           f"within {timeout_s:.0f}s", f"see {board.log_path}")
        time.sleep(0.05)


def status(root: Path | str | None = None) -> dict[str, Any]:
    """Machine-readable view of a sim root (for ``sim status --json``)."""
    root_p = sim_root(root)
    return {
        "root": str(root_p),
        "supervisor": running_pid(root_p),
        "boards": [{k: v for k, v in b.data.items() if k not in ("root_password",)} for b in list_boards(root_p)],
    }


FDS_PER_BOARD = 4           # measured ~3 at 256 boards: console pty master, its log, a worker's files
FDS_WANTED = 64 + FDS_PER_BOARD * 1024       # room for a 1,024-board sim root


def raise_fd_limit(wanted: int = FDS_WANTED) -> int:
    """Raise the soft RLIMIT_NOFILE towards ``wanted`` (never above the hard limit); returns the soft
    limit now. The usual default soft limit of 1024 runs out near 256 boards, one supervisor
    holding every board's console; the hard limit (often 524288) allows far more."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="provisioner.sim.supervisor")
    ap.add_argument("--root", default=None)
    args = ap.parse_args(argv)
    raise_fd_limit()
    root = sim_root(args.root)
    root.mkdir(parents=True, exist_ok=True)
    sup_loop = asyncio.new_event_loop()
    asyncio.set_event_loop(sup_loop)
    try:
        sup_loop.run_until_complete(Supervisor(root).run())
    finally:
        sup_loop.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())


__all__ = ["ensure_running", "stop", "status", "wait_for_state", "extract_rootfs", "running_pid"]
