"""Run external programs (kas-container, qdl, bazel, ansible-playbook) from argv lists.

One small helper so every runner streams output the same way: each line goes to a parser
callback and to a log file, nothing is ever passed through a shell, and a timeout kills the
whole process group (qdl, for one, waits forever for a missing device).

A child that must not outlive us (qdl: an orphan keeps writing the board and holds its USB
interface) is started with a parent-death signal, and :func:`start_id` names a process by pid
*and* start time so a later run can tell a survivor from an unrelated process that reused the pid.

A child that must close down cleanly (bitbake writes its caches when it gets SIGINT) is given a
:class:`GracefulStop`: Ctrl-C then asks it to stop and waits, and only escalates after a grace
period. This is the one process runner: build, litert build, station flash and fleet use it.

Children get the environment the caller passes (:meth:`provisioner.context.RunContext.child_env`
builds the whitelisted one); ``env=None`` inherits ours, which only tests and benchmarks should rely on.
"""

from __future__ import annotations

import ctypes
import os
import queue
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from provisioner.errors import UserError


@dataclass
class Result:
    argv: list[str]
    returncode: int
    duration_s: float
    timed_out: bool = False
    tail: tuple[str, ...] = ()
    stopped: bool = False       # ended (or never started) because the caller's stop event was set
    log_error: str | None = None  # the log could not be written (e.g. a full disk); the run went on


#: prctl(2) option: the signal the kernel sends a process when the thread that forked it exits.
_PR_SET_PDEATHSIG = 1


def _death_signal_setter() -> Callable[[], None]:
    """A ``preexec_fn`` that makes the child get SIGKILL when its parent thread dies.

    prctl(2): the setting survives execve() of an ordinary binary (a ``#!/bin/sh`` wrapper that
    ``exec``s qdl keeps it) but is cleared for a set-user-ID binary or one with file
    capabilities - the station's next start covers that case (see station records). libc is
    looked up here, in the parent, so the forked child only makes one system call.
    """
    prctl = ctypes.CDLL(None, use_errno=True).prctl
    parent = os.getpid()

    def setter() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:  # the parent died before the signal was armed
            os._exit(1)

    return setter


def start_id(pid: int) -> str | None:
    """``<boot id>:<start time in clock ticks>`` of a running process, None if there is none.

    proc(5): field 22 of ``/proc/<pid>/stat`` is the start time after boot; the boot id makes it
    unique across reboots. A pid alone may have been reused by the time someone checks it. A
    zombie (state Z/X, field 3) counts as gone: it has closed its files and holds no device.
    """
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return None
    # comm (field 2) is in parentheses and may itself contain spaces or ')'
    fields = stat[stat.rindex(")") + 2:].split()
    if fields[0] in ("Z", "X"):
        return None
    return f"{boot}:{fields[19]}"


def pid_alive(pid: object) -> bool:
    """Whether ``pid`` (as some record holds it, so checked by type) names a live process here.

    kill(2) with signal 0 checks only that the process exists; EPERM means it does, as another user's.
    """
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@dataclass(frozen=True)
class GracefulStop:
    """Ctrl-C policy for a child that must finish or cancel its work itself (bitbake under kas).

    ``run_streaming`` (which otherwise SIGTERMs at once, then SIGKILLs after 5 s) sends SIGINT to
    the group, keeps reading for ``grace_s``, then runs ``stop_argv`` (e.g. ``docker stop <name>``
    for a container whose engine client died), then SIGTERM and SIGKILL. A second Ctrl-C skips the
    current wait. ``notice`` is told once, when the wait starts; ``label`` names the child in the log.
    """

    grace_s: float = 120.0
    stop_argv: Sequence[str] | None = None
    notice: Callable[[], None] | None = None
    label: str = "the program"


