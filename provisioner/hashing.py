"""sha256 of big artifacts, in parallel, with a progress bar.

A Genie bundle is five 1 GB files and ``hashlib`` releases the GIL while hashing, so a thread
per file uses every core. Progress goes to stderr so ``--json`` output stays clean.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

CHUNK = 4 * 1024 * 1024
#: a sha256 as hashlib's hexdigest() writes it (also what an OSTree commit id is)
SHA256_RE = re.compile(r"^[0-9a-f]{64}$")


def sha256_file(path: str | Path, on_bytes: Callable[[int], None] | None = None) -> str:
    """Hex sha256 of a file, reporting progress through ``on_bytes(n)``."""
    h = hashlib.sha256()
    with open(path, "rb", buffering=0) as f:
        buf = bytearray(CHUNK)
        view = memoryview(buf)
        while n := f.readinto(buf):
            h.update(view[:n])
            if on_bytes:
                on_bytes(n)
    return h.hexdigest()


def hash_files(paths: Iterable[Path], *, progress: bool = True, workers: int | None = None) -> dict[Path, str]:
    """sha256 of every path (threads); shows a rich progress bar on stderr when ``progress``."""
    files = [Path(p) for p in paths]
    if not files:
        return {}
    workers = workers or min(len(files), os.cpu_count() or 2)
    total = sum(p.stat().st_size for p in files)
    if not progress:
        with ThreadPoolExecutor(workers) as pool:
            return dict(zip(files, pool.map(sha256_file, files), strict=True))

    from rich.progress import BarColumn, DownloadColumn, Progress, TimeRemainingColumn, TransferSpeedColumn

    from provisioner.ui import stderr

    with Progress("[progress.description]{task.description}", BarColumn(), DownloadColumn(),
                  TransferSpeedColumn(), TimeRemainingColumn(), console=stderr, transient=True) as bar:
        task = bar.add_task(f"sha256 {len(files)} file(s)", total=total)

        def one(p: Path) -> str:
            return sha256_file(p, lambda n: bar.advance(task, n))

        with ThreadPoolExecutor(workers) as pool:
            return dict(zip(files, pool.map(one, files), strict=True))


def artifact_files(path: Path) -> list[Path]:
    """The files that make up an artifact: the file itself, or every file of a bundle folder."""
    if path.is_dir():
        return sorted(p for p in path.rglob("*") if p.is_file())
    return [path]


# -- sidecar files: a digest recorded beside the file it describes ------------------------------
# `fetch` (QAIRT zips) and `litert build` (the runtime tarball) write them where they run; the plan
# only reads them, so deciding never hashes multi-GB files. Format: sha256sum(1)'s "<hex>  <name>".
SHA256_SUFFIX = ".sha256"
LICENSE_MD5_SUFFIX = ".license.md5"     # md5 of the QAIRT zip's qairt/<version>/LICENSE.pdf
_HEX_LEN = {SHA256_SUFFIX: 64, LICENSE_MD5_SUFFIX: 32}


def write_sidecar(path: Path, suffix: str, digest: str) -> Path:
    """Write ``<path><suffix>`` holding ``digest`` atomically (a reader never sees half a line)."""
    side = path.with_name(path.name + suffix)
    tmp = side.with_name(f".{side.name}.tmp")
    tmp.write_text(f"{digest}  {path.name}\n", encoding="utf-8")
    os.replace(tmp, side)
    return side


def read_sidecar(path: Path, suffix: str) -> str | None:
    """The digest in ``<path><suffix>``, or None when there is none (or it is not a digest)."""
    side = path.with_name(path.name + suffix)
    try:
        words = side.read_text(encoding="utf-8").split()
    except (OSError, UnicodeDecodeError):
        return None
    if not words or len(words[0]) != _HEX_LEN[suffix]:
        return None
    digest = words[0].lower()
    return digest if all(c in "0123456789abcdef" for c in digest) else None
