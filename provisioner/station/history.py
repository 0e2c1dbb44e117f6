"""One read of the flash history for every front end (``station history``, the dashboard).

Why one place: whether the history comes from this station's SQLite file or from the central
PostgreSQL database that several stations forward to is a station.yaml setting, and a caller
should not have to know which. Rows look the same either way (the local ``attempts`` columns,
JSON decoded, ``duration_s``), plus ``station`` naming the station that recorded the attempt.
:func:`read_history` serves ``station history``; :func:`history_reader` gives the dashboard its
:class:`~provisioner.station.history_reader.HistoryReader`.
"""

from __future__ import annotations

import contextlib
import sqlite3
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from provisioner.errors import StationError
from provisioner.station.central import Central
from provisioner.station.config import StationConfig
from provisioner.station.history_reader import HistoryReader, SqliteHistoryReader
from provisioner.station.records import OUTCOMES, Records


@dataclass
class History:
    """Attempts, newest first, and where they were read (``central`` or ``local``)."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    source: str = "local"
    where: str = ""
    truncated: bool = False
    malformed: int = 0    # central rows skipped because they are not attempt records


def read_history(cfg: StationConfig, *, serial: str | None = None, release: str | None = None,
                 outcome: str | None = None, station: str | None = None, limit: int | None = None,
                 local: bool = False, env: Mapping[str, str]) -> History:
    """The attempts matching every filter given; the central history when station.yaml names one
    (unless ``local``), else this station's database. An unreachable central database is the
    one-line StationError of :class:`Central`, its hint adding ``--local``."""
    if outcome and outcome not in OUTCOMES:
        raise StationError(f"unknown outcome {outcome!r}", f"one of {', '.join(OUTCOMES)}")
    want = limit + 1 if limit else None
    if cfg.central is not None and not local:
        c = Central(cfg.central, env)
        try:
            rows = c.history(serial=serial, release=release, outcome=outcome, station=station, limit=want)
        except StationError as exc:
            raise StationError(exc.message, f"{exc.hint}; or pass --local for this station's own history"
                               if exc.hint else "pass --local for this station's own history") from None
        finally:
            c.close()
        hist = History(rows, "central", cfg.central.describe(), malformed=c.malformed)
    else:
        if not cfg.database.is_file():
            raise StationError(f"no station database at {cfg.database}", "flash a board first or pass --db")
        name = cfg.central.station if cfg.central is not None else None
        with Records(cfg.database, writer=False) as records:
            rows = [r | {"station": name} for r in records.history(serial)
                    if (not release or r.get("release_id") == release) and (not outcome or r["result"] == outcome)]
        if station and station != name:
            rows = []
        hist = History(rows[:want] if want else rows, "local", str(cfg.database))
    if limit and len(hist.rows) > limit:
        hist.rows, hist.truncated = hist.rows[:limit], True
    return hist


class CentralHistoryReader:
    """The dashboard's reader when a central database is configured: the tiles, ``version`` and
    one attempt (its qdl log) come from this station's own database; the history search covers
    every station. A row of another station carries no ``log_path``: its log is on that station.

    The search runs in the dashboard's request handler, so a central database that does not
    answer is not asked again for ``retry_s``; meanwhile the search answers from the local
    database, as it would without a central one.
    """

    def __init__(self, cfg: StationConfig, env: Mapping[str, str], *, retry_s: float = 30.0) -> None:
        assert cfg.central is not None
        self.local = SqliteHistoryReader(cfg.database)
        self.central = Central(cfg.central, env)
        self.database = cfg.database
        self.station = cfg.central.station
        self.retry_s = retry_s
        self.error: str | None = None
        self._down_until = 0.0

    def version(self) -> object:
        return self.local.version()

    def latest_by_slot(self) -> list[dict[str, Any]]:
        return self.local.latest_by_slot()

    def attempt(self, attempt_id: int) -> dict[str, Any] | None:
        return self.local.attempt(attempt_id)

    def _own_db(self) -> str | None:
        """This station's id in the central history (set by its first forward), read-only."""
        if not self.database.is_file():
            return None
        try:
            db = sqlite3.connect(f"{self.database.absolute().as_uri()}?mode=ro", uri=True, timeout=1.0)
            try:
                row = db.execute("SELECT value FROM outbox_meta WHERE key='station_db'").fetchone()
            finally:
                db.close()
        except sqlite3.Error:
            return None
        return row[0] if row else None

    def search(self, *, serial: str | None = None, release: str | None = None, result: str | None = None,
               limit: int = 200) -> list[dict[str, Any]]:
        if time.monotonic() >= self._down_until:
            try:
                # a new connection per search (connect_timeout bounds it); a kept one could hang on
                # a server that stopped answering, and with it the dashboard
                rows = self.central.history(serial=serial, release=release, outcome=result, limit=limit,
                                            contains=True)
            except Exception as exc:  # unreachable, or a bug reading its rows: this station's own still answers
                self.error = str(exc) if isinstance(exc, StationError) else (
                    f"central records {self.central.settings.describe()}: unreadable ({type(exc).__name__})")
                self._down_until = time.monotonic() + self.retry_s
            else:
                self.error = None
                self.central.close()
                own = self._own_db()
                return [r if r.get("station_db") == own else r | {"log_path": None} for r in rows]
        return [r | {"station": self.station} for r in
                self.local.search(serial=serial, release=release, result=result, limit=limit)]

    def close(self) -> None:
        self.local.close()
        with contextlib.suppress(Exception):
            self.central.close()


def history_reader(cfg: StationConfig, env: Mapping[str, str]) -> HistoryReader:
    """The dashboard's reader: the central history when station.yaml names one, else this station's."""
    if cfg.central is not None:
        return CentralHistoryReader(cfg, env)
    return SqliteHistoryReader(cfg.database)
