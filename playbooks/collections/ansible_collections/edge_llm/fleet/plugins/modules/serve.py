#!/usr/bin/python
"""Board side of fleet launch: make edge-llm-serve's files and instances what the controller planned, in one call.

The controller (action plugin of the same name, provisioner.fleet.launch) computes every path,
content, owner and mode; this module only compares, writes what differs (atomically), tells
systemd, starts or restarts the instances whose inputs changed, waits for GET /health and probes
the API. It knows nothing about boards or models. Stdlib only (a QLI image has no pip).
"""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: serve
short_description: Install and run edge-llm-serve@<model> instances, wait for /health, probe the API
description:
  - Writes the files in O(files) and the token file whose content differs from what is on the board (atomic
    rename, owner and mode as given), creates O(dirs), runs C(systemctl daemon-reload) when a unit or drop-in
    changed, restarts each instance one of whose inputs changed (starts it if it was not running; never start
    then restart), enables it, waits until GET /health answers 200 and checks that the API accepts the board's
    token and refuses a request without it.
  - First, for each entry of O(pins), it compares the QAIRT the model's current C(model.json) names with the
    inventory's; a difference (fleet deploy moved the model to another QAIRT) fails with one line and writes,
    restarts and starts nothing.
  - In check mode it reports what it would write and which instances it would start or restart, and touches nothing.
  - On a board booted from an OSTree deployment (C(/run/ostree-booted) exists) it never writes under C(/usr): that is
    the booted commit, mounted read-only. A file there that differs (the C(edge-llm-serve) program) is kept as the
    image has it, named in RV(edge_llm.kept_image) and in the message; a newer one comes with an OS update.
  - Normally called through the action plugin of the same name, which builds every option on the controller.
options:
  dirs:
    description: Directories, each {path, mode, owner, group}.
    type: list
    elements: dict
    default: []
  files:
    description:
      - Files, each {path, content (text) or content_b64 (bytes, base64), mode, owner, group, reload, units}.
      - A file with package {name, digest, entry_b64} is also current when it is that entry point and the package
        the board's python3 imports has that digest (an image's site-packages).
      - reload is true for a systemd unit or drop-in; units names the instances the file is an input of.
    type: list
    elements: dict
    default: []
  token:
    description: The board's bearer token (content of O(token_file)); never returned or logged.
    type: str
    required: false
  token_file:
    description: Where the token goes, {path, mode, owner, group, units}.
    type: dict
    required: false
  instances:
    description:
      - Instances, each {model, unit, socket, port, bind, health_url}.
      - socket is the instance's socket unit (the same name as unit, .socket). It holds the port from boot on and
        across every restart of the service (systemd.socket(5)), so no other local user can take the port.
        It is started before the service, and a service that still listens itself (a board launched before
        socket units) is stopped first so the socket can bind, then started on it.
    type: list
    elements: dict
    required: true
  pins:
    description: Per model {model, meta_path, qairt} - the QAIRT the inventory pins and where current's model.json is.
    type: list
    elements: dict
    default: []
  enabled:
    description: Enable the instances at boot (false disables them).
    type: bool
    default: true
  health_retries:
    description: GET /health attempts per instance.
    type: int
    default: 30
  health_delay:
    description: Seconds between attempts.
    type: float
    default: 1
  health_timeout:
    description: Seconds per attempt.
    type: float
    default: 5
  address:
    description: Address clients use to reach the board (endpoint URL of a LAN bind).
    type: str
    required: false
author: edge-llm provisioner
"""

EXAMPLES = r"""
# the action reads edge_llm_board, edge_llm_models, edge_llm_serve_* (token_dir, bind, port_base, ...) by name
- name: Launch edge-llm-serve
  edge_llm.fleet.serve: {}

- name: Launch on the LAN address, with a token directory of its own
  edge_llm.fleet.serve:
    bind: 0.0.0.0
    token_dir: /srv/edge-llm/tokens
"""

RETURN = r"""
edge_llm:
  description: kind launch - endpoints, auth, written files, started/restarted/enabled units.
  returned: always
  type: dict
