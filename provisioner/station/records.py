"""Station records: every board seen and every flash attempt, in SQLite.

Why SQLite in WAL mode with one short ``BEGIN IMMEDIATE`` transaction per state change: the
station may lose power or be ``kill -9``-ed mid-flash, and the next start must still find a
consistent history. An attempt left ``running`` by a process that no longer exists is marked
``interrupted`` when the database is next opened. Only one station process may write at a time:
a lock file (``<db>.lock``, flock) says who holds it, and a second station gets one clear line.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from provisioner import catalog
from provisioner.errors import StationError

SCHEMA = """
CREATE TABLE IF NOT EXISTS boards (
    serial TEXT PRIMARY KEY,
    board TEXT,
    slot TEXT,
    port TEXT,
    mode TEXT,
    first_seen REAL NOT NULL,
    last_seen REAL NOT NULL,
    identity TEXT,
    address TEXT
);
CREATE TABLE IF NOT EXISTS attempts (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    serial TEXT NOT NULL,
    slot TEXT,
    board TEXT,
    release_id TEXT,
    artifacts TEXT,
    qdl_version TEXT,
    host TEXT,
    pid INTEGER,
    started REAL NOT NULL,
    ended REAL,
    state TEXT NOT NULL,
    result TEXT NOT NULL,
    error TEXT,
    log_path TEXT,
    identity TEXT,
    tries INTEGER DEFAULT 0
);
CREATE INDEX IF NOT EXISTS attempts_serial ON attempts(serial);
CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    attempt_id INTEGER REFERENCES attempts(id),
    ts REAL NOT NULL,
    step TEXT NOT NULL,
    kind TEXT NOT NULL,
    duration_s REAL,
    detail TEXT
);
"""

RUNNING = "running"
PASSED = "passed"
FAILED = "failed"
INTERRUPTED = "interrupted"


def _pid_alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class Records:
    """The station database. ``writer=True`` takes the station lock (one flashing station per db).

    Thread-safe: worker threads share one connection behind a lock; each call is one
    transaction, so a crash loses at most the change being written.
    """

    def __init__(self, path: Path | str, *, writer: bool = True, busy_timeout_s: float = 2.0) -> None:
        self.path = Path(path)
        self.writer = writer
        self._lock = threading.Lock()
        self._lockfile: Any = None
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if writer:
            self._take_station_lock()
        try:
            self.db = sqlite3.connect(self.path, timeout=busy_timeout_s, isolation_level=None,
                                      check_same_thread=False)
            self.db.row_factory = sqlite3.Row
            self.db.execute(f"PRAGMA busy_timeout={int(busy_timeout_s * 1000)}")
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA synchronous=FULL")
            with self._lock:
                self.db.executescript(SCHEMA)
        except sqlite3.DatabaseError as exc:
            self.close()
            raise self._db_error(exc) from None
        self.recovered = self.recover_interrupted()

    # -- locking -------------------------------------------------------------------------
    def _take_station_lock(self) -> None:
        lock_path = self.path.with_name(self.path.name + ".lock")
        f = open(lock_path, "a+", encoding="utf-8")  # noqa: SIM115 - held for the object's lifetime
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.seek(0)
            holder = f.read().strip() or "unknown pid"
            f.close()
            raise StationError(f"station database {self.path} is in use by another station process ({holder})",
                               "wait for it to finish or use another --db") from None
        f.seek(0)
        f.truncate()
        f.write(f"pid {os.getpid()} on {socket.gethostname()}\n")
        f.flush()
        self._lockfile = f

    def _db_error(self, exc: Exception) -> StationError:
        text = str(exc)
        if "locked" in text or "busy" in text:
            return StationError(f"station database {self.path} is locked by another station process",
                                "wait for it to finish or use another --db")
        return StationError(f"station database {self.path} is unusable ({text})", "move it away and retry")

    @contextlib.contextmanager
    def _tx(self) -> Iterator[sqlite3.Cursor]:
        """One ``BEGIN IMMEDIATE`` transaction (write lock taken up front, short busy timeout)."""
        with self._lock:
            cur = self.db.cursor()
            try:
                cur.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError as exc:
                raise self._db_error(exc) from None
            try:
                yield cur
            except BaseException:
                cur.execute("ROLLBACK")
                raise
            else:
                try:
                    cur.execute("COMMIT")
                except sqlite3.OperationalError as exc:
                    cur.execute("ROLLBACK")
                    raise self._db_error(exc) from None

    def close(self) -> None:
        db = getattr(self, "db", None)
        if db is not None:
            with contextlib.suppress(sqlite3.Error):
                db.close()
            self.db = None  # type: ignore[assignment]
        if self._lockfile is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(self._lockfile, fcntl.LOCK_UN)
            self._lockfile.close()
            self._lockfile = None

    def __enter__(self) -> Records:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- recovery ------------------------------------------------------------------------
    def recover_interrupted(self) -> list[int]:
        """Mark attempts still ``running`` from a dead process (or any other process, if we hold
        the station lock) as ``interrupted``. Returns their ids."""
        rows = self.db.execute("SELECT id, pid, host FROM attempts WHERE result = ?", (RUNNING,)).fetchall()
        me = os.getpid()
        host = socket.gethostname()
        stale = [r["id"] for r in rows
                 if r["pid"] != me and (self._lockfile is not None or (r["host"] == host and not _pid_alive(r["pid"])))]
        if stale:
            with self._tx() as cur:
                for aid in stale:
                    cur.execute("UPDATE attempts SET result=?, ended=COALESCE(ended, ?), error=COALESCE(error, ?) "
                                "WHERE id=? AND result=?",
                                (INTERRUPTED, time.time(), "station process died during the attempt", aid, RUNNING))
        return stale

    # -- writes --------------------------------------------------------------------------
    def board_seen(self, serial: str, *, slot: str | None = None, port: str | None = None, mode: str | None = None,
                   board: str | None = None) -> None:
        now = time.time()
        with self._tx() as cur:
            cur.execute(
                "INSERT INTO boards(serial, board, slot, port, mode, first_seen, last_seen) VALUES (?,?,?,?,?,?,?) "
                "ON CONFLICT(serial) DO UPDATE SET board=COALESCE(excluded.board, board), "
                "slot=COALESCE(excluded.slot, slot), port=COALESCE(excluded.port, port), "
                "mode=COALESCE(excluded.mode, mode), last_seen=excluded.last_seen",
                (serial, board, slot, port, mode, now, now))

    def start_attempt(self, serial: str, *, slot: str | None, board: str | None, release_id: str | None,
                      artifacts: dict[str, str], qdl_version: str | None, log_path: Path | str | None) -> int:
        with self._tx() as cur:
            cur.execute(
                "INSERT INTO attempts(serial, slot, board, release_id, artifacts, qdl_version, host, pid, started, "
                "state, result, log_path) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                (serial, slot, board, release_id, json.dumps(artifacts, sort_keys=True), qdl_version,
                 socket.gethostname(), os.getpid(), time.time(), "unknown", RUNNING,
                 str(log_path) if log_path else None))
            return int(cur.lastrowid)

    def set_state(self, attempt_id: int, state: str, *, tries: int | None = None) -> None:
        with self._tx() as cur:
            cur.execute("UPDATE attempts SET state=?, tries=COALESCE(?, tries) WHERE id=?", (state, tries, attempt_id))

    def add_event(self, attempt_id: int | None, step: str, kind: str, *, duration_s: float | None = None,
                  detail: dict[str, Any] | None = None) -> None:
        with self._tx() as cur:
            cur.execute("INSERT INTO events(attempt_id, ts, step, kind, duration_s, detail) VALUES (?,?,?,?,?,?)",
                        (attempt_id, time.time(), step, kind, duration_s,
                         json.dumps(detail, sort_keys=True) if detail else None))

    def finish_attempt(self, attempt_id: int, result: str, *, error: str | None = None,
                       identity: dict[str, Any] | None = None) -> None:
        with self._tx() as cur:
            cur.execute("UPDATE attempts SET result=?, ended=?, error=?, identity=COALESCE(?, identity) WHERE id=?",
                        (result, time.time(), error, json.dumps(identity, sort_keys=True) if identity else None,
                         attempt_id))

    def set_identity(self, serial: str, identity: dict[str, Any] | None, address: str | None = None) -> None:
        with self._tx() as cur:
            cur.execute("UPDATE boards SET identity=COALESCE(?, identity), address=COALESCE(?, address) "
                        "WHERE serial=?",
                        (json.dumps(identity, sort_keys=True) if identity else None, address, serial))

    # -- reads ---------------------------------------------------------------------------
    def history(self, serial: str | None = None) -> list[dict[str, Any]]:
        """Attempts, newest first (optionally for one board serial)."""
        sql = "SELECT * FROM attempts"
        args: tuple[Any, ...] = ()
        if serial:
            sql += " WHERE serial = ?"
            args = (serial.upper(),)
        rows = self.db.execute(sql + " ORDER BY id DESC", args).fetchall()
        out = []
        for r in rows:
            d = dict(r)
            for key in ("artifacts", "identity"):
                d[key] = json.loads(d[key]) if d.get(key) else None
            d["duration_s"] = round(d["ended"] - d["started"], 3) if d.get("ended") else None
            out.append(d)
        return out

    def events(self, attempt_id: int) -> list[dict[str, Any]]:
        rows = self.db.execute("SELECT * FROM events WHERE attempt_id=? ORDER BY id", (attempt_id,)).fetchall()
        return [dict(r) | {"detail": json.loads(r["detail"]) if r["detail"] else None} for r in rows]

    def boards(self) -> list[dict[str, Any]]:
        rows = self.db.execute("SELECT * FROM boards ORDER BY slot, serial").fetchall()
        return [dict(r) | {"identity": json.loads(r["identity"]) if r["identity"] else None} for r in rows]

    def passed_boards(self) -> list[dict[str, Any]]:
        """Boards whose latest finished attempt passed, with that attempt's release and identity."""
        rows = self.db.execute(
            "SELECT a.*, b.address AS address, b.identity AS board_identity FROM attempts a "
            "LEFT JOIN boards b ON b.serial = a.serial "
            "WHERE a.id = (SELECT MAX(id) FROM attempts x WHERE x.serial = a.serial AND x.result != ?) "
            "AND a.result = ? ORDER BY a.board, a.slot, a.serial", (RUNNING, PASSED)).fetchall()
        out = []
        for r in rows:
            d = dict(r)
            ident = d.get("identity") or d.get("board_identity")
            d["identity"] = json.loads(ident) if ident else {}
            out.append(d)
        return out


