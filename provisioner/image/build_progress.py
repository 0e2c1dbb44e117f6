"""What a running build shows and leaves behind: live progress, the failure line, the summary file.

The parsing of bitbake's output is :mod:`provisioner.image.bitbake_log`; this is the glue
between it, the terminal and the files beside the build log.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from rich.markup import escape

from provisioner.image.bitbake_log import BitbakeProgress
from provisioner.image.container import host_path
from provisioner.image.host_config import Dirs
from provisioner.ui import Reporter


class ProgressView:
    """Shows bitbake progress: a rich progress bar on a terminal, throttled lines otherwise."""

    def __init__(self, reporter: Reporter, interval_s: float = 15.0) -> None:
        self.reporter = reporter
        self.interval_s = interval_s
        self._last = 0.0
        self._last_pct = -1
        self._phase = ""
        self._bar = None
        if not reporter.quiet and reporter.console.is_terminal:
            from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

            self._bar = Progress(TextColumn("[bold]{task.fields[phase]}"), BarColumn(),
                                 TextColumn("{task.description}"), TimeElapsedColumn(),
                                 console=reporter.console, transient=True)
            self._task = self._bar.add_task("starting", total=1.0, phase="build")
            self._bar.start()

    def update(self, progress: BitbakeProgress, kind: str) -> None:
        if self.reporter.quiet:
            return
        if kind == "failure":
            self.reporter.info(f"[red]{escape(progress.failures[-1].task)} failed[/]")
        phase = "tasks" if progress.task_total else "setscene" if progress.setscene_total else "build"
        if self._bar is not None:
            self._bar.update(self._task, completed=progress.fraction, description=escape(progress.status()),
                             phase=phase)
            return
        now = time.monotonic()
        pct = int(progress.fraction * 100)
        if phase != self._phase or now - self._last >= self.interval_s or pct >= self._last_pct + 10:
            self._last, self._last_pct, self._phase = now, pct, phase
            self.reporter.info(escape(progress.status()))

    def stop(self) -> None:
        if self._bar is not None:
            self._bar.stop()


def failure_message(progress: BitbakeProgress, rc: int, log: Path, dirs: Dirs | None = None) -> str:
    """One line for a failed build: the first failed task and its log, else kas-container's last word."""
    if progress.failures:
        f = progress.failures[0]
        more = f" (+{len(progress.failures) - 1} more)" if len(progress.failures) > 1 else ""
        where = f"; task log: {host_path(f.logfile, dirs) if dirs else f.logfile}" if f.logfile else ""
        return f"bitbake task {f.task} failed with exit code {f.exit_code}{more}{where}"
    last = next((e for e in reversed(progress.errors)), None) or next(
        (ln for ln in reversed(progress.tail()) if ln.strip()), "no output")
    return f"kas-container exited with status {rc}: {last}"


def failure_report(log: Path, lines: int = 15) -> list[str]:
    """The lines to show under a failure: the ERROR lines and the task log excerpt bitbake printed."""
    from provisioner.image.bitbake_log import parse_log

    with open(log, encoding="utf-8", errors="replace") as f:
        p = parse_log(f)
    out: list[str] = []
    for fail in p.failures[:3]:
        ctx = [ln for ln in fail.context if ln.startswith(("ERROR:", "| "))]
        out += ctx[-lines:]
    return out


def write_summary(log_path: Path, release: str, progress: BitbakeProgress, status: str,
                  duration: float) -> dict[str, Any]:
    """Store the run's figures beside the log (``<release>.build.json``), atomically."""
    summary = progress.summary()
    summary.update({"status": status, "duration_s": round(duration, 1), "release": release, "log": str(log_path)})
    path = log_path.with_suffix(".json")
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return summary