"""

import base64  # noqa: E402
import grp  # noqa: E402
import hashlib  # noqa: E402
import importlib.util  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import pwd  # noqa: E402
import stat  # noqa: E402
import tempfile  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible_collections.edge_llm.fleet.plugins.module_utils import serve_client  # noqa: E402

RUNNING = ("active", "activating", "reloading")   # as ansible.builtin.systemd_service counts "running"
#: created by ostree-prepare-root on every OSTree-booted system (ostree v2026.1 src/libostree/ostree-sysroot.h line 33,
#: OSTREE_PATH_BOOTED: "Filesystem path that is created on an ostree-booted system")
OSTREE_BOOTED = "/run/ostree-booted"
KEPT_WHY = ("kept the image's {paths}: on an OSTree board /usr is the booted commit, read-only; "
            "a newer edge-llm-serve reaches this board only through an OS update (fleet update-os)")


def in_booted_commit(path):
    """Whether ``path`` is part of the booted OSTree commit: under /usr once links are followed (the
    commit's /usr/local is a link into /var, meta-updater image_types_ostree.bbclass @ f0e1ccaf line 126),
    on a board where ostree-prepare-root mounted /usr read-only (ostree-prepare-root.c lines 320-326)."""
    return os.path.exists(OSTREE_BOOTED) and os.path.realpath(path).startswith("/usr/")


def ids(entry):
    """(uid, gid) of an entry's owner and group names."""
    owner, group = str(entry.get("owner") or "root"), str(entry.get("group") or "root")
    return pwd.getpwnam(owner).pw_uid, grp.getgrnam(group).gr_gid


def differs(path, content, mode, uid, gid):
    """Whether ``path`` is missing or differs in bytes, mode, owner or group."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return True
    if not stat.S_ISREG(st.st_mode) or stat.S_IMODE(st.st_mode) != mode or (st.st_uid, st.st_gid) != (uid, gid):
        return True
    if st.st_size != len(content):
        return True
    with open(path, "rb") as fh:
        return fh.read() != content


def package_digest(files):
    """sha256 over sorted (name, bytes) pairs, each length-prefixed: the rule of the controller's
    provisioner.shipped.serve_package_digest (this module runs on the board without the controller's package;
    tests/fleet/test_serve.py keeps the two equal)."""
    h = hashlib.sha256()
    for name, data in sorted(files):
        raw = name.encode("utf-8")
        h.update(len(raw).to_bytes(4, "big") + raw + len(data).to_bytes(8, "big") + data)
    return h.hexdigest()


def installed_package_digest(name):
    """The digest of the package ``name`` as this board's python3 imports it (an image's site-packages), or None."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    root = list(spec.submodule_search_locations)[0]
    parent = os.path.dirname(root)
    files = []
    for d, _, names in os.walk(root):
        for n in names:
            if n.endswith(".py"):
                full = os.path.join(d, n)
                with open(full, "rb") as fh:
                    files.append((os.path.relpath(full, parent).replace(os.sep, "/"), fh.read()))
    return package_digest(files)


def runs_package(path, package, mode, uid, gid):
    """Whether the program at ``path`` is the image's entry point and the package it imports is the wanted one:
    an image built from the same layer runs the same service without the launch's one-file copy."""
    entry = base64.b64decode(package["entry_b64"])
    return not differs(path, entry, mode, uid, gid) and installed_package_digest(package["name"]) == package["digest"]


def write_atomic(path, content, mode, uid, gid):
    """Replace ``path`` by a complete file in one rename: a reader (or a crash) never sees half of it."""
    parent = os.path.dirname(path)
    os.makedirs(parent, mode=0o755, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=parent, prefix=f".{os.path.basename(path)}.")
    try:
        os.fchmod(fd, mode)
        os.fchown(fd, uid, gid)
        with os.fdopen(fd, "wb") as fh:
            fh.write(content)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def ensure_dir(entry, check):
    """True if the directory was (or would be) created or had its mode/owner changed."""
    path, mode = str(entry["path"]), int(str(entry.get("mode") or "0755"), 8)
    uid, gid = ids(entry)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        if not check:
            os.makedirs(path, mode=mode, exist_ok=True)
            os.chmod(path, mode)
            os.chown(path, uid, gid)
        return True
    if stat.S_IMODE(st.st_mode) == mode and (st.st_uid, st.st_gid) == (uid, gid):
        return False
    if not check:
        os.chmod(path, mode)
        os.chown(path, uid, gid)
    return True


