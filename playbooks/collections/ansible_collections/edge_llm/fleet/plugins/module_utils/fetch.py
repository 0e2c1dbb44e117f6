"""Resumable, checksum-verified download ON the board (shared by the fetch and deploy modules).

Why not ansible.builtin.get_url: it restarts a 3-5 GB model from byte 0 after a reboot or a
dropped link, and it only notices a full disk after filling it. fetch_one keeps a ``.part`` file,
resumes with an HTTP Range request, checks free space before the first byte, verifies size and
sha256 before the file gets its final name, and makes no request at all when the destination
already has the expected checksum. Standard library only: a QLI image has no pip.
"""

from __future__ import annotations

import errno
import hashlib
import os
import urllib.error
import urllib.request

CHUNK = 1 << 20


def sha256_of(path):
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(4 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def free_bytes(path):
    d = path
    while not os.path.isdir(d):
        parent = os.path.dirname(d)
        if parent == d:
            break
        d = parent
    st = os.statvfs(d)
    return st.f_bavail * st.f_frsize


def human(n):
    return f"{n / 1048576.0:.1f} MiB"


class Failed(Exception):
    pass


def fetch_one(url, dest, want, size, reserve_mb, timeout, mode_text, check_mode):
    """Download one file; returns (changed, bytes_downloaded, resumed_from, msg) or raises Failed."""
    want = want.lower()
    part = dest + ".part"
    if os.path.isfile(dest) and (size is None or os.path.getsize(dest) == size) and sha256_of(dest) == want:
        return False, 0, 0, "already present, sha256 ok"
    have = os.path.getsize(part) if os.path.isfile(part) else 0
    if size is not None and have > size:
        have = 0
    if check_mode:
        return True, 0, 0, f"would download {url}"
    parent = os.path.dirname(dest)
    try:
        os.makedirs(parent, exist_ok=True)
    except OSError as exc:
        raise Failed(f"cannot create {parent}: {exc.strerror}") from exc
    if size is not None:
        need = size - have + reserve_mb * 1048576
        free = free_bytes(parent)
        if free < need:
            raise Failed(f"disk full: {os.path.basename(dest)} needs {human(need)} more on {parent} but only "
                         f"{human(free)} are free -> free space (old versions under /opt/edge-llm/models) and "
                         "rerun; nothing was switched")
    downloaded, resumed_from = 0, 0
    if size is None or have < size:
        req = urllib.request.Request(url, headers={"User-Agent": "edge-llm-fleet/1"})
        if have:
            req.add_header("Range", f"bytes={have}-")
        resp = None
        try:
            resp = urllib.request.urlopen(req, timeout=timeout)
        except urllib.error.HTTPError as exc:
            if not (exc.code == 416 and size is not None and have == size):
                raise Failed(f"artifact server answered {exc.code} {exc.reason} for {url} -> check the URL and "
                             "the index") from exc
        except (urllib.error.URLError, OSError) as exc:
            raise Failed(f"cannot reach the artifact server for {url}: {getattr(exc, 'reason', exc)} -> check "
                         "edge_llm_deploy_index.base_url and that the board can reach it") from exc
        if resp is not None:
            mode = "ab" if have and resp.status == 206 else "wb"
            resumed_from = have if mode == "ab" else 0
            try:
                with open(part, mode) as fh:
                    while True:
                        chunk = resp.read(CHUNK)
                        if not chunk:
                            break
                        fh.write(chunk)
                        fh.flush()
                        downloaded += len(chunk)
                    os.fsync(fh.fileno())
            except OSError as exc:
                if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                    raise Failed(f"disk full while writing {dest} ({part} kept for resume) -> free space and "
                                 "rerun; nothing was switched") from exc
                raise Failed(f"download of {url} interrupted: {exc} ({part} kept; rerun resumes)") from exc
            finally:
                resp.close()
    got_size = os.path.getsize(part)
    if size is not None and got_size != size:
        raise Failed(f"{url}: got {got_size} bytes, expected {size} (kept {part}; rerun resumes)")
    got = sha256_of(part)
    if got != want:
        os.unlink(part)
        raise Failed(f"checksum mismatch for {url}: sha256 {got}, expected {want} -> the artifact server's copy "
                     "is wrong or corrupted; fix it and rerun (nothing was switched)")
    os.chmod(part, int(mode_text, 8))
    os.replace(part, dest)
    return True, downloaded, resumed_from, f"downloaded {downloaded} bytes (resumed from {resumed_from})"
