#!/usr/bin/python
"""Board side of edge-llm deploy and rollback: install, smoke-test, then commit and switch, in one or two calls.

The controller (action plugin of the same name: provisioner.fleet.deploy, .rollback) computes the plan
and judges the smoke runs; this module executes and reports facts, so a board costs one module call
when it is up to date and two when something changes. edge-llm-serve loads its model once, at start:
after a switch, call 2 rewrites the instance's config the controller planned and try-restarts it.
"""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: deploy
short_description: Install, health-gate, commit and switch edge-llm versions on a board
description:
  - O(mode=install) installs QAIRT/runtime trees (resumable sha256-checked download into staging, unpack into
    C(<dest>.partial), mark C(.edge-llm-artifact.json), one rename) and model versions (download into
    C(<version>.partial), C(model.json), one rename), runs the smoke inference of every version that is not
    committed yet, and reports current, previous and the commit marks.
  - O(mode=rollback) reports each model's current and previous and runs the smoke inference on previous.
  - O(mode=apply) executes the steps the controller derived (atomic commit marks, atomic symlink replace, prune,
    removing current and stopping the service of a model with nothing healthy to serve).
  - Normally called through the action plugin of the same name, which builds the arguments on the controller.
options:
  mode:
    description: What to do.
    type: str
    choices: [install, rollback, apply]
    default: install
  trees:
    description: QAIRT/runtime trees (url, sha256, size, dest, staging), from provisioner.fleet.shared.deploy_index.
    type: list
    elements: dict
  models:
    description: Model versions (install) or model links (rollback).
    type: list
    elements: dict
  runs:
    description: Smoke inference per model name (provisioner.fleet.shared.serve_config.smoke_run).
    type: dict
  artifact_mark:
    description: Name of the mark written into a complete tree (provisioner.fleet.shared.deploy_index.ARTIFACT_MARK).
    type: str
    default: .edge-llm-artifact.json
  meta_name:
    description: Name of a version's metadata file, present once the version is complete (provisioner.contracts.board).
    type: str
    default: model.json
  ops:
    description: Steps for O(mode=apply) (write, link, unlink, stop, prune, restart).
    type: list
    elements: dict
  qairt_slot:
    description: What stands for previous's QAIRT in O(mode=rollback)'s smoke run (provisioner.fleet.rollback).
    type: str
    default: "{qairt}"
  reserve_mb:
    description: Free space to keep on the filesystem besides each download.
    type: int
    default: 64
  timeout:
    description: Socket timeout of the downloads in seconds.
    type: int
    default: 60
author: edge-llm provisioner
"""

EXAMPLES = r"""
- name: Pull, health-gate, commit and switch
  edge_llm.fleet.deploy:
    install: "{{ edge_llm_deploy_index | edge_llm.fleet.board_install(edge_llm_models, edge_llm_board) }}"
    board: "{{ edge_llm_board }}"
    models: "{{ edge_llm_models }}"
"""

RETURN = r"""
trees:
  description: Per tree - dest, installed (before this run), changed.
  returned: mode=install
  type: list
found:
  description: Per model - installed, committed, old (current), old_previous, run (smoke result) or error,
    qairt (per version, from its model.json), instance (config and drop-in text of a launched instance).
  returned: mode=install, mode=rollback
  type: dict
bytes_downloaded:
  description: Bytes transferred in this call.
  returned: always
  type: int
