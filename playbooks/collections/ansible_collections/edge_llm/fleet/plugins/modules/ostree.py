#!/usr/bin/python
"""Board side of fleet update-os: the booted OSTree state, staging a commit, committing or rolling back.

One module call per step instead of a shell/command task per ``ostree`` invocation: the board runs
the real ``ostree`` CLI and answers with JSON. Stdlib only (a QLI image has no pip). Which commit,
branch and repository to use, and what counts as up to date for the fleet, come from the controller
(the role's arguments); this module only executes and reports facts.

Every ``ostree admin`` call uses the default sysroot, ``/``: only then does ostree treat the system as booted
(ostreedev/ostree v2026.1 src/libostree/ostree-sysroot.c:1159-1175: ``/run/ostree-booted`` present and ``/``
the sysroot), find the booted deployment (:898-930), merge the booted deployment's ``/etc`` into the new one
and write its entries to ``/boot``, where QLI mounts the ESP systemd-boot reads (uptane/meta-updater @
f0e1ccaf classes/image_types_ota.bbclass:124-136). ``--sysroot=/sysroot`` has none of that.
"""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: ostree
short_description: Read, stage, commit or roll back an OSTree deployment on a booted board
description:
  - O(mode=state) reports the deployments C(ostree admin status) lists (default first) and the booted one (marked
    C(*)), whether the commit is complete in the board's repository, the boot id, and the update-os record.
  - O(mode=stage) refuses a board that did not boot an OSTree deployment, points the remote at O(repo_url)
    (replacing an older URL), pulls the commit (a static delta when the repository has one; a cut pull resumes
    from the repository's staging directory, retried), records the update (commit, the deployment it replaces,
    the boot id) and deploys the commit as the default with O(kargs) set (C(ostree admin deploy --karg)).
    Boot counting is ostree's and systemd-boot's own (the new entry is named with its tries). An up-to-date
    board gets only the remote's URL corrected; a commit this board rolled back before is not tried again, and
    neither is any commit while the record holds another commit's unfinished update (booted, or rolling back).
  - O(mode=commit) ends the update: the gate passed on the booted commit.
  - O(mode=rollback) on the failed deployment makes the previous one the default (C(ostree admin set-default));
    RV(reboot) is then true. Once the board runs the previous deployment it removes the failed one
    (C(ostree admin undeploy)) and records the commit as rolled back with O(why).
  - Check mode reports what would change and touches nothing.
  - Through its action plugin, an option the task does not pass is read from the matching
    C(edge_llm_update_os_*) variable (commit, branch, repo_url, remote, osname, kargs, state_file, pull_retries).
