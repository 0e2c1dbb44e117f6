"""Runs as named steps with cleanups that always run (after kas's ``Macro`` of setup/cleanup pairs).

A long job (the rehearsal, a build) is a list of :class:`Step`. Each step reports start, end,
duration and error as events, so the progress display and the final summary speak in step names,
and a step's cleanup (stop virtual boards, remove temp dirs) runs even when a later step fails or
the user presses Ctrl-C.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from provisioner.errors import UserError


@dataclass
class Step:
    """One named stage of a job. ``run`` returns a short result line for the summary."""

    name: str
    run: Callable[[], str | None]
    cleanup: Callable[[], None] | None = None
    simulated: bool = False      # does this step talk to virtual boards / stand-ins?
    what: str = ""               # one line: which real tool or simulator does the work


@dataclass
class StepResult:
    name: str
    ok: bool
    duration_s: float
    detail: str = ""
    simulated: bool = False
    what: str = ""
    skipped: bool = False

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class StepRunner:
    """Run steps in order; stop at the first failure; run registered cleanups in reverse."""

    on_event: Callable[[str, Step, StepResult | None], None] | None = None
    skip: set[str] = field(default_factory=set)
    results: list[StepResult] = field(default_factory=list)

    def run(self, steps: list[Step]) -> list[StepResult]:
        cleanups: list[tuple[Step, Callable[[], None]]] = []
        try:
            for step in steps:
                if step.name in self.skip:
                    self.results.append(StepResult(step.name, True, 0.0, "skipped", step.simulated, step.what, True))
                    continue
                self._emit("start", step, None)
                start = time.monotonic()
                try:
                    detail = step.run() or ""
                    ok = True
                except UserError as err:
                    detail, ok = str(err), False
                finally:
                    if step.cleanup:
                        cleanups.append((step, step.cleanup))
                result = StepResult(step.name, ok, time.monotonic() - start, detail, step.simulated, step.what)
                self.results.append(result)
                self._emit("end", step, result)
                if not ok:
                    break
        finally:
            for step, cleanup in reversed(cleanups):
                self._emit("cleanup", step, None)
                try:
                    cleanup()
                except Exception as exc:  # a failed cleanup must not hide the real error
                    self._emit("cleanup-failed", step, StepResult(step.name, False, 0.0, str(exc)))
        return self.results

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.results)

    def _emit(self, kind: str, step: Step, result: StepResult | None) -> None:
        if self.on_event:
            self.on_event(kind, step, result)
