"""A live feed of a flashing station's board events, for any dashboard that listens.

Why a feed beside the records: the records keep what must survive a crash (states, step
starts and stops, outcomes), one fsync'ed transaction at a time, and deliberately not qdl's
progress; a dashboard also wants the progress, and wants every change within a fraction of a
second without polling the database hard. So the flashing station also sends its
board events (:class:`~provisioner.steps.StepEvent`) as Unix datagrams to every socket in ``<db>.feed/``
(one per listening dashboard). Nobody listening costs a ``stat`` four times a second; a full or gone
listener loses the datagram (sending never blocks, never fails a flash), and a dashboard reads
the records for everything that matters anyway.

The folder is the station user's own (mode 0700): a sender only sends into a folder owned by
its own user and writable by no one else, so no other local user can listen in; a receiver
creates it that way.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import socket
import stat
import threading
import time
from pathlib import Path
from typing import Any

from provisioner.errors import StationError
from provisioner.steps import StepEvent

#: the largest datagram sent; an event whose detail is larger is sent without its detail
MAX_DATAGRAM = 16384
#: the least time between two of one board's progress datagrams: for a new partition, for the same one
PROGRESS_NEW_S = 0.25
PROGRESS_SAME_S = 1.0
#: not sent: step stops (durations) and qdl's pid are for the records, a page shows neither
UNSENT_KINDS = ("stop", "process")
#: how often a sender looks for dashboards that came or went
LOOK_EVERY_S = 0.25
#: how long the sender gathers a burst of events into one datagram (the page's latency budget is 250 ms)
BATCH_S = 0.02


def feed_dir(database: Path | str) -> Path:
    """Where the listeners of the station writing ``database`` put their sockets."""
    p = Path(database)
    return p.with_name(p.name + ".feed")


def _private(st: os.stat_result) -> bool:
    return (stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid()
            and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH))


class FeedSender:
    """A step-event listener that sends every event to the dashboards listening on ``database``.

    ``attempts`` (serial -> attempt id) is the run's map, so each datagram names its attempt.
    A board's thread only queues (no encoding, no system call); one sender thread, started with
    the first event a dashboard is there for, sends what queued within :data:`BATCH_S` as one
    datagram (a JSON list), so a burst from eight boards wakes a dashboard once, not eight times.
    """

    def __init__(self, database: Path | str, attempts: dict[str, int] | None = None) -> None:
        self.dir = feed_dir(database)
        self.attempts = attempts if attempts is not None else {}
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._sock.setblocking(False)
        self._mtime: int | None = None
        self._targets: list[str] = []
        self._looked = -LOOK_EVERY_S
        self._progress_sent: dict[str, tuple[float, Any]] = {}
        self._queue: list[dict[str, Any]] = []
        self._busy = False
        self._closed = False
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None

    def _listeners(self) -> list[str]:
        """The sockets in the feed folder: the folder is looked at every :data:`LOOK_EVERY_S` at
        most (a new dashboard is found that fast), and listed again only when it changed."""
        now = time.monotonic()
        if now - self._looked < LOOK_EVERY_S:
            return self._targets
        self._looked = now
        try:
            st = os.stat(self.dir)
        except OSError:
            self._mtime, self._targets = None, []
            return []
        if st.st_ctime_ns != self._mtime:   # ctime: entries added or removed, mode or owner changed
            self._mtime = st.st_ctime_ns
            if not _private(st):
                self._targets = []
            else:
                try:
                    self._targets = [str(self.dir / n) for n in os.listdir(self.dir) if n.endswith(".sock")]
                except OSError:
                    self._targets = []
        return self._targets

    def __call__(self, ev: StepEvent) -> None:
        if ev.kind in UNSENT_KINDS and ev.step != "attempt":
            return
        if not self._listeners():
            return
        if ev.kind == "progress" and ev.step == "flash" and "partition" in ev.detail:
            # qdl's progress: a page needs a new partition a few times a second, a rate once a second
            now, part = time.monotonic(), ev.detail.get("partition")
            last = self._progress_sent.get(ev.serial or "")
            if last is not None and now - last[0] < (PROGRESS_NEW_S if part != last[1] else PROGRESS_SAME_S):
                return
            self._progress_sent[ev.serial or ""] = (now, part)
        msg = ev.as_dict() | {"attempt": self.attempts.get(ev.serial or "")}
        with self._cond:
            if self._closed:
                return
            self._queue.append(msg)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="station-feed", daemon=True)
                self._thread.start()
            self._cond.notify_all()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._closed:
                    self._cond.wait()
                if not self._queue:
                    return
                self._busy = True
                closing = self._closed
            if not closing:
                time.sleep(BATCH_S)        # let the rest of a burst join this datagram
            with self._cond:
                batch, self._queue = self._queue, []
            try:
                self._send(batch)
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()

    def _send(self, batch: list[dict[str, Any]]) -> None:
        for data in _datagrams(batch):
            for path in self._listeners():
                try:
                    self._sock.sendto(data, path)
                except OSError as exc:
                    if exc.errno in (errno.ECONNREFUSED, errno.ENOENT):
                        self._mtime, self._looked = None, -LOOK_EVERY_S   # a dashboard went away: look again
                    # EAGAIN (a listener behind): the datagram is dropped, the flash goes on

    def flush(self) -> None:
        """Wait until everything queued has been sent."""
        with self._cond:
            while self._queue or self._busy:
                self._cond.wait()

    def close(self) -> None:
        """Send what is queued, end the sender thread."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            thread = self._thread
        if thread is not None:
            thread.join(timeout=5)
        with contextlib.suppress(OSError):
            self._sock.close()


