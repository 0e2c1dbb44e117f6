"""The processes a started unit leaves behind on a virtual board: service runners and socket holders.

Services really run: ``start`` forks a detached runner that applies the unit's ``User=``,
``Group=``, ``SupplementaryGroups=``, ``Environment=``/``EnvironmentFile=``, ``WorkingDirectory=``
and ``LimitMEMLOCK=`` (else ``DefaultLimitMEMLOCK=`` from ``/etc/systemd/system.conf[.d]`` as read at
boot or ``daemon-reexec``, else systemd's 8M) and execs ``ExecStart=``; it records the main pid
and restarts per ``Restart=``/``RestartSec=`` with systemd's start-rate limit. Output goes to a
per-unit journal file (``journalctl -u`` is not emulated; ``status`` shows the tail). A socket
unit's holder keeps its listening sockets, hands them to the service's runner and starts the
service on incoming traffic. Apart from :mod:`provisioner.sim.service_manager` because these run
detached, long after the ``systemctl`` that started them exited; they reach the manager's state
only through the ``Manager`` they are given. Only the standard library is imported.
"""

from __future__ import annotations

import contextlib
import fcntl
import grp
import os
import pwd
import re
import select
import shlex
import signal
import socket
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from provisioner.sim.unit_files import Unit, UnitError, env_assignments, paired_unit

if TYPE_CHECKING:
    from provisioner.sim.service_manager import Manager

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
START_LIMIT_BURST = 5
START_LIMIT_INTERVAL_S = 10.0
MAXFD = 65536
SD_LISTEN_FDS_START = 3     # sd_listen_fds(3): the first passed descriptor


def _unit_env(unit: Unit, user: pwd.struct_passwd | None) -> dict[str, str]:
    env = {"PATH": DEFAULT_PATH, "LANG": "C.UTF-8", "INVOCATION_ID": os.urandom(16).hex()}
    if user:
        env.update(USER=user.pw_name, LOGNAME=user.pw_name, HOME=user.pw_dir, SHELL=user.pw_shell)
    for f in unit.values("Service", "EnvironmentFile"):
        optional = f.startswith("-")
        path = f.lstrip("-")
        try:
            for line in Path(path).read_text(encoding="utf-8").splitlines():
                line = line.strip()
                if line and not line.startswith("#") and "=" in line:
                    k, v = line.split("=", 1)
                    env[k.strip()] = v.strip().strip('"').strip("'")
        except OSError:
            if not optional:
                raise
    for a in env_assignments(unit):
        if "=" in a:
            k, v = a.split("=", 1)
            env[k] = v
    return env



def journal_path(mgr: Manager, name: str) -> Path:
    return mgr.state_dir / "journal" / f"{name}.log"


def journal(mgr: Manager, name: str, *lines: str) -> None:
    """Append lines to a unit's journal file from a process whose stderr is not that journal (the CLI)."""
    jp = journal_path(mgr, name)
    jp.parent.mkdir(parents=True, exist_ok=True)
    with open(jp, "a", encoding="utf-8") as fh:
        fh.writelines(time.strftime("%b %d %H:%M:%S ") + line + "\n" for line in lines)



def _close_fds_except(keep: tuple[int, ...]) -> None:
    low = 3
    for fd in sorted(keep):
        os.closerange(low, fd)
        low = fd + 1
    os.closerange(low, MAXFD)