def unit_states(module, systemctl, units):
    """{unit: (ActiveState, UnitFileState)} from one ``systemctl show``."""
    rc, out, err = module.run_command([systemctl, "show", "-p", "Id", "-p", "ActiveState", "-p", "UnitFileState",
                                       *units])
    if rc != 0:
        module.fail_json(msg=f"systemctl show failed: {err.strip() or out.strip()}")
    states, block = {}, {}
    for line in [*out.splitlines(), ""]:
        if not line.strip():
            if block:
                states[block.get("Id", "")] = (block.get("ActiveState", ""), block.get("UnitFileState", ""))
            block = {}
            continue
        key, _, value = line.partition("=")
        block[key] = value
    # systemctl prints blocks in argument order; an Id it rewrote (alias) still lines up by position
    ordered = list(states.values())
    return {u: states.get(u, ordered[i] if i < len(ordered) else ("", "")) for i, u in enumerate(units)}


def systemctl_do(module, systemctl, verb, units):
    if not units:
        return
    rc, out, err = module.run_command([systemctl, verb, *units])
    if rc != 0:
        module.fail_json(msg=f"systemctl {verb} {' '.join(units)} failed: {err.strip() or out.strip()}",
                         changed=True)


def pin_problems(pins):
    """One line per model whose current version (its model.json) names another QAIRT than the inventory."""
    problems = []
    for pin in pins:
        try:
            with open(str(pin["meta_path"]), encoding="utf-8") as fh:
                meta = json.load(fh)
        except (OSError, ValueError):
            continue            # no version installed yet (or no model.json): nothing to disagree with
        have = str(meta.get("qairt") or "").strip() if isinstance(meta, dict) else ""
        if have and have != str(pin["qairt"]):
            version = meta.get("version") or os.path.basename(os.path.dirname(os.path.realpath(pin["meta_path"])))
            problems.append(f"{pin['model']}: current ({version}) is built for QAIRT {have} (fleet deploy put it "
                            f"there), the inventory pins {pin['qairt']} -> set qairt: \"{have}\" for {pin['model']} "
                            f"in edge_llm_models, then rerun fleet launch")
    return problems