options:
  mode: {type: str, required: true, choices: [state, stage, commit, rollback], description: What to do.}
  commit: {type: str, required: true, description: The release's commit (64 hex digits).}
  branch: {type: str, default: '', description: The release's branch (OSTREE_BRANCHNAME; stage).}
  repo_url: {type: str, default: '', description: The published repository as the board reaches it (stage).}
  remote: {type: str, default: edge-llm, description: Name of the remote in the board's repository.}
  osname: {type: str, default: nodistro, description: The deployment's stateroot (OSTREE_OSNAME).}
  kargs: {type: list, elements: str, default: [], description: Kernel arguments NAME=VALUE the release sets.}
  state_file: {type: str, default: /var/lib/edge-llm/update-os.json, description: The board's update-os record.}
  why: {type: str, default: '', description: Why the gate failed (rollback).}
  pull_retries: {type: int, default: 3, description: Extra pull attempts after a failed one (stage).}
  pull_delay: {type: int, default: 1, description: Seconds between pull attempts.}
author: edge-llm provisioner
"""

EXAMPLES = r"""
# commit, branch, repo_url, kargs, ... from the edge_llm_update_os_* variables
- name: Stage the release's commit
  edge_llm.fleet.ostree:
    mode: stage
"""

RETURN = r"""
state: {description: booted, deployments (list), have, boot_id and record as read before acting., returned: always,
        type: dict}
up_to_date: {description: The board boots the commit and no update is pending (stage)., returned: stage, type: bool}
reboot: {description: The board must reboot (into the staged commit; out of the failed one)., returned: always,
         type: bool}
pull: {description: The pull summary ostree printed (empty when nothing was pulled)., returned: always, type: str}
edge_llm: {description: kind update-os payload for the fleet report (outcome, from, to, pull)., returned: always,
           type: dict}
"""

import json  # noqa: E402
import os  # noqa: E402
import re  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402

COMMIT_RE = re.compile(r"^[0-9a-f]{64}$")
KARG_RE = re.compile(r"^[A-Za-z0-9_.-]+=[^\s\"']*$")
#: one `ostree admin status` deployment line: "* nodistro <checksum>.<serial>" (booted), "  nodistro ..." else
#: (ostree v2026.1 src/ostree/ot-admin-builtin-status.c:98-99, "%c %s %s.%d%s" with '*' marking the booted one)
STATUS_RE = re.compile(r"^(\*?)\s*(\S+)\s+([0-9a-f]{64})\.([0-9]+)")
REPO = "/ostree/repo"            # the booted system's repository: /ostree -> sysroot/ostree (image_types_ostree:56)
BOOTED_FLAG = "/run/ostree-booted"            # OSTREE_PATH_BOOTED, src/libostree/ostree-sysroot.h:33
BOOT_ID = "/proc/sys/kernel/random/boot_id"
INPUTS_MSG = ("update-os needs the release's OSTree commit, branch and the repository URL "
              "(provisioner fleet update-os --release)")
STAGED, ROLLING_BACK = "staged", "rolling back"


def ostree_exe():
    return shutil.which("ostree") or "/usr/bin/ostree"


def run(argv):
    """(rc, stdout, stderr) of one ostree invocation; a missing binary is rc 127 like a shell's."""
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    except OSError as exc:
        return 127, "", str(exc)
    return proc.returncode, proc.stdout, proc.stderr


def read_text(path):
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read()
    except OSError:
        return ""


def read_record(path):
    """The update-os record: {"pending": {commit, from, boot_id, phase, why, to, rollback_boot_id},
    "rolled_back": {commit: why}}; rollback_boot_id is the boot that asked to leave the failed deployment."""
    try:
        data = json.loads(read_text(path) or "{}")
    except ValueError:
        data = {}
    return data if isinstance(data, dict) else {}


def write_record(path, data):
    """Written whole, then renamed: a reboot or a kill never leaves half a record."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(data, fh, sort_keys=True)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def read_state(module, p):
    """booted, deployments (default first), have (complete in the repo), boot_id, record, ostree_booted.

    On a board that booted OSTree, a failed ``ostree admin status`` fails the task with ostree's message: read as
    "no deployments", it would let a rollback record one it never did."""
    commit = p["commit"]
    rc, out, err = run([ostree_exe(), "admin", "status"])
    if rc != 0 and os.path.exists(BOOTED_FLAG):
        module.fail_json(msg=f"ostree admin status failed on this OSTree board: {err.strip()[-300:] or f'exit {rc}'}")
    deployments, booted = [], ""
    for line in out.splitlines() if rc == 0 else []:
        m = STATUS_RE.match(line)
        if m:
            deployments.append(m.group(3))
            if m.group(1):
                booted = m.group(3)
    # complete = a checksum is shown as the commit object when present (ot-builtin-show.c:419-421), and no
    # state/<commit>.commitpartial is left by a cut pull (src/libostree/ostree-core-private.h:128)
    have = (run([ostree_exe(), f"--repo={REPO}", "show", commit])[0] == 0
            and not os.path.exists(os.path.join(REPO, "state", f"{commit}.commitpartial")))
    return {"booted": booted, "deployments": deployments, "have": have, "boot_id": read_text(BOOT_ID).strip(),
            "record": read_record(p["state_file"]), "ostree_booted": os.path.exists(BOOTED_FLAG)}


def payload(outcome, state, commit, pull="", **more):
    return {"kind": "update-os", "outcome": outcome, "from": state["booted"], "to": commit, "pull": pull, **more}


def fail(module, msg, state=None, **extra):
    module.fail_json(msg=msg, state=state or {}, **extra)


def not_ostree_board(state):
    """Why this board cannot take an OSTree update (None when it can)."""
    if state["booted"]:
        return None
    if not state["ostree_booted"]:
        return ("not an OSTree board: it did not boot an OSTree deployment (no /run/ostree-booted; flash a "
                "qcom-distro-sota image first; update-os replaces whole OSTree images only)")
    return "ostree admin status shows no booted deployment on this OSTree board"


def remote_url(remote):
    """The URL the board's remote names now (``ostree remote show-url``, v2026.1
    src/ostree/ot-remote-builtin-show-url.c:52-55); "" when none."""
    rc, out, _err = run([ostree_exe(), f"--repo={REPO}", "remote", "show-url", remote])
    return out.strip() if rc == 0 else ""


def set_remote(module, p, state):
    """Point the remote at this run's repository: a board keeps pulling from whatever URL its remote names,
    so one added for an earlier URL is replaced (``ostree remote add --force``: "Replace the provided remote
    if it exists", v2026.1 src/ostree/ot-remote-builtin-add.c:56-57).

    --no-gpg-verify: a QLI board's ostree verifies no signature (meta-updater f0e1ccaf
    recipes-extended/ostree/ostree_2026.1.bbappend line 5 removes gpgme; meta-oe 9af4488d ostree_2026.1.bb
    lines 44-51 enable no ed25519 backend), so gpg-verify on would fail every pull. The board checks instead
    that what it pulls hashes to the commit id the controller names (``pull REMOTE BRANCH@COMMIT``)."""
    rc, _out, err = run([ostree_exe(), f"--repo={REPO}", "remote", "add", "--force", "--no-gpg-verify",
                         p["remote"], p["repo_url"]])
    if rc != 0:
        fail(module, f"ostree remote add {p['remote']} {p['repo_url']}: {err.strip()[-300:]}", state)


def pending(state, commit):
    rec = state["record"].get("pending") or {}
    return rec if rec.get("commit") == commit else {}


def admin(module, state, *args):
    """One ``ostree admin`` call on the booted sysroot (the default, ``/``); fails the task with its message."""
    rc, out, err = run([ostree_exe(), "admin", *args])
    if rc != 0:
        fail(module, f"ostree admin {' '.join(args)[:120]}: {err.strip()[-300:]}", state)
    return out


def stage(module, p, state):
    commit = p["commit"]
    why = not_ostree_board(state)
    if why:
        fail(module, why, state)
    other = state["record"].get("pending") or {}
    if other.get("commit") not in (None, commit) and (state["booted"] == other["commit"]
                                                       or other.get("phase") == ROLLING_BACK):
        # deploying now would keep only the booted and merge deployments and drop the last good one, and a
        # rollback would then go to a deployment that never passed the gate
        why = (f"unfinished update to {str(other['commit'])[:12]} ({other.get('phase') or STAGED}): rerun "
               "update-os with that release first")
        fail(module, why, state, edge_llm=payload("refused", state, commit, reason=why))
    earlier = (state["record"].get("rolled_back") or {}).get(commit)
    if earlier is not None and state["booted"] != commit:
        fail(module, f"update to {commit[:12]} was rolled back on this board before ({earlier}); not tried again",
             state, edge_llm=payload("rolled back", state, commit, why=earlier))
    moved = remote_url(p["remote"]) != p["repo_url"]
    if moved and not module.check_mode:
        set_remote(module, p, state)
    rec = pending(state, commit)
    # up to date only while the commit is also the default: otherwise the next reboot would leave it
    up_to_date = state["booted"] == commit and not rec and state["deployments"][:1] == [commit]
    result = {"state": state, "up_to_date": up_to_date, "reboot": False, "pull": "", "changed": moved}
    if up_to_date:
        return dict(result, edge_llm=payload("up-to-date", state, commit))
    if rec and (state["booted"] == commit or rec.get("boot_id") != state["boot_id"]):
        # rebooted since the deploy (into it, or boot counting fell back): nothing to stage, the gate decides
        return dict(result, edge_llm=payload("staged", state, commit))
    # a board running the commit that is not its default: set-default, no reboot, the gate judges it again
    result.update(changed=True, reboot=state["booted"] != commit)
    at = state["deployments"].index(commit) if commit in state["deployments"] else -1
    todo = [s for s, need in (("remote", moved), ("pull", not state["have"] and at < 0),
                              ("deploy", at < 0), ("set-default", at > 0), ("record", not rec)) if need]
    if module.check_mode:
        return dict(result, would=todo, edge_llm=payload("would update", state, commit))
    pull = ""
    if "pull" in todo:
        # the static delta from the running commit is used when published; a cut pull resumes. BRANCH@COMMIT
        # pulls exactly that commit of the branch (v2026.1 src/ostree/ot-builtin-pull.c:259-278)
        for attempt in range(max(0, p["pull_retries"]) + 1):
            rc, out, err = run([ostree_exe(), f"--repo={REPO}", "pull", p["remote"], f"{p['branch']}@{commit}"])
            if rc == 0:
                pull = out.strip()
                break
            if attempt < p["pull_retries"]:
                time.sleep(max(0, p["pull_delay"]))
        else:
            fail(module, f"ostree pull {p['branch']}@{commit[:12]} failed {p['pull_retries'] + 1} times: "
                         f"{err.strip()[-300:]}", state)
    # recorded before the deploy, so a controller killed right after it still knows what the board was on
    write_record(p["state_file"], dict(state["record"], pending={
        "commit": commit, "from": state["booted"], "boot_id": state["boot_id"], "phase": STAGED}))
    if "deploy" in todo:
        # the booted deployment is the merge deployment: its /etc is merged in, its kernel arguments copied
        # unless --karg replaces one (v2026.1 src/ostree/ot-admin-builtin-deploy.c:156-200); the new entry is
        # the default, named with sysroot.boot-counting-tries (ostree-sysroot-deploy.c:1811-1829). Without
        # --retain* it keeps only the booted and merge deployments of this stateroot (ot-admin-builtin-deploy.c:
        # 301-318, src/libostree/ostree-sysroot.c:2168-2171): why stage refuses while another update is open
        admin(module, state, "deploy", f"--os={p['osname']}", *(f"--karg={a}" for a in p["kargs"]), commit)
    elif "set-default" in todo:
        admin(module, state, "set-default", str(at))   # v2026.1 src/ostree/ot-admin-builtin-set-default.c:52-63
    return dict(result, pull=pull, edge_llm=payload("staged", state, commit, pull))


def commit_mode(module, p, state):
    rec = state["record"]
    changed = bool(pending(state, p["commit"]))
    if changed and not module.check_mode:
        write_record(p["state_file"], {k: v for k, v in rec.items() if k != "pending"})
    return {"state": state, "reboot": False, "pull": "", "changed": changed,
            "edge_llm": {"kind": "update-os", "outcome": "updated", "to": p["commit"]}}


def rollback(module, p, state):
    """Out of a deployment that failed the gate, the way a booted ostree allows: the booted deployment cannot be
    undeployed ("Cannot undeploy currently booted deployment", v2026.1 src/ostree/ot-admin-builtin-undeploy.c:
    66-70), so the previous one becomes the default and the board reboots into it; the failed one is removed
    once it no longer runs."""
    commit = p["commit"]
    rec = pending(state, commit)
    why = p["why"] or rec.get("why") or "health gate failed"
    deps = state["deployments"]
    others = [d for d in deps if d != commit]
    base = {"state": state, "pull": "", "changed": False}
    if not state["booted"]:
        fail(module, f"ostree admin status shows no booted deployment: nothing rolled back from {commit[:12]}",
             state)
    if state["booted"] == commit:
        if rec.get("phase") == ROLLING_BACK and rec.get("rollback_boot_id") not in (None, state["boot_id"]):
            # the reboot out of it came back into it (a pinned firmware default, a reset into the same entry)
            fail(module, f"still on the failed deployment {commit[:12]} after the reboot into "
                         f"{str(rec.get('to') or '')[:12]}: {why}", state,
                 edge_llm=payload("rollback failed", state, commit, why=why))
        if not others:
            fail(module, f"no previous deployment to roll back to from {commit[:12]}", state)
        target = rec.get("from") if rec.get("from") in others else others[0]
        if module.check_mode:
            return dict(base, reboot=True, changed=True, edge_llm=payload("would roll back", state, commit))
        write_record(p["state_file"], dict(state["record"], pending=dict(rec, commit=commit, phase=ROLLING_BACK,
                                                                          why=why, to=target,
                                                                          rollback_boot_id=state["boot_id"])))
        if deps[0] != target:
            admin(module, state, "set-default", str(deps.index(target)))
        return dict(base, reboot=True, changed=True, edge_llm=payload("rolling back", state, commit, why=why))
    changed = commit in deps or bool(rec)
    if changed and not module.check_mode:
        if commit in deps:
            admin(module, state, "undeploy", str(deps.index(commit)))
        done = dict(state["record"].get("rolled_back") or {}, **{commit: why})
        write_record(p["state_file"], {**{k: v for k, v in state["record"].items() if k != "pending"},
                                       "rolled_back": done})
    return dict(base, reboot=False, changed=changed,
                edge_llm=payload("rolled back", state, commit, why=why))


def main():
    module = AnsibleModule(argument_spec={
        "mode": {"type": "str", "required": True, "choices": ["state", "stage", "commit", "rollback"]},
        "commit": {"type": "str", "required": True},
        "branch": {"type": "str", "default": ""},
        "repo_url": {"type": "str", "default": ""},
        "remote": {"type": "str", "default": "edge-llm"},
        "osname": {"type": "str", "default": "nodistro"},
        "kargs": {"type": "list", "elements": "str", "default": []},
        "state_file": {"type": "str", "default": "/var/lib/edge-llm/update-os.json"},
        "why": {"type": "str", "default": ""},
        "pull_retries": {"type": "int", "default": 3},
        "pull_delay": {"type": "int", "default": 1},
    }, supports_check_mode=True)
    p = module.params
    if not COMMIT_RE.match(p["commit"] or "") or (p["mode"] == "stage" and not (p["branch"] and p["repo_url"])):
        module.fail_json(msg=INPUTS_MSG)
    bad = [a for a in p["kargs"] or [] if not KARG_RE.match(a)]
    if bad:
        module.fail_json(msg=f"kernel arguments must be NAME=VALUE without spaces or quotes: {bad[0][:80]!r}")
    state = read_state(module, p)
    if p["mode"] == "state":
        module.exit_json(changed=False, state=state, reboot=False, pull="")
    handler = {"stage": stage, "commit": commit_mode, "rollback": rollback}[p["mode"]]
    module.exit_json(**handler(module, p, state))


if __name__ == "__main__":
    main()
