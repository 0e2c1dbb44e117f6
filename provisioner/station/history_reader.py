"""The one read interface the station dashboard uses for recorded attempts.

Why an interface: the dashboard's tiles and history view need four questions answered (has
anything changed, the newest attempt of every slot, a search, one attempt), and the answers may
come from this station's own SQLite records or, for a factory with several stations, from a
central history. :class:`HistoryReader` is that contract; :class:`SqliteHistoryReader` answers
it from the station database.

Why not :class:`~provisioner.station.records.Records`: opening ``Records`` even as a reader
settles attempts left running by a dead station, i.e. writes. The dashboard serves read-only
views, so it reads through a connection SQLite opens read-only (``mode=ro``,
https://www.sqlite.org/uri.html#urimode) and never changes a record. A database that does not
exist yet (a new station) reads as empty until the first flash creates it.
"""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path
from typing import Any, Protocol

_COLUMNS = ("id, serial, slot, board, release_id, host, pid, started, ended, state, result, error, log_path, tries")


class HistoryReader(Protocol):
    """What the dashboard reads. Rows are dicts with the ``attempts`` columns named in ``_COLUMNS``."""

    def version(self) -> object:
        """A value that changes whenever the history changed (cheap: called several times a second)."""

    def latest_by_slot(self) -> list[dict[str, Any]]:
        """The newest attempt of every slot, each with ``last_step`` (``(step, kind)`` of its last step event)."""

    def search(self, *, serial: str | None = None, release: str | None = None, result: str | None = None,
               limit: int = 200) -> list[dict[str, Any]]:
        """Attempts matching every given filter (serial and release as substrings), newest first."""

    def attempt(self, attempt_id: int) -> dict[str, Any] | None:
        """One attempt, or None."""

    def close(self) -> None:
        """Release the connection."""


class SqliteHistoryReader:
    """:class:`HistoryReader` over one station database, opened read-only."""

    def __init__(self, database: Path | str) -> None:
        self.path = Path(database).absolute()
        self._db: sqlite3.Connection | None = None

    def _conn(self) -> sqlite3.Connection | None:
        if self._db is None:
            if not self.path.is_file():
                return None
            try:
                db = sqlite3.connect(f"{self.path.as_uri()}?mode=ro", uri=True, timeout=2.0,
                                     check_same_thread=False)
                db.row_factory = sqlite3.Row
                db.execute("SELECT 1 FROM attempts LIMIT 1")
            except sqlite3.Error:
                return None     # not (yet) a station database: empty until it is
            self._db = db
        return self._db

    def _rows(self, sql: str, args: tuple[Any, ...] = ()) -> list[dict[str, Any]]:
        db = self._conn()
        if db is None:
            return []
        try:
            return [dict(r) for r in db.execute(sql, args).fetchall()]
        except sqlite3.Error:
            self.close()        # a replaced or damaged file: reopen on the next question
            return []

    def version(self) -> object:
        db = self._conn()
        if db is None:
            return None
        try:
            # changes when another connection commits (https://www.sqlite.org/pragma.html#pragma_data_version)
            return (id(db), db.execute("PRAGMA data_version").fetchone()[0])
        except sqlite3.Error:
            self.close()
            return None

    def latest_by_slot(self) -> list[dict[str, Any]]:
        rows = self._rows(f"SELECT {_COLUMNS} FROM attempts WHERE id IN "
                          "(SELECT MAX(id) FROM attempts WHERE slot IS NOT NULL GROUP BY slot) ORDER BY slot")
        for r in rows:
            r["last_step"] = None
            if r["result"] == "running":
                ev = self._rows("SELECT step, kind FROM events WHERE attempt_id=? AND kind IN ('start','stop','error') "
                                "ORDER BY id DESC LIMIT 1", (r["id"],))
                r["last_step"] = (ev[0]["step"], ev[0]["kind"]) if ev else None
        return rows

    def search(self, *, serial: str | None = None, release: str | None = None, result: str | None = None,
               limit: int = 200) -> list[dict[str, Any]]:
        where, args = [], []
        for col, value in (("serial", serial), ("release_id", release)):
            if value:
                where.append(f"instr(upper({col}), upper(?)) > 0")   # substring, no LIKE wildcards from the user
                args.append(value)
        if result:
            where.append("result = ?")
            args.append(result)
        sql = f"SELECT {_COLUMNS} FROM attempts" + (" WHERE " + " AND ".join(where) if where else "")
        return self._rows(sql + " ORDER BY id DESC LIMIT ?", (*args, int(limit)))

    def attempt(self, attempt_id: int) -> dict[str, Any] | None:
        rows = self._rows(f"SELECT {_COLUMNS} FROM attempts WHERE id=?", (attempt_id,))
        return rows[0] if rows else None

    def close(self) -> None:
        if self._db is not None:
            with contextlib.suppress(sqlite3.Error):
                self._db.close()
            self._db = None