def _datagrams(batch: list[dict[str, Any]]) -> list[bytes]:
    """``batch`` as JSON lists of at most :data:`MAX_DATAGRAM` bytes (an event too big alone loses its detail)."""
    out: list[bytes] = []
    part: list[bytes] = []
    size = 2
    for msg in batch:
        one = json.dumps(msg, default=str).encode()
        if len(one) > MAX_DATAGRAM - 2:
            one = json.dumps(msg | {"detail": {}}, default=str).encode()
        if part and size + len(one) + 1 > MAX_DATAGRAM:
            out.append(b"[" + b",".join(part) + b"]")
            part, size = [], 2
        part.append(one)
        size += len(one) + 1
    if part:
        out.append(b"[" + b",".join(part) + b"]")
    return out


class FeedReceiver:
    """One dashboard's socket in the feed folder; :meth:`read` returns the events waiting."""

    def __init__(self, database: Path | str) -> None:
        self.dir = feed_dir(database)
        if not self.dir.parent.is_dir():   # a mistyped --db: never create folders for it
            raise StationError(f"no such folder {self.dir.parent} for the station database {database}",
                               "pass the station's --db (or database: in station.yaml)")
        try:
            self.dir.mkdir(mode=0o700, exist_ok=True)
            st = os.stat(self.dir)
        except OSError as exc:
            raise StationError(f"cannot create the live feed folder {self.dir}: {exc.strerror}",
                               "run the dashboard as the station's user, with the station's database") from None
        if not _private(st):
            raise StationError(f"live feed folder {self.dir} is not private to this user (owner uid {st.st_uid}, "
                               f"mode {stat.S_IMODE(st.st_mode):o})",
                               "remove it (the dashboard recreates it) or run the dashboard as the station's user")
        self.path = self.dir / f"{os.getpid()}-{os.urandom(4).hex()}.sock"
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            self.sock.bind(str(self.path))
        except OSError as exc:
            self.sock.close()
            raise StationError(f"cannot listen in the live feed folder {self.dir}: {exc.strerror}",
                               "check the folder's owner and free space") from None
        self.sock.setblocking(False)
        with contextlib.suppress(OSError):   # room for bursts of progress while the loop is busy
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)

    def fileno(self) -> int:
        return self.sock.fileno()

    def read(self) -> list[dict[str, Any]]:
        """Every datagram waiting, decoded; anything that is not an event object is dropped."""
        out = []
        while True:
            try:
                data = self.sock.recv(MAX_DATAGRAM * 2)
            except (BlockingIOError, InterruptedError):
                return out
            except OSError:
                return out
            try:
                msgs = json.loads(data)
            except ValueError:
                continue
            out += [m for m in (msgs if isinstance(msgs, list) else [msgs]) if isinstance(m, dict)]

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()
        with contextlib.suppress(OSError):
            self.path.unlink()
