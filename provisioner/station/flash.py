"""Station runs: scan what is plugged in, and flash a release onto many boards in parallel.

The public entry points for the CLI and ``provisioner rehearse``: :func:`scan`,
:func:`flash_release`. One qdl process per board (selected with ``--serial``), each in its own
thread with its own timeout, so one bad board never stalls or fails the others.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from provisioner import catalog
from provisioner.context import RunContext
from provisioner.contracts.release import Release
from provisioner.errors import StationError, UserError
from provisioner.station import edl
from provisioner.station.bundle import Preflight, preflight
from provisioner.station.config import StationConfig
from provisioner.station.console import ConsoleDriver
from provisioner.station.feed import FeedSender
from provisioner.station.qdl import QDL_HINT, QdlDriver, QdlInfo, detect_qdl
from provisioner.station.records import FAILED, INTERRUPTED, PASSED, Records, is_no_space, no_space_error, require_space
from provisioner.station.strategy import BoardStrategy, BoardTarget, FlashOptions, FlashSettings
from provisioner.steps import Listener, StepEvent


def board_for_machine(machine: str | None) -> str | None:
    """Catalog board id whose soc0 machine is ``machine``."""
    for b in catalog.boards().values():
        if machine and b.soc0_machine == machine:
            return b.id
    return None


# -- scan ------------------------------------------------------------------------------------

@dataclass
class ConsoleBoard:
    port: str
    identity: dict[str, Any] | None = None
    board: str | None = None
    error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"port": self.port, "board": self.board, "identity": self.identity, "error": self.error}


@dataclass
class ScanResult:
    devices: list[edl.EdlDevice] = field(default_factory=list)
    consoles: list[ConsoleBoard] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"edl": [d.as_dict() for d in self.devices], "consoles": [c.as_dict() for c in self.consoles]}


def scan(config: StationConfig, consoles: list[str] | None = None, *, env: Mapping[str, str],
         records: Records | None = None, prompt_timeout_s: float = 10.0) -> ScanResult:
    """EDL/crash-dump boards from sysfs and the identity of boards on ``consoles`` (ports).

    A console that cannot be read is reported with its error rather than aborting the scan.
    """
    result = ScanResult(devices=edl.scan_edl(config.sysfs_root, config.slots))
    for dev in result.devices:
        if records:
            records.board_seen(dev.serial, slot=dev.slot or dev.port, port=dev.port, mode=dev.mode,
                               board=config.boards.get(dev.port))
    for port in consoles or []:
        cb = ConsoleBoard(port)
        try:
            with ConsoleDriver(port, env=env, baudrate=config.baudrate, credential=config.credential,
                               prompt_timeout_s=prompt_timeout_s) as con:
                cb.identity, cb.error = con.identity_or_banner()
            cb.board = board_for_machine(cb.identity.get("machine"))
            if records and cb.identity.get("serial"):
                records.board_seen(cb.identity["serial"], mode="booted", board=cb.board)
                records.set_identity(cb.identity["serial"], cb.identity)
        except UserError as exc:
            cb.error = str(exc)
        result.consoles.append(cb)
    return result


# -- flash -----------------------------------------------------------------------------------

@dataclass
class BoardResult:
    serial: str
    slot: str | None
    port: str | None
    state: str
    ok: bool
    error: str | None
    duration_s: float
    tries: int
    rate_kbs: float | None
    log_path: str
    identity: dict[str, Any] | None = None
    attempt_id: int | None = None
    log_error: str | None = None     # the qdl log could not be written completely (full disk)

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__) | {"duration_s": round(self.duration_s, 3)}


@dataclass
class FlashRun:
    release: str
    board: str
    qdl: QdlInfo
    results: list[BoardResult]
    duration_s: float

    @property
    def ok(self) -> bool:
        return bool(self.results) and all(r.ok for r in self.results)

    @property
    def failed(self) -> list[BoardResult]:
        return [r for r in self.results if not r.ok]

    def as_dict(self) -> dict[str, Any]:
        return {"release": self.release, "board": self.board, "qdl": self.qdl.as_dict(), "ok": self.ok,
                "duration_s": round(self.duration_s, 3), "boards": [r.as_dict() for r in self.results]}


class RecordsListener:
    """Feeds step events into the station database (progress events are not stored), from one
    writer thread that writes whatever has queued up in one transaction.

    Why not write from the boards' own threads: every write is a transaction with an fsync
    (``synchronous=FULL``) behind one lock, so with eight boards each board waited for the
    others' commits before its qdl could start (five commits each: forty in a row), and the
    station's start-up grew with the number of boards. Now a board only queues; :meth:`flush`
    waits until its events are written (before the attempt's outcome is).

    A full disk does not stop a board that is being flashed: the events are dropped, the records
    keep the error (:attr:`Records.space_error`) and the run reports it once every board is done.
    Any other database error is raised to the next board that emits or flushes.
    """

    def __init__(self, records: Records, attempts: dict[str, int]) -> None:
        self.records = records
        self.attempts = attempts
        self._queue: list[tuple[str, tuple[Any, ...]]] = []
        self._writing = False
        self._closed = False
        self._error: StationError | None = None
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._writer, name="records", daemon=True)
        self._thread.start()

    def __call__(self, ev: StepEvent) -> None:
        aid = self.attempts.get(ev.serial)
        if aid is None or ev.kind == "progress":
            return
        if ev.kind == "state":
            op: tuple[str, tuple[Any, ...]] = ("state", (aid, ev.detail["state"], None, ev.slot))
        elif ev.kind == "process":
            op = ("process", (aid, ev.detail["pid"], ev.detail.get("start")))
        else:
            op = ("event", (aid, ev.step, ev.kind, ev.duration_s, ev.detail or None, time.time()))
        with self._cond:
            if self._error is not None:
                raise self._error
            self._queue.append(op)
            self._cond.notify_all()

    def _writer(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._closed:
                    self._cond.wait()
                if not self._queue:
                    return
                ops, self._queue = self._queue, []
                self._writing = True
            error = None
            try:
                self.records.write_many(ops)
            except StationError as exc:
                if self.records.space_error is None:
                    error = exc
            with self._cond:
                self._writing = False
                self._error = self._error or error
                self._cond.notify_all()

    def flush(self) -> None:
        """Wait until every queued event is in the database (or raise the error that stopped it)."""
        with self._cond:
            while self._queue or self._writing:
                self._cond.wait()
            if self._error is not None:
                raise self._error

    def close(self) -> None:
        """Write what is queued and end the writer thread."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join()


def select_targets(config: StationConfig, board_id: str, *, serials: list[str] | None, all_boards: bool
                   ) -> list[BoardTarget]:
    """Resolve which boards to flash, refusing unknown serials before anything starts."""
    devices = edl.scan_edl(config.sysfs_root, config.slots)
    by_serial = {d.serial: d for d in devices}
    targets: list[BoardTarget] = []
    if serials:
        for raw in dict.fromkeys(s.upper() for s in serials):
            dev = by_serial.get(raw)
            console = config.console_for(raw, dev.port if dev else None)
            if dev is None and console is None:
                visible = ", ".join(by_serial) or "none"
                raise StationError(f"board {raw} is not connected (not in EDL under {config.sysfs_root}, "
                                   f"no console configured; in EDL now: {visible})",
                                   "check the serial, put the board in EDL or add its console to station.yaml")
            targets.append(BoardTarget(raw, board_id, dev.port if dev else None,
                                       (dev.slot or dev.port) if dev else None, console))
    elif all_boards:
        for dev in devices:
            if dev.mode != "edl":
                continue
            targets.append(BoardTarget(dev.serial, board_id, dev.port, dev.slot or dev.port,
                                       config.console_for(dev.serial, dev.port)))
        if not targets:
            raise StationError(f"no boards in EDL on this station (sysfs root {config.sysfs_root})",
                               "put the boards in EDL (reboot edl, or the EDL button at power-on) and scan again")
    else:
        raise StationError("no boards selected", "pass --serial S (repeatable) or --all")
    for t in targets:
        wired = config.boards.get(t.port or "")
        if wired and wired != board_id:
            raise StationError(f"slot {t.slot} holds a {wired}, the release is for {board_id}",
                               "flash it with a release built for that board")
    return targets


def check_qdl_for(info: QdlInfo, targets: list[BoardTarget], *, allow_old_qdl: bool, visible: int) -> bool:
    """Whether to pass ``--serial``; refuses parallel (or unconfirmed single) flashing with an old qdl."""
    if info.has_serial:
        return True
    if len(targets) > 1:
        raise StationError(f"{info.describe()} at {info.path} has no --serial: cannot flash {len(targets)} boards "
                           "at once safely", QDL_HINT)
    if not allow_old_qdl:
        raise StationError(f"{info.describe()} at {info.path} has no --serial and flashes whichever board it finds",
                           "pass --allow-old-qdl to flash this one board alone, or " + QDL_HINT)
    if visible > 1:
        raise StationError(f"{info.describe()} cannot choose between the {visible} boards in EDL",
                           "leave only the one board in EDL, or " + QDL_HINT)
    return False


def _stop_children(program: str) -> list[int]:
    """SIGTERM the process groups of our own child qdl processes (by pid; nothing else)."""
    import os
    import signal

    me = os.getpid()
    killed = []
    for task in Path(f"/proc/{me}/task").iterdir():
        try:
            pids = (task / "children").read_text().split()
        except OSError:
            continue
        for pid in map(int, pids):
            try:
                argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
                # started by run_streaming (own session) and a qdl (a wrapper script may exec
                # something whose argv no longer names the configured path)
                if os.getsid(pid) == pid and (program.encode() in argv or any(b"qdl" in a for a in argv[:3])):
                    os.killpg(pid, signal.SIGTERM)
                    killed.append(pid)
            except (OSError, ValueError):
                continue
    return killed


def flash_release(release: Path | str | Release | Preflight, config: StationConfig, ctx: RunContext,
                  options: FlashOptions | None = None, *, listener: Listener | None = None,
                  records: Records | None = None, stop: threading.Event | None = None,
                  on_preflight: Callable[[Preflight], None] | None = None) -> FlashRun:
    """Preflight, then flash every selected board in parallel; never raises for one board's failure.

    ``options`` are the operator's choices (which boards, timeouts, retries, boot check), resolved
    at the CLI edge; ``config`` is the station; ``ctx`` the run (qdl gets its whitelisted environment,
    the consoles read the credential's variable from it). ``listener`` receives every :class:`StepEvent`
    (live progress); ``records`` (writer) gets the attempts. Raises :class:`StationError` only for
    problems that stop the whole run (bad bundle, qdl missing/too old, unknown serial, no boards).
    """
    opts = options or FlashOptions()
    t0 = time.monotonic()
    pf = release if isinstance(release, Preflight) else preflight(release, opts.board_id)
    if on_preflight:
        on_preflight(pf)
    pf.raise_for_problems()
    info = detect_qdl(config.qdl, ctx.env)
    targets = select_targets(config, pf.board.id, serials=list(opts.serials), all_boards=opts.all_boards)
    visible = len([d for d in edl.scan_edl(config.sysfs_root) if d.mode == "edl"])
    serial_select = check_qdl_for(info, targets, allow_old_qdl=opts.allow_old_qdl, visible=visible)
    log_dir = Path(config.log_dir) / time.strftime("%Y%m%d-%H%M%S") / pf.release_id
    require_space(config.log_dir, "per-board log folder")
    try:
        log_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        if is_no_space(exc, log_dir):
            raise no_space_error(log_dir, "per-board log folder") from None
        raise StationError(f"cannot create the log folder {log_dir}: {exc.strerror}",
                           "set log_dir: in station.yaml to a writable folder") from None
    settings = FlashSettings(preflight=pf, qdl=QdlDriver(info, env=ctx.env, storage=pf.board.storage_type.lower()),
                             sysfs_root=Path(config.sysfs_root), log_dir=log_dir, env=ctx.env, slots=config.slots,
                             credential=config.credential, baudrate=config.baudrate, options=opts,
                             serial_select=serial_select)
    attempts: dict[str, int] = {}
    listeners: list[Listener] = []
    rec_listener: RecordsListener | None = None
    feed: FeedSender | None = None
    if records is not None:
        for t in targets:
            records.board_seen(t.serial, slot=t.slot, port=t.port, mode="edl" if t.port else None, board=pf.board.id)
            attempts[t.serial] = records.start_attempt(
                t.serial, slot=t.slot, board=pf.board.id, release_id=pf.release_id,
                artifacts=pf.artifact_sha256, qdl_version=info.describe(),
                log_path=log_dir / f"{t.serial}-qdl.log")
        rec_listener = RecordsListener(records, attempts)
        listeners.append(rec_listener)
        feed = FeedSender(records.path, attempts)   # live events for `station dashboard`
        listeners.append(feed)
        for t in targets:
            feed(StepEvent("attempt", "start", serial=t.serial, slot=t.slot,
                           detail={"release": pf.release_id, "board": pf.board.id}))
    if listener:
        listeners.append(listener)
    stop = stop or threading.Event()
    goal = "verified" if opts.boot_check else "flashed"

    unrecorded: dict[str, str] = {}   # serial -> where its outcome is, when the database missed it

    def work(t: BoardTarget) -> BoardResult:
        strat = BoardStrategy(t, settings, listeners, stop)
        b0 = time.monotonic()
        try:
            if records is not None and records.space_error is not None:
                # the records disk is full: do not start a board whose outcome could not be kept
                raise StationError(f"board {t.serial} not flashed: {records.space_error.message}")
            strat.transition(goal)
            ok, error = True, None
        except UserError as exc:
            ok, error = False, strat.error or str(exc)
        except OSError as exc:
            if not is_no_space(exc, getattr(exc, "filename", None) or log_dir):
                raise
            ok, error = False, str(no_space_error(exc.filename or log_dir, "station file"))
            strat.state = "failed"
        except Exception as exc:  # a bug in one worker must not lose the other boards' records
            ok, error = False, f"internal error: {type(exc).__name__}: {exc}"
            strat.state = "failed"
        aid = attempts.get(t.serial)
        if records is not None and aid is not None:
            result = PASSED if ok else (INTERRUPTED if stop.is_set() else FAILED)
            try:
                if rec_listener is not None:
                    rec_listener.flush()     # the board's events before its outcome
                if not records.finish_attempt(aid, result, error="interrupted by the operator"
                                              if result == INTERRUPTED else error, identity=strat.identity):
                    unrecorded[t.serial] = f"in {strat.log_path}, recorded at the next start"
                if strat.identity:
                    address = config.addresses.get(t.serial) or strat.identity.get("ip")
                    records.set_identity(t.serial, strat.identity, address)
            except StationError:
                if records.space_error is None:
                    raise
                unrecorded.setdefault(t.serial, "not recorded anywhere")
            if feed is not None:
                feed(StepEvent("attempt", "stop", serial=t.serial, slot=t.slot, duration_s=time.monotonic() - b0,
                               detail={"result": result, "error": error}))
        pr = strat.progress
        rate = max(pr.rates) if pr and pr.rates else None
        return BoardResult(t.serial, t.slot, t.port, strat.state, ok, error, time.monotonic() - b0, strat.tries,
                           rate, str(strat.log_path), strat.identity, aid, strat.log_error)

    workers = max(1, min(opts.jobs or len(targets), len(targets)))
    try:
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="flash") as pool:
            try:
                results = list(pool.map(work, targets))
            except KeyboardInterrupt:
                # qdl runs in its own session (Ctrl-C does not reach it): stop every one we started,
                # let the workers record their attempts as interrupted, then re-raise.
                stop.set()
                _stop_children(info.path)
                pool.shutdown(wait=True, cancel_futures=True)
                raise
    finally:
        if rec_listener is not None:
            rec_listener.close()
        if feed is not None:
            feed.close()
    run = FlashRun(pf.release_id, pf.board.id, info, results, time.monotonic() - t0)
    full = records.space_error if records is not None else None
    log_errors = [r.serial for r in results if r.log_error]
    if full is not None or log_errors:
        raise _storage_failure(run, full, unrecorded, log_errors, log_dir)
    return run


def _storage_failure(run: FlashRun, full: StationError | None, unrecorded: dict[str, str],
                     log_errors: list[str], log_dir: Path) -> StationError:
    """One line for a run that met a full disk: which filesystem, and what became of every board."""
    outcomes = []
    for r in run.results:
        how = unrecorded.get(r.serial, "recorded")
        if r.serial in log_errors:
            how += ", qdl log incomplete"
        outcomes.append(f"{r.serial} {'passed' if r.ok else 'failed'} ({how})")
    first = full or no_space_error(log_dir, "per-board log")
    return StationError(f"{first.message}; {'; '.join(outcomes)}", first.hint)
