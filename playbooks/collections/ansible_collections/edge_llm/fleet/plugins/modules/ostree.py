#!/usr/bin/python
"""Board side of fleet update-os: the board's OSTree state, staging a commit, committing or rolling back.

One module call per step instead of a shell/command task per ``ostree`` invocation: the board runs
the real ``ostree`` CLI and answers with JSON. Stdlib only (a QLI image has no pip). Which commit,
branch and repository to use, and what counts as up to date for the fleet, come from the controller
(the role's arguments); this module only executes and reports facts.
"""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: ostree
short_description: Read, stage, commit or roll back an OSTree deployment on a board
description:
  - O(mode=state) reports the booted deployment (the one the kernel command line's C(ostree=) names, which
    ostree-prepare-root follows), the deployments C(ostree admin status) lists (default first), whether the
    commit is complete in the board's repository, and the armed trial (boot counting).
  - O(mode=stage) refuses a board that did not boot an OSTree deployment (no C(ostree=) kernel argument), points
    the remote at O(repo_url) (replacing an older URL), pulls the commit (a static delta when the repository has
    one; a cut pull resumes from the repository's staging directory, retried), deploys it and arms boot counting.
    An up-to-date board (booted on the commit, no trial armed) gets only the remote's URL corrected. Returns the
    pull summary ostree printed.
  - O(mode=commit) disarms boot counting: the booted deployment stays the default.
  - O(mode=rollback) undeploys the failed deployment (the previous one is the default again) and disarms boot
    counting; RV(reboot) says whether the board still runs the failed deployment.
  - Check mode reports what would change and touches nothing.
  - Through its action plugin, an option the task does not pass is read from the matching
    C(edge_llm_update_os_*) variable (commit, sysroot, trial_file, branch, repo_url, remote, osname, pull_retries).
options:
  mode: {type: str, required: true, choices: [state, stage, commit, rollback], description: What to do.}
  commit: {type: str, required: true, description: The release's commit (64 hex digits).}
  sysroot: {type: str, default: /sysroot, description: The physical root of the OSTree-booted board.}
  trial_file: {type: str, required: true, description: Boot counting is armed while this file names a commit.}
  branch: {type: str, default: '', description: The release's branch (OSTREE_BRANCHNAME; stage).}
  repo_url: {type: str, default: '', description: The published repository as the board reaches it (stage).}
  remote: {type: str, default: edge-llm, description: Name of the remote in the board's repository.}
  osname: {type: str, default: nodistro, description: The deployment's stateroot (OSTREE_OSNAME).}
  pull_retries: {type: int, default: 3, description: Extra pull attempts after a failed one (stage).}
  pull_delay: {type: int, default: 1, description: Seconds between pull attempts.}
author: edge-llm provisioner
"""

EXAMPLES = r"""
# commit, branch, repo_url, trial_file, ... from the edge_llm_update_os_* variables
- name: Stage the release's commit
  edge_llm.fleet.ostree:
    mode: stage
"""

RETURN = r"""
state: {description: booted, deployments (list), have, trial, as read before acting., returned: always, type: dict}
up_to_date: {description: The board boots the commit and no trial is armed (stage)., returned: stage, type: bool}
reboot: {description: The board must reboot (into the staged commit; out of the failed one)., returned: always,
         type: bool}
pull: {description: The pull summary ostree printed (empty when nothing was pulled)., returned: always, type: str}
edge_llm: {description: kind update-os payload for the fleet report (outcome, from, to, pull)., returned: always,
           type: dict}
"""

import os  # noqa: E402
import re  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402

COMMIT_RE = re.compile(r"^[0-9a-f]{64}$")
DEPLOYMENT_RE = re.compile(r"\b([0-9a-f]{64})\.[0-9]+\b")
INPUTS_MSG = ("update-os needs the release's OSTree commit, branch and the repository URL "
              "(provisioner fleet update-os --release)")


def ostree_exe():
    return shutil.which("ostree") or "/usr/bin/ostree"


def run(argv):
    """(rc, stdout, stderr) of one ostree invocation; a missing binary is rc 127 like a shell's."""
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    except OSError as exc:
        return 127, "", str(exc)
    return proc.returncode, proc.stdout, proc.stderr


def ostree_karg():
    """The kernel's ``ostree=`` argument: what ostree-prepare-root boots, so a board without it is not an
    OSTree board (ostree docs, "Deployments" and ostree-prepare-root.service)."""
    try:
        with open("/proc/cmdline", encoding="utf-8") as fh:
            args = fh.read().split()
    except OSError:
        return ""
    return next((a[len("ostree="):] for a in args if a.startswith("ostree=")), "")


def booted_checksum(sysroot):
    """The deployment the kernel's ``ostree=`` argument names (ostree-prepare-root follows that link)."""
    arg = ostree_karg()
    if not arg:
        return ""
    path = os.path.join(sysroot, arg.lstrip("/"))
    if not os.path.exists(path):
        return ""
    return os.path.basename(os.path.realpath(path)).split(".")[0]


def read_state(p):
    """booted, deployments (default first), have (complete in the repo), trial."""
    sysroot, commit = p["sysroot"], p["commit"]
    repo = os.path.join(sysroot, "ostree/repo")
    rc, out, err = run([ostree_exe(), "admin", f"--sysroot={sysroot}", "status"])
    # a fresh sysroot has no deployment: status may fail or list nothing, both mean none
    deployments = [] if rc != 0 else DEPLOYMENT_RE.findall(out)
    have = (run([ostree_exe(), f"--repo={repo}", "show", commit])[0] == 0
            and not os.path.exists(os.path.join(repo, "state", f"{commit}.commitpartial")))
    try:
        with open(p["trial_file"], encoding="utf-8") as fh:
            trial = fh.read().strip()
    except OSError:
        trial = ""
    return {"booted": booted_checksum(sysroot), "deployments": deployments, "have": have, "trial": trial}


def payload(outcome, state, commit, pull=""):
    return {"kind": "update-os", "outcome": outcome, "from": state["booted"], "to": commit, "pull": pull}


def fail(module, msg, state=None, **extra):
    module.fail_json(msg=msg, state=state or {}, **extra)


def not_ostree_board(p, state):
    """Why this board cannot take an OSTree update (None when it can): it did not boot an OSTree deployment."""
    if state["booted"]:
        return None
    arg = ostree_karg()
    if not arg:
        return ("not an OSTree board: its kernel command line has no ostree= argument (flash a "
                "qcom-distro-sota image first; update-os replaces whole OSTree images only)")
    return (f"the kernel's ostree={arg} names no deployment under {p['sysroot']} "
            "(set edge_llm_update_os_sysroot to the board's physical root)")


def remote_url(repo, remote):
    """The URL the board's remote names now (``ostree remote show-url``, ostree-remote(1)); "" when none."""
    rc, out, _err = run([ostree_exe(), f"--repo={repo}", "remote", "show-url", remote])
    return out.strip() if rc == 0 else ""


def set_remote(module, repo, p, state):
    """Point the remote at this run's repository: a board keeps pulling from whatever URL its remote names,
    so one added for an earlier URL is replaced (``ostree remote add --force``: "Replace the provided remote
    if it exists", ostree-remote(1))."""
    rc, _out, err = run([ostree_exe(), f"--repo={repo}", "remote", "add", "--force", "--no-gpg-verify",
                         p["remote"], p["repo_url"]])
    if rc != 0:
        fail(module, f"ostree remote add {p['remote']} {p['repo_url']}: {err.strip()[-300:]}", state)


def stage(module, p, state):
    commit = p["commit"]
    why = not_ostree_board(p, state)
    if why:
        fail(module, why, state)
    repo = os.path.join(p["sysroot"], "ostree/repo")
    moved = remote_url(repo, p["remote"]) != p["repo_url"]
    if moved and not module.check_mode:
        set_remote(module, repo, p, state)
    up_to_date = state["booted"] == commit and state["trial"] != commit
    result = {"state": state, "up_to_date": up_to_date, "reboot": False, "pull": "", "changed": moved}
    if up_to_date:
        return dict(result, edge_llm=payload("up-to-date", state, commit))
    if state["booted"] == commit:
        # the controller stopped after the reboot into the trial: nothing to stage, the gate decides
        return dict(result, edge_llm=payload("staged", state, commit))
    result.update(changed=True, reboot=True)
    todo = [s for s, need in (("remote", moved), ("pull", not state["have"]),
                              ("deploy", commit not in state["deployments"]), ("arm", state["trial"] != commit))
            if need]
    if module.check_mode:
        return dict(result, would=todo, edge_llm=payload("would update", state, commit))
    sysroot = p["sysroot"]
    pull = ""
    if "pull" in todo:
        # the static delta from the running commit is used when published; a cut pull resumes
        for attempt in range(max(0, p["pull_retries"]) + 1):
            rc, out, err = run([ostree_exe(), f"--repo={repo}", "pull", p["remote"], f"{p['branch']}@{commit}"])
            if rc == 0:
                pull = out.strip()
                break
            if attempt < p["pull_retries"]:
                time.sleep(max(0, p["pull_delay"]))
        else:
            fail(module, f"ostree pull {p['branch']}@{commit[:12]} failed {p['pull_retries'] + 1} times: "
                         f"{err.strip()[-300:]}", state)
    if "deploy" in todo:
        # the new deployment becomes the default entry; the bootloader still counts its boot
        rc, _out, err = run([ostree_exe(), "admin", f"--sysroot={sysroot}", "deploy", f"--os={p['osname']}",
                             commit])
        if rc != 0:
            fail(module, f"ostree admin deploy {commit[:12]}: {err.strip()[-300:]}", state, pull=pull)
    if "arm" in todo:
        write_trial(p["trial_file"], commit)
    return dict(result, pull=pull, edge_llm=payload("staged", state, commit, pull))


def write_trial(path, commit):
    """Arm boot counting for ``commit`` (written whole, then renamed: a reboot never sees half a file)."""
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(commit + "\n")
        fh.flush()
        os.fsync(fh.fileno())
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


def disarm(path):
    try:
        os.unlink(path)
    except FileNotFoundError:
        return False
    return True


def commit_mode(module, p, state):
    changed = bool(state["trial"]) or os.path.exists(p["trial_file"])
    if changed and not module.check_mode:
        disarm(p["trial_file"])
    return {"state": state, "reboot": False, "pull": "", "changed": changed,
            "edge_llm": {"kind": "update-os", "outcome": "updated", "to": p["commit"]}}


def rollback(module, p, state):
    commit = p["commit"]
    present = commit in state["deployments"]
    changed = present or os.path.exists(p["trial_file"])
    if not module.check_mode:
        if present:
            index = state["deployments"].index(commit)
            rc, _out, err = run([ostree_exe(), "admin", f"--sysroot={p['sysroot']}", "undeploy", str(index)])
            if rc != 0:
                fail(module, f"ostree admin undeploy {index} ({commit[:12]}): {err.strip()[-300:]}", state)
        disarm(p["trial_file"])
    return {"state": state, "reboot": state["booted"] == commit, "pull": "", "changed": changed,
            "edge_llm": {"kind": "update-os", "outcome": "rolled back", "to": commit}}


def main():
    module = AnsibleModule(argument_spec={
        "mode": {"type": "str", "required": True, "choices": ["state", "stage", "commit", "rollback"]},
        "commit": {"type": "str", "required": True},
        "sysroot": {"type": "str", "default": "/sysroot"},
        "trial_file": {"type": "str", "required": True},
        "branch": {"type": "str", "default": ""},
        "repo_url": {"type": "str", "default": ""},
        "remote": {"type": "str", "default": "edge-llm"},
        "osname": {"type": "str", "default": "nodistro"},
        "pull_retries": {"type": "int", "default": 3},
        "pull_delay": {"type": "int", "default": 1},
    }, supports_check_mode=True)
    p = module.params
    if not COMMIT_RE.match(p["commit"] or "") or (p["mode"] == "stage" and not (p["branch"] and p["repo_url"])):
        module.fail_json(msg=INPUTS_MSG)
    state = read_state(p)
    if p["mode"] == "state":
        module.exit_json(changed=False, state=state, reboot=False, pull="")
    handler = {"stage": stage, "commit": commit_mode, "rollback": rollback}[p["mode"]]
    module.exit_json(**handler(module, p, state))


if __name__ == "__main__":
    main()
