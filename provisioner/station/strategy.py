"""Per-board strategy: a state machine unknown -> edl -> flashing -> flashed -> booted -> verified.

labgrid's strategy idea: callers ask for a *target state* (``transition("flashed")``) and the
strategy runs only the steps still missing, so asking twice does nothing the second time. A
failure latches the board in ``failed``: it is not retried behind the operator's back (retries
of transient USB errors happen inside the flash step, bounded and visible as events).

Every step is timed by :func:`provisioner.steps.timed` and emits :class:`~provisioner.steps.StepEvent`s
(start/stop/error with durations, plus state, qdl progress, retries) - the event type of every long
job - that the live display and the station records both consume; the strategy prints nothing.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from provisioner.contracts import inventory
from provisioner.errors import StationError, UserError
from provisioner.process import start_id
from provisioner.station import edl
from provisioner.station.bundle import Preflight
from provisioner.station.config import Credential
from provisioner.station.console import BANNER_SOURCE, ConsoleDriver, LoginRefused
from provisioner.station.qdl import QdlDriver, QdlProgress
from provisioner.steps import Listener, StepEvent, emit_to, timed

STATES = ("unknown", "edl", "flashing", "flashed", "booted", "verified")
FAILED = "failed"




@dataclass
class BoardTarget:
    """Resources of one board: its serial, where it is plugged, and its console if any."""

    serial: str
    board_id: str
    port: str | None = None
    slot: str | None = None
    console: str | None = None


@dataclass(frozen=True)
class FlashOptions:
    """What the operator chose for one flash run, resolved once at the CLI edge.

    The defaults live here only (``station flash``'s option defaults are read from this class).
    """

    serials: tuple[str, ...] = ()     # boards to flash by serial ...
    all_boards: bool = False          # ... or every board in EDL
    board_id: str | None = None       # the release's board, when the bundle does not say
    jobs: int | None = None           # parallel boards (default: all)
    timeout_s: float = 900.0          # per qdl run
    retries: int = 2                  # extra qdl runs after a transient USB error
    reappear_timeout_s: float = 30.0  # wait for a dropped board to come back in EDL
    edl_timeout_s: float = 60.0       # wait for a board sent to EDL from its console
    boot_timeout_s: float = 300.0
    boot_check: bool = False          # watch the console and verify the release booted
    allow_old_qdl: bool = False       # one board alone with a qdl that has no --serial


@dataclass
class FlashSettings:
    """Everything the steps need, decided up front (nothing looked up inside a step)."""

    preflight: Preflight
    qdl: QdlDriver
    sysfs_root: Path
    log_dir: Path
    env: Mapping[str, str]            # the run's environment (the console credential's variable)
    slots: dict[str, str] = field(default_factory=dict)
    credential: Credential = field(default_factory=Credential)
    baudrate: int = 115200
    options: FlashOptions = field(default_factory=FlashOptions)
    serial_select: bool = True        # pass --serial (False only for the old qdl, one board)


class BoardStrategy:
    """State machine for one board; ``transition(target)`` is idempotent; ``failed`` latches."""

    def __init__(self, target: BoardTarget, settings: FlashSettings, listeners: list[Listener] | None = None,
                 stop: threading.Event | None = None) -> None:
        self.target = target
        self.s = settings
        self.listeners = list(listeners or [])
        self.stop = stop or threading.Event()
        self.state = "unknown"
        self.error: str | None = None
        self.tries = 0
        self.identity: dict[str, Any] | None = None
        self.boot_log: Path | None = None
        self.progress: QdlProgress | None = None
        self.log_error: str | None = None   # the per-board log could not be written (full disk)
        self._capture: tuple[ConsoleDriver, threading.Event, threading.Thread] | None = None
        safe = target.serial
        self.log_path = settings.log_dir / f"{safe}-qdl.log"
        self.console_log = settings.log_dir / f"{safe}-console.log"

    # -- events --------------------------------------------------------------------------
    def emit(self, step: str, kind: str, *, duration_s: float | None = None, **detail: Any) -> None:
        self._emit(StepEvent(step, kind, duration_s=duration_s, detail=detail, serial=self.target.serial,
                             slot=self.target.slot))

    def _emit(self, ev: StepEvent) -> None:
        ev.slot = self.target.slot   # the slot is known once the board is found in EDL
        emit_to(self.listeners, ev)

    def _set(self, state: str) -> None:
        self.state = state
        self.emit("state", "state", state=state)

    def _step(self, name: str, func: Callable[[], None]) -> None:
        try:
            timed(name, func, self._emit, serial=self.target.serial)
        except UserError as exc:
            self.error = str(exc)
            con = self._stop_capture()
            if con is not None:
                con.close()
            self._set(FAILED)
            raise

    # -- public --------------------------------------------------------------------------
    def transition(self, target: str) -> str:
        """Run the missing steps up to ``target``; returns the reached state.

        Raises the step's :class:`StationError` on failure (and the board stays ``failed``).
        """
        if target not in STATES:
            raise StationError(f"unknown board state '{target}'", f"use one of {', '.join(STATES)}")
        if self.state == FAILED:
            raise StationError(f"board {self.target.serial} is marked failed ({self.error})",
                               "fix the cause and start a new run")
        want = STATES.index(target)
        while STATES.index(self.state) < want:
            if self.stop.is_set():
                self.error = "stopped"
                self._set(FAILED)
                raise StationError(f"board {self.target.serial}: run stopped", "start a new run")
            if self.state == "unknown":
                self._step("edl", self._to_edl)
                self._set("edl")
            elif self.state in ("edl", "flashing"):
                if want >= STATES.index("booted"):
                    self._start_capture()
                self._set("flashing")
                self._step("flash", self._flash)
                self._set("flashed")
            elif self.state == "flashed":
                self._step("boot", self._boot)
                self._set("booted")
            elif self.state == "booted":
                self._step("verify", self._verify)
                self._set("verified")
        return self.state

    # -- steps ---------------------------------------------------------------------------
    def _to_edl(self) -> None:
        dev = edl.find_device(self.s.sysfs_root, self.target.serial, self.s.slots)
        if dev is not None and dev.mode == "edl":
            self._adopt(dev)
            return
        if dev is not None and dev.mode == "ramdump":
            raise StationError(f"board {self.target.serial} is in crash-dump mode (05c6:900e)",
                               "collect the dump with qdl ramdump or power-cycle it into EDL")
        if not self.target.console:
            raise StationError(f"board {self.target.serial} is not in EDL and has no console configured",
                               "hold the EDL button at power-on, or add its console to station.yaml")
        with ConsoleDriver(self.target.console, env=self.s.env, baudrate=self.s.baudrate,
                           credential=self.s.credential, log_path=self.console_log) as con:
            try:
                con.ensure_shell()
            except LoginRefused as exc:
                raise StationError(f"board {self.target.serial} is not in EDL and root cannot log in on its console "
                                   f"({exc.message})", "production images disable root login: hold the EDL "
                                   "button at power-on, or set the console password if this is a debug image"
                                   ) from None
            self.emit("edl", "progress", action="reboot edl", console=self.target.console)
            con.reboot_edl()
        dev = edl.wait_for_device(self.s.sysfs_root, self.target.serial, timeout_s=self.s.options.edl_timeout_s,
                                  slots=self.s.slots)
        if dev is None:
            raise StationError(f"board {self.target.serial} did not appear in EDL within "
                               f"{self.s.options.edl_timeout_s:g} s after 'reboot edl'",
                               "check the USB cable of its slot")
        self._adopt(dev)

    def _adopt(self, dev: edl.EdlDevice) -> None:
        self.target.port = dev.port
        self.target.slot = dev.slot or self.target.slot or dev.port

    def _flash(self) -> None:
        pf = self.s.preflight
        planned = [p.label for p in pf.programs if not p.skipped and not p.erase]
        attempts = 1 + max(0, self.s.options.retries)
        for n in range(1, attempts + 1):
            self.tries = n

            def on_progress(pr: QdlProgress) -> None:
                self.progress = pr
                self.emit("flash", "progress", phase=pr.phase, partition=pr.current, done=len(pr.written),
                          total=len(planned), rate_kbs=pr.rate_kbs, attempt=self.tries)

            def on_start(pid: int) -> None:
                # who holds the board now: a station start after a crash ends this qdl if it survived
                self.emit("flash", "process", pid=pid, start=start_id(pid))

            outcome = self.s.qdl.flash(pf.qdl_args(), serial=self.target.serial if self.s.serial_select else None,
                                       planned=planned, log_path=self.log_path, timeout_s=self.s.options.timeout_s,
                                       include=pf.bundle_dir, on_progress=on_progress, stop=self.stop,
                                       on_start=on_start)
            self.progress = outcome.progress
            if outcome.log_error:
                self.log_error = self.log_error or outcome.log_error
                self.emit("flash", "progress", warning=f"qdl log not written: {outcome.log_error}")
            if outcome.ok:
                if outcome.progress.warnings:
                    self.emit("flash", "progress", warnings=outcome.progress.warnings)
                return
            if not outcome.transient or n == attempts or self.stop.is_set():
                raise StationError(f"board {self.target.serial}: {outcome.error}",
                                   f"see {self.log_path}")
            self.emit("flash", "retry", attempt=n, error=outcome.error)
            dev = edl.wait_for_device(self.s.sysfs_root, self.target.serial,
                                      timeout_s=self.s.options.reappear_timeout_s, slots=self.s.slots)
            if dev is None:
                raise StationError(f"board {self.target.serial} dropped out of EDL ({outcome.error}) and did not "
                                   f"come back within {self.s.options.reappear_timeout_s:g} s",
                                   "re-seat its USB cable, power-cycle it into EDL and flash it again")

    def _console(self) -> ConsoleDriver:
        if not self.target.console:
            raise StationError(f"board {self.target.serial} has no console configured; cannot check the boot",
                               "add it to consoles: in station.yaml or drop --boot-check")
        return ConsoleDriver(self.target.console, env=self.s.env, baudrate=self.s.baudrate,
                             credential=self.s.credential, log_path=self.console_log,
                             prompt_timeout_s=self.s.options.boot_timeout_s)

    def _start_capture(self) -> None:
        """Open the console before qdl resets the board, so the whole boot log lands in the
        console log (a UART keeps no history for a late listener)."""
        if not self.target.console or self._capture is not None:
            return
        con = self._console()
        try:
            con.open()
        except StationError as exc:
            self.emit("boot", "progress", warning=f"boot log not captured: {exc}")
            return
        stop = threading.Event()

        def loop() -> None:
            while not stop.is_set():
                try:
                    con._read_some(time.monotonic() + 5)
                except StationError:
                    return

        th = threading.Thread(target=loop, name=f"console-{self.target.serial}", daemon=True)
        th.start()
        self._capture = (con, stop, th)

    def _stop_capture(self) -> ConsoleDriver | None:
        if self._capture is None:
            return None
        con, stop, th = self._capture
        stop.set()
        th.join(timeout=5)
        self._capture = None
        return con

    def _boot(self) -> None:
        """Wait for the login prompt and read the board's identity back.

        With a root login (debug images, factory password) that is the full identity. A
        production image refuses root on the console; then the getty banner, which the layer
        makes print ``edge-llm release <BUILD_ID>``, is the evidence, and the fleet's SSH checks
        read the rest later.
        """
        deadline = time.monotonic() + self.s.options.boot_timeout_s
        con = self._stop_capture()
        if con is not None and con.ser is not None:
            try:
                con.wait_for_boot(timeout_s=max(1.0, deadline - time.monotonic()))
            except StationError:
                con.close()
                raise
        else:
            con = self._console()
            while True:
                try:
                    con.open()
                    break
                except StationError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.2)
        self.emit("boot", "progress", check="identity")   # up: now the boot check reads it back
        try:
            self.identity, refused = con.identity_or_banner(timeout_s=max(1.0, deadline - time.monotonic()))
            if refused:
                self.emit("boot", "progress", note=f"identity from the console banner ({refused})")
        finally:
            con.close()
        self.boot_log = self.console_log

    def _verify(self) -> None:
        pf = self.s.preflight
        ident = self.identity or {}
        problems = []
        if ident.get("build_id") != pf.release_id:
            problems.append(f"BUILD_ID is {ident.get('build_id')!r}, expected {pf.release_id!r}")
        if ident.get("source") != BANNER_SOURCE and ident.get("machine") != pf.board.soc0_machine:
            problems.append(f"soc0 machine is {ident.get('machine')!r}, expected {pf.board.soc0_machine!r}")
        if ident.get("serial") and ident["serial"] != self.target.serial:
            problems.append(f"console {self.target.console} shows board {ident['serial']}, not {self.target.serial}")
        if problems:
            raise StationError(f"board {self.target.serial} booted the wrong thing: {'; '.join(problems)}",
                               f"see {self.console_log}")
        # the board's fleet name by the release's rule, recorded with the identity it was read with
        ident["fleet_hostname"] = inventory.hostname_for(pf.release.hostname_rule, pf.board.id, self.target.serial)
        if not ident.get("host_keys"):
            self.emit("boot", "progress", warning=f"board {self.target.serial} showed no SSH host key on its console: "
                      "the fleet cannot pin it (is edge-llm-identity in the image?)")
