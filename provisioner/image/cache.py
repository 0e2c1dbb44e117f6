"""`provisioner cache serve`: share one host's sstate with other build hosts, the Yocto way.

Nothing new is invented here: other hosts use bitbake's own ``SSTATE_MIRRORS`` (an HTTP mirror of
this host's ``SSTATE_DIR``) and hash equivalence (``BB_SIGNATURE_HANDLER = "OEEquivHash"`` with
``BB_HASHSERVE`` pointing at a shared ``bitbake-hashserv``). This module starts both side by side
and prints the manifest ``build:`` snippet the other hosts paste in.

The HTTP mirror is read-only (GET/HEAD only: http.server answers 501 to anything else), and the
hash server database lives on local disk, not beside an NFS sstate folder (sqlite over NFS
corrupts).

Safe by default: both servers listen on loopback unless ``--bind`` says otherwise. A writable hash
server on the LAN lets anyone report a task hash equivalent to another and so make every build host
reuse a wrong sstate object. With a LAN ``--bind`` the hash server there runs with
bitbake-hashserv's ``--read-only`` ("Disallow write operations from clients", bitbake
bin/bitbake-hashserv), and a second bitbake-hashserv on the same database takes reports only on
``write_bind`` (loopback by default) for this host's own builds. Two processes on one database are
what SQLite's WAL mode is for (bitbake lib/hashserv/sqlite.py sets ``journal_mode = WAL``).
"""

from __future__ import annotations

import ipaddress
import os
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from provisioner.context import RunContext
from provisioner.errors import BuildError


class _ReadOnlySstate(SimpleHTTPRequestHandler):
    """Serves files below the sstate folder; counts hits instead of logging every request."""

    server_version = "edge-llm-sstate/1"
    stats: dict[str, int]

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - http.server's signature
        pass

    def send_response(self, code: int, message: str | None = None) -> None:
        key = "hits" if code == 200 else "misses" if code == 404 else "other"
        self.stats[key] = self.stats.get(key, 0) + 1
        super().send_response(code, message)


LOOPBACK = "127.0.0.1"


def host_port(host: str, port: int) -> str:
    """bitbake-hashserv's ADDRESS:PORT form (an IPv6 address in brackets)."""
    return f"[{host}]:{port}" if ":" in host and not host.startswith("[") else f"{host}:{port}"


