"""Download model artifacts and QAIRT SDK zips into the build's downloads directory.

The directory is the same one later handed to bitbake as ``DL_DIR``, so recipes find the files
without touching the network. Downloads are multi-GB over links that drop, hence:

* resumable: data lands in ``<name>.part``; a rerun continues with an HTTP ``Range`` request
  (or a seek for ``file://`` mirrors) and only the finished, verified file is renamed to
  ``<name>`` - a file without ``.part`` is always complete;
* verified: size and sha256 (when the manifest gives them); a mismatch deletes the partial
  file and says so, because resuming a corrupt prefix can never succeed;
* idempotent: a complete file with the right checksum is skipped;
* mirrors first (``build.mirrors``: a LAN or ``file://`` mirror, then the origin URL);
* credentials only to the host they are for (:class:`_Credentials`): ``~/.netrc`` per host,
  ``PROVISIONER_HTTP_TOKEN`` (bearer) only to the origin - scheme, host and port - of the URL the
  manifest (or the catalog, for QAIRT) names for the file, never to a mirror, and nothing at all
  to a plain-http mirror; a redirect to another host drops them (requests' ``rebuild_auth``).
  Neither is ever printed - URLs in messages have their userinfo removed.
"""

from __future__ import annotations

import hashlib
import os
import queue
import re
import threading
import time
import urllib.parse
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from provisioner import catalog
from provisioner.context import RunContext
from provisioner.errors import FetchError, UserError
from provisioner.hashing import LICENSE_MD5_SUFFIX, SHA256_SUFFIX, write_sidecar
from provisioner.manifest import Manifest
from provisioner.ui import Reporter

CHUNK = 1024 * 1024
RECV_CHUNK = 128 * 1024  # HTTP body: cache-sized chunks (see _Sink)
RECV_BUFFERS = 16
TOKEN_ENV = "PROVISIONER_HTTP_TOKEN"
DEFAULT_TIMEOUT = (10.0, 60.0)  # connect, read (seconds without a byte)


@dataclass
class FetchItem:
    """One file to put in the downloads directory, and where it may come from (in order)."""

    filename: str
    urls: list[str]
    kind: str  # model | qairt
    name: str  # model name or QAIRT version
    sha256: str | None = None
    size: int | None = None

    @property
    def home(self) -> str:
        """The URL the manifest (or the catalog) names; the ones before it are ``build.mirrors``."""
        return self.urls[-1]


@dataclass
class FetchResult:
    item: FetchItem
    path: Path
    status: str  # downloaded | resumed | skipped
    source: str | None
    transferred: int
    seconds: float
    sha256: str
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"file": self.item.filename, "kind": self.item.kind, "name": self.item.name, "path": str(self.path),
                "status": self.status, "source": redact(self.source) if self.source else None,
                "transferred": self.transferred, "seconds": round(self.seconds, 3),
                "size": self.path.stat().st_size if self.path.exists() else None, "sha256": self.sha256,
                "notes": self.notes}


def origin(url: str) -> tuple[str, str, int | None]:
    """(scheme, host, port) of ``url``, the unit a bearer token belongs to (RFC 6454 origin)."""
    parts = urllib.parse.urlsplit(url)
    scheme = parts.scheme.lower()
    port = parts.port or {"http": 80, "https": 443}.get(scheme)
    return scheme, (parts.hostname or "").lower(), port


class _Credentials:
    """A requests ``auth`` that decides, per request URL, which credentials (if any) go along.

    Passing it as ``auth=`` also stops requests from adding ``~/.netrc`` on its own, so this is
    the one place that rule lives. ``home`` is the URL the manifest names for the file (the
    origin the token is for); every other URL of the item is a mirror.
    """

    def __init__(self, home: str, token: str | None = None, trust_env: bool = True) -> None:
        self.home = origin(home)
        self.token = token          # the run's $PROVISIONER_HTTP_TOKEN (never copied into a child's environment)
        self.trust_env = trust_env

    def __call__(self, r: Any) -> Any:
        import requests.auth
        import requests.utils

        url = r.url
        user, password = requests.utils.get_auth_from_url(url)
        if user or password:  # written into the URL itself: it goes to that URL only
            return requests.auth.HTTPBasicAuth(user, password)(r)
        at = origin(url)
        if at != self.home and at[0] != "https":
            return r  # a plain-http mirror: anyone on the path could read them
        netrc = requests.utils.get_netrc_auth(url) if self.trust_env else None
        if netrc:  # ~/.netrc names its host (``machine``): that host gets them
            return requests.auth.HTTPBasicAuth(*netrc)(r)
        if self.token and at == self.home:
            r.headers["Authorization"] = f"Bearer {self.token}"
        return r


