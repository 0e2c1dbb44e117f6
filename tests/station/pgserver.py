"""A throwaway PostgreSQL cluster for tests and benches: Debian's real server binaries.

Why not the system cluster: tests must kill the server with SIGKILL and restart it, and must not
touch anything the machine runs. So ``initdb`` makes a cluster in a temporary folder and the
``postgres`` binary serves it on a free loopback port; :meth:`PgServer.kill` takes the postmaster
and every child down at once with SIGKILL, as a power cut of the server would (minus the disk).
The server refuses to run as root (docs/15/server-start.html), so as root the cluster
belongs to the ``postgres`` user Debian's package creates (else ``nobody``).

initdb options used (https://www.postgresql.org/docs/15/app-initdb.html): ``--pwfile`` (the
superuser password from a file, never argv), ``--auth=scram-sha-256``, ``--no-sync``.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

ADMIN = "pgadmin"


def bindir() -> Path | None:
    """The newest /usr/lib/postgresql/*/bin with initdb and postgres, or None."""
    for d in sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(Path(p).parent.name), reverse=True):
        if (Path(d) / "initdb").is_file() and (Path(d) / "postgres").is_file():
            return Path(d)
    return None


def skip_reason() -> str | None:
    """Why a real PostgreSQL cannot run here (one line), or None."""
    if bindir() is None:
        return "PostgreSQL server binaries not installed (Debian package postgresql; .ci/run installs it)"
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return "psycopg not installed (pip install -e '.[test]')"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PgServer:
    """One cluster; :meth:`kill` and :meth:`start` may be called any number of times."""

    def __init__(self) -> None:
        self.bin = bindir()
        assert self.bin is not None, skip_reason()
        self.dir = Path(tempfile.mkdtemp(prefix="pgtest-"))
        self.dir.chmod(0o755)
        self.data = self.dir / "data"
        self.log = self.dir / "server.log"
        self.port = _free_port()
        self.admin_password = os.urandom(12).hex()
        self.user: str | None = None
        if os.geteuid() == 0:
            for name in ("postgres", "nobody"):
                with contextlib.suppress(KeyError):
                    pwd.getpwnam(name)
                    self.user = name
                    break
        self.proc: subprocess.Popen[bytes] | None = None
        self._initdb()

    # -- process ---------------------------------------------------------------------------
    def _as_user(self) -> dict[str, Any]:
        if self.user is None:
            return {}
        pw = pwd.getpwnam(self.user)
        return {"user": pw.pw_uid, "group": pw.pw_gid, "extra_groups": []}

    def _own(self, path: Path) -> None:
        if self.user is not None:
            pw = pwd.getpwnam(self.user)
            os.chown(path, pw.pw_uid, pw.pw_gid)

    def _initdb(self) -> None:
        self._own(self.dir)
        pwfile = self.dir / "admin.pw"
        pwfile.write_text(self.admin_password + "\n")
        pwfile.chmod(0o600)
        self._own(pwfile)
        try:
            subprocess.run([str(self.bin / "initdb"), "-D", str(self.data), "-U", ADMIN, f"--pwfile={pwfile}",
                            "--auth=scram-sha-256", "--no-sync", "-E", "UTF8", "--locale=C"],
                           check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=self.dir,
                           **self._as_user())
        finally:
            pwfile.unlink()

    def start(self, timeout_s: float = 60.0) -> None:
        """Start the server and wait until it accepts connections (crash recovery included)."""
        log = open(self.log, "ab")  # noqa: SIM115 - handed to the child
        self._own(self.log)
        self.proc = subprocess.Popen(
            [str(self.bin / "postgres"), "-D", str(self.data), "-p", str(self.port), "-k", str(self.dir),
             "-c", "listen_addresses=127.0.0.1", "-c", "shared_buffers=16MB", "-c", "max_connections=40",
             "-c", "log_connections=on"],
            stdout=log, stderr=log, stdin=subprocess.DEVNULL, start_new_session=True, cwd=self.dir,
            **self._as_user())
        log.close()
        import psycopg

        deadline = time.monotonic() + timeout_s
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"postgres exited {self.proc.returncode}: {self.log.read_text()[-2000:]}")
            try:
                psycopg.connect(self.url(ADMIN, "postgres"), password=self.admin_password, connect_timeout=2).close()
                return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def pids(self) -> list[int]:
        """The postmaster and its children (backends, checkpointer, ...). Not one process group:
        every child calls setsid() at start (src/backend/utils/init/miscinit.c InitPostmasterChild)."""
        if self.proc is None:
            return []
        out = [self.proc.pid]
        for d in Path("/proc").iterdir():
            if not d.name.isdigit():
                continue
            try:
                fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == self.proc.pid:
                out.append(int(d.name))
        return out

    def _signal(self, sig: int) -> list[int]:
        pids = self.pids()
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        return pids

    @staticmethod
    def _alive(pid: int) -> bool:
        try:
            return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
        except OSError:
            return False

    def kill(self) -> None:
        """SIGKILL the postmaster and all its children at once, and wait until they are gone."""
        if self.proc is None:
            return
        pids = self._signal(signal.SIGKILL)
        self.proc.wait()
        deadline = time.monotonic() + 30
        while any(self._alive(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.05)
        self.proc = None

    def freeze(self, frozen: bool = True) -> None:
        """SIGSTOP (or SIGCONT) the whole server: connections stay open, nothing answers (a hung host)."""
        self._signal(signal.SIGSTOP if frozen else signal.SIGCONT)

    def stop(self) -> None:
        """Fast shutdown (SIGINT, docs/15/server-shutdown.html)."""
        if self.proc is None:
            return
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.kill()
        self.proc = None

    def cleanup(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    # -- databases -------------------------------------------------------------------------
    def url(self, user: str, db: str) -> str:
        return f"postgresql://{user}@127.0.0.1:{self.port}/{db}"

    def admin(self, db: str = "postgres") -> Any:
        import psycopg

        return psycopg.connect(self.url(ADMIN, db), password=self.admin_password, autocommit=True)

    def make_db(self, name: str, role: str, password: str) -> str:
        """A database owned by a new login role; returns its URL (without the password)."""
        from psycopg import sql

        with self.admin() as conn:
            conn.execute(sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(sql.Identifier(role),
                                                                           sql.Literal(password)))
            conn.execute(sql.SQL("CREATE DATABASE {} OWNER {}").format(sql.Identifier(name), sql.Identifier(role)))
        return self.url(role, name)

    def count(self, db: str, query: str, args: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        with self.admin(db) as conn:
            return conn.execute(query, args).fetchall()