"""

import json  # noqa: E402
import os  # noqa: E402
import re  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import tarfile  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible_collections.edge_llm.fleet.plugins.module_utils.fetch import Failed, fetch_one  # noqa: E402
from ansible_collections.edge_llm.fleet.plugins.module_utils.probe import run_one  # noqa: E402
from ansible_collections.edge_llm.fleet.plugins.module_utils.serve_client import wait_healthy  # noqa: E402

# what systemctl says for a unit that is not installed (nothing to stop)
NO_UNIT = re.compile(r"not loaded|does not exist|not found|No such file")


def link_target(path):
    """Basename a symlink points at ('' when it is not a symlink)."""
    try:
        return os.path.basename(os.readlink(path).rstrip("/"))
    except OSError:
        return ""


def read_small(path, limit=1 << 20):
    """Text of a small file, or None when it is missing or unreadable."""
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read(limit)
    except (OSError, UnicodeDecodeError):
        return None


def version_qairt(directory, versions, meta_name):
    """{version: QAIRT its model.json names} for the versions that have one."""
    out = {}
    for v in versions:
        try:
            q = json.loads(read_small(os.path.join(directory, v, meta_name)) or "{}").get("qairt")
        except (ValueError, AttributeError):
            q = None
        if v and q:
            out[v] = str(q)
    return out


def instance_files(inst):
    """Config and drop-in of the instance fleet launch wrote, or None when it never launched this model."""
    if not inst:
        return None
    config = read_small(inst["config_path"])
    return None if config is None else {"config": config, "dropin": read_small(inst["dropin_path"])}


def fill(value, slot, text):
    """``value`` with every ``slot`` in its strings replaced by ``text`` (lists and dicts, keys included)."""
    if isinstance(value, str):
        return value.replace(slot, text)
    if isinstance(value, list):
        return [fill(v, slot, text) for v in value]
    if isinstance(value, dict):
        return {fill(k, slot, text): fill(v, slot, text) for k, v in value.items()}
    return value


def atomic_write(path, text):
    os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
    tmp = f"{os.path.dirname(path)}/.{os.path.basename(path)}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


def atomic_link(path, target):
    """Point ``path`` at ``target`` with one rename (readers see the old or the new link, never none)."""
    if os.path.islink(path) and os.readlink(path) == target:
        return False
    tmp = f"{os.path.dirname(path)}/.{os.path.basename(path)}.{os.getpid()}.tmp"
    if os.path.lexists(tmp):
        os.unlink(tmp)
    os.symlink(target, tmp)
    os.replace(tmp, path)
    return True


def unpack(tarball, dest):
    """Extract a tree tarball into ``dest``, refusing members that would land outside it."""
    root = os.path.realpath(dest)
    with tarfile.open(tarball, "r:*") as tf:
        members = tf.getmembers()
        for m in members:
            target = os.path.realpath(os.path.join(root, m.name))
            if os.path.isabs(m.name) or ".." in m.name.split("/") or not (target == root or
                                                                         target.startswith(root + os.sep)):
                raise Failed(f"{tarball}: unsafe member path {m.name!r} -> refusing to unpack; rebuild the tarball")
            if not (m.isfile() or m.isdir() or m.issym() or m.islnk()):
                raise Failed(f"{tarball}: member {m.name!r} is a device or fifo -> refusing to unpack")
            if m.issym() or m.islnk():
                base = root if m.islnk() else os.path.dirname(target)
                link = os.path.realpath(os.path.join(base, m.linkname))
                if os.path.isabs(m.linkname) or not link.startswith(root + os.sep):
                    raise Failed(f"{tarball}: link {m.name!r} points outside the tree -> refusing to unpack")
        if hasattr(tarfile, "data_filter"):       # Python 3.12 / 3.11.4+ (PEP 706) as a second guard
            tf.extractall(dest, members=members, filter="data")
        else:
            tf.extractall(dest, members=members)  # noqa: S202 - every member was checked above


def install_tree(tree, p, check_mode):
    """(changed, bytes) for one tree; raises Failed."""
    dest, staging = tree["dest"], tree["staging"]
    if os.path.exists(dest):
        return False, 0
    if check_mode:
        return True, 0
    os.makedirs(os.path.dirname(staging), mode=0o755, exist_ok=True)
    _changed, got, _resumed, _msg = fetch_one(tree["url"], staging, tree["sha256"], tree.get("size"),
                                              p["reserve_mb"], p["timeout"], "0644", False)
    partial = dest + ".partial"
    shutil.rmtree(partial, ignore_errors=True)      # left by an interrupted run
    os.makedirs(partial, mode=0o755)
    try:
        unpack(staging, partial)
    except (tarfile.TarError, OSError) as exc:
        raise Failed(f"cannot unpack {staging} into {partial}: {exc}") from exc
    atomic_write(os.path.join(partial, p["artifact_mark"]), json.dumps(tree, indent=4, sort_keys=True) + "\n")
    os.rename(partial, dest)
    os.unlink(staging)
    return True, got


def install_model(m, p, check_mode):
    """(changed, bytes) for one model version; raises Failed."""
    if os.path.isfile(os.path.join(m["version_dir"], p["meta_name"])):
        return False, 0
    got = 0
    for f in m["fetch"]:
        size = int(f["size"]) if f.get("size") is not None else None
        _changed, n, _resumed, _msg = fetch_one(f["url"], f["dest"], f["sha256"], size, p["reserve_mb"],
                                                p["timeout"], "0644", check_mode)
        got += n
    if check_mode:
        return True, 0
    os.makedirs(m["partial_dir"], mode=0o755, exist_ok=True)
    atomic_write(os.path.join(m["partial_dir"], p["meta_name"]), json.dumps(m["meta"], indent=4, sort_keys=True) + "\n")
    if not os.path.exists(m["version_dir"]):
        os.rename(m["partial_dir"], m["version_dir"])
    return True, got


def do_install(p, check_mode):
    out = {"changed": False, "bytes_downloaded": 0, "trees": [], "found": {}, "error": None}
    try:
        for tree in p["trees"] or []:
            changed, got = install_tree(tree, p, check_mode)
            out["trees"].append({"dest": tree["dest"], "installed": not changed, "changed": changed})
            out["changed"] |= changed
            out["bytes_downloaded"] += got
        for m in p["models"] or []:
            changed, got = install_model(m, p, check_mode)
            out["changed"] |= changed
            out["bytes_downloaded"] += got
            info = {"installed": not changed, "committed": os.path.isfile(m["committed"]),
                    "old": link_target(m["current"]), "old_previous": link_target(m["previous"])}
            info["qairt"] = version_qairt(m["dir"], (info["old"], info["old_previous"]), p["meta_name"])
            info["instance"] = instance_files(m.get("instance"))
            # check mode: say what call 2 would do too (commit, switch); otherwise only what this call did
            out["changed"] |= check_mode and (not info["committed"] or info["old"] != m["version"])
            run = (p["runs"] or {}).get(m["name"])
            if not info["committed"] and run is not None and not check_mode:
                info["run"] = run_one(run)
            out["found"][m["name"]] = info
    except Failed as exc:
        out["error"] = str(exc)
    except OSError as exc:
        out["error"] = f"{exc.filename or 'install'}: {exc.strerror}"
    return out


def do_rollback(p, check_mode):
    out = {"changed": False, "bytes_downloaded": 0, "found": {}}
    for m in p["models"] or []:
        info = {"current": link_target(m["current"]),
                "previous": link_target(m["previous"]) if os.path.islink(m["previous"]) else ""}
        info["qairt"] = version_qairt(m.get("dir") or os.path.dirname(m["current"]),
                                      (info["current"], info["previous"]), p["meta_name"])
        info["instance"] = instance_files(m.get("instance"))
        out["changed"] |= check_mode and bool(info["previous"])     # the swap is call 2's
        run = (p["runs"] or {}).get(m["name"])
        if info["previous"] and run is not None and not check_mode:
            # previous runs on its own QAIRT (its model.json), the inventory's when it names none
            qairt = info["qairt"].get(info["previous"]) or m.get("default_qairt") or ""
            info["run"] = run_one(fill(run, p["qairt_slot"], qairt))
        out["found"][m["name"]] = info
    return out


def systemctl(*args, timeout=180, check=True, tolerate=None):
    """Run ``systemctl args``. A command that cannot run raises OSError; with ``check``, so does a non-zero exit
    unless its stderr matches ``tolerate``."""
    exe = shutil.which("systemctl") or "/bin/systemctl"
    try:
        proc = subprocess.run([exe, *args], capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise OSError(0, f"systemctl {args[0]}: {exc}", args[-1]) from exc
    if check and proc.returncode != 0 and not (tolerate and tolerate.search(proc.stderr)):
        raise OSError(0, f"systemctl {args[0]} failed: {(proc.stderr or proc.stdout).strip()[-300:]}", args[-1])
    return proc


def stop_unit(unit):
    """Stop and disable a service that has nothing healthy to serve (a unit that was never installed is fine)."""
    for verb in ("stop", "disable"):
        systemctl(verb, unit, timeout=120, tolerate=NO_UNIT)


def unit_running(unit):
    """Whether systemd runs ``unit`` now (try-restart restarts only such a unit)."""
    try:
        proc = systemctl("is-active", unit, timeout=60, check=False)
    except OSError:
        return False
    return proc.stdout.strip() in ("active", "activating", "reloading")


def restart(op):
    """try-restart a running instance onto what its config now names, then wait for GET /health 200.

    An instance that is not running stays stopped (its files are already rewritten for the next start);
    the health outcome is a fact for the controller to judge, not a module failure.
    """
    if op.get("daemon_reload"):
        systemctl("daemon-reload")
    running = unit_running(op["unit"])
    if not running:
        return {"changed": False, "running": False, "health": None}
    systemctl("try-restart", op["unit"])
    last = wait_healthy(op["instance"], op.get("retries", 30), op.get("delay", 1), op.get("timeout", 5))
    return {"changed": True, "running": True, "health": last}


def prune(directory, keep, suffix):
    """Remove version directories other than ``keep`` (and their commit marks); links are never versions."""
    removed = []
    try:
        names = sorted(os.listdir(directory))
    except OSError:
        return removed
    for name in names:
        path = os.path.join(directory, name)
        if name.startswith(".") or name in keep or os.path.islink(path) or not os.path.isdir(path):
            continue
        shutil.rmtree(path)
        if os.path.lexists(path + suffix):
            os.unlink(path + suffix)
        removed.append(name)
    return removed


def do_apply(ops):
    done = []
    for op in ops or []:
        kind, changed = op["op"], True
        if kind == "write":
            atomic_write(op["path"], op["content"])
        elif kind == "link":
            changed = atomic_link(op["path"], op["target"])
        elif kind == "unlink":
            changed = os.path.lexists(op["path"])
            if changed:
                os.unlink(op["path"])
        elif kind == "stop":
            stop_unit(op["unit"])
        elif kind == "prune":
            op = dict(op, removed=prune(op["dir"], set(op["keep"]), op["suffix"]))
            changed = bool(op["removed"])
        elif kind == "restart":
            got = restart(op)
            changed = got["changed"]
            done.append({"op": kind, "path": op["unit"], "changed": changed, "running": got["running"],
                         "health": got["health"], "model": op.get("model"), "version": op.get("version"),
                         "health_url": op["instance"].get("health_url")})
            continue
        else:
            raise OSError(0, f"unknown step {kind!r}", kind)
        done.append({"op": kind, "path": op.get("path") or op.get("unit") or op.get("dir"), "changed": changed,
                     **({"removed": op["removed"]} if kind == "prune" else {})})
    return {"changed": any(d["changed"] for d in done), "bytes_downloaded": 0, "done": done}


def main():
    module = AnsibleModule(
        argument_spec={"mode": {"type": "str", "choices": ["install", "rollback", "apply"], "default": "install"},
                       "trees": {"type": "list", "elements": "dict"},
                       "models": {"type": "list", "elements": "dict"},
                       "runs": {"type": "dict"},
                       "artifact_mark": {"type": "str", "default": ".edge-llm-artifact.json"},
                       "meta_name": {"type": "str", "default": "model.json"},
                       "ops": {"type": "list", "elements": "dict"},
                       "qairt_slot": {"type": "str", "default": "{qairt}"},
                       "reserve_mb": {"type": "int", "default": 64},
                       "timeout": {"type": "int", "default": 60}},
        supports_check_mode=True,
    )
    p = module.params
    if p["mode"] == "install":
        module.exit_json(**do_install(p, module.check_mode))
    if p["mode"] == "rollback":
        module.exit_json(**do_rollback(p, module.check_mode))
    if module.check_mode:
        module.exit_json(changed=bool(p["ops"]), bytes_downloaded=0, done=[])
    try:
        module.exit_json(**do_apply(p["ops"]))
    except OSError as exc:
        module.fail_json(msg=f"{exc.filename}: {exc.strerror}")


if __name__ == "__main__":
    main()