def is_loopback(host: str) -> bool:
    """True for an address only this host can reach (127.0.0.0/8, ::1, localhost)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@dataclass
class CacheService:
    """A running hash server (+ a writer for this host when serving the LAN) and sstate HTTP mirror.

    ``stop()`` ends all of them. ``write_port`` is None when no address accepts reports.
    """

    sstate_dir: Path
    bind: str
    http_port: int
    hashserv_port: int
    advertise: str
    db: Path
    read_only: bool = False
    write_bind: str | None = None
    write_port: int | None = None
    hashserv: subprocess.Popen | None = None
    writer: subprocess.Popen | None = None
    http: ThreadingHTTPServer | None = None
    stats: dict[str, int] = field(default_factory=dict)
    _thread: threading.Thread | None = None

    @property
    def log(self) -> Path:
        """bitbake-hashserv's output, beside its database."""
        return self.db.with_suffix(".log")

    @property
    def write_log(self) -> Path:
        """The writer's output (only with a separate write address)."""
        return self.db.with_suffix(".write.log")

    @property
    def write_hashserve(self) -> str | None:
        """The address this host's own builds report new hashes to (None: nobody may)."""
        if self.write_port is None or self.write_bind is None:
            return None
        host = LOOPBACK if self.write_bind in ("", "0.0.0.0") else self.write_bind
        return host_port(host, self.write_port)

    @property
    def mirror_url(self) -> str:
        return f"http://{self.advertise}:{self.http_port}/PATH;downloadfilename=PATH"

    @property
    def hashserve(self) -> str:
        return f"{self.advertise}:{self.hashserv_port}"

    def snippet(self) -> str:
        """The manifest ``build:`` keys other hosts use (YAML)."""
        return ("build:\n"
                f"  sstate_mirrors: [\"{self.mirror_url}\"]\n"
                f"  hashserve: {self.hashserve}\n")

    def as_dict(self) -> dict[str, Any]:
        return {"sstate_dir": str(self.sstate_dir), "bind": self.bind, "http_port": self.http_port,
                "hashserv_port": self.hashserv_port, "hashserv_read_only": self.read_only,
                "write_hashserve": self.write_hashserve, "db": str(self.db),
                "build": {"sstate_mirrors": [self.mirror_url], "hashserve": self.hashserve},
                "snippet": self.snippet()}

    def stop(self) -> None:
        if self.http is not None:
            if self._thread is not None:     # shutdown() waits for serve_forever: only if it runs
                self.http.shutdown()
                self._thread = None
            self.http.server_close()
            self.http = None
        for proc in (self.hashserv, self.writer):
            if proc is not None and proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        self.hashserv = self.writer = None

    def alive(self) -> bool:
        """Every hash server this service started still runs."""
        procs = [self.hashserv] + ([self.writer] if self._separate_writer else [])
        return all(p is not None and p.poll() is None for p in procs)

    @property
    def _separate_writer(self) -> bool:
        return self.write_port is not None and self.write_port != self.hashserv_port

    def __enter__(self) -> CacheService:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def find_hashserv(env: Mapping[str, str], bitbake_dir: Path | None = None, work_dir: Path | None = None) -> Path:
    """``bitbake-hashserv`` from ``bitbake_dir``/bin, PATH, or the bitbake kas checked out in ``work_dir``.

    The PyPI bitbake-setup package carries the ``bb`` module but not the hash server; a bitbake
    checkout (kas puts one in KAS_WORK_DIR/bitbake on the first build) has it in ``bin/``.
    """
    candidates: list[Path] = []
    if bitbake_dir is not None:
        candidates.append(Path(bitbake_dir) / "bin" / "bitbake-hashserv")
    on_path = shutil.which("bitbake-hashserv", path=env.get("PATH"))
    if on_path:
        candidates.append(Path(on_path))
    if work_dir is not None:
        candidates.append(Path(work_dir) / "bitbake" / "bin" / "bitbake-hashserv")
    for c in candidates:
        if c.is_file() and os.access(c, os.X_OK):
            return c
    where = f" (looked in {', '.join(str(c) for c in candidates)})" if candidates else ""
    raise BuildError(f"bitbake-hashserv not found{where}",
                     "pass --bitbake DIR (a bitbake checkout, e.g. <KAS_WORK_DIR>/bitbake after one build) "
                     "or put bitbake/bin on PATH")


