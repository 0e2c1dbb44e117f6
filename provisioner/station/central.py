"""Central station records on PostgreSQL: one history that several stations write.

Why a second store: one station's SQLite file answers "what did this bench flash"; a quality
engineer asks "where and when was serial X flashed" across every station of a line. Each station
keeps writing its own WAL database first (:mod:`provisioner.station.records`) and forwards the
attempts it has settled through an outbox (:mod:`provisioner.station.outbox`); this module is the
PostgreSQL side: settings from ``station.yaml``, a connection with short timeouts, an idempotent
insert and the history query.

Settings (``station.yaml``)::

    records: postgresql://station@db.line1:5432/records   # libpq URI, never with a password
    records_password_file: /etc/edge-llm/records.pw          # or:
    records_password_env: STATION_RECORDS_PASSWORD           # default PGPASSWORD
    station: line1-bench-a                                   # name in the history (default: host name)

The password is read when a connection is opened and handed to libpq in-process: it is never in
argv, in a child's environment, in a log or in an error message (URLs are printed through
:func:`mask_url`). Without a password source libpq's own password file (``~/.pgpass``) applies.

What this relies on in PostgreSQL 15 (the version Debian 12 ships), by documentation section:

- libpq connection URIs and parameters ``connect_timeout``, ``options``, ``application_name``,
  ``keepalives*``, ``tcp_user_timeout``: https://www.postgresql.org/docs/15/libpq-connect.html
  (sections 34.1.1 "Connection Strings" and 34.1.2 "Parameter Key Words"); ``PGPASSWORD`` and the
  password file: https://www.postgresql.org/docs/15/libpq-envars.html and libpq-pgpass.html.
- ``statement_timeout`` (set per connection through ``options=-c ...``):
  https://www.postgresql.org/docs/15/runtime-config-client.html
- ``INSERT ... ON CONFLICT (...) DO NOTHING ... RETURNING``: a row whose key is already there is
  skipped, and RETURNING only yields rows actually inserted:
  https://www.postgresql.org/docs/15/sql-insert.html (section "ON CONFLICT Clause").
- ``pg_advisory_xact_lock``: two stations creating the table at the same moment would otherwise
  race in ``CREATE TABLE IF NOT EXISTS``: https://www.postgresql.org/docs/15/functions-admin.html
  (9.27.10 "Advisory Lock Functions").
- A committed transaction survives a server crash (WAL, ``synchronous_commit`` on by default):
  https://www.postgresql.org/docs/15/wal-reliability.html - so a row is marked sent locally only
  after COMMIT returned.

The driver is psycopg 3 (PyPI ``psycopg[binary]``): ``psycopg.connect(conninfo, **params)``
merges keyword parameters into the conninfo (psycopg/conninfo.py ``make_conninfo``).
"""

from __future__ import annotations

import datetime as dt
import json
import re
import socket
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from provisioner.errors import StationError
from provisioner.station.secret_file import read_secret_file

#: station.yaml keys this module reads (config.py accepts them and hands them here)
KEYS = ("records", "records_password_file", "records_password_env", "station")
DEFAULT_PASSWORD_ENV = "PGPASSWORD"
TABLE = "station_attempts"
#: key of the advisory lock held while the table is created (any constant bigint of ours)
_SCHEMA_LOCK = 0x6564_6765_6C6C_6D01
#: rows per INSERT statement
BATCH = 100

SCHEMA = f"""
CREATE TABLE IF NOT EXISTS {TABLE} (
    station_db uuid NOT NULL,
    attempt_id bigint NOT NULL,
    station text NOT NULL,
    serial text NOT NULL,
    board text,
    slot text,
    release_id text,
    result text NOT NULL,
    error text,
    started timestamptz NOT NULL,
    ended timestamptz,
    record jsonb NOT NULL,
    received timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (station_db, attempt_id)
);
CREATE INDEX IF NOT EXISTS {TABLE}_serial ON {TABLE} (serial, started DESC);
CREATE INDEX IF NOT EXISTS {TABLE}_started ON {TABLE} (started DESC);
"""

