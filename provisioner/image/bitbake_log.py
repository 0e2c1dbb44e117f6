"""Read bitbake's console output (through kas) as it streams: progress, failures, cache figures.

bitbake's non-interactive UI (knotty, as kas-container runs it without a tty) prints one line per
event. The few that matter for a person watching a multi-hour build:

* ``NOTE: Running setscene task N of M (<recipe file>:<task>_setscene)`` - restoring from sstate;
* ``NOTE: Running task N of M (<recipe file>:<task>)`` - real work, the progress bar;
* ``NOTE: recipe <pn>-<pv>-<pr>: task <task>: Started|Succeeded|Failed`` - the current tasks;
* ``NOTE: Sstate summary: Wanted N Local L Mirrors M Missed X Current C (P% match, Q% complete)``
  - how well the shared cache worked (stored in release.json);
* ``ERROR: Task (<recipe file>:<task>) failed with exit code 'N'`` and
  ``ERROR: Logfile of failure stored in: <path>`` - what to show when it breaks.

The parser is a plain state machine fed one line at a time (no regex on lines that cannot
match), so it keeps up with bitbake on a 200,000-line log; see ``bench/progress.py``.
"""

from __future__ import annotations

import re
from collections import deque
from dataclasses import dataclass, field
from typing import Any

_RUNNING = re.compile(r"Running (setscene )?task (\d+) of (\d+) \((.*)\)\s*$")
_SSTATE = re.compile(
    r"Sstate summary: Wanted (\d+) Local (\d+) Mirrors (\d+) Missed (\d+) Current (\d+) "
    r"\((\d+)% match, (\d+)% complete\)")
_TASK_FAILED = re.compile(r"Task \((.*)\) failed with exit code '?(-?\w+)'?")
_LOGFILE = re.compile(r"Logfile of failure stored in: (\S+)")
_TASKS_SUMMARY = re.compile(r"Tasks Summary: Attempted (\d+) tasks of which (\d+) didn't need to be rerun and "
                            r"(?:all succeeded|(\d+) failed)")
_SETSCENE_DONE = re.compile(r"Setscene tasks: (\d+) of (\d+)")


@dataclass
class Failure:
    """One failed bitbake task: ``task`` like ``linux-qcom_6.18.bb:do_compile``, its log and the lines before it."""

    task: str
    exit_code: str
    logfile: str | None = None
    context: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"task": self.task, "exit_code": self.exit_code, "logfile": self.logfile, "context": self.context}


@dataclass
class SstateSummary:
    """bitbake's cache figures for one build (``match`` = share of wanted objects found)."""

    wanted: int
    local: int
    mirrors: int
    missed: int
    current: int
    match_pct: int
    complete_pct: int

    def as_dict(self) -> dict[str, int]:
        return dict(self.__dict__)

    def line(self) -> str:
        return (f"Sstate summary: Wanted {self.wanted} Local {self.local} Mirrors {self.mirrors} "
                f"Missed {self.missed} Current {self.current} ({self.match_pct}% match, "
                f"{self.complete_pct}% complete)")


@dataclass
class Event:
    """What changed with the last line (for the display): ``kind`` is task|setscene|started|finished|
    failure|sstate|error."""

    kind: str
    detail: str = ""