def detached(mgr: Manager, name: str, body: Callable[[], None], keep: tuple[int, ...] = ()) -> None:
    """Run ``body`` in a double-forked process of its own session (reparented to the board's subreaper, so
    it outlives the systemctl that started it), stdout/stderr on the unit's journal, no fds open but stdio
    and ``keep``. Returns in the caller once the intermediate child has exited."""
    pid = os.fork()
    if pid:
        os.waitpid(pid, 0)
        return
    try:
        os.setsid()
        if os.fork():
            os._exit(0)
        devnull = os.open(os.devnull, os.O_RDWR)
        jp = journal_path(mgr, name)
        jp.parent.mkdir(parents=True, exist_ok=True)
        log = os.open(jp, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o640)
        os.dup2(devnull, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        _close_fds_except(keep)
        signal.set_wakeup_fd(-1)           # a socket holder's, when it starts a service's runner
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        body()
    except BaseException:   # noqa: BLE001 - a detached process must never return into the caller's code
        os._exit(1)
    os._exit(0)


def spawn_runner(mgr: Manager, unit: Unit) -> None:
    """Double-fork a detached runner that supervises the unit's main process."""
    detached(mgr, unit.name, lambda: _run_unit(mgr, unit))


def _mark_runner(mgr: Manager, name: str) -> Path:
    mark = runners_dir(mgr) / str(os.getpid())
    mark.parent.mkdir(parents=True, exist_ok=True)
    mark.write_text(name + "\n", encoding="utf-8")
    return mark


def hold_sockets(mgr: Manager, unit: Unit, socks: list[socket.socket], store: socket.socket) -> None:
    """The socket holder: keep the listening sockets open until SIGTERM, hand them to the service's runner
    on request, and start the service when a connection arrives while it is not running.

    systemd.socket(5): with Accept=no "only one service unit is spawned for all connections", started on
    incoming traffic; socket.c triggers it only while the service is inactive or failed, not while its
    start is pending (the service's auto-restart wait counts as pending), and puts the socket in failed
    state with Result=service-start-limit-hit once the service hits its start limit. The connection
    waits in the listen backlog meanwhile and is accepted by the service. The holder sleeps in poll():
    on the listening sockets only while the service is down, else on a pidfd of the service's runner,
    which exits exactly when the service is down for good (stopped, failed without restart). SIGTERM
    (``systemctl stop X.socket``, the board's shutdown) only sets a flag and wakes poll() through the
    signal wakeup fd, so it never interrupts a state write or a service start half-way."""
    name = unit.name
    service = paired_unit(name, ".service")
    fdname = unit.get("Socket", "FileDescriptorName") or name
    names = ":".join([fdname] * len(socks)).encode()
    stop = {"flag": False}
    wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGTERM, lambda signum, frame: stop.update(flag=True))
    mark = _mark_runner(mgr, name)
    started = time.time()
    triggers: list[float] = []
    watched: tuple[int, int] | None = None        # (runner pid, its pidfd)
    sub = "listening"
    mgr.write_state(name, runner_pid=os.getpid())
    _log(f"Listening on {name} - {unit.get('Unit', 'Description', name)}.")
    failure = ""
    try:
        while not failure and not stop["flag"]:
            svc = mgr.state(service)
            down = svc.get("active") in ("inactive", "failed")
            if down and svc.get("result") == "start-limit-hit" and float(svc.get("since") or 0) >= started:
                failure = "service-start-limit-hit"
                break
            if ("listening" if down else "running") != sub:
                sub = "listening" if down else "running"
                mgr.write_state(name, sub=sub)
            poller = select.poll()
            poller.register(store, select.POLLIN)
            poller.register(wake_r, select.POLLIN)
            timeout: int | None = None
            if down:
                for sock in socks:
                    poller.register(sock, select.POLLIN)
            else:
                runner = int(svc.get("runner_pid") or 0)
                if watched and watched[0] != runner:
                    os.close(watched[1])
                    watched = None
                if runner and not watched:
                    with contextlib.suppress(OSError):
                        watched = (runner, os.pidfd_open(runner))
                if watched:
                    poller.register(watched[1], select.POLLIN)
                else:
                    timeout = 100     # ms: a start was requested and its runner has not written its pid yet
            ready = {fd for fd, _ev in poller.poll(timeout)}
            if stop["flag"]:
                break
            if store.fileno() in ready:
                _hand_out(store, socks, names)
            if down and any(sock.fileno() in ready for sock in socks):
                now = time.monotonic()
                triggers = [t for t in triggers if now - t < START_LIMIT_INTERVAL_S]
                if len(triggers) >= START_LIMIT_BURST:    # the service's start limit, over the starts we asked for
                    journal(mgr, service, f"{service}: Start request repeated too quickly.")
                    mgr.write_state(service, active="failed", sub="failed", result="start-limit-hit",
                                    since=time.time())
                    failure = "service-start-limit-hit"
                    break
                triggers.append(now)
                _log(f"{name}: Incoming traffic, starting {service}.")
                try:
                    mgr.start(service, wait=False)
                except UnitError as exc:      # socket.c: "Failed to queue service startup job"
                    _log(f"{name}: Failed to queue service startup job: {exc}")
                    failure = "resources"
    finally:
        for sock in (*socks, store):
            sock.close()
        for fd in (wake_r, wake_w, *(watched[1:] if watched else ())):
            os.close(fd)
        mark.unlink(missing_ok=True)
    if failure:
        _log(f"{name}: Failed with result '{failure}'.")
        mgr.write_state(name, active="failed", sub="failed", result=failure, runner_pid=0, since=time.time())
        mgr.fd_store(name).unlink(missing_ok=True)
    else:
        _log(f"Closed {name} - {unit.get('Unit', 'Description', name)}.")


