"""qdl driver: run qdl for one board, parse its output into progress, classify failures.

A *driver* in labgrid's sense: it knows how to use a resource (an EDL device, by serial) with
one tool. It never guesses where qdl is (the station config says) and it reads the version
first, because the Debian 2022 qdl has no ``--serial`` and would flash whichever board it
finds first - unsafe with several boards on one station.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from provisioner import context
from provisioner.errors import StationError
from provisioner.process import run_streaming

QDL_HINT = ("get qdl >= 2.1: `bitbake qdl-native` in a meta-qcom build, or build github.com/linux-msm/qdl; "
            "then set qdl: in station.yaml or pass --qdl")

_VERSION = re.compile(r"qdl version\s+v?(?P<v>[0-9][\w.+~-]*)", re.I)
_FLASHED = re.compile(r'flashed "(?P<label>[^"]*)" successfully(?: at (?P<rate>[\d.]+)\s*kB/s)?', re.I)
_PATCHES = re.compile(r"(?P<n>\d+) patches applied")
_BOOTABLE = re.compile(r"partition (?P<n>\d+) is now bootable")
_SAHARA = re.compile(r"Sahara: sending|HELLO version|READ image|END OF IMAGE|DONE status", re.I)
#: qdl's firehose_program warning for an image larger than its partition: "to big" up to v2.7,
#: "too big" from v2.8 (linux-msm/qdl src/firehose.c).
_TRUNCATED = re.compile(r"too? big for (?P<label>\S+) truncated", re.I)
#: qdl/libusb messages meaning "the USB link went away", worth a retry once the device is back in EDL.
TRANSIENT = re.compile(
    r"LIBUSB_ERROR_(NO_DEVICE|IO|PIPE|TIMEOUT|OVERFLOW)|No such device|device (was )?(disconnected|removed|lost)"
    r"|failed to (read|write)|usb_(read|write)|Broken pipe|Input/output error|Connection reset|timed out waiting",
    re.I)


@dataclass(frozen=True)
class QdlInfo:
    """What the configured qdl can do."""

    path: str
    version: str | None
    has_serial: bool
    has_version_option: bool

    @property
    def old(self) -> bool:
        return not self.has_serial

    def describe(self) -> str:
        if self.version:
            return f"qdl {self.version}"
        return "qdl 2.0/2.1 (no --version)" if self.has_serial else "qdl < 2.0 (no --serial, e.g. Debian 1.0+git2022)"

    def as_dict(self) -> dict[str, Any]:
        return asdict(self) | {"describe": self.describe()}


def resolve_qdl(qdl: str) -> str:
    """Absolute path of the configured qdl, or a StationError saying how to get one."""
    if "/" in qdl:
        p = Path(qdl)
        if not p.is_file():
            raise StationError(f"qdl not found at {qdl}", QDL_HINT)
        if not os.access(p, os.X_OK):
            raise StationError(f"qdl at {qdl} is not executable", f"chmod +x {qdl}")
        return str(p.resolve())
    found = shutil.which(qdl)
    if not found:
        raise StationError(f"qdl not found ('{qdl}' is not on PATH)", QDL_HINT)
    return found


#: what qdl may see besides :data:`provisioner.context.CHILD_ENV`: libusb's own settings
#: (LIBUSB_DEBUG, read by libusb_init in libusb/core.c) and the knobs of a stand-in qdl a rehearsal points
#: ``qdl:`` at. A whitelist, so no secret of the station or the operator's shell (console or
#: records password, dashboard token, anything else) reaches qdl or its log.
QDL_KEEP = ("LIBUSB_*", "PROVISIONER_SIM_*")


def qdl_env(env: Mapping[str, str]) -> dict[str, str]:
    """qdl's environment: the run's (``env``) whitelisted child environment (:meth:`RunContext.child_env`)."""
    return context.RunContext(env).child_env(keep=QDL_KEEP)


def _probe(argv: list[str], env: Mapping[str, str]) -> tuple[int, str]:
    try:
        cp = subprocess.run(argv, capture_output=True, text=True, timeout=10, stdin=subprocess.DEVNULL,
                            errors="replace", env=qdl_env(env))
    except subprocess.TimeoutExpired:
        return 124, ""
    except OSError as exc:
        raise StationError(f"cannot run {argv[0]}: {exc.strerror}", QDL_HINT) from None
    return cp.returncode, (cp.stdout or "") + (cp.stderr or "")


def detect_qdl(qdl: str, env: Mapping[str, str]) -> QdlInfo:
    """Run ``qdl --version`` (with the run's ``env``, :func:`qdl_env`); an unknown option means qdl < 2.2,
    then the usage text tells whether ``--serial`` exists (2.0/2.1) or not (the Debian 2022 build)."""
    path = resolve_qdl(qdl)
    rc, out = _probe([path, "--version"], env)
    m = _VERSION.search(out)
    if rc == 0 and m:
        return QdlInfo(path, m["v"], True, True)
    usage = out
    if "--serial" not in usage:
        _, usage2 = _probe([path, "--help"], env)
        usage += usage2
    return QdlInfo(path, None, "--serial" in usage, False)


def qdl_argv(info: QdlInfo, args: list[str], *, serial: str | None, storage: str = "ufs",
             include: Path | None = None) -> list[str]:
    """The qdl command line (an argv list; never a shell string)."""
    argv = [info.path, "--storage", storage]
    if serial:
        if not info.has_serial:
            raise StationError(f"{info.describe()} cannot select a board by serial", QDL_HINT)
        argv += ["--serial", serial]
    if include:
        argv += ["--include", str(include)]
    return argv + args


@dataclass
class QdlProgress:
    """Live state of one qdl run, parsed line by line (what the progress display shows)."""

    planned: list[str] = field(default_factory=list)  # partition labels in write order
    phase: str = "starting"
    written: list[str] = field(default_factory=list)
    rate_kbs: float | None = None
    rates: list[float] = field(default_factory=list)
    patches: int = 0
    bootable_lun: int | None = None
    warnings: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    transient: bool = False
    transient_error: str | None = None
    waiting_for_device: bool = False
    last_line: str = ""

    @property
    def current(self) -> str | None:
        """The partition being written now: the next planned one not reported flashed yet."""
        if self.phase != "writing":
            return None
        done = len(self.written)
        return self.planned[done] if done < len(self.planned) else None

    def feed(self, line: str) -> bool:
        """Update from one output line; True if something visible changed."""
        s = line.strip()
        if not s:
            return False
        self.last_line = s[:200]
        if "Waiting for EDL device" in s or "none match serial" in s:
            self.waiting_for_device = True
            self.phase = "waiting"
            return True
        if s.startswith("Talking to device") or "Collecting crash dump" in s:
            self.waiting_for_device = False
            self.phase = "sahara" if "crash" not in s else "ramdump"
            return True
        if _SAHARA.search(s):
            self.waiting_for_device = False
            if self.phase in ("starting", "waiting"):
                self.phase = "sahara"
                return True
            return False
        if "waiting for Firehose" in s or "firehose" in s.lower() and self.phase == "sahara":
            self.phase = "writing"
            return True
        m = _FLASHED.search(s)
        if m:
            self.phase = "writing"
            self.written.append(m["label"])
            if m["rate"]:
                self.rate_kbs = float(m["rate"])
                self.rates.append(self.rate_kbs)
            return True
        m = _PATCHES.search(s)
        if m:
            self.phase = "patching"
            self.patches = int(m["n"])
            return True
        m = _BOOTABLE.search(s)
        if m:
            self.bootable_lun = int(m["n"])
            self.phase = "resetting"
            return True
        if _TRUNCATED.search(s):
            self.warnings.append(s)
            return True
        if TRANSIENT.search(s):
            self.transient = True
            self.transient_error = self.transient_error or s
            self.errors.append(s)
            return True
        low = s.lower()
        if "fail" in low or "error" in low or "unable to" in low:
            self.errors.append(s)
            return True
        return False


@dataclass
class FlashOutcome:
    ok: bool
    returncode: int
    duration_s: float
    timed_out: bool
    transient: bool
    error: str | None
    progress: QdlProgress
    log_error: str | None = None   # the per-board log could not be written (full disk); qdl ran on

    def as_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "returncode": self.returncode, "duration_s": round(self.duration_s, 3),
                "timed_out": self.timed_out, "transient": self.transient, "error": self.error,
                "written": list(self.progress.written), "rate_kbs": self.progress.rate_kbs}


class QdlDriver:
    """Flash one board (by serial) with qdl, streaming progress to ``on_progress``."""

    def __init__(self, info: QdlInfo, *, env: Mapping[str, str], storage: str = "ufs") -> None:
        self.info = info
        self.env = env              # the run's environment, of which qdl sees qdl_env()
        self.storage = storage

    def flash(self, args: list[str], *, serial: str | None, planned: list[str], log_path: Path | None,
              timeout_s: float, include: Path | None = None,
              on_progress: Callable[[QdlProgress], None] | None = None,
              stop: threading.Event | None = None,
              on_start: Callable[[int], None] | None = None) -> FlashOutcome:
        """Run qdl to its end; ``on_start(pid)`` once it runs (the station records who holds the board).

        qdl dies with the calling thread (parent-death signal): an orphan would keep writing the
        board and hold its USB interface, so the next flash of that board fails "Resource busy".
        """
        argv = qdl_argv(self.info, args, serial=serial, storage=self.storage, include=include)
        progress = QdlProgress(planned=list(planned))

        def on_line(line: str) -> None:
            if progress.feed(line) and on_progress:
                on_progress(progress)

        header_error = None
        if log_path:
            try:
                log_path.parent.mkdir(parents=True, exist_ok=True)
                with open(log_path, "a", encoding="utf-8") as log:
                    log.write(f"# {time.strftime('%Y-%m-%dT%H:%M:%S')} {' '.join(argv)}\n")
            except OSError as exc:  # a full log disk must not stop the flash; the caller reports it
                header_error = f"{log_path}: {exc.strerror}"
        res = run_streaming(argv, on_line=on_line, log_path=log_path, timeout_s=timeout_s, stop=stop,
                            die_with_parent=True, on_start=on_start, env=qdl_env(self.env))
        ok = res.returncode == 0 and not res.timed_out and not res.stopped
        error = None
        if res.stopped:
            error = "qdl stopped: the run was interrupted"
        elif res.timed_out:
            if progress.waiting_for_device or progress.phase in ("starting", "waiting"):
                error = f"qdl did not see board {serial or ''} in EDL within {timeout_s:g} s".replace("  ", " ")
            else:
                error = f"qdl timed out after {timeout_s:g} s while {progress.phase} (last: {progress.last_line})"
        elif not ok:
            last = progress.errors[-1] if progress.errors else (res.tail[-1] if res.tail else "no output")
            cause = progress.transient_error or last
            error = f"qdl exited {res.returncode}: {cause}" + (f" ({last})" if cause != last else "")
        return FlashOutcome(ok, res.returncode, res.duration_s, res.timed_out, progress.transient and not ok,
                            error, progress, res.log_error or header_error)
