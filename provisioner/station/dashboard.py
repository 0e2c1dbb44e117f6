"""`provisioner station dashboard`: the station's slots, live, on a web page; and its history.

Why aiohttp (https://docs.aiohttp.org): one well-kept package (aio-libs) that is both the HTTP
server and the framework, with streamed responses for server-sent events, so the page needs no
separate ASGI/WSGI server, and one event loop serves every open page without a thread each.
Flask or Bottle would need a threaded server per open event stream; Starlette would add uvicorn.

What it serves (read-only: GET only, apart from the token login form):

* ``/`` the page (``dashboard_static/``: HTML, JS and CSS from this package, nothing from a CDN);
* ``/events`` server-sent events (https://html.spec.whatwg.org/multipage/server-sent-events.html):
  a ``snapshot`` of every tile, then a ``tile`` event whenever one changes;
* ``/api/history?serial=&release=&result=&limit=`` attempts as JSON, each with a link to its qdl log;
* ``/log/<attempt id>`` the end of that attempt's qdl log, as plain text.

Where the tiles come from: :mod:`provisioner.station.tiles`, fed by the flashing station's live
feed (:mod:`provisioner.station.feed`), a poll of the records through
:class:`~provisioner.station.history_reader.HistoryReader`, and the EDL scan of sysfs.

Who may look: the caller decides the bind (loopback by default; the CLI refuses a LAN bind
without a token). With a token, a browser logs in once at ``/login`` (the cookie holds an HMAC
of the token, never the token); scripts send ``Authorization: Bearer``. On loopback, requests
whose ``Host`` is not a loopback name are refused, so a web page elsewhere cannot read the
dashboard through DNS rebinding. Every page carries a Content-Security-Policy that allows only
this origin's own scripts and styles: board and record text is inserted as text, never as HTML.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import json
import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web

from provisioner.errors import StationError
from provisioner.process import pid_alive
from provisioner.station import edl
from provisioner.station.config import StationConfig
from provisioner.station.feed import FeedReceiver
from provisioner.station.history_reader import HistoryReader, SqliteHistoryReader
from provisioner.station.records import OUTCOMES
from provisioner.station.tiles import SlotBoard

STATIC = Path(__file__).with_name("dashboard_static")
#: the most of a qdl log the page shows (its end: where a failure is)
LOG_TAIL_BYTES = 256 * 1024
POLL_S = 0.5          # records and sysfs are looked at this often
COALESCE_S = 0.05    # the least time between two writes to one page (keeps the browser's work bounded)
KEEPALIVE_S = 15.0    # an idle event stream gets a comment line this often (proxies, dead peers)
COOKIE = "edge_llm_dashboard"
MIN_TOKEN_CHARS = 16
_CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
        "form-action 'self'; base-uri 'none'; frame-ancestors 'none'")
_LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]", "::1")
_FIELD_MAX = 128


@dataclass
class DashboardSettings:
    """Where and for whom to serve; resolved at the CLI edge."""

    bind: str = "127.0.0.1"
    port: int = 8765
    loopback: bool = True
    token: str | None = field(default=None, repr=False)


class Dashboard:
    """The live tiles of one station and the open event streams that watch them."""

    def __init__(self, config: StationConfig, reader: HistoryReader | None = None,
                 slots: list[str] | None = None, searcher: HistoryReader | None = None) -> None:
        self.config = config
        self.reader = reader or SqliteHistoryReader(config.database)
        #: the history searches' own reader and thread: a central database that is slow to answer
        #: holds up searches only, never the tiles' poll (which uses :attr:`reader` in :attr:`_io`)
        self.searcher = searcher or SqliteHistoryReader(config.database)
        self._search_io = ThreadPoolExecutor(max_workers=1, thread_name_prefix="dashboard-search")
        names = slots if slots is not None else list(dict.fromkeys(config.slots.values()))
        self.board = SlotBoard(names)
        self._version: object = object()
        self._streams: list[tuple[dict[str, dict[str, Any]], asyncio.Event]] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._receiver: FeedReceiver | None = None
        self._stop = threading.Event()
        self._tasks: list[Any] = []
        self._host = socket.gethostname()
        self._io = ThreadPoolExecutor(max_workers=1, thread_name_prefix="dashboard-read")

    # -- inputs ----------------------------------------------------------------------
    def _publish(self, slots: list[str]) -> None:
        for slot in dict.fromkeys(slots):
            tile = self.board.tiles[slot].as_dict()
            for pending, wake in self._streams:
                pending[slot] = tile
                wake.set()

    def on_feed(self, messages: list[dict[str, Any]]) -> None:
        changed: list[str] = []
        for msg in messages:
            changed += self.board.apply_event(msg)
        self._publish(changed)

    def _read(self) -> tuple[list[dict[str, Any]] | None, dict[str, str]]:
        """The blocking half of a poll (records, only when they changed; the EDL scan), run in
        :attr:`_io` so a slow database (a central one) never holds up the live view."""
        rows = None
        version = self.reader.version()
        if version != self._version:
            self._version = version
            rows = self.reader.latest_by_slot()
        devices = edl.scan_edl(self.config.sysfs_root, self.config.slots)
        return rows, {d.slot or d.port: d.serial for d in devices if d.mode == "edl"}

    def apply(self, rows: list[dict[str, Any]] | None, in_edl: dict[str, str]) -> None:
        changed: list[str] = []
        if rows is not None:
            dead = {r["id"] for r in rows if r["result"] == "running" and r.get("host") == self._host
                    and not pid_alive(r.get("pid"))}
            changed += self.board.apply_attempts(rows, dead=dead)
        changed += self.board.apply_scan(in_edl)
        self._publish(changed)

    def poll(self) -> None:
        """One poll in the caller's thread (tests)."""
        self.apply(*self._read())

    async def _reading(self, func: Callable[..., Any], *args: Any) -> Any:
        """Run one blocking reader call in :attr:`_io` (one thread: the reader is never used by two at once)."""
        return await asyncio.get_running_loop().run_in_executor(self._io, func, *args)

    async def _searching(self, func: Callable[..., Any]) -> Any:
        """Run one :attr:`searcher` call in its own thread (never beside another on that reader)."""
        return await asyncio.get_running_loop().run_in_executor(self._search_io, func)

    # -- lifecycle -------------------------------------------------------------------
    async def start(self, app: web.Application) -> None:
        self._loop = asyncio.get_running_loop()
        self._receiver = FeedReceiver(self.config.database)
        th = threading.Thread(target=self._listen, name="dashboard-feed", daemon=True)
        th.start()
        self._tasks = [th, asyncio.create_task(self._poller())]

    def _listen(self) -> None:
        """Read the feed in its own thread: the kernel queues few datagrams, so read them at once."""
        import select

        rx = self._receiver
        assert rx is not None and self._loop is not None
        while not self._stop.is_set():
            ready, _, _ = select.select([rx], [], [], 0.5)
            if ready:
                msgs = rx.read()
                if msgs:
                    self._loop.call_soon_threadsafe(self.on_feed, msgs)

    async def _poller(self) -> None:
        while True:
            try:
                self.apply(*await self._reading(self._read))
            except Exception:   # noqa: BLE001 - a bad read must not stop the live view
                pass
            await asyncio.sleep(POLL_S)

    async def stop(self, app: web.Application) -> None:
        self._stop.set()
        for t in self._tasks:
            if isinstance(t, asyncio.Task):
                t.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await t
            else:
                t.join(timeout=2)
        for _, wake in self._streams:
            wake.set()
        if self._receiver is not None:
            self._receiver.close()
        await self._reading(self.reader.close)
        self._io.shutdown(wait=False)
        self._search_io.submit(self.searcher.close)
        self._search_io.shutdown(wait=False)

    # -- handlers --------------------------------------------------------------------
    async def events(self, request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache",
                                           "X-Accel-Buffering": "no"})
        await resp.prepare(request)
        pending: dict[str, dict[str, Any]] = {}
        wake = asyncio.Event()
        me = (pending, wake)
        self._streams.append(me)
        try:
            await resp.write(_sse("snapshot", {"tiles": self.board.snapshot(), "station": self._host}))
            while not self._stop.is_set():
                try:
                    await asyncio.wait_for(wake.wait(), KEEPALIVE_S)
                except TimeoutError:
                    await resp.write(b": keepalive\n\n")
                    continue
                wake.clear()
                tiles = list(pending.values())
                pending.clear()
                await resp.write(b"".join(_sse("tile", t) for t in tiles))
                await asyncio.sleep(COALESCE_S)   # a burst of qdl progress becomes one update per tile
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        finally:
            self._streams.remove(me)
        return resp

    async def history(self, request: web.Request) -> web.Response:
        q = request.query
        serial, release, result = (q.get(k, "").strip() for k in ("serial", "release", "result"))
        for name, value in (("serial", serial), ("release", release)):
            if len(value) > _FIELD_MAX:
                return _bad(f"{name} is longer than {_FIELD_MAX} characters")
        if result and result not in OUTCOMES:
            return _bad(f"result must be one of {', '.join(OUTCOMES)}")
        try:
            limit = int(q.get("limit", "200"))
        except ValueError:
            return _bad("limit must be a whole number")
        if not 1 <= limit <= 1000:
            return _bad("limit must be between 1 and 1000")
        rows = await self._searching(lambda: self.searcher.search(
            serial=serial or None, release=release or None, result=result or None, limit=limit))
        out = [{k: r.get(k) for k in ("id", "station", "serial", "slot", "board", "release_id", "started", "ended",
                                      "state", "result", "error", "tries")}
               | {"log_url": f"/log/{int(r['id'])}" if r.get("log_path") else None} for r in rows]
        note = getattr(self.searcher, "error", None)    # a central history that did not answer
        return web.json_response({"attempts": out, "note": f"{note}; showing this station's attempts" if note
                                  else None}, dumps=lambda o: json.dumps(o, default=str))

    async def log(self, request: web.Request) -> web.Response:
        try:
            attempt_id = int(request.match_info["attempt"])
        except ValueError:
            raise web.HTTPNotFound(text="no such attempt") from None
        if not 0 < attempt_id < 2**63:   # an attempt id is a positive SQLite INTEGER (64-bit)
            raise web.HTTPNotFound(text="no such attempt")
        row = await self._reading(self.reader.attempt, attempt_id)
        if row is None or not row.get("log_path"):
            raise web.HTTPNotFound(text=f"attempt {attempt_id} has no qdl log on record")
        path = Path(row["log_path"])
        try:
            with open(path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                f.seek(max(0, size - LOG_TAIL_BYTES))
                data = f.read(LOG_TAIL_BYTES)
        except OSError as exc:
            raise web.HTTPNotFound(text=f"qdl log {path} of attempt {attempt_id} is unreadable "
                                        f"({exc.strerror})") from None
        head = f"# qdl log of attempt {attempt_id}: {path}" + (
            f" (last {LOG_TAIL_BYTES // 1024} KiB of {size} bytes)" if size > LOG_TAIL_BYTES else "") + "\n"
        return web.Response(text=head + data.decode("utf-8", errors="replace"), content_type="text/plain",
                            charset="utf-8")


def _sse(event: str, data: Any) -> bytes:
    """One server-sent event; JSON has no raw newlines, so ``data:`` is one line."""
    return f"event: {event}\ndata: {json.dumps(data, default=str)}\n\n".encode()


def _bad(message: str) -> web.Response:
    return web.json_response({"error": message}, status=400)


def _session(token: str) -> str:
    """What the login cookie holds: derived from the token, so the cookie never is the token."""
    return hmac.new(token.encode(), b"edge-llm station dashboard session", hashlib.sha256).hexdigest()


def build_app(dashboard: Dashboard, settings: DashboardSettings) -> web.Application:
    """The aiohttp application: routes, the guard middleware and the dashboard's start/stop."""
    session = _session(settings.token) if settings.token else None

    @web.middleware
    async def guard(request: web.Request, handler: Callable[..., Any]) -> web.StreamResponse:
        if settings.loopback:
            host = request.host.rsplit(":", 1)[0] if not request.host.endswith("]") else request.host
            # the address it was bound to answers too (--bind 127.0.0.2 prints that URL)
            if host not in _LOOPBACK_HOSTS and host.strip("[]") != settings.bind.strip("[]"):
                return _secure(web.Response(status=421, text="this dashboard answers to 127.0.0.1 / localhost only"))
        if request.method not in ("GET", "HEAD") and request.path != "/login":
            return _secure(web.Response(status=405, text="the dashboard is read-only"))
        if session is not None and request.path not in ("/login", "/static/style.css"):
            cookie = request.cookies.get(COOKIE, "")
            bearer = request.headers.get("Authorization", "").removeprefix("Bearer ").strip()
            if not (hmac.compare_digest(cookie.encode(), session.encode()) or (
                    bearer and hmac.compare_digest(bearer.encode(), settings.token.encode()))):  # type: ignore[union-attr]
                if request.path.startswith(("/api/", "/events", "/log/")):
                    return _secure(web.json_response({"error": "log in first (token)"}, status=401))
                return _secure(web.Response(status=303, headers={"Location": "/login"}))
        try:
            resp = await handler(request)
        except web.HTTPException as exc:   # answered as a plain response, with the same headers
            resp = web.Response(status=exc.status, text=exc.text, headers=exc.headers)
        except (asyncio.CancelledError, ConnectionError):
            raise
        except Exception as exc:  # a bug: one line on the console, a plain 500 with the same headers
            logging.getLogger(__name__).error("dashboard: %s %s failed (%s: %s)", request.method, request.path,
                                              type(exc).__name__, exc)
            resp = web.Response(status=500, text="internal error")
        return _secure(resp)

    async def login_form(request: web.Request) -> web.StreamResponse:
        page = (STATIC / "login.html").read_text(encoding="utf-8")
        if request.query.get("failed"):
            page = page.replace("<!--failed-->", '<p class="failed">That token is not this dashboard\'s.</p>')
        return web.Response(text=page, content_type="text/html", charset="utf-8")

    async def login(request: web.Request) -> web.StreamResponse:
        if session is None:
            raise web.HTTPSeeOther("/")
        form = await request.post()
        given = str(form.get("token", ""))
        if not hmac.compare_digest(given.encode(), settings.token.encode()):  # type: ignore[union-attr]
            await asyncio.sleep(1.0)           # slows down guessing
            raise web.HTTPSeeOther("/login?failed=1")
        resp = web.Response(status=303, headers={"Location": "/"})
        resp.set_cookie(COOKIE, session, httponly=True, samesite="Strict", path="/")
        return resp

    async def index(request: web.Request) -> web.StreamResponse:
        return web.FileResponse(STATIC / "index.html")

    app = web.Application(middlewares=[guard], client_max_size=4096)
    app.router.add_get("/", index)
    app.router.add_get("/login", login_form)
    app.router.add_post("/login", login)
    app.router.add_get("/events", dashboard.events)
    app.router.add_get("/api/history", dashboard.history)
    app.router.add_get("/log/{attempt}", dashboard.log)
    app.router.add_static("/static", STATIC, show_index=False, follow_symlinks=False)
    app.on_startup.append(dashboard.start)
    app.on_shutdown.append(dashboard.stop)
    return app


def _secure(resp: web.StreamResponse) -> web.StreamResponse:
    if not resp.prepared:
        resp.headers.setdefault("Content-Security-Policy", _CSP)
        resp.headers.setdefault("X-Content-Type-Options", "nosniff")
        resp.headers.setdefault("Referrer-Policy", "no-referrer")
        resp.headers.setdefault("X-Frame-Options", "DENY")
    return resp


class DashboardServer:
    """The dashboard's event loop in a background thread: ``with DashboardServer(...) as srv: srv.url``.

    The CLI waits in the main thread (so Ctrl-C arrives there); tests and the benchmark drive a
    flash beside it.
    """

    def __init__(self, config: StationConfig, settings: DashboardSettings, *,
                 reader: HistoryReader | None = None, searcher: HistoryReader | None = None) -> None:
        self.dashboard = Dashboard(config, reader, searcher=searcher)
        self.settings = settings
        self.app = build_app(self.dashboard, settings)
        self.url = ""
        self._loop = asyncio.new_event_loop()
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None

    def __enter__(self) -> DashboardServer:
        self._runner = web.AppRunner(self.app, access_log=None, handle_signals=False, shutdown_timeout=1.0)
        self._loop.run_until_complete(self._runner.setup())
        site = web.TCPSite(self._runner, self.settings.bind, self.settings.port)
        try:
            self._loop.run_until_complete(site.start())
        except OSError as exc:
            self._loop.run_until_complete(self._runner.cleanup())
            self._loop.close()
            raise StationError(f"cannot serve the dashboard on {self.settings.bind}:{self.settings.port}: "
                               f"{exc.strerror or exc}", "pick another --port or stop what uses it") from None
        # the bound port (``--port 0`` picks one): BaseRunner.addresses, aiohttp 3.14 web_runner.py:284
        port = self._runner.addresses[0][1] if self._runner.addresses else self.settings.port
        host = f"[{self.settings.bind}]" if ":" in self.settings.bind else self.settings.bind
        self.url = f"http://{host}:{port}/"
        self._thread = threading.Thread(target=self._loop.run_forever, name="dashboard", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._thread is None:
            return
        fut = asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop)  # type: ignore[union-attr]
        with contextlib.suppress(Exception):
            fut.result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()
        self._thread = None


def serve(config: StationConfig, settings: DashboardSettings, *,
          on_ready: Callable[[str], None] | None = None, reader: HistoryReader | None = None,
          searcher: HistoryReader | None = None) -> None:
    """Serve the dashboard until Ctrl-C (KeyboardInterrupt propagates after a clean stop).

    ``reader`` feeds the tiles and the qdl logs, ``searcher`` (another instance, its own
    connections) the history search."""
    with DashboardServer(config, settings, reader=reader, searcher=searcher) as srv:
        if on_ready:
            on_ready(srv.url)
        while True:
            time.sleep(3600)