def _hand_out(store: socket.socket, socks: list[socket.socket], names: bytes) -> None:
    """Give one runner the listening sockets (SCM_RIGHTS: the same open sockets, not copies of the address),
    with their LISTEN_FDNAMES as the message."""
    try:
        conn, _addr = store.accept()
    except OSError:
        return
    with conn:
        conn.settimeout(2)
        with contextlib.suppress(OSError):
            socket.send_fds(conn, [names], [s.fileno() for s in socks])


def _listen_fds(mgr: Manager, unit: Unit) -> tuple[list[int], str]:
    """The listening sockets of the service's same-named socket unit, if it is active (systemd passes the
    fds of the sockets that trigger the service, systemd.service(5) Sockets=), and their LISTEN_FDNAMES."""
    sock_name = paired_unit(unit.name, ".socket")
    if any(s != sock_name for v in unit.values("Service", "Sockets") for s in v.split()):
        _log(f"{unit.name}: Sockets= other than {sock_name} is not emulated; those sockets are not passed")
    if not unit.name.endswith(".service") or mgr.state(sock_name).get("active") != "active":
        return [], ""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(5)
            conn.connect(str(mgr.fd_store(sock_name)))
            msg, fds, _flags, _addr = socket.recv_fds(conn, 4096, 64)
    except OSError as exc:
        _log(f"{unit.name}: Failed to get the sockets of {sock_name}: {exc}")
        return [], ""
    return fds, msg.decode()


def _install_listen_fds(fds: list[int]) -> None:
    """In the service's child: the passed sockets become fds 3, 4, ... (SD_LISTEN_FDS_START, sd_listen_fds(3))
    and nothing else stays open past stderr, as systemd execs services. Each fd is first duplicated above
    the target range, so that one received as, say, fd 4 is not overwritten before it is moved."""
    n = len(fds)
    high = [fcntl.fcntl(fd, fcntl.F_DUPFD, SD_LISTEN_FDS_START + n) for fd in fds]
    for i, fd in enumerate(high):
        os.dup2(fd, SD_LISTEN_FDS_START + i)
    os.closerange(SD_LISTEN_FDS_START + n, MAXFD)


def _run_unit(mgr: Manager, unit: Unit) -> None:
    name = unit.name
    stopping = {"flag": False}
    child = {"pid": 0}

    def on_term(signum: int, frame: Any) -> None:
        stopping["flag"] = True
        if child["pid"]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(child["pid"], signal.SIGTERM)

    signal.signal(signal.SIGTERM, on_term)
    restart = unit.get("Service", "Restart", "no")
    try:
        restart_sec = float(re.sub(r"[^0-9.]", "", unit.get("Service", "RestartSec", "0.1")) or 0.1)
    except ValueError:
        restart_sec = 0.1
    mgr.write_state(name, runner_pid=os.getpid())
    mark = _mark_runner(mgr, name)
    try:
        _supervise(mgr, unit, restart, restart_sec, stopping, child)
    finally:
        mark.unlink(missing_ok=True)


def runners_dir(mgr: Manager) -> Path:
    """One file per live runner (named by its pid): lets the namespace holder, a shell script, see
    without starting Python whether any service needs stopping when the board shuts down."""
    return mgr.state_dir / "runners"


