"""The station's outbox: settled attempts in the local database, forwarded to the central one.

Why an outbox instead of writing to PostgreSQL from the flash: the local WAL database is the
record that survives ``kill -9`` and power loss; the central one may be down, slow or restarting
at any moment, and a board on the bench must not wait for it. So a flash only ever writes SQLite,
and a background thread (:class:`Forwarder`) copies every attempt that has an outcome (passed,
failed, interrupted) to the central history.

What is pending is derived, not queued: an attempt is in the outbox while it is settled and has
no row in ``outbox_sent``. An attempt settled later by crash recovery (``Records`` at the next
open) therefore joins the outbox by itself, and so does the history of a station that is
connected to a central database for the first time. A row is marked sent only after the
central COMMIT returned; a crash between the two re-sends it, and the central insert skips it
(``ON CONFLICT DO NOTHING`` on the local database id + attempt id, :mod:`.central`).

The local database gets a random id (``outbox_meta``) the first time it forwards: a station
whose database is replaced starts new attempt ids under a new key instead of colliding with
its old ones.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from provisioner.errors import StationError
from provisioner.station.central import Central, CentralSettings

OUTBOX_SCHEMA = """
CREATE TABLE IF NOT EXISTS outbox_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS outbox_sent (attempt_id INTEGER PRIMARY KEY, sent REAL NOT NULL);
CREATE TABLE IF NOT EXISTS outbox_refused (attempt_id INTEGER PRIMARY KEY, at REAL NOT NULL, error TEXT NOT NULL);
"""
_PENDING = ("FROM attempts a WHERE a.result != 'running' "
            "AND NOT EXISTS (SELECT 1 FROM outbox_sent s WHERE s.attempt_id = a.id) "
            "AND NOT EXISTS (SELECT 1 FROM outbox_refused r WHERE r.attempt_id = a.id)")


def _without_nul(value: Any) -> Any:
    """``value`` with every NUL character removed from its strings, at any depth: PostgreSQL
    stores none in text or jsonb (docs/current/datatype-json.html, 8.14: ``\\u0000`` is refused),
    and board text read off a noisy UART can hold some."""
    if isinstance(value, str):
        return value.replace("\x00", "")
    if isinstance(value, dict):
        return {_without_nul(k): _without_nul(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_without_nul(v) for v in value]
    return value


def attempt_record(row: Mapping[str, Any]) -> dict[str, Any]:
    """A local ``attempts`` row as the central history keeps it: every column (so columns added
    to the local table later travel along), JSON columns decoded, and the duration."""
    d = dict(row)
    for key, value in d.items():
        if isinstance(value, str) and value[:1] in "{[":
            with contextlib.suppress(ValueError):
                d[key] = json.loads(value)
    d["duration_s"] = round(d["ended"] - d["started"], 3) if d.get("ended") else None
    return _without_nul(d)


class Outbox:
    """The local side: which settled attempts the central database has not confirmed yet."""

    def __init__(self, db_path: Path | str, *, busy_timeout_s: float = 5.0) -> None:
        self.path = Path(db_path)
        try:
            self.db = sqlite3.connect(self.path, timeout=busy_timeout_s, isolation_level=None,
                                      check_same_thread=False)
            self.db.row_factory = sqlite3.Row
            self.db.executescript(OUTBOX_SCHEMA)
            self.db.execute("INSERT OR IGNORE INTO outbox_meta(key, value) VALUES ('station_db', ?)",
                            (str(uuid.uuid4()),))
            self.station_db = self.db.execute("SELECT value FROM outbox_meta WHERE key='station_db'").fetchone()[0]
        except sqlite3.Error as exc:
            raise StationError(f"station database {self.path}: outbox unusable ({exc})",
                               "check the path and its permissions") from None

    def pending(self, limit: int = 500) -> list[dict[str, Any]]:
        """Settled attempts not yet confirmed by the central database, oldest first."""
        if not self.db.execute("SELECT 1 FROM sqlite_master WHERE name='attempts'").fetchone():
            return []
        rows = self.db.execute(f"SELECT a.* {_PENDING} ORDER BY a.id LIMIT ?", (limit,)).fetchall()
        return [attempt_record(r) for r in rows]

    def backlog(self) -> int:
        if not self.db.execute("SELECT 1 FROM sqlite_master WHERE name='attempts'").fetchone():
            return 0
        return int(self.db.execute(f"SELECT COUNT(*) {_PENDING}").fetchone()[0])

    def mark_sent(self, ids: list[int]) -> None:
        """One transaction for the batch; a failure here only means those rows are sent again."""
        now = time.time()
        self.db.execute("BEGIN IMMEDIATE")
        try:
            self.db.executemany("INSERT OR IGNORE INTO outbox_sent(attempt_id, sent) VALUES (?, ?)",
                                [(i, now) for i in ids])
            self.db.execute("COMMIT")
        except BaseException:
            if self.db.in_transaction:
                self.db.execute("ROLLBACK")
            raise

    def set_aside(self, refused: Mapping[int, str]) -> None:
        """Keep attempts the central database refused out of every later delivery (they stay in
        the local history); the error is kept beside them for whoever looks."""
        if refused:
            now = time.time()
            with self.db:
                self.db.executemany("INSERT OR REPLACE INTO outbox_refused(attempt_id, at, error) VALUES (?, ?, ?)",
                                    [(i, now, e) for i, e in refused.items()])

    def close(self) -> None:
        with contextlib.suppress(sqlite3.Error):
            self.db.close()


@dataclass
class ForwardStatus:
    """What forwarding achieved so far; ``error`` is the last failure while the server is unreachable."""

    sent: int = 0
    duplicates: int = 0
    backlog: int = 0
    error: str | None = None
    #: attempts the central database refused, set aside in the local outbox: id -> its error
    refused: dict[int, str] = field(default_factory=dict)


def forward_once(outbox: Outbox, central: Central, status: ForwardStatus | None = None,
                 *, batch: int = 500) -> ForwardStatus:
    """Send everything pending now, batch by batch; raises the one-line StationError of a failure
    (what was confirmed before it stays marked)."""
    st = status or ForwardStatus()
    while True:
        rows = outbox.pending(batch)
        if not rows:
            break
        got = central.deliver(outbox.station_db, rows)
        try:
            outbox.mark_sent(got.inserted + got.duplicates)
            outbox.set_aside(got.rejected)
        except sqlite3.Error as exc:  # a full disk: the rows are simply sent (and skipped) again later
            raise StationError(f"station database {outbox.path}: cannot mark attempts sent ({exc})",
                               "free space on the station disk") from None
        st.sent += len(got.inserted)
        st.duplicates += len(got.duplicates)
        st.refused.update(got.rejected)
        if len(rows) < batch:
            break
    st.backlog = outbox.backlog()
    st.error = None
    return st


class Forwarder:
    """Background thread draining the outbox while the station flashes.

    It wakes every ``interval_s`` (an attempt reaches the central history within about that
    long); after a failure it waits longer each time (up to ``max_backoff_s``), so a dead server
    costs the station one short connection attempt now and then, nothing more. ``report`` gets
    one line when the central database becomes unreachable (once per distinct error) and one when
    it is back.
    """

    def __init__(self, db_path: Path | str, settings: CentralSettings, env: Mapping[str, str], *,
                 interval_s: float = 1.0, max_backoff_s: float = 10.0,
                 report: Callable[[str], None] | None = None) -> None:
        self.db_path = Path(db_path)
        self.settings = settings
        self.central = Central(settings, env)
        self.outbox = Outbox(self.db_path)
        self.interval_s = interval_s
        self.max_backoff_s = max_backoff_s
        self.report = report or (lambda line: None)
        self.status = ForwardStatus(backlog=self.outbox.backlog())
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._final = True
        self._busy = threading.Lock()
        self._thread = threading.Thread(target=self._loop, name="records-forwarder", daemon=True)

    def start(self) -> Forwarder:
        self._thread.start()
        return self

    def wake(self) -> None:
        """Forward now (e.g. right after an attempt was settled) instead of at the next tick."""
        self._wake.set()

    def _attempt(self) -> bool:
        with self._busy:
            try:
                known = set(self.status.refused)
                forward_once(self.outbox, self.central, self.status)
                for aid, error in self.status.refused.items():
                    if aid not in known:
                        self.report(f"{error}; attempt {aid} is set aside: it stays in this station's history only")
            except StationError as exc:
                line = f"{exc.message} ({exc.hint})" if exc.hint else exc.message
                if line != self.status.error:
                    self.report(f"{line}; {self.outbox.backlog()} attempt(s) wait in the local outbox")
                self.status.error = line
                return False
            except sqlite3.Error as exc:  # the local database is busy beyond its timeout: next tick
                self.status.error = f"station database {self.db_path}: {exc}"
                return False
            except Exception as exc:  # a bug here must not end forwarding, nor ever a flash
                line = f"central records: forwarding failed ({type(exc).__name__}: {exc})"
                if line != self.status.error:
                    self.report(line)
                self.status.error = line
                return False
        return True

    def _loop(self) -> None:
        delay = self.interval_s
        while True:
            self._wake.wait(delay)
            self._wake.clear()
            stopping = self._stop.is_set()
            if stopping and not (self._final and self.status.error is None):
                return
            was_down = self.status.error is not None
            if self._attempt():
                if was_down:
                    self.report(f"central records {self.settings.describe()} reachable again; "
                                f"{self.status.sent} attempt(s) sent so far")
                delay = self.interval_s
            else:
                delay = min(self.max_backoff_s, max(delay * 2, self.interval_s))
            if stopping:
                return

    def close(self, *, final: bool = True) -> ForwardStatus:
        """Stop the thread; ``final`` has it send what is pending once more, unless the server
        was unreachable at its last try (then the backlog waits for the next run, without delay).

        A server that accepted the connection and then stopped answering (a hung or stopped
        host: the kernel still acknowledges, so no TCP timeout fires) would hold the thread
        forever; the station waits for it only as long as one connect plus one statement may
        take, then leaves it (a daemon thread ends with the process) and reports the backlog.
        """
        self._final = final
        self._stop.set()
        self._wake.set()
        s = self.settings
        limit = s.connect_timeout_s + s.statement_timeout_ms / 1000
        self._thread.join(timeout=limit + 1)
        if self._thread.is_alive():
            line = f"central records {s.describe()} did not answer within {limit:.0f} s"
            self.report(line)
            self.status.error = line
            waiting = Outbox(self.db_path)  # the thread still holds its own connection
            try:
                self.status.backlog = waiting.backlog()
            finally:
                waiting.close()
            return self.status
        with contextlib.suppress(sqlite3.Error):
            self.status.backlog = self.outbox.backlog()
        self.central.close()
        self.outbox.close()
        return self.status


@contextlib.contextmanager
def forwarding(db_path: Path | str, settings: CentralSettings | None, env: Mapping[str, str],
               report: Callable[[str], None] | None = None, **kw: Any) -> Iterator[Forwarder | None]:
    """A running :class:`Forwarder` for the block (None when no central database is configured)."""
    if settings is None:
        yield None
        return
    fwd = Forwarder(db_path, settings, env, report=report, **kw).start()
    try:
        yield fwd
    finally:
        fwd.close()