class _SourceFailed(Exception):
    """One source failed; the next mirror may still work."""


def redact(url: str) -> str:
    """``https://user:pw@host/x`` -> ``https://host/x`` (credentials never reach logs)."""
    parts = urllib.parse.urlsplit(url)
    if parts.username or parts.password:
        host = parts.hostname or ""
        if parts.port:
            host += f":{parts.port}"
        parts = parts._replace(netloc=host)
    return urllib.parse.urlunsplit(parts._replace(query="")) if parts.query else urllib.parse.urlunsplit(parts)


def downloads_dir(manifest: Manifest, override: Path | None = None) -> Path:
    d = override or manifest.build.dl_dir
    if d is None:
        raise UserError("no downloads directory", "set build.dl_dir in the manifest or pass --dl-dir")
    return Path(d)


def fetch_list(manifest: Manifest, *, models_only: bool = False) -> list[FetchItem]:
    """Everything ``fetch`` would download for ``manifest`` (models with a URL, then QAIRT zips)."""
    mirrors = [m.rstrip("/") for m in manifest.build.mirrors]
    items: list[FetchItem] = []
    for m in manifest.models:
        if not m.url:
            continue
        items.append(FetchItem(filename=m.filename, urls=[f"{mi}/{m.filename}" for mi in mirrors] + [m.url],
                               kind="model", name=m.name, sha256=m.sha256, size=m.size))
    if not models_only:
        for v in manifest.qairt:
            url = catalog.qairt_url(v)
            fname = url.rsplit("/", 1)[-1]
            items.append(FetchItem(filename=fname, urls=[f"{mi}/{fname}" for mi in mirrors] + [url],
                                   kind="qairt", name=v))
    return items


def fetch_all(items: list[FetchItem], dl_dir: Path, ctx: RunContext, *, progress: bool = True,
              timeout: tuple[float, float] = DEFAULT_TIMEOUT) -> list[FetchResult]:
    """Fetch every item into ``dl_dir``; stop at the first item no source can deliver.

    ``ctx`` is the run: its reporter shows each file, its ``$PROVISIONER_HTTP_TOKEN`` goes to each file's
    own origin (:class:`_Credentials`)."""
    reporter, token = ctx.reporter, ctx.env.get(TOKEN_ENV)
    dl_dir.mkdir(parents=True, exist_ok=True)
    import requests

    session = requests.Session()
    session.headers["User-Agent"] = "edge-llm-provisioner"
    results: list[FetchResult] = []
    bar = _progress() if progress else None
    try:
        if bar:
            bar.start()
        for item in items:
            results.append(fetch_one(item, dl_dir, session=session, reporter=reporter, bar=bar, timeout=timeout,
                                     token=token))
    finally:
        if bar:
            bar.stop()
        session.close()
    return results


def _progress():
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        Progress,
        TimeRemainingColumn,
        TransferSpeedColumn,
    )

    from provisioner.ui import stderr

    return Progress("[progress.description]{task.description}", BarColumn(), DownloadColumn(), TransferSpeedColumn(),
                    TimeRemainingColumn(), console=stderr)


def _hash_existing(path: Path) -> tuple[Any, int]:
    h = hashlib.sha256()
    n = 0
    with open(path, "rb") as f:
        while chunk := f.read(4 * CHUNK):
            h.update(chunk)
            n += len(chunk)
    return h, n