def group_name(board_id: str) -> str:
    """Ansible group of a board type: ``iq-8275-evk`` -> ``iq_8275_evk``."""
    return board_id.replace("-", "_")


def build_inventory(records: Records, addresses: dict[str, str] | None = None) -> dict[str, Any]:
    """Ansible YAML inventory of boards that passed, grouped per board type.

    ``addresses`` (serial -> ``host[:port]``) overrides what was read back on the console.
    """
    addresses = {k.upper(): v for k, v in (addresses or {}).items()}
    children: dict[str, Any] = {}
    for row in records.passed_boards():
        board_id = row.get("board") or "unknown"
        ident = row.get("identity") or {}
        serial = row["serial"]
        hostname = ident.get("hostname") or f"{board_id.removesuffix('-evk')}-{serial.lower()}"
        hostvars: dict[str, Any] = {
            "edge_llm_serial": serial,
            "edge_llm_board": board_id,
            "edge_llm_release": row.get("release_id"),
            "edge_llm_slot": row.get("slot"),
        }
        addr = addresses.get(serial) or row.get("address") or ident.get("address")
        if addr:
            host, _, port = str(addr).partition(":")
            hostvars["ansible_host"] = host
            if port:
                hostvars["ansible_port"] = int(port)
        hostvars["ansible_user"] = "root"
        if board_id in catalog.boards():
            hostvars["edge_llm_soc0_machine"] = catalog.board(board_id).soc0_machine
        group = children.setdefault(group_name(board_id), {"hosts": {}})
        group["hosts"][hostname] = {k: v for k, v in hostvars.items() if v is not None}
    return {"all": {"children": dict(sorted(children.items()))}}


def write_inventory(records: Records, out: Path | str, addresses: dict[str, str] | None = None) -> dict[str, Any]:
    """Write :func:`build_inventory` atomically to ``out``; returns the inventory."""
    inv = build_inventory(records, addresses)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp")
    tmp.write_text("# generated by `provisioner station export-inventory`\n"
                   + yaml.safe_dump(inv, sort_keys=True, default_flow_style=False), encoding="utf-8")
    os.replace(tmp, out)
    return inv
