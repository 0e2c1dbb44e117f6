"""Station records: every board seen and every flash attempt, in SQLite.

Why SQLite in WAL mode with one short ``BEGIN IMMEDIATE`` transaction per state change: the
station may lose power or be ``kill -9``-ed mid-flash, and the next start must still find a
consistent history. An attempt left ``running`` by a process that no longer exists is settled
when the database is next opened: from the outcome line the station appends to the board's qdl
log before it updates the row (so a flash whose row could not be written is not lost), else as
``interrupted``; a qdl that outlived its station (its pid and start time are in the row) is
ended first, since it would still hold the board. Only one station process may write at a time:
a lock file (``<db>.lock``, flock) says who holds it, and a second station gets one clear line.

A full disk is a one-line error naming the filesystem, never a lost flash: a writer keeps a
small reserve file next to the database and deletes it to make room for the outcomes of the
boards already flashing when the disk fills up. SQLite may already have rolled the transaction
back after SQLITE_FULL (https://www.sqlite.org/lang_transaction.html, "Response To Errors Within
A Transaction"), so a rollback is only issued while ``in_transaction`` says one is open.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import signal
import socket
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from provisioner.errors import StationError
from provisioner.process import pid_alive, start_id

T = TypeVar("T")


def _op_state(cur: sqlite3.Cursor, attempt_id: int, state: str, tries: int | None, slot: str | None = None) -> None:
    cur.execute("UPDATE attempts SET state=?, tries=COALESCE(?, tries), slot=COALESCE(slot, ?) WHERE id=?",  # slot:
                (state, tries, slot, attempt_id))   # a board sent to EDL from its console has one once found there


def _op_process(cur: sqlite3.Cursor, attempt_id: int, pid: int, started: str | None) -> None:
    cur.execute("UPDATE attempts SET qdl_pid=?, qdl_start=? WHERE id=?", (pid, started, attempt_id))


def _op_event(cur: sqlite3.Cursor, attempt_id: int | None, step: str, kind: str, duration_s: float | None,
              detail: dict[str, Any] | None, ts: float) -> None:
    cur.execute("INSERT INTO events(attempt_id, ts, step, kind, duration_s, detail) VALUES (?,?,?,?,?,?)",
                (attempt_id, ts, step, kind, duration_s, json.dumps(detail, sort_keys=True) if detail else None))


_OPS: dict[str, Callable[..., None]] = {"state": _op_state, "process": _op_process, "event": _op_event}

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
    tries INTEGER DEFAULT 0,
    qdl_pid INTEGER,
    qdl_start TEXT
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
#: every outcome an attempt can have, the one list the history filters and the dashboard check against
OUTCOMES = (PASSED, FAILED, INTERRUPTED, RUNNING)

#: Columns added after the first release; older databases get them on open.
_ADDED_COLUMNS = {"qdl_pid": "INTEGER", "qdl_start": "TEXT"}
#: Room kept free next to the database for the outcomes of boards already flashing.
RESERVE_BYTES = 1 << 20
#: A filesystem with less free space than this is full for the station's purposes.
MIN_FREE_BYTES = 1 << 20
#: Prefix of the line :meth:`Records.finish_attempt` appends to a board's qdl log.
OUTCOME_PREFIX = "# station outcome "
_SQLITE_FULL = 13   # https://www.sqlite.org/rescode.html#full
_SQLITE_IOERR = 10  # https://www.sqlite.org/rescode.html#ioerr


def mount_point(path: Path | str) -> Path:
    """The mount point of the filesystem that holds (or would hold) ``path``."""
    p = Path(os.path.abspath(path))
    while not p.exists() and p != p.parent:
        p = p.parent
    while not os.path.ismount(p):
        p = p.parent
    return p


def no_space_error(path: Path | str, what: str) -> StationError:
    """The one-line error for a full filesystem: which one, which file, what to do."""
    mnt = mount_point(path)
    return StationError(f"station records: no space left on {mnt} ({what} {os.path.abspath(path)})",
                        f"free space on {mnt} (df -h {mnt}), then run the station again")


def is_no_space(exc: BaseException, path: Path | str) -> bool:
    """Whether ``exc`` (OSError or sqlite3 error) means the filesystem of ``path`` is full.

    SQLite reports ENOSPC on a write as SQLITE_FULL, but a WAL index (``-shm``) that cannot
    grow is an I/O error; that one counts as a full disk when the filesystem has no room left.
    """
    if isinstance(exc, OSError):
        return exc.errno in (errno.ENOSPC, errno.EDQUOT)
    if not isinstance(exc, sqlite3.Error):
        return False
    code = getattr(exc, "sqlite_errorcode", None)
    if code == _SQLITE_FULL or "database or disk is full" in str(exc):
        return True
    return code is not None and code & 0xFF == _SQLITE_IOERR and free_bytes(path) < MIN_FREE_BYTES


def free_bytes(path: Path | str) -> int:
    """Bytes an unprivileged writer may still use on the filesystem of ``path``."""
    try:
        st = os.statvfs(mount_point(path))
    except OSError:
        return MIN_FREE_BYTES
    return st.f_bavail * st.f_frsize


def require_space(path: Path | str, what: str) -> None:
    """Refuse to start when the filesystem of ``path`` is (almost) full."""
    if free_bytes(path) < MIN_FREE_BYTES:
        raise no_space_error(path, what)


class Reserve:
    """A ballast file next to the database, deleted to make room when the disk fills up.

    Recreated on every writer start, so a station never starts flashing on a disk where it could
    not record what it did.
    """

    def __init__(self, path: Path) -> None:
        self.path = path

    def ensure(self, size: int = RESERVE_BYTES) -> None:
        try:
            if self.path.stat().st_size >= size:
                return
        except FileNotFoundError:
            pass
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            try:
                os.posix_fallocate(fd, 0, size)
            except OSError as exc:
                if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
                    raise
                os.pwrite(fd, bytes(size), 0)  # a filesystem without fallocate: write it out
            os.fsync(fd)
        except OSError:
            os.close(fd)
            with contextlib.suppress(OSError):
                self.path.unlink()
            raise
        os.close(fd)

    def release(self) -> bool:
        """Delete the reserve; False if there was none left to free."""
        try:
            self.path.unlink()
        except FileNotFoundError:
            return False
        return True


def read_outcome(log_path: Path | str | None, attempt_id: int) -> dict[str, Any] | None:
    """The last outcome line for ``attempt_id`` in a board's qdl log, if the station wrote one."""
    if not log_path:
        return None
    try:
        text = Path(log_path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    found = None
    for line in text.splitlines():
        if not line.startswith(OUTCOME_PREFIX):
            continue
        try:
            d = json.loads(line[len(OUTCOME_PREFIX):])
        except ValueError:
            continue  # a line cut short by a full disk or a crash
        if isinstance(d, dict) and d.get("attempt") == attempt_id and d.get("result") in (PASSED, FAILED):
            found = d
    return found


def _end_process(pid: int, started: str) -> bool:
    """End a process (its whole group if it leads one) that is still the one started at ``started``.

    SIGTERM first (qdl then releases the USB interface), SIGKILL after 5 s.
    """
    for sig, grace in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
        if start_id(pid) != started:
            return True
        try:
            if os.getpgid(pid) == pid:
                os.killpg(pid, sig)
            else:
                os.kill(pid, sig)
        except ProcessLookupError:
            return True
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)  # reap it if it happens to be our own child
            if start_id(pid) != started:
                return True
            time.sleep(0.05)
    return start_id(pid) != started


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
        self.reserve = Reserve(self.path.with_name(self.path.name + ".reserve"))
        #: the first full-disk error met while writing (the run goes on; the caller reports it)
        self.space_error: StationError | None = None
        #: one line per attempt settled at open (survivor ended, reconciled, interrupted)
        self.recovery_notes: list[str] = []
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            if writer:
                self._take_station_lock()
            self.db = sqlite3.connect(self.path, timeout=busy_timeout_s, isolation_level=None,
                                      check_same_thread=False)
            self.db.row_factory = sqlite3.Row
            self.db.execute(f"PRAGMA busy_timeout={int(busy_timeout_s * 1000)}")
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA synchronous=FULL")
            with self._lock:
                self.db.executescript(SCHEMA)
                self._add_columns()
            if writer:
                self.reserve.ensure()
            self.recovered = self.recover_interrupted()
        except (OSError, sqlite3.DatabaseError) as exc:
            self.close()
            if is_no_space(exc, self.path):
                raise no_space_error(self.path, "sqlite database") from None
            if isinstance(exc, OSError):
                raise StationError(f"station database {self.path}: {exc.strerror}",
                                   "check the path and its permissions") from None
            raise self._db_error(exc) from None
        except StationError:
            self.close()
            raise

    def _add_columns(self) -> None:
        """Bring a database written by an older station up to :data:`SCHEMA`."""
        have = {r["name"] for r in self.db.execute("PRAGMA table_info(attempts)")}
        for name, kind in _ADDED_COLUMNS.items():
            if name not in have:
                self.db.execute(f"ALTER TABLE attempts ADD COLUMN {name} {kind}")

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
        self._lockfile = f  # held from here on, released by close()
        f.seek(0)
        f.truncate()
        f.write(f"pid {os.getpid()} on {socket.gethostname()}\n")
        f.flush()

    def _db_error(self, exc: Exception) -> StationError:
        text = str(exc)
        if "locked" in text or "busy" in text:
            return StationError(f"station database {self.path} is locked by another station process",
                                "wait for it to finish or use another --db")
        return StationError(f"station database {self.path} is unusable ({text})", "move it away and retry")

    def _write(self, body: Callable[[sqlite3.Cursor], T]) -> T:
        """Run ``body`` in one ``BEGIN IMMEDIATE`` transaction (write lock taken up front).

        On a full disk the reserve is deleted and the transaction run once more; if that fails
        too, the full-disk error is raised (and kept in :attr:`space_error`).
        """
        with self._lock:
            while True:
                try:
                    return self._transaction(body)
                except sqlite3.DatabaseError as exc:     # OperationalError (full, locked) or corruption
                    if not is_no_space(exc, self.path):
                        raise self._db_error(exc) from None
                    self.space_error = self.space_error or no_space_error(self.path, "sqlite database")
                    if not self.reserve.release():
                        raise self.space_error from None

    def _read(self, sql: str, args: tuple[Any, ...] = ()) -> list[sqlite3.Row]:
        """One query; a locked or corrupt database is the same one-line StationError as on write."""
        try:
            return self.db.execute(sql, args).fetchall()
        except sqlite3.DatabaseError as exc:
            raise self._db_error(exc) from None

    def _transaction(self, body: Callable[[sqlite3.Cursor], T]) -> T:
        cur = self.db.cursor()
        cur.execute("BEGIN IMMEDIATE")
        try:
            result = body(cur)
            cur.execute("COMMIT")
        except BaseException:
            # after SQLITE_FULL (and a failed COMMIT) SQLite may have rolled back already
            if self.db.in_transaction:
                with contextlib.suppress(sqlite3.Error):
                    self.db.execute("ROLLBACK")
            raise
        return result

    def close(self) -> None:
        db = getattr(self, "db", None)
        if db is not None:
            with contextlib.suppress(sqlite3.Error):
                db.close()
            self.db = None  # type: ignore[assignment]
        if self._lockfile is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(self._lockfile, fcntl.LOCK_UN)
            with contextlib.suppress(OSError):  # its pid line may not fit on a full disk
                self._lockfile.close()
            self._lockfile = None

    def __enter__(self) -> Records:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- recovery ------------------------------------------------------------------------
    def recover_interrupted(self) -> list[int]:
        """Settle attempts still ``running`` from a dead process (or any other process, if we
        hold the station lock). Returns their ids; :attr:`recovery_notes` says what was done.

        A qdl the dead station left running (same pid *and* start time as recorded) still
        writes the board and holds its USB interface: a writer ends it before anything else
        touches that board; a reader leaves such an attempt to the next writer. The result comes
        from the outcome line in the board's log when the station wrote one, else ``interrupted``.
        """
        rows = self.db.execute("SELECT id, serial, pid, host, log_path, qdl_pid, qdl_start FROM attempts "
                               "WHERE result = ?", (RUNNING,)).fetchall()
        me = os.getpid()
        host = socket.gethostname()
        writer = self._lockfile is not None
        settle: list[tuple[int, str, str, dict[str, Any] | None]] = []
        for r in rows:
            if r["pid"] == me or not (writer or (r["host"] == host and not pid_alive(r["pid"]))):
                continue
            survivor = (r["host"] == host and r["qdl_pid"] and r["qdl_start"]
                        and start_id(r["qdl_pid"]) == r["qdl_start"])
            what = f"attempt {r['id']} (board {r['serial']})"
            error = "station process died during the attempt"
            if survivor:
                if not writer:
                    continue
                ended = _end_process(r["qdl_pid"], r["qdl_start"])
                error += (f"; its qdl (pid {r['qdl_pid']}) was still running and was ended at the next start"
                          if ended else f"; its qdl (pid {r['qdl_pid']}) is still running and could not be ended")
                self.recovery_notes.append(
                    f"{what}: the station died while qdl pid {r['qdl_pid']} was writing the board; "
                    + ("ended it" if ended else f"could not end it: stop pid {r['qdl_pid']} before flashing "
                                                "that board"))
            outcome = read_outcome(r["log_path"], r["id"])
            if outcome:
                result = outcome["result"]
                error = outcome.get("error") or None
                self.recovery_notes.append(f"{what}: recorded as {result} from the outcome in {r['log_path']} "
                                           "(the station could not record it then)")
            else:
                result = INTERRUPTED
                if not survivor:
                    self.recovery_notes.append(f"{what}: marked interrupted (the station process died)")
            settle.append((r["id"], result, error, outcome.get("identity") if outcome else None))
        if settle:
            def body(cur: sqlite3.Cursor) -> None:
                for aid, result, error, identity in settle:
                    cur.execute("UPDATE attempts SET result=?, ended=COALESCE(ended, ?), "
                                "error=COALESCE(error, ?), identity=COALESCE(identity, ?) WHERE id=? AND result=?",
                                (result, time.time(), error, json.dumps(identity, sort_keys=True)
                                 if identity else None, aid, RUNNING))
            try:
                self._write(body)
            except StationError:
                if writer:
                    raise
                self.recovery_notes.clear()  # a reader on a full disk still reads; the next writer settles
                return []
        return [aid for aid, *_ in settle]

    # -- writes --------------------------------------------------------------------------
    def board_seen(self, serial: str, *, slot: str | None = None, port: str | None = None, mode: str | None = None,
                   board: str | None = None) -> None:
        now = time.time()
        self._write(lambda cur: cur.execute(
            "INSERT INTO boards(serial, board, slot, port, mode, first_seen, last_seen) VALUES (?,?,?,?,?,?,?) "
            "ON CONFLICT(serial) DO UPDATE SET board=COALESCE(excluded.board, board), "
            "slot=COALESCE(excluded.slot, slot), port=COALESCE(excluded.port, port), "
            "mode=COALESCE(excluded.mode, mode), last_seen=excluded.last_seen",
            (serial, board, slot, port, mode, now, now)))

    def start_attempt(self, serial: str, *, slot: str | None, board: str | None, release_id: str | None,
                      artifacts: dict[str, str], qdl_version: str | None, log_path: Path | str | None) -> int:
        def body(cur: sqlite3.Cursor) -> int:
            cur.execute(
                "INSERT INTO attempts(serial, slot, board, release_id, artifacts, qdl_version, host, pid, started, "
                "state, result, log_path) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                (serial, slot, board, release_id, json.dumps(artifacts, sort_keys=True), qdl_version,
                 socket.gethostname(), os.getpid(), time.time(), "unknown", RUNNING,
                 str(log_path) if log_path else None))
            return int(cur.lastrowid or 0)

        return self._write(body)

    def set_state(self, attempt_id: int, state: str, *, tries: int | None = None) -> None:
        self.write_many([("state", (attempt_id, state, tries))])

    def set_qdl_process(self, attempt_id: int, pid: int, started: str | None) -> None:
        """Who writes the board now (pid + start id), so a later start can end it if it outlives us."""
        self.write_many([("process", (attempt_id, pid, started))])

    def add_event(self, attempt_id: int | None, step: str, kind: str, *, duration_s: float | None = None,
                  detail: dict[str, Any] | None = None) -> None:
        self.write_many([("event", (attempt_id, step, kind, duration_s, detail, time.time()))])

    def write_many(self, ops: list[tuple[str, tuple[Any, ...]]]) -> None:
        """Several state / qdl process / event writes in one transaction (one fsync for all).

        ``ops`` are ``("state", (attempt_id, state, tries[, slot]))``, ``("process", (attempt_id, pid,
        start))`` and ``("event", (attempt_id, step, kind, duration_s, detail, ts))``.
        """
        def body(cur: sqlite3.Cursor) -> None:
            for name, args in ops:
                _OPS[name](cur, *args)

        self._write(body)

    def finish_attempt(self, attempt_id: int, result: str, *, error: str | None = None,
                       identity: dict[str, Any] | None = None) -> bool:
        """Record how an attempt ended; True if the row was written.

        The outcome goes to the board's qdl log first (one line, fsync'ed), then into the row:
        whichever of the two a crash or a full disk spares, the next start finds the outcome.
        False (with :attr:`space_error` set) when only the log line could be written; raises the
        full-disk error when neither could.
        """
        row = self.db.execute("SELECT log_path FROM attempts WHERE id=?", (attempt_id,)).fetchone()
        log_path = row["log_path"] if row else None
        logged = bool(log_path) and self._append_outcome(Path(log_path), {
            "attempt": attempt_id, "result": result, "error": error, "identity": identity})
        try:
            self._write(lambda cur: cur.execute(
                "UPDATE attempts SET result=?, ended=?, error=?, identity=COALESCE(?, identity) WHERE id=?",
                (result, time.time(), error, json.dumps(identity, sort_keys=True) if identity else None,
                 attempt_id)))
        except StationError:
            if logged and self.space_error is not None:
                return False
            raise
        return True

    def _append_outcome(self, log_path: Path, outcome: dict[str, Any]) -> bool:
        """Append the outcome line whole or not at all; on a full disk that also holds the
        reserve, free the reserve once and try again."""
        data = (OUTCOME_PREFIX + json.dumps(outcome, sort_keys=True) + "\n").encode()
        while True:
            try:
                log_path.parent.mkdir(parents=True, exist_ok=True)
                fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
                try:
                    size = os.fstat(fd).st_size
                    if os.write(fd, data) != len(data):  # a torn line would hide the next one
                        os.ftruncate(fd, size)
                        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
                    os.fsync(fd)
                finally:
                    os.close(fd)
                return True
            except OSError as exc:
                if not is_no_space(exc, log_path):
                    return False
                self.space_error = self.space_error or no_space_error(log_path, "per-board log")
                if mount_point(log_path) != mount_point(self.path) or not self.reserve.release():
                    return False

    def set_identity(self, serial: str, identity: dict[str, Any] | None, address: str | None = None) -> None:
        self._write(lambda cur: cur.execute(
            "UPDATE boards SET identity=COALESCE(?, identity), address=COALESCE(?, address) WHERE serial=?",
            (json.dumps(identity, sort_keys=True) if identity else None, address, serial)))

    # -- reads ---------------------------------------------------------------------------
    def history(self, serial: str | None = None) -> list[dict[str, Any]]:
        """Attempts, newest first (optionally for one board serial)."""
        sql = "SELECT * FROM attempts"
        args: tuple[Any, ...] = ()
        if serial:
            sql += " WHERE serial = ?"
            args = (serial.upper(),)
        rows = self._read(sql + " ORDER BY id DESC", args)
        out = []
        for r in rows:
            d = dict(r)
            for key in ("artifacts", "identity"):
                d[key] = json.loads(d[key]) if d.get(key) else None
            d["duration_s"] = round(d["ended"] - d["started"], 3) if d.get("ended") else None
            out.append(d)
        return out

    def events(self, attempt_id: int) -> list[dict[str, Any]]:
        rows = self._read("SELECT * FROM events WHERE attempt_id=? ORDER BY id", (attempt_id,))
        return [dict(r) | {"detail": json.loads(r["detail"]) if r["detail"] else None} for r in rows]

    def boards(self) -> list[dict[str, Any]]:
        rows = self._read("SELECT * FROM boards ORDER BY slot, serial")
        return [dict(r) | {"identity": json.loads(r["identity"]) if r["identity"] else None} for r in rows]

    def passed_boards(self) -> list[dict[str, Any]]:
        """Boards whose latest finished attempt passed, with that attempt's release and identity."""
        rows = self._read(
            "SELECT a.*, b.address AS address, b.identity AS board_identity FROM attempts a "
            "LEFT JOIN boards b ON b.serial = a.serial "
            "WHERE a.id = (SELECT MAX(id) FROM attempts x WHERE x.serial = a.serial AND x.result != ?) "
            "AND a.result = ? ORDER BY a.board, a.slot, a.serial", (RUNNING, PASSED))
        out = []
        for r in rows:
            d = dict(r)
            ident = d.get("identity") or d.get("board_identity")
            d["identity"] = json.loads(ident) if ident else {}
            out.append(d)
        return out