def _wait_port(host: str, port: int, proc: subprocess.Popen, timeout_s: float, log: Path) -> None:
    deadline = time.monotonic() + timeout_s
    target = "127.0.0.1" if host in ("", "0.0.0.0") else "::1" if host == "::" else host
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            out = log.read_text(errors="replace") if log.exists() else ""
            last = next((ln for ln in reversed(out.splitlines()) if ln.strip()), f"exit {proc.returncode}")
            raise BuildError(f"bitbake-hashserv stopped at start: {last}",
                             f"check the port (--hashserv-port) and the database path (--db); log: {log}")
        try:
            with socket.create_connection((target, port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise BuildError(f"bitbake-hashserv did not listen on port {port} within {timeout_s:.0f} s",
                     "check its output; is the port firewalled or taken?")


def _start_hashserv(argv: list[str], log: Path, env: Mapping[str, str]) -> subprocess.Popen:
    with open(log, "ab") as logf:
        return subprocess.Popen(argv, stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=env, start_new_session=True)


@dataclass(frozen=True)
class CacheOptions:
    """What the operator chose for ``provisioner cache serve``, resolved once at the CLI edge (as
    :class:`provisioner.station.strategy.FlashOptions` is for a flash run).

    ``bind`` loopback (the default): one writable hash server only this host reaches. Any other
    ``bind``: the hash server there is read-only and a second one on ``write_bind:write_port``
    (default loopback, ``hashserv_port + 1``) takes this host's reports. ``read_only_hashserv``:
    no address accepts reports. ``http_port`` 0 picks a free port (tests). ``db`` None: the run's
    state folder (:attr:`provisioner.context.RunContext.state_dir`); ``hashserv_exe`` None:
    :func:`find_hashserv` on the run's PATH.
    """

    bind: str = LOOPBACK
    http_port: int = 8080
    hashserv_port: int = 8686
    write_bind: str = LOOPBACK
    write_port: int | None = None
    advertise: str | None = None
    db: Path | None = None
    hashserv_exe: Path | None = None
    read_only_hashserv: bool = False
    upstream: str | None = None
    start_timeout_s: float = 20.0


def start_cache(sstate_dir: Path, ctx: RunContext, options: CacheOptions | None = None) -> CacheService:
    """Start ``bitbake-hashserv`` and the read-only HTTP sstate mirror; return the running service.

    ``ctx`` is the run (its environment goes to the hash server, its state folder holds the default
    database), ``options`` the operator's choices (:class:`CacheOptions`). The caller owns ``stop()``.
    """
    o = options or CacheOptions()
    bind, http_port, hashserv_port, write_bind, write_port = o.bind, o.http_port, o.hashserv_port, o.write_bind, \
        o.write_port
    advertise, db, read_only_hashserv, upstream = o.advertise, o.db, o.read_only_hashserv, o.upstream
    start_timeout_s = o.start_timeout_s
    env = dict(ctx.env)
    sstate_dir = Path(sstate_dir).expanduser().resolve()
    if not sstate_dir.is_dir():
        raise BuildError(f"sstate folder {sstate_dir} does not exist",
                         "pass --dir with the SSTATE_DIR of a host that has built (or create it)")
    lan = not is_loopback(bind)
    if lan and not read_only_hashserv:
        write_port = hashserv_port + 1 if write_port is None else write_port
        if write_port == hashserv_port:
            raise BuildError(f"the write address {write_bind}:{write_port} uses the LAN hash server's port",
                             "pick another --write-port (default: --hashserv-port + 1)")
    else:
        # loopback: the one server is this host's writer (unless everything is read-only)
        write_bind, write_port = bind, (None if read_only_hashserv else hashserv_port)
    exe = o.hashserv_exe or find_hashserv(env)
    if db is None:
        db = ctx.state_dir / "hashserv.db"
    db = Path(db).expanduser().resolve()
    db.parent.mkdir(parents=True, exist_ok=True)
    advertise = advertise or (socket.getfqdn() if lan else bind)

    stats: dict[str, int] = {}
    handler = type("Handler", (_ReadOnlySstate,), {"stats": stats})
    try:
        http = ThreadingHTTPServer((bind, http_port), partial(handler, directory=str(sstate_dir)))
    except OSError as exc:
        raise BuildError(f"cannot serve sstate on {bind}:{http_port}: {exc.strerror}",
                         "pick another --port or stop what uses it") from exc
    read_only = lan or read_only_hashserv
    svc = CacheService(sstate_dir, bind, http.server_address[1], hashserv_port, advertise, db, read_only=read_only,
                       write_bind=write_bind, write_port=write_port, http=http, stats=stats)
    common = ["--database", str(db)] + (["--upstream", upstream] if upstream else [])
    try:
        svc.hashserv = _start_hashserv([str(exe), "--bind", host_port(bind, hashserv_port), *common]
                                       + (["--read-only"] if read_only else []), svc.log, env)
        _wait_port(bind, hashserv_port, svc.hashserv, start_timeout_s, svc.log)
        if svc._separate_writer:
            assert write_port is not None
            svc.writer = _start_hashserv([str(exe), "--bind", host_port(write_bind, write_port), *common],
                                         svc.write_log, env)
            _wait_port(write_bind, write_port, svc.writer, start_timeout_s, svc.write_log)
    except BaseException:
        svc.stop()
        raise
    svc._thread = threading.Thread(target=http.serve_forever, name="sstate-http", daemon=True)
    svc._thread.start()
    return svc


def serve(sstate_dir: Path, ctx: RunContext, options: CacheOptions | None = None, *, on_ready: Any = None) -> None:
    """Run the service until Ctrl-C (the CLI); ``on_ready(service)`` prints the snippet."""
    svc = start_cache(sstate_dir, ctx, options)
    try:
        if on_ready:
            on_ready(svc)
        while svc.alive():
            time.sleep(0.5)
        codes = [p.returncode for p in (svc.hashserv, svc.writer) if p is not None and p.poll() is not None]
        raise BuildError(f"bitbake-hashserv exited ({codes[0] if codes else '?'})",
                         f"see its log ({svc.log}); restart `provisioner cache serve`")
    finally:
        svc.stop()
