#!/usr/bin/python
"""Resumable, checksum-verified download ON the board from the artifact server.

The download itself (``.part`` file, HTTP Range resume, free-space check, size and sha256 before
the final name) is module_utils/fetch.py, shared with the deploy module; this module is its
one-task front end for roles that fetch files on their own.
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

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible_collections.edge_llm.fleet.plugins.module_utils.fetch import Failed, fetch_one  # noqa: E402


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