_URL_PASSWORD = re.compile(r"^(postgres(?:ql)?://[^:/@?#]*):[^@/?#]*@", re.IGNORECASE)
_QUERY_PASSWORD = re.compile(r"([?&]password=)[^&#]*", re.IGNORECASE)


def mask_url(url: str) -> str:
    """``url`` with any password replaced by ``***`` (for every message that names the database)."""
    return _QUERY_PASSWORD.sub(r"\1***", _URL_PASSWORD.sub(r"\1:***@", url))


@dataclass(frozen=True)
class CentralSettings:
    """Where the central history is and where its password comes from (never the password)."""

    url: str
    station: str
    password_file: Path | None = None
    password_env: str | None = DEFAULT_PASSWORD_ENV
    connect_timeout_s: int = 3
    statement_timeout_ms: int = 5000

    def describe(self) -> str:
        return mask_url(self.url)

    def password_source(self) -> str:
        if self.password_file is not None:
            return f"file {self.password_file}"
        return f"environment variable {self.password_env}"

    def password(self, env: Mapping[str, str]) -> str | None:
        """The password from its file or variable, or None (then libpq's ~/.pgpass applies)."""
        if self.password_file is not None:
            return read_secret_file(self.password_file, f"central records {self.describe()}: password file",
                                    "fix records_password_file in station.yaml")
        if self.password_env:
            return env.get(self.password_env) or None
        return None


def parse_settings(data: Mapping[str, Any], base: Path, source: Path | str) -> CentralSettings | None:
    """The central-records keys of a station.yaml mapping (None when ``records`` is not set).

    A password inside the URL is refused (it would end up in logs and shell history); the
    message shows the URL masked.
    """
    url = data.get("records")
    if url in (None, "", "sqlite"):
        for key in KEYS[1:3]:
            if key in data:
                raise StationError(f"station config {source}: {key} needs records: postgresql://...",
                                   "name the central database or drop the key")
        return None
    url = str(url).strip()
    if not re.match(r"^postgres(ql)?://", url, re.IGNORECASE):
        raise StationError(f"station config {source}: records must be a postgresql:// URL, not {mask_url(url)!r}",
                           "e.g. records: postgresql://station@db.example:5432/records (or drop it for SQLite)")
    if mask_url(url) != url:
        raise StationError(f"station config {source}: records URL {mask_url(url)} contains a password",
                           "remove it; use records_password_file: or records_password_env: instead")
    # libpq itself parses the rest when the station connects (psycopg is not even imported for a
    # flash until then: its import costs a few hundred ms); a URI it rejects is that one-line error
    pw_file = data.get("records_password_file")
    pw_env = data.get("records_password_env")
    if pw_file and pw_env:
        raise StationError(f"station config {source}: records_password_file and records_password_env are exclusive",
                           "keep one")
    station = str(data.get("station") or socket.gethostname())
    if pw_file:
        p = Path(str(pw_file)).expanduser()
        return CentralSettings(url, station, password_file=p if p.is_absolute() else base / p, password_env=None)
    return CentralSettings(url, station, password_env=str(pw_env) if pw_env else DEFAULT_PASSWORD_ENV)


def _one_line(exc: BaseException, secret: str | None) -> str:
    """libpq's multi-line message as one line, with the secret (if it ever appeared) removed."""
    text = "; ".join(" ".join(s.split()) for s in str(exc).splitlines() if s.strip()) or type(exc).__name__
    text = text.removeprefix("connection failed: ")
    if secret:
        text = text.replace(secret, "***")
    return mask_url(text)


URI_HINT = "fix records: in station.yaml (a libpq connection URI, docs/15/libpq-connect.html)"


def _hint(text: str, settings: CentralSettings) -> str:
    if "password authentication failed" in text or "no password supplied" in text:
        return f"check the password in {settings.password_source()} and the role in the URL"
    if "invalid" in text and ("URI" in text or "connection option" in text):
        return URI_HINT
    if "does not exist" in text:
        return "create the database and role (see the README's factory section)"
    return "check that the server runs and this station reaches it"


def _json(obj: Any) -> str:
    """The record as JSON; a value JSON has no type for (a BLOB column) goes as its text."""
    return json.dumps(obj, default=str, sort_keys=True)


def _ts(value: float | None) -> dt.datetime | None:
    return dt.datetime.fromtimestamp(value, tz=dt.UTC) if value is not None else None


