"""`provisioner cache serve`: share one host's sstate with other build hosts, the Yocto way.

Nothing new is invented here: other hosts use bitbake's own ``SSTATE_MIRRORS`` (an HTTP mirror of
this host's ``SSTATE_DIR``) and hash equivalence (``BB_SIGNATURE_HANDLER = "OEEquivHash"`` with
``BB_HASHSERVE`` pointing at a shared ``bitbake-hashserv``). This module starts both side by side
and prints the manifest ``build:`` snippet the other hosts paste in.

The HTTP mirror is read-only (GET/HEAD only: http.server answers 501 to anything else), and the
hash server database lives on local disk, not beside an NFS sstate folder (sqlite over NFS
corrupts).
"""

from __future__ import annotations

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


@dataclass
class CacheService:
    """A running hash server + sstate HTTP mirror. ``stop()`` ends both."""

    sstate_dir: Path
    bind: str
    http_port: int
    hashserv_port: int
    advertise: str
    db: Path
    hashserv: subprocess.Popen | None = None
    http: ThreadingHTTPServer | None = None
    stats: dict[str, int] = field(default_factory=dict)
    _thread: threading.Thread | None = None

    @property
    def log(self) -> Path:
        """bitbake-hashserv's output, beside its database."""
        return self.db.with_suffix(".log")

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
        return {"sstate_dir": str(self.sstate_dir), "http_port": self.http_port, "hashserv_port": self.hashserv_port,
                "db": str(self.db), "build": {"sstate_mirrors": [self.mirror_url], "hashserve": self.hashserve},
                "snippet": self.snippet()}

    def stop(self) -> None:
        if self.http is not None:
            if self._thread is not None:     # shutdown() waits for serve_forever: only if it runs
                self.http.shutdown()
                self._thread = None
            self.http.server_close()
            self.http = None
        if self.hashserv is not None and self.hashserv.poll() is None:
            self.hashserv.terminate()
            try:
                self.hashserv.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.hashserv.kill()
                self.hashserv.wait()
        self.hashserv = None

    def __enter__(self) -> CacheService:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def find_hashserv(env: Mapping[str, str] | None = None, bitbake_dir: Path | None = None,
                  work_dir: Path | None = None) -> Path:
    """``bitbake-hashserv`` from ``bitbake_dir``/bin, PATH, or the bitbake kas checked out in ``work_dir``.

    The PyPI bitbake-setup package carries the ``bb`` module but not the hash server; a bitbake
    checkout (kas puts one in KAS_WORK_DIR/bitbake on the first build) has it in ``bin/``.
    """
    env = os.environ if env is None else env
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


def start_cache(
    sstate_dir: Path,
    *,
    bind: str = "0.0.0.0",
    http_port: int = 8080,
    hashserv_port: int = 8686,
    advertise: str | None = None,
    db: Path | None = None,
    hashserv_exe: Path | None = None,
    read_only_hashserv: bool = False,
    upstream: str | None = None,
    env: Mapping[str, str] | None = None,
    start_timeout_s: float = 20.0,
) -> CacheService:
    """Start ``bitbake-hashserv`` and the read-only HTTP sstate mirror; return the running service.

    ``http_port`` 0 picks a free port (tests). The caller owns ``stop()``.
    """
    env = dict(os.environ if env is None else env)
    sstate_dir = Path(sstate_dir).expanduser().resolve()
    if not sstate_dir.is_dir():
        raise BuildError(f"sstate folder {sstate_dir} does not exist",
                         "pass --dir with the SSTATE_DIR of a host that has built (or create it)")
    exe = hashserv_exe or find_hashserv(env)
    if db is None:
        state = Path(env.get("XDG_STATE_HOME") or Path(env.get("HOME", "~")).expanduser() / ".local" / "state")
        db = state / "edge-llm" / "hashserv.db"
    db = Path(db).expanduser().resolve()
    db.parent.mkdir(parents=True, exist_ok=True)
    advertise = advertise or socket.getfqdn()

    stats: dict[str, int] = {}
    handler = type("Handler", (_ReadOnlySstate,), {"stats": stats})
    try:
        http = ThreadingHTTPServer((bind, http_port), partial(handler, directory=str(sstate_dir)))
    except OSError as exc:
        raise BuildError(f"cannot serve sstate on {bind}:{http_port}: {exc.strerror}",
                         "pick another --port or stop what uses it") from exc
    svc = CacheService(sstate_dir, bind, http.server_address[1], hashserv_port, advertise, db, http=http,
                       stats=stats)
    argv = [str(exe), "--bind", f"{bind}:{hashserv_port}", "--database", str(db)]
    if read_only_hashserv:
        argv.append("--read-only")
    if upstream:
        argv += ["--upstream", upstream]
    try:
        with open(svc.log, "ab") as logf:
            svc.hashserv = subprocess.Popen(argv, stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                            env=env, start_new_session=True)
        _wait_port(bind, hashserv_port, svc.hashserv, start_timeout_s, svc.log)
    except BaseException:
        svc.stop()
        raise
    svc._thread = threading.Thread(target=http.serve_forever, name="sstate-http", daemon=True)
    svc._thread.start()
    return svc


def serve(sstate_dir: Path, *, on_ready: Any = None, **kwargs: Any) -> None:
    """Run the service until Ctrl-C (the CLI); ``on_ready(service)`` prints the snippet."""
    svc = start_cache(sstate_dir, **kwargs)
    try:
        if on_ready:
            on_ready(svc)
        while svc.hashserv is not None and svc.hashserv.poll() is None:
            time.sleep(0.5)
        raise BuildError(f"bitbake-hashserv exited ({svc.hashserv.returncode if svc.hashserv else '?'})",
                         "see its output above; restart `provisioner cache serve`")
    finally:
        svc.stop()