class BitbakeProgress:
    """Accumulates the state of a build from its output lines.

    ``feed(line)`` returns an :class:`Event` when the line changed something worth redrawing,
    else ``None``. All state is public for the final report.
    """

    def __init__(self, context_lines: int = 25) -> None:
        self.task = 0
        self.task_total = 0
        self.setscene = 0
        self.setscene_total = 0
        self.current: dict[str, str] = {}      # "pn:task" -> "pn" (insertion order = start order)
        self.failures: list[Failure] = []
        self.errors: list[str] = []
        self.sstate: SstateSummary | None = None
        self.tasks_attempted: int | None = None
        self.tasks_failed: int | None = None
        self.lines = 0
        self.config: dict[str, str] = {}       # bitbake's "Build Configuration:" block (BB_VERSION, layers...)
        self._in_config = False
        self._recent: deque[str] = deque(maxlen=context_lines)

    # The hot path: most lines are compiler output or task notes; bail out on the first char.
    def feed(self, line: str) -> Event | None:
        self.lines += 1
        ev: Event | None = None
        if line.startswith("NOTE: "):
            ev = self._note(line[6:])
        elif line.startswith("ERROR: "):
            ev = self._error(line[7:])
        elif line.startswith("Sstate summary") or line.startswith("Setscene tasks"):
            ev = self._note(line)
        elif self._in_config:
            key, sep, value = line.partition("=")
            if sep and key.strip():
                self.config[key.strip()] = value.strip().strip('"')
            else:
                self._in_config = bool(line.strip() == "" and not self.config)
        elif line == "Build Configuration:":
            self._in_config = True
        self._recent.append(line)
        return ev

    def _note(self, text: str) -> Event | None:
        c = text[:4]
        if c == "Runn":
            m = _RUNNING.match(text)
            if m:
                n, total = int(m.group(2)), int(m.group(3))
                if m.group(1):
                    self.setscene, self.setscene_total = n, total
                    return Event("setscene", m.group(4))
                self.task, self.task_total = n, total
                return Event("task", m.group(4))
        elif c == "reci":
            # "recipe <pn>: task <task>: <State>" - split, not regex: a third of all lines look like this
            head, sep, state = text.rpartition(": ")
            if sep and head.startswith("recipe ") and state in ("Started", "Succeeded", "Failed"):
                pn, sep2, task = head[7:].partition(": task ")
                if sep2:
                    key = f"{pn}:{task}"
                    if state == "Started":
                        self.current[key] = pn
                        return Event("started", key)
                    self.current.pop(key, None)
                    return Event("finished", key)
        elif c == "Ssta":
            m = _SSTATE.match(text)
            if m:
                self.sstate = SstateSummary(*(int(g) for g in m.groups()))
                return Event("sstate", self.sstate.line())
        elif c == "Task":
            m = _TASKS_SUMMARY.match(text)
            if m:
                self.tasks_attempted = int(m.group(1))
                self.tasks_failed = int(m.group(3) or 0)
        elif c == "Sets":
            m = _SETSCENE_DONE.match(text)
            if m:
                self.setscene, self.setscene_total = int(m.group(1)), int(m.group(2))
        return None

    def _error(self, text: str) -> Event | None:
        if text.startswith("Task ("):
            m = _TASK_FAILED.match(text)
            if m:
                f = Failure(task=_short_task(m.group(1)), exit_code=m.group(2),
                            context=[*self._recent, "ERROR: " + text])
                # the logfile line comes just before the Task line; attach it if seen
                for prev in reversed(self._recent):
                    lm = _LOGFILE.search(prev)
                    if lm:
                        f.logfile = lm.group(1)
                        break
                    if "failed with exit code" in prev:
                        break
                self.failures.append(f)
                return Event("failure", f.task)
        if text.startswith("Logfile of failure"):
            m = _LOGFILE.match(text)
            if m and self.failures and self.failures[-1].logfile is None:
                self.failures[-1].logfile = m.group(1)
        self.errors.append(text)
        return Event("error", text)

    # -- views ------------------------------------------------------------------------
    @property
    def fraction(self) -> float:
        """Share of real tasks done (0..1); setscene progress before the first real task."""
        if self.task_total:
            return self.task / self.task_total
        if self.setscene_total:
            return self.setscene / self.setscene_total
        return 0.0

    def status(self) -> str:
        """One line for the progress display."""
        parts = []
        if self.setscene_total:
            parts.append(f"setscene {self.setscene}/{self.setscene_total}")
        if self.task_total:
            parts.append(f"task {self.task}/{self.task_total} ({100 * self.task / self.task_total:.0f}%)")
        if self.current:
            now = list(self.current)[-3:]
            parts.append("running: " + ", ".join(now) + (f" +{len(self.current) - 3}" if len(self.current) > 3
                                                         else ""))
        return " | ".join(parts) or "starting (kas checkout / bitbake parse)"

    def summary(self) -> dict[str, Any]:
        return {
            "tasks": {"done": self.task, "total": self.task_total, "attempted": self.tasks_attempted,
                      "failed": self.tasks_failed},
            "setscene": {"done": self.setscene, "total": self.setscene_total},
            "sstate": self.sstate.as_dict() if self.sstate else None,
            "failures": [f.as_dict() for f in self.failures],
            "errors": self.errors[-20:],
            "lines": self.lines,
        }

    def layer_commits(self) -> dict[str, str]:
        """``{layer: commit}`` from the Build Configuration block (``meta-qcom = "HEAD:ef00..."``)."""
        out = {}
        for key, value in self.config.items():
            branch, sep, commit = value.rpartition(":")
            if sep and re.fullmatch(r"[0-9a-f]{40}", commit):
                out[key] = commit
        return out

    def tail(self) -> list[str]:
        return list(self._recent)


def _short_task(spec: str) -> str:
    """``/work/meta-qcom/recipes-kernel/linux/linux-qcom_6.18.bb:do_compile`` -> ``linux-qcom_6.18.bb:do_compile``."""
    spec = spec.removeprefix("virtual:native:").removeprefix("mc::")
    path, _, task = spec.rpartition(":")
    return f"{path.rsplit('/', 1)[-1]}:{task}" if path else spec


def parse_log(lines: Any) -> BitbakeProgress:
    """Feed every line of an iterable (a log file) and return the final state."""
    p = BitbakeProgress()
    for line in lines:
        p.feed(line.rstrip("\n"))
    return p