def fetch_one(item: FetchItem, dl_dir: Path, *, session: Any = None, reporter: Reporter | None = None,
              bar: Any = None, timeout: tuple[float, float] = DEFAULT_TIMEOUT, token: str | None = None) -> FetchResult:
    """Download one item (mirrors in order), resuming a ``.part`` file, verifying size and sha256; ``token``
    (the run's ``$PROVISIONER_HTTP_TOKEN``) goes to the item's own origin only."""
    reporter = reporter or Reporter(quiet=True)
    if session is None:
        import requests

        session = requests.Session()
    final = dl_dir / item.filename
    part = dl_dir / (item.filename + ".part")
    notes: list[str] = []
    t0 = time.monotonic()

    if final.exists():
        size = final.stat().st_size
        if item.size is not None and size != item.size:
            notes.append(f"existing {final.name} has {size} bytes, expected {item.size}: downloading again")
            final.unlink()
        else:
            digest = _hash_existing(final)[0].hexdigest()
            if item.sha256 and digest != item.sha256:
                notes.append(f"existing {final.name} has the wrong sha256: downloading again")
                final.unlink()
            else:
                reporter.info(f"{final.name}: already complete" + (" (sha256 verified)" if item.sha256 else ""))
                _record(item, final, digest)
                return FetchResult(item, final, "skipped", None, 0, time.monotonic() - t0, digest, notes)
    for n in notes:
        reporter.warn(n)

    errors: list[str] = []
    for url in item.urls:
        try:
            auth = _Credentials(item.home, token, getattr(session, "trust_env", True))
            transferred, resumed, digest = _download(item, url, part, session, bar, timeout, reporter, auth)
        except _SourceFailed as exc:
            errors.append(str(exc))
            if len(item.urls) > 1:
                reporter.warn(str(exc) + ("; trying next source" if url != item.urls[-1] else ""))
            continue
        os.replace(part, final)
        _record(item, final, digest)
        status = "resumed" if resumed else "downloaded"
        reporter.info(f"{final.name}: {status} from {redact(url)} ({transferred:,} bytes)")
        return FetchResult(item, final, status, url, transferred, time.monotonic() - t0, digest, notes)
    detail = errors[-1] if len(errors) == 1 else "; ".join(errors)
    raise FetchError(f"cannot fetch {item.filename}: {detail}", _hint(errors))


def _record(item: FetchItem, final: Path, digest: str) -> None:
    """Write what the plan needs to know about a fetched QAIRT zip beside it (the plan hashes nothing)."""
    if item.kind == "qairt":
        record_qairt_checksums(final, item.name, digest)


def record_qairt_checksums(zpath: Path, version: str, sha256: str) -> None:
    """``<zip>.sha256`` and ``<zip>.license.md5`` (md5 of ``qairt/<version>/LICENSE.pdf``, the file the
    qairt-runtime recipe's LIC_FILES_CHKSUM names) beside a complete QAIRT zip; a zip without that
    member gets no md5 file, so the plan keeps saying the checksum is unknown."""
    write_sidecar(zpath, SHA256_SUFFIX, sha256)
    try:
        with zipfile.ZipFile(zpath) as z:
            md5 = hashlib.md5(z.read(f"qairt/{version}/LICENSE.pdf")).hexdigest()
    except (KeyError, zipfile.BadZipFile, OSError):
        return
    write_sidecar(zpath, LICENSE_MD5_SUFFIX, md5)


def _hint(errors: list[str]) -> str:
    text = " ".join(errors)
    statuses = set(re.findall(r"HTTP (\d{3})", text))  # not bare digits: a port like :36401 is no 401
    if "sha256" in text:
        return "the source serves different bytes than the manifest's sha256: check the URL/mirror and the sha256"
    if statuses & {"401", "403"}:
        return f"the server wants credentials: add them to ~/.netrc or set {TOKEN_ENV}"
    if "404" in statuses:
        return "check the URL (and that the mirror holds the file), or set build.mirrors"
    return "check the network/mirror and rerun; a partial download resumes where it stopped"


