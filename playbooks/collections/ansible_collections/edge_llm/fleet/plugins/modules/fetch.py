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
    description: HTTP(S) URL of the artifact.
    type: str
    required: true
  dest:
    description: Absolute destination path on the board.
    type: path
    required: true
  sha256:
    description: Expected sha256 (hex).
    type: str
    required: true
  size:
    description: Expected size in bytes.
    type: int
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


def main():
    module = AnsibleModule(
        argument_spec={"url": {"type": "str", "required": True}, "dest": {"type": "path", "required": True},
                       "sha256": {"type": "str", "required": True}, "size": {"type": "int", "required": False},
                       "reserve_mb": {"type": "int", "default": 64}, "timeout": {"type": "int", "default": 60},
                       "mode": {"type": "str", "default": "0644"}},
        supports_check_mode=True,
    )
    p = module.params
    url, dest, want = p["url"], p["dest"], p["sha256"].lower()
    size = p["size"]
    part = dest + ".part"
    result = {"changed": False, "dest": dest, "bytes_downloaded": 0, "resumed_from": 0, "url": url}
    if os.path.isfile(dest) and (size is None or os.path.getsize(dest) == size) and sha256_of(dest) == want:
        module.exit_json(msg="already present, sha256 ok", **result)
    have = os.path.getsize(part) if os.path.isfile(part) else 0
    if size is not None and have > size:
        have = 0
    result["changed"] = True
    if module.check_mode:
        module.exit_json(msg=f"would download {url}", **result)
    parent = os.path.dirname(dest)
    try:
        os.makedirs(parent, exist_ok=True)
    except OSError as exc:
        module.fail_json(msg=f"cannot create {parent}: {exc.strerror}", **result)
    if size is not None:
        need = size - have + p["reserve_mb"] * 1048576
        free = free_bytes(parent)
        if free < need:
            module.fail_json(msg=(f"disk full: {os.path.basename(dest)} needs {human(need)} more on {parent} but "
                                  f"only {human(free)} are free -> free space (old versions under "
                                  "/opt/edge-llm/models) and rerun; nothing was switched"), **result)
    if size is None or have < size:
        req = urllib.request.Request(url, headers={"User-Agent": "edge-llm-fleet/1"})
        if have:
            req.add_header("Range", f"bytes={have}-")
        resp = None
        try:
            resp = urllib.request.urlopen(req, timeout=p["timeout"])
        except urllib.error.HTTPError as exc:
            if not (exc.code == 416 and size is not None and have == size):
                module.fail_json(msg=f"artifact server answered {exc.code} {exc.reason} for {url} -> check the URL "
                                     "and the index", **result)
        except (urllib.error.URLError, OSError) as exc:
            module.fail_json(msg=(f"cannot reach the artifact server for {url}: {getattr(exc, 'reason', exc)} -> "
                                  "check edge_llm_deploy.base_url and that the board can reach it"), **result)
        if resp is not None:
            mode = "ab" if have and resp.status == 206 else "wb"
            if mode == "wb":
                have = 0
            result["resumed_from"] = have
            try:
                with open(part, mode) as fh:
                    while True:
                        chunk = resp.read(CHUNK)
                        if not chunk:
                            break
                        fh.write(chunk)
                        result["bytes_downloaded"] += len(chunk)
                    fh.flush()
                    os.fsync(fh.fileno())
            except OSError as exc:
                if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                    module.fail_json(msg=(f"disk full while writing {dest} ({part} kept for resume) -> free space "
                                          "and rerun; nothing was switched"), **result)
                module.fail_json(msg=f"download of {url} interrupted: {exc} ({part} kept; rerun resumes)", **result)
            finally:
                resp.close()
    got_size = os.path.getsize(part)
    if size is not None and got_size != size:
        module.fail_json(msg=f"{url}: got {got_size} bytes, expected {size} (kept {part}; rerun resumes)", **result)
    got = sha256_of(part)
    if got != want:
        os.unlink(part)
        module.fail_json(msg=(f"checksum mismatch for {url}: sha256 {got}, expected {want} -> the artifact "
                              "server's copy is wrong or corrupted; fix it and rerun (nothing was switched)"),
                         **result)
    os.chmod(part, int(p["mode"], 8))
    os.replace(part, dest)
    module.exit_json(msg=f"downloaded {result['bytes_downloaded']} bytes (resumed from {result['resumed_from']})",
                     **result)


if __name__ == "__main__":
    main()