def main():
    module = AnsibleModule(argument_spec={
        "dirs": {"type": "list", "elements": "dict", "default": []},
        "files": {"type": "list", "elements": "dict", "default": []},
        "token": {"type": "str", "required": False, "no_log": True},
        "token_file": {"type": "dict", "required": False, "no_log": False},
        "instances": {"type": "list", "elements": "dict", "required": True},
        "pins": {"type": "list", "elements": "dict", "default": []},
        "enabled": {"type": "bool", "default": True},
        "health_retries": {"type": "int", "default": 30},
        "health_delay": {"type": "float", "default": 1},
        "health_timeout": {"type": "float", "default": 5},
        "address": {"type": "str", "required": False, "default": None},
    # no_log: the journal's "Invoked with" line would carry every file's content (the 80 KB program
    # included) on every launch; the result says which files, units and instances changed instead.
    }, supports_check_mode=True, no_log=True)
    p, check = module.params, module.check_mode
    instances = p["instances"]
    units = [str(i["unit"]) for i in instances]
    problems = pin_problems(p["pins"])
    if problems:
        module.fail_json(msg="; ".join(problems), changed=False,
                         invocation={"module_args": {"instances": units}})

    changed_dirs = [str(d["path"]) for d in p["dirs"] if ensure_dir(d, check)]
    written, kept, reload, touched = [], [], False, set()
    entries = [(f, base64.b64decode(f["content_b64"]) if f.get("content_b64") is not None
                 else str(f["content"]).encode("utf-8")) for f in p["files"]]
    tf = p["token_file"]
    if tf:
        # no token (check mode before the first launch: the controller has none yet) means "would be created"
        entries.append((tf, (p["token"] + "\n").encode("utf-8") if p["token"] else None))
    for entry, content in entries:
        path, mode = str(entry["path"]), int(str(entry.get("mode") or "0644"), 8)
        uid, gid = ids(entry)
        if content is not None and not differs(path, content, mode, uid, gid):
            continue
        if entry.get("package") and runs_package(path, entry["package"], mode, uid, gid):
            continue
        if in_booted_commit(path):
            kept.append(path)
            continue
        if not check:
            write_atomic(path, content, mode, uid, gid)
        written.append(path)
        reload = reload or bool(entry.get("reload"))
        touched.update(str(u) for u in entry.get("units") or [])

    systemctl = module.get_bin_path("systemctl", required=True)
    if reload and not check:
        rc, out, err = module.run_command([systemctl, "daemon-reload"])
        if rc != 0:
            module.fail_json(msg=f"systemctl daemon-reload failed: {err.strip() or out.strip()}", changed=True)
    # each instance's socket unit (same name, .socket) holds its port; systemd hands it to the service
    socket_of = {str(i["unit"]): str(i["socket"]) for i in instances if i.get("socket")}
    sockets = list(socket_of.values())
    states = unit_states(module, systemctl, units + sockets)
    # a service that listens where its socket must (the socket unit is new, or its ListenStream= changed)
    # stops first: the socket (re)starts on a free port, and the service starts again on the socket
    moved = [s for s in sockets if s in touched and states[s][0] in RUNNING]
    stop_first = [u for u, s in socket_of.items()
                  if states[u][0] in RUNNING and (s in moved or states[s][0] not in RUNNING)]
    open_sockets = [s for s in sockets if states[s][0] not in RUNNING]
    restart = [u for u in units if u in touched and states[u][0] in RUNNING and u not in stop_first]
    start = [u for u in units if states[u][0] not in RUNNING or u in stop_first]
    want = "enabled" if p["enabled"] else "disabled"
    toggle = [u for u in units + sockets if (states[u][1] == "enabled") != p["enabled"]]
    if not check:
        # the socket stops before its service: a client in between must not start the old service on it,
        # which would make systemd refuse the socket's start ("Socket service ... already active")
        systemctl_do(module, systemctl, "stop", moved)
        systemctl_do(module, systemctl, "stop", stop_first)
        for inst in (i for i in instances if i.get("socket") in moved + open_sockets):
            rc, out, err = module.run_command([systemctl, "start", str(inst["socket"])])
            if rc != 0:       # systemd could not bind: another process holds the port (systemd.socket(5))
                module.fail_json(msg=f"{inst['model']}: {inst['socket']} could not listen on {inst['bind']}:"
                                     f"{inst['port']}: the port is taken by another process (systemctl start: "
                                     f"{(err.strip() or out.strip()).splitlines()[0] if (err or out).strip() else rc})",
                                 changed=True)
        systemctl_do(module, systemctl, "restart", restart)
        systemctl_do(module, systemctl, "start", start)
        systemctl_do(module, systemctl, "enable" if p["enabled"] else "disable", toggle)
    changed = bool(changed_dirs or written or restart or start or toggle or moved or open_sockets)
    payload = {"kind": "launch", "endpoints": {}, "auth": "bearer", "check_mode": check,
               "dirs": changed_dirs, "written": written, "daemon_reload": reload, "restarted": restart,
               "started": start, "sockets": moved + open_sockets, want: toggle, "kept_image": kept}
    note = KEPT_WHY.format(paths=", ".join(kept)) if kept else ""
    if note:
        module.warn(note)
    # what comes back is only this summary: file contents stay out of the result
    invocation = {"module_args": {"instances": units, "files": [str(f["path"]) for f in p["files"]]}}
    if check:
        payload["endpoints"] = {str(i["model"]): serve_client.endpoint(i, p["address"]) for i in instances}
        module.exit_json(changed=changed, edge_llm=payload, invocation=invocation,
                         msg="check mode: nothing written, started or probed")

    problems = []
    for inst in instances:
        last = serve_client.wait_healthy(inst, p["health_retries"], p["health_delay"], p["health_timeout"])
        if last is not None:
            problems.append(f"{inst['model']}: GET {inst['health_url']} did not answer 200 after "
                            f"{p['health_retries']} attempts ({last})")
    if problems:
        module.fail_json(msg="health: " + "; ".join(problems + ([note] if note else [])), changed=changed,
                         edge_llm=payload, invocation=invocation)
    if not p["token"]:
        module.fail_json(msg="no API token was given (the controller generates it at launch)", changed=changed,
                         edge_llm=payload, invocation=invocation)
    probed, problems = serve_client.probe(instances, p["token"], p["address"])
    payload.update(probed)
    if problems:
        module.fail_json(msg="; ".join(problems), changed=changed, edge_llm=payload, invocation=invocation)
    wrote = f", wrote {len(written)} file(s)" if written else ""
    module.exit_json(changed=changed, edge_llm=payload, invocation=invocation,
                     msg=f"{len(instances)} instance(s) healthy{wrote}" + (f"; {note}" if note else ""))


if __name__ == "__main__":
    main()
