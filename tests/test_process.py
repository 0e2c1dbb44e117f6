"""run_streaming's stop event: how a station worker thread's qdl is ended when the operator presses
Ctrl-C (the signal reaches the main thread only, and qdl runs in its own session)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from provisioner.process import run_streaming


def _running(pid: int) -> bool:
    """Alive and not a zombie waiting to be reaped."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def test_stop_set_before_start_runs_nothing(tmp_path):
    stop = threading.Event()
    stop.set()
    marker = tmp_path / "ran"
    res = run_streaming(["sh", "-c", f"touch {marker}"], stop=stop)
    assert res.stopped and res.returncode != 0
    assert not marker.exists()


def test_stop_set_while_running_ends_the_whole_process_group(tmp_path):
    stop = threading.Event()
    pids = tmp_path / "pids"
    script = f"sleep 300 & echo $$ $! > {pids}; echo started; wait"
    seen: list[str] = []

    def on_line(line: str) -> None:
        seen.append(line)
        stop.set()                     # the operator presses Ctrl-C once the program is running

    res = run_streaming(["sh", "-c", script], on_line=on_line, stop=stop, timeout_s=120)
    assert seen == ["started"] and res.stopped and not res.timed_out
    group = [int(p) for p in pids.read_text().split()]
    deadline = time.monotonic() + 10          # SIGTERM is delivered at once; exiting takes a moment
    while any(_running(pid) for pid in group) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [pid for pid in group if _running(pid)] == []


def test_without_stop_the_program_runs_to_its_end():
    res = run_streaming(["sh", "-c", "echo one; echo two; exit 3"], stop=threading.Event())
    assert (res.returncode, res.tail, res.stopped) == (3, ("one", "two"), False)


def test_a_failing_line_parser_does_not_leave_the_program_running(tmp_path):
    """A parser that raises on a line (a bug, or a UserError it decided on) must not orphan the child:
    an orphaned qdl keeps writing the board after the station reported the attempt over."""
    pids = tmp_path / "pids"
    script = f"sleep 300 & echo $$ $! > {pids}; echo started; wait"

    def on_line(line: str) -> None:
        raise RuntimeError("parser gave up")

    try:
        run_streaming(["sh", "-c", script], on_line=on_line, timeout_s=120)
    except RuntimeError:
        pass
    else:
        raise AssertionError("the parser's error was swallowed")
    shell, sleeper = (int(p) for p in pids.read_text().split())
    assert not _running(shell)
    # the group's SIGTERM reaches the sleeper at once, but a loaded machine may take a moment to run it
    deadline = time.monotonic() + 10
    while _running(sleeper) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _running(sleeper), "the child's child outlived the failed parser"