def run_streaming(
    argv: Sequence[str],
    *,
    on_line: Callable[[str], None] | None = None,
    log_path: Path | None = None,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    timeout_s: float | None = None,
    tail_lines: int = 40,
    stop: threading.Event | None = None,
    die_with_parent: bool = False,
    on_start: Callable[[int], None] | None = None,
    graceful: GracefulStop | None = None,
) -> Result:
    """Run ``argv``, feeding each output line (stdout+stderr merged) to ``on_line``.

    The child gets its own process group so a timeout or Ctrl-C stops it and its children.
    ``stop`` is how another thread ends the run (Ctrl-C arrives in the main thread only): set
    before the start, nothing is started; set later, the process group is terminated. Returns the
    exit status and the last ``tail_lines`` lines for error messages.

    ``die_with_parent``: the kernel SIGKILLs the child if this thread dies (kill -9 of us
    included).
    ``on_start(pid)`` is called once the child runs. A log that cannot be written (full disk)
    stops being written, but the child keeps being read to its end: the child's work (a board
    being flashed) matters more than its log, and the caller gets ``log_error``.

    ``graceful``: how Ctrl-C stops the child (see :class:`GracefulStop`); the KeyboardInterrupt is
    re-raised once the child is gone. The log is then flushed whenever the reader has caught up
    (a build prints 200,000 lines) rather than after every line.
    """
    argv = [str(a) for a in argv]
    start = time.monotonic()
    tail: list[str] = []
    if stop is not None and stop.is_set():
        return Result(argv, -signal.SIGTERM, 0.0, stopped=True)
    log_error: str | None = None
    log = None
    if log_path:
        try:
            log = open(log_path, "a", encoding="utf-8", errors="replace")  # noqa: SIM115
        except OSError as exc:
            log_error = f"{log_path}: {exc.strerror}"
    try:
        proc = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env=dict(env) if env is not None else None, cwd=cwd, start_new_session=True,
            text=True, encoding="utf-8", errors="replace", bufsize=1,
            preexec_fn=_death_signal_setter() if die_with_parent else None,  # noqa: PLW1509 - one syscall
        )
    except OSError as exc:
        if log:
            _close_quietly(log)
        raise UserError(f"cannot run {argv[0]}: {exc.strerror}", "check that it is installed and executable") \
            from exc
    if on_start:
        try:
            on_start(proc.pid)
        except BaseException:
            _terminate(proc)
            if log:
                _close_quietly(log)
            raise
    timed_out = threading.Event()

    def _kill() -> None:
        timed_out.set()
        _terminate(proc)

    timer = threading.Timer(timeout_s, _kill) if timeout_s else None
    if timer:
        timer.daemon = True
        timer.start()
    stopped = threading.Event()
    if stop is not None:
        def _watch() -> None:
            while proc.poll() is None:
                if stop.wait(0.2):
                    stopped.set()
                    _terminate(proc)
                    return

        threading.Thread(target=_watch, name=f"stop-{proc.pid}", daemon=True).start()

    def write_log(raw: str, flush: bool) -> None:
        nonlocal log, log_error
        if log:
            try:
                log.write(raw if raw.endswith("\n") else raw + "\n")
                if flush:
                    log.flush()
            except OSError as exc:
                log_error = f"{log_path}: {exc.strerror}"
                _close_quietly(log)
                log = None

    def take(raw: str, flush: bool = True) -> None:
        write_log(raw, flush)
        tail.append(raw.rstrip("\n"))
        if len(tail) > tail_lines:
            del tail[0]
        if on_line:
            on_line(tail[-1])

    def note(text: str) -> None:       # our own lines in the child's log, not fed to the parser
        write_log(f"### provisioner: {text}", True)

    try:
        assert proc.stdout is not None
        if graceful is None:
            for raw in proc.stdout:
                take(raw)
        else:
            _read_gracefully(proc, take, note, graceful, env)
        proc.wait()
    except KeyboardInterrupt:
        if graceful is None:        # the graceful reader has already stopped the child its own way
            _terminate(proc)
        raise
    except BaseException:
        _terminate(proc)            # a failing ``on_line`` must not orphan the child (qdl on a board)
        raise
    finally:
        if timer:
            timer.cancel()
        if log:
            _close_quietly(log)
    return Result(argv, proc.returncode, time.monotonic() - start, timed_out.is_set(), tuple(tail),
                  stopped.is_set(), log_error)


def _read_gracefully(proc: subprocess.Popen, take: Callable[..., None], note: Callable[[str], None],
                     how: GracefulStop, env: Mapping[str, str] | None) -> None:
    """Feed ``proc``'s lines to ``take`` until EOF; on Ctrl-C stop the child the way ``how`` says.

    Lines come through a reader thread so the waits after Ctrl-C can have deadlines.
    """
    assert proc.stdout is not None
    stdout = proc.stdout
    lines: queue.Queue[str | None] = queue.Queue(maxsize=10000)

    def reader() -> None:
        for raw in stdout:
            lines.put(raw)
        lines.put(None)

    threading.Thread(target=reader, name=f"read-{proc.pid}", daemon=True).start()

    def drain(deadline: float | None) -> bool:
        """Consume lines until EOF (True) or the deadline passes (False)."""
        while True:
            try:
                raw = lines.get(timeout=0.5 if deadline is None else max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                if deadline is not None and time.monotonic() >= deadline:
                    return False
                continue
            if raw is None:
                return True
            take(raw, flush=lines.empty())   # people `tail -f` the log: flush once caught up

    def wait(seconds: float) -> bool:
        try:
            return drain(time.monotonic() + seconds)
        except KeyboardInterrupt:          # a second Ctrl-C: do not wait any longer
            return False

    try:
        drain(None)
        return
    except KeyboardInterrupt:
        pass
    note(f"Ctrl-C, asking {how.label} to stop (SIGINT)")
    if how.notice:
        how.notice()
    _signal_group(proc.pid, signal.SIGINT)
    done = wait(how.grace_s)
    if not done and how.stop_argv:
        note(" ".join(how.stop_argv))
        try:
            subprocess.run(list(how.stop_argv), capture_output=True, timeout=30,
                           env=dict(env) if env is not None else None, stdin=subprocess.DEVNULL)
        except (OSError, subprocess.TimeoutExpired):
            pass
        done = wait(10)
    if not done:
        _signal_group(proc.pid, signal.SIGTERM)
        if not wait(10):
            _signal_group(proc.pid, signal.SIGKILL)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass
    note(f"{how.label} stopped by the user")
    raise KeyboardInterrupt


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass


def _close_quietly(f: object) -> None:
    """Close a log file whose buffered tail may no longer fit on its disk."""
    try:
        f.close()  # type: ignore[attr-defined]
    except OSError:
        pass


def _terminate(proc: subprocess.Popen) -> None:
    """SIGTERM the process group, then SIGKILL after a grace period."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
