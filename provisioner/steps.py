"""The one step/event machinery for every long job: the rehearsal, ``litert build``, station flashing.

A job is a list of named steps. Each step is timed the same way (after labgrid's ``@step``
decorator: an event when it starts, one when it stops with its duration, the error if it
raised) and reports through one event type, :class:`StepEvent`, so a progress display and the
station records are just listeners.

* :func:`timed` runs one callable as a step and emits ``start``, then ``stop`` or ``error``;
* :class:`StepRunner` runs a list of :class:`Step` in order, stops at the first failure and runs
  registered cleanups in reverse even on Ctrl-C (after kas's ``Macro`` of setup/cleanup pairs);
* the station's per-board strategy times its edl/flash/boot/verify steps with :func:`timed` and
  adds board events (``state``, ``progress``, ``retry``, ``process``) of the same type.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from provisioner.errors import UserError

T = TypeVar("T")

#: event kinds: a step's life (start/stop/error), a skipped step, cleanups, and board events
KINDS = ("start", "stop", "error", "skip", "cleanup", "cleanup-failed",
         "state", "progress", "retry", "process")


@dataclass
class StepEvent:
    """One observable thing that happened in a job (to one board, when ``serial`` is set)."""

    step: str
    kind: str
    ts: float = field(default_factory=time.time)
    duration_s: float | None = None
    detail: dict[str, Any] = field(default_factory=dict)
    serial: str | None = None
    slot: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"serial": self.serial, "slot": self.slot, "step": self.step, "kind": self.kind, "ts": self.ts,
                "duration_s": self.duration_s, "detail": self.detail}


Listener = Callable[[StepEvent], None]


def emit_to(listeners: Iterable[Listener], ev: StepEvent) -> None:
    """Give ``ev`` to every listener. A listener's UserError (e.g. the records disk is full) is the
    job's business and propagates; any other exception is a broken display and must not end a flash."""
    for listener in listeners:
        try:
            listener(ev)
        except UserError:
            raise
        except Exception:
            pass


def timed(name: str, func: Callable[[], T], emit: Callable[[StepEvent], None], *,
          serial: str | None = None, slot: str | None = None) -> T:
    """Run ``func`` as step ``name``: ``start``, then ``stop`` with its duration or ``error`` (duration +
    message) before the UserError propagates. Other exceptions (Ctrl-C, bugs) pass through untimed."""
    emit(StepEvent(name, "start", serial=serial, slot=slot))
    t0 = time.monotonic()
    try:
        out = func()
    except UserError as exc:
        emit(StepEvent(name, "error", duration_s=time.monotonic() - t0, detail={"error": str(exc)},
                       serial=serial, slot=slot))
        raise
    emit(StepEvent(name, "stop", duration_s=time.monotonic() - t0,
                   detail={"result": out} if isinstance(out, str) and out else {}, serial=serial, slot=slot))
    return out


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
    error: UserError | None = field(default=None, repr=False, compare=False)  # the failure, hint included

    def as_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "error"}


@dataclass
class StepRunner:
    """Run steps in order; stop at the first failure; run registered cleanups in reverse.

    Every step is run through :func:`timed`, so ``on_event`` gets the same :class:`StepEvent`s a
    station listener gets (``stop``/``error`` carry the duration; ``error`` the message).
    """

    on_event: Listener | None = None
    skip: set[str] = field(default_factory=set)
    results: list[StepResult] = field(default_factory=list)

    def run(self, steps: list[Step]) -> list[StepResult]:
        cleanups: list[tuple[Step, Callable[[], None]]] = []
        try:
            for step in steps:
                if step.name in self.skip:
                    self.results.append(StepResult(step.name, True, 0.0, "skipped", step.simulated, step.what, True))
                    self._emit(StepEvent(step.name, "skip"))
                    continue
                start = time.monotonic()
                error: UserError | None = None
                try:
                    detail = timed(step.name, step.run, self._emit) or ""
                except UserError as err:
                    detail, error = str(err), err
                finally:
                    if step.cleanup:
                        cleanups.append((step, step.cleanup))
                self.results.append(StepResult(step.name, error is None, time.monotonic() - start, detail,
                                               step.simulated, step.what, error=error))
                if error is not None:
                    break
        finally:
            for step, cleanup in reversed(cleanups):
                self._emit(StepEvent(step.name, "cleanup"))
                try:
                    cleanup()
                except Exception as exc:  # a failed cleanup must not hide the real error
                    self._emit(StepEvent(step.name, "cleanup-failed", detail={"error": str(exc)}))
        return self.results

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.results)

    @property
    def error(self) -> UserError | None:
        """The error that stopped the job, if one did."""
        return next((r.error for r in self.results if r.error is not None), None)

    def _emit(self, ev: StepEvent) -> None:
        if self.on_event:
            emit_to([self.on_event], ev)
