#!/usr/bin/python
"""Resumable, checksum-verified download ON the board from the artifact server.

Why not ansible.builtin.get_url: it restarts a 3-5 GB model from byte 0 after a reboot or a
dropped link, and it only notices a full disk after filling it. This module keeps a ``.part``
file, resumes with an HTTP Range request, checks free space before the first byte, verifies
size and sha256 before the file gets its final name, and does nothing (no request at all) when
the destination already has the expected checksum.
"""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: fetch
short_description: Resumable, checksum-verified download from an artifact server
description:
  - Downloads O(url) to O(dest) through O(dest).part, resuming with an HTTP Range request.
  - Verifies O(size) and O(sha256) before renaming into place; a mismatch deletes the partial file and fails.
  - Fails before downloading when the filesystem lacks free space for the rest of the file.
  - Idempotent - an existing O(dest) with the expected sha256 means no request is made.
options:
  url:
    description: HTTP(S) URL of the artifact (or use O(files)).
    type: str
    required: false
  dest:
    description: Absolute destination path on the board.
    type: path
    required: false
  sha256:
    description: Expected sha256 (hex).
    type: str
    required: false
  size:
    description: Expected size in bytes.
    type: int
    required: false
  files:
    description: Several downloads in one call (a Genie bundle's parts), each with url, dest, sha256, size.
    type: list
    elements: dict
    required: false
  reserve_mb:
    description: Free space to keep on the filesystem besides the file.
    type: int
    default: 64
  timeout:
    description: Socket timeout in seconds.
    type: int
    default: 60
  mode:
    description: File mode of the result.
    type: str
    default: "0644"
author: edge-llm provisioner
"""

EXAMPLES = r"""
- name: Fetch a model file
  edge_llm.fleet.fetch:
    url: http://artifacts.lan/models/gemma-4-e2b/0123abcd/gemma.litertlm
    dest: /opt/edge-llm/models/gemma-4-e2b/0123abcd.partial/gemma.litertlm
    sha256: 0123abcd...
    size: 3294593024
"""

RETURN = r"""
files:
  description: Per file - dest, changed, bytes, resumed_from, msg.
  returned: always
  type: list
bytes_downloaded:
  description: Bytes transferred in this run (0 when already present).
  returned: always
  type: int
resumed_from:
  description: Offset a resumed download started at.
  returned: always
  type: int
"""

import errno  # noqa: E402
import hashlib  # noqa: E402
import os  # noqa: E402
import urllib.error  # noqa: E402
import urllib.request  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402

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


def main():
    module = AnsibleModule(
        argument_spec={"url": {"type": "str"}, "dest": {"type": "path"}, "sha256": {"type": "str"},
                       "size": {"type": "int"}, "files": {"type": "list", "elements": "dict"},
                       "reserve_mb": {"type": "int", "default": 64}, "timeout": {"type": "int", "default": 60},
                       "mode": {"type": "str", "default": "0644"}},
        required_one_of=[("url", "files")],
        mutually_exclusive=[("url", "files")],
        required_together=[("url", "dest", "sha256")],
        supports_check_mode=True,
    )
    p = module.params
    items = p["files"] or [{"url": p["url"], "dest": p["dest"], "sha256": p["sha256"], "size": p["size"]}]
    result = {"changed": False, "bytes_downloaded": 0, "resumed_from": 0, "files": []}
    for item in items:
        for key in ("url", "dest", "sha256"):
            if not item.get(key):
                module.fail_json(msg=f"files: every entry needs url, dest and sha256 (missing {key})", **result)
        size = int(item["size"]) if item.get("size") is not None else None
        try:
            changed, got, resumed, msg = fetch_one(item["url"], item["dest"], item["sha256"], size, p["reserve_mb"],
                                                   p["timeout"], p["mode"], module.check_mode)
        except Failed as exc:
            module.fail_json(msg=str(exc), **result)
        result["changed"] = result["changed"] or changed
        result["bytes_downloaded"] += got
        result["resumed_from"] = max(result["resumed_from"], resumed)
        result["files"].append({"dest": item["dest"], "changed": changed, "bytes": got, "resumed_from": resumed,
                                "msg": msg})
    module.exit_json(msg=f"{len(items)} file(s): {result['bytes_downloaded']} bytes downloaded", **result)

if __name__ == "__main__":
    main()