def _download(item: FetchItem, url: str, part: Path, session: Any, bar: Any, timeout: tuple[float, float],
              reporter: Reporter, auth: _Credentials) -> tuple[int, bool, str]:
    """Fill ``part`` from ``url``; return (bytes transferred now, resumed?, sha256)."""
    have = part.stat().st_size if part.exists() else 0
    if item.size is not None and have > item.size:
        reporter.warn(f"{part.name} is larger than the expected {item.size} bytes: starting over")
        part.unlink()
        have = 0
    h, hashed = _hash_existing(part) if have else (hashlib.sha256(), 0)
    assert hashed == have
    scheme = urllib.parse.urlsplit(url).scheme
    if scheme == "file":
        transferred, resumed, h = _copy_file(url, part, have, h, item, bar)
    elif scheme in ("http", "https"):
        transferred, resumed, h = _http(url, part, have, h, item, session, bar, timeout, auth)
    else:
        raise _SourceFailed(f"{redact(url)}: unsupported URL scheme")
    size = part.stat().st_size
    digest = h.hexdigest()
    if item.size is not None and size != item.size:
        part.unlink()
        raise _SourceFailed(f"{redact(url)}: got {size} bytes, expected {item.size} (partial file deleted)")
    if item.sha256 and digest != item.sha256:
        part.unlink()
        raise _SourceFailed(f"{redact(url)}: sha256 mismatch (got {digest[:16]}..., expected "
                            f"{item.sha256[:16]}...; partial file deleted)")
    return transferred, resumed, digest


def _task(bar: Any, item: FetchItem, total: int | None, have: int) -> Callable[[int], None]:
    if bar is None:
        return lambda n: None
    task = bar.add_task(item.filename, total=total, completed=have)
    return lambda n: bar.advance(task, n)


def _copy_file(url: str, part: Path, have: int, h: Any, item: FetchItem, bar: Any) -> tuple[int, bool, Any]:
    src = Path(urllib.parse.unquote(urllib.parse.urlsplit(url).path))
    if not src.is_file():
        raise _SourceFailed(f"{url}: no such file")
    total = src.stat().st_size
    if have > total:
        part.unlink()
        have, h = 0, hashlib.sha256()
    advance = _task(bar, item, total, have)
    n = 0
    with open(src, "rb") as fi, open(part, "ab") as fo:
        fi.seek(have)
        while chunk := fi.read(4 * CHUNK):
            fo.write(chunk)
            h.update(chunk)
            n += len(chunk)
            advance(len(chunk))
    return n, have > 0, h


class _Sink:
    """Write and hash on a second thread, so the socket is read while the disk and sha256 work.

    ``recv``, ``write`` and ``sha256`` all release the GIL: with a sink thread they overlap
    instead of taking turns when a core is free. Chunks travel in a small fixed pool of buffers
    that the reader fills with ``readinto`` and the sink hands back, so no memory is allocated
    per chunk. The chunk size is a measured compromise: each byte is touched three times (copied
    in from the socket, copied out to the page cache, hashed), and a 128 KiB chunk is still in the
    CPU cache for the second and third touch while a 1 MiB one is not; smaller chunks add Python
    work per byte. ``provisioner fetch`` of 1 GB on the 2-core VM (CPU user+sys, wall vs curl):
    1 MiB ~3.6 s (0.6-0.7x), 64 KiB ~2.9 s (0.8-0.9x), 128 KiB ~2.5 s (0.9-1.05x); curl ~1.8 s,
    and it does not hash.
    """

    def __init__(self, fo: Any, h: Any, buffers: int = RECV_BUFFERS, size: int = RECV_CHUNK) -> None:
        self.fo, self.h = fo, h
        self.error: BaseException | None = None
        # memoryviews made once: per-chunk Python work is what small chunks multiply
        self.free: queue.SimpleQueue[memoryview] = queue.SimpleQueue()
        for _ in range(buffers):
            self.free.put(memoryview(bytearray(size)))
        self.full: queue.SimpleQueue[tuple[memoryview, int] | None] = queue.SimpleQueue()
        self.t = threading.Thread(target=self._run, daemon=True)
        self.t.start()

    def _run(self) -> None:
        write, update = self.fo.write, self.h.update
        while (item := self.full.get()) is not None:
            buf, n = item
            if self.error is None:
                try:
                    chunk = buf if n == len(buf) else buf[:n]
                    write(chunk)
                    update(chunk)
                except BaseException as exc:  # disk full etc.: reported by finish()
                    self.error = exc
            self.free.put(buf)  # always hand it back: the reader must never wait forever

    def buffer(self) -> memoryview:
        """An empty buffer to read into (waits while all of them are queued for writing)."""
        if self.error is not None:
            raise self.error
        return self.free.get()

    def put(self, buf: memoryview, n: int) -> None:
        """Queue the first ``n`` bytes of ``buf`` for writing and hashing (``n == 0``: just hand it back)."""
        if n:
            self.full.put((buf, n))
        else:
            self.free.put(buf)

    def finish(self) -> Any:
        self.full.put(None)
        self.t.join()
        if self.error is not None:
            raise self.error
        return self.h