@dataclass
class Delivery:
    """What one :meth:`Central.deliver` did: ids newly stored, and ids the server already had."""

    inserted: list[int]
    duplicates: list[int]
    #: ids the server refused on their own (a value it cannot store), each with its one-line error
    rejected: dict[int, str] = field(default_factory=dict)


class RowRefused(StationError):
    """The server (or psycopg, before sending) refused a value: retrying the same rows cannot help."""


class Central:
    """One connection to the central database; reopened on the next call after it broke."""

    def __init__(self, settings: CentralSettings, env: Mapping[str, str]) -> None:
        self.settings = settings
        self.env = env
        self._conn: Any = None
        self._schema_ok = False
        self.malformed = 0   # rows the last history() skipped: not a station's attempt record

    # -- connection ----------------------------------------------------------------------
    def error(self, exc: BaseException, secret: str | None = None) -> StationError:
        """The one-line error for a driver exception (never the password, the URL masked)."""
        text = _one_line(exc, secret)
        return StationError(f"central records {self.settings.describe()}: {text}", _hint(text, self.settings))

    def connect(self) -> Any:
        if self._conn is not None and not self._conn.closed:
            return self._conn
        try:
            import psycopg
        except ImportError:
            raise StationError("central records need the psycopg package", "pip install 'psycopg[binary]'") from None
        s = self.settings
        secret = s.password(self.env)
        try:
            # libpq parameters (docs/15/libpq-connect.html 34.1.2): a dead or unreachable server costs
            # at most connect_timeout to find out, a hung one statement_timeout / tcp_user_timeout.
            self._conn = psycopg.connect(
                s.url, autocommit=True, password=secret, connect_timeout=s.connect_timeout_s,
                application_name="edge-llm-station", options=f"-c statement_timeout={s.statement_timeout_ms}",
                tcp_user_timeout=s.statement_timeout_ms, keepalives=1, keepalives_idle=5,
                keepalives_interval=2, keepalives_count=2)
        except psycopg.ProgrammingError as exc:   # libpq could not parse the URI: nothing was sent
            err = self.error(exc, secret)
            raise StationError(err.message, URI_HINT) from None
        except psycopg.Error as exc:
            raise self.error(exc, secret) from None
        return self._conn

    def close(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            except Exception:  # a connection to a killed server: nothing left to close
                pass
            self._conn = None

    def _run(self, body: Any) -> Any:
        """Run ``body(conn)`` in one transaction; any driver error closes the connection and
        becomes the one-line StationError (the caller retries later on a new connection)."""
        import psycopg

        conn = self.connect()
        try:
            with conn.transaction():
                return body(conn)
        except psycopg.DataError as exc:   # the transaction was rolled back; the connection is fine
            err = self.error(exc)
            raise RowRefused(err.message, err.hint) from None
        except psycopg.Error as exc:
            self.close()
            raise self.error(exc) from None

    def ensure_schema(self) -> None:
        """Create the table once if it is missing (a role with INSERT/SELECT only works when an
        administrator created it beforehand)."""
        if self._schema_ok:
            return

        def body(conn: Any) -> None:
            if conn.execute("SELECT to_regclass(%s)", (TABLE,)).fetchone()[0] is None:
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))
                conn.execute(SCHEMA)

        self._run(body)
        self._schema_ok = True

    # -- writes --------------------------------------------------------------------------
    def deliver(self, station_db: str, rows: list[dict[str, Any]]) -> Delivery:
        """Store settled attempts of one local database; rows already there are skipped.

        The key is (local database id, local attempt id): a delivery repeated after a crash
        between the server's COMMIT and the local "sent" mark inserts nothing. A key that is
        there with another serial or start time means two stations share one local database
        (a copied disk image): refused, so neither history is silently dropped.
        """
        from psycopg.types.json import Jsonb

        self.ensure_schema()
        db = uuid.UUID(station_db)

        def store(rows: list[dict[str, Any]], out: Delivery) -> None:
            self._run(lambda conn: body(conn, rows, out))

        def body(conn: Any, rows: list[dict[str, Any]], out: Delivery) -> None:
            for i in range(0, len(rows), BATCH):
                chunk = rows[i:i + BATCH]
                values, params = [], []
                for r in chunk:
                    values.append("(%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s)")
                    params += [db, r["id"], self.settings.station, r["serial"], r.get("board"), r.get("slot"),
                               r.get("release_id"), r["result"], r.get("error"), _ts(r["started"]),
                               _ts(r.get("ended")), Jsonb(r, dumps=_json)]
                got = {row[0] for row in conn.execute(
                    f"INSERT INTO {TABLE} (station_db, attempt_id, station, serial, board, slot, release_id, result, "
                    f"error, started, ended, record) VALUES {','.join(values)} "
                    "ON CONFLICT (station_db, attempt_id) DO NOTHING RETURNING attempt_id", params)}
                dup = [r for r in chunk if r["id"] not in got]
                if dup:
                    there = dict(((a, (s, t)) for a, s, t in conn.execute(
                        f"SELECT attempt_id, serial, started FROM {TABLE} WHERE station_db=%s AND attempt_id = ANY(%s)",
                        (db, [r["id"] for r in dup]))))
                    for r in dup:
                        serial, started = there.get(r["id"], (None, None))
                        if serial != r["serial"] or started is None or abs(started.timestamp() - r["started"]) > 1e-3:
                            raise _Collision(r["id"], station_db)
                out.inserted += sorted(got)
                out.duplicates += [r["id"] for r in dup]

        out = Delivery([], [])
        try:
            try:
                store(rows, out)
            except RowRefused:
                # one row the server cannot store must not block every later one: send the batch
                # row by row and set the refused ones aside (the caller keeps them out of the outbox)
                out = Delivery([], [])
                for row in rows:
                    one = Delivery([], [])
                    try:
                        store([row], one)
                    except RowRefused as exc:
                        out.rejected[row["id"]] = exc.message
                        continue
                    out.inserted += one.inserted
                    out.duplicates += one.duplicates
        except _Collision as exc:
            self.close()
            raise StationError(f"central records {self.settings.describe()}: attempt {exc.attempt_id} of local "
                               f"database {exc.station_db} is already there with another board or time",
                               "this station's database was copied from another station: move it away "
                               "(a new one gets a new id) and forward again") from None
        return out

    # -- reads ---------------------------------------------------------------------------
    def history(self, *, serial: str | None = None, release: str | None = None, outcome: str | None = None,
                station: str | None = None, limit: int | None = None, contains: bool = False) -> list[dict[str, Any]]:
        """Attempts of every station, newest first, each the station's own record plus ``station``.

        ``contains``: serial and release match as case-insensitive substrings (a search box),
        else exactly (the serial in upper case, as the station records it)."""
        where, args = [], []
        for col, value in (("serial", serial), ("release_id", release)):
            if value and contains:
                where.append(f"strpos(upper({col}), upper(%s)) > 0")   # no LIKE wildcards from the user
                args.append(value)
            elif value:
                where.append(f"{col} = %s")
                args.append(value.upper() if col == "serial" else value)
        for col, value in (("result", outcome), ("station", station)):
            if value:
                where.append(f"{col} = %s")
                args.append(value)
        sql = f"SELECT station, station_db, record FROM {TABLE}"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY started DESC, station, attempt_id DESC"
        if limit:
            sql += " LIMIT %s"
            args.append(limit)

        def body(conn: Any) -> list[dict[str, Any]]:
            if conn.execute("SELECT to_regclass(%s)", (TABLE,)).fetchone()[0] is None:
                return []   # no station has forwarded anything yet
            out, bad = [], 0
            for st, db, rec in conn.execute(sql, args):
                # any station role can INSERT, and other versions write other records: a row
                # that is not an attempt record is counted and skipped, never a crash
                if isinstance(rec, dict) and all(k in rec for k in ("id", "serial", "result")):
                    out.append(dict(rec) | {"station": st, "station_db": str(db)})
                else:
                    bad += 1
            self.malformed = bad
            return out

        return self._run(body)


class _Collision(Exception):
    def __init__(self, attempt_id: int, station_db: str) -> None:
        super().__init__(attempt_id)
        self.attempt_id = attempt_id
        self.station_db = station_db