def _supervise(mgr: Manager, unit: Unit, restart: str, restart_sec: float, stopping: dict[str, bool],
               child: dict[str, int]) -> None:
    name = unit.name
    starts: list[float] = []
    n_restarts = 0
    while True:
        now = time.monotonic()
        starts = [s for s in starts if now - s < START_LIMIT_INTERVAL_S] + [now]
        if len(starts) > START_LIMIT_BURST:
            mgr.write_state(name, active="failed", sub="failed", result="start-limit-hit", main_pid=0,
                            runner_pid=0, since=time.time())
            _log(f"{name}: Start request repeated too quickly.")
            return
        try:
            pid = _exec_main(mgr, unit)
        except Exception as exc:   # noqa: BLE001 - report like systemd's "Failed at step EXEC"
            _log(f"{name}: Failed to start: {exc}")
            mgr.write_state(name, active="failed", sub="failed", result="exit-code", main_pid=0, runner_pid=0,
                            exit_status=203, since=time.time())
            return
        child["pid"] = pid
        mgr.write_state(name, active="active", sub="running", main_pid=pid, last_main_pid=pid,
                        n_restarts=n_restarts, since=time.time())
        _pid, status = os.waitpid(pid, 0)
        child["pid"] = 0
        code = os.waitstatus_to_exitcode(status)
        if stopping["flag"] or mgr.state(name).get("stopping"):
            mgr.write_state(name, active="inactive", sub="dead", main_pid=0, runner_pid=0, exit_status=code,
                            result="success", since=time.time())
            return
        failed = code != 0
        _log(f"{name}: Main process exited, code={'exited' if code >= 0 else 'killed'}, status={code}")
        # systemd.service(5) RestartPreventExitStatus=: listed exit codes prevent the restart whatever Restart= says
        prevent = {int(v) for v in " ".join(unit.values("Service", "RestartPreventExitStatus")).split() if v.isdigit()}
        if code not in prevent and (restart == "always"
                                    or (restart in ("on-failure", "on-abnormal", "on-abort") and failed)):
            n_restarts += 1
            mgr.write_state(name, active="activating", sub="auto-restart", main_pid=0, exit_status=code,
                            result="exit-code" if failed else "success", n_restarts=n_restarts)
            time.sleep(min(restart_sec, 5.0))
            if stopping["flag"]:
                mgr.write_state(name, active="inactive", sub="dead", runner_pid=0, since=time.time())
                return
            continue
        mgr.write_state(name, active="failed" if failed else "inactive", sub="failed" if failed else "dead",
                        main_pid=0, runner_pid=0, exit_status=code, result="exit-code" if failed else "success",
                        since=time.time())
        return


def _log(msg: str) -> None:
    sys.stderr.write(time.strftime("%b %d %H:%M:%S ") + msg + "\n")
    sys.stderr.flush()


def _exec_main(mgr: Manager, unit: Unit) -> int:
    argv = shlex.split(unit.get("Service", "ExecStart"))
    while argv and argv[0][:1] in "-@:+!":
        argv[0] = argv[0][1:]
    user_name = unit.get("Service", "User")
    user = pwd.getpwnam(user_name) if user_name else None
    group_name = unit.get("Service", "Group")
    gid = grp.getgrnam(group_name).gr_gid if group_name else (user.pw_gid if user else 0)
    extra = []
    for g in unit.values("Service", "SupplementaryGroups"):
        extra += [grp.getgrnam(x).gr_gid for x in g.split()]
    env = _unit_env(unit, user)
    memlock = mgr.memlock_for(unit)
    wd = unit.get("Service", "WorkingDirectory") or (user.pw_dir if user else "/")
    fds, fdnames = _listen_fds(mgr, unit)
    pid = os.fork()
    if pid:
        for fd in fds:
            os.close(fd)
        return pid
    try:
        if fds:
            # sd_listen_fds(3): LISTEN_PID is the pid of the process that is to take the fds, set after fork
            env.update(LISTEN_FDS=str(len(fds)), LISTEN_PID=str(os.getpid()), LISTEN_FDNAMES=fdnames)
        os.setsid()
        from provisioner.sim.limits import set_memlock
        set_memlock(memlock, memlock, env)
        if user:
            os.initgroups(user.pw_name, gid)
            if extra:
                os.setgroups(sorted(set(os.getgroups()) | set(extra)))
            os.setgid(gid)
            os.setuid(user.pw_uid)
        elif group_name or extra:
            os.setgroups(extra)
            os.setgid(gid)
        with contextlib.suppress(OSError):
            os.chdir(wd.lstrip("-") or "/")
        _install_listen_fds(fds)
        os.execvpe(argv[0], argv, env)
    except BaseException as exc:   # noqa: BLE001
        sys.stderr.write(f"{unit.name}: Failed at step EXEC spawning {argv[0] if argv else '?'}: {exc}\n")
        os._exit(203)
    return 0