def _readinto(resp: Any) -> Callable[[memoryview], int]:
    """``readinto`` of the response body without copies where possible.

    urllib3's own ``readinto`` reads into a new bytes object and copies it; the ``http.client``
    response underneath reads from the socket straight into our buffer. Both return raw bytes
    (we ask for ``Accept-Encoding: identity``), so fall back to urllib3's when the layout differs.
    """
    import http.client

    fp = getattr(resp.raw, "_fp", None)
    if isinstance(fp, http.client.HTTPResponse):
        return fp.readinto
    return resp.raw.readinto


def _http(url: str, part: Path, have: int, h: Any, item: FetchItem, session: Any, bar: Any,
          timeout: tuple[float, float], auth: _Credentials) -> tuple[int, bool, Any]:
    import http.client

    import requests
    import urllib3

    headers = {"Accept-Encoding": "identity"}
    if have:
        headers["Range"] = f"bytes={have}-"
    shown = redact(url)
    try:
        resp = session.get(url, headers=headers, auth=auth, stream=True, timeout=timeout, allow_redirects=True)
    except requests.exceptions.Timeout as exc:
        raise _SourceFailed(f"{shown}: timed out (no answer within {timeout[0]:g}s/{timeout[1]:g}s)") from exc
    except requests.exceptions.ConnectionError as exc:
        reason = "connection refused" if "refused" in str(exc).lower() else "cannot connect"
        raise _SourceFailed(f"{shown}: {reason}") from exc
    except requests.exceptions.RequestException as exc:
        raise _SourceFailed(f"{shown}: {type(exc).__name__}") from exc
    with resp:
        if resp.status_code == 416 and have:
            # Range past the end: the partial file already holds everything the server has
            total = _content_range_total(resp.headers.get("Content-Range"))
            if total == have:
                return 0, True, h
            part.unlink()
            raise _SourceFailed(f"{shown}: server rejected the resume (416); partial file deleted, rerun")
        if resp.status_code >= 400:
            raise _SourceFailed(f"{shown}: HTTP {resp.status_code} {resp.reason or ''}".rstrip())
        resumed = have > 0 and resp.status_code == 206
        if have and not resumed:  # server ignored Range: start over
            part.unlink()
            have, h = 0, hashlib.sha256()
        length = resp.headers.get("Content-Length")
        total = (have + int(length)) if length and length.isdigit() else item.size
        advance = _task(bar, item, total, have)
        n = 0
        readinto = _readinto(resp)
        with open(part, "ab" if resumed else "wb") as fo:
            sink = _Sink(fo, h)
            lost: BaseException | None = None
            shown_at = 0  # progress moves per MiB, not per chunk (rich takes a lock per update)
            try:
                while True:
                    buf = sink.buffer()
                    got = readinto(buf)
                    sink.put(buf, got)
                    if not got:
                        break
                    n += got
                    if n - shown_at >= CHUNK:
                        advance(n - shown_at)
                        shown_at = n
            except (requests.exceptions.RequestException, urllib3.exceptions.HTTPError, http.client.HTTPException,
                    OSError) as exc:
                if sink.error is not None:
                    lost = sink.error
                else:
                    lost = exc
            finally:  # always flush what arrived (also on Ctrl-C): the next run resumes after it
                advance(n - shown_at)
                try:
                    h = sink.finish()
                except OSError as exc:
                    raise FetchError(f"{part}: cannot write: {exc.strerror or exc}",
                                     "free disk space in the downloads directory and rerun (it resumes)") from exc
            if lost is not None:
                why = lost.strerror if isinstance(lost, OSError) and lost.strerror else type(lost).__name__
                raise _SourceFailed(f"{shown}: connection lost after {have + n:,} bytes ({why}); "
                                    "rerun to resume") from lost
        if length and length.isdigit() and n != int(length):
            raise _SourceFailed(f"{shown}: connection closed after {have + n:,} of {have + int(length):,} bytes; "
                                "rerun to resume")
    return n, resumed, h


def _content_range_total(value: str | None) -> int | None:
    if value and "/" in value:
        tail = value.rsplit("/", 1)[1]
        return int(tail) if tail.isdigit() else None
    return None
