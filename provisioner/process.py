"""Run external programs (kas-container, qdl, bazel, ansible-playbook) from argv lists.

One small helper so every runner streams output the same way: each line goes to a parser
callback and to a log file, nothing is ever passed through a shell, and a timeout kills the
whole process group (qdl, for one, waits forever for a missing device).
"""

from __future__ import annotations

import os
import shutil
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


def which(program: str, what: str, hint: str) -> str:
    """Absolute path of ``program`` or a UserError saying how to get it."""
    found = shutil.which(program)
    if not found:
        raise UserError(f"{what} not found ('{program}' is not on PATH)", hint)
    return found


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
) -> Result:
    """Run ``argv``, feeding each output line (stdout+stderr merged) to ``on_line``.

    The child gets its own process group so a timeout or Ctrl-C stops it and its children.
    ``stop`` is how another thread ends the run (Ctrl-C arrives in the main thread only): set
    before the start, nothing is started; set later, the process group is terminated. Returns the
    exit status and the last ``tail_lines`` lines for error messages.
    """
    argv = [str(a) for a in argv]
    start = time.monotonic()
    tail: list[str] = []
    if stop is not None and stop.is_set():
        return Result(argv, -signal.SIGTERM, 0.0, stopped=True)
    log = open(log_path, "a", encoding="utf-8", errors="replace") if log_path else None  # noqa: SIM115
    try:
        proc = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env=dict(env) if env is not None else None, cwd=cwd, start_new_session=True,
            text=True, encoding="utf-8", errors="replace", bufsize=1,
        )
    except OSError as exc:
        if log:
            log.close()
        raise UserError(f"cannot run {argv[0]}: {exc.strerror}", "check that it is installed and executable") \
            from exc
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
    try:
        assert proc.stdout is not None
        for raw in proc.stdout:
            line = raw.rstrip("\n")
            if log:
                log.write(raw if raw.endswith("\n") else raw + "\n")
                log.flush()
            tail.append(line)
            if len(tail) > tail_lines:
                del tail[0]
            if on_line:
                on_line(line)
        proc.wait()
    except KeyboardInterrupt:
        _terminate(proc)
        raise
    finally:
        if timer:
            timer.cancel()
        if log:
            log.close()
    return Result(argv, proc.returncode, time.monotonic() - start, timed_out.is_set(), tuple(tail),
                  stopped.is_set())


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
