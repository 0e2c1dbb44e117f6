#!/usr/bin/env python3
"""One ansible-pull run on a board, and its report (installed by the edge_llm_pull role).

ansible-pull clones the fleet playbooks and runs the playbook locally, as Ansible's ansible-pull
documentation describes (``-U URL -C BRANCH -d DIR --only-if-changed``). Its playbook output uses
the ``edge_llm.fleet.events`` stdout callback, so the report is the same JSON lines a push run
gives the controller's runner; ``provisioner fleet report --from-pull DIR`` reads them back.

Report ``<reports>/<board>.jsonl``: a ``pull`` event (url, branch, commit, rc) then the playbook's
events. No playbook run (no new commit with --only-if-changed) leaves the last report as it was;
a failed clone or playbook start is reported as one failed ``ansible-pull`` task. The report is
PUT to ``<collector_url>/<board>.jsonl`` when a collector is set; a failed upload is retried by
the next run (``.pending`` marker). Standard library only.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

CALLBACK = "edge_llm.fleet.events"


def pull_argv(cfg: dict) -> list[str]:
    """ansible-pull's argv, with the URL's credential left out (argv is world-readable in /proc/<pid>/cmdline)."""
    argv = [cfg["ansible_pull"], "-U", public_url(cfg["url"]), "-d", cfg["checkout"], "-i", cfg["inventory"],
            "-l", cfg["name"]]
    if cfg.get("branch"):
        argv += ["-C", cfg["branch"]]
    if cfg.get("only_if_changed"):
        argv.append("--only-if-changed")
    return argv + [cfg["playbook"]]


def public_url(url: str) -> str:
    """The git URL without its user:password part: a report is uploaded and read by others, a credential is not."""
    parts = urllib.parse.urlsplit(url)
    if not parts.password and not parts.username:
        return url
    host = parts.hostname or ""
    netloc = (f"[{host}]" if ":" in host else host) + (f":{parts.port}" if parts.port else "")
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc))


def git_credentials(cfg: dict, path: Path) -> Path | None:
    """Where git finds the URL's user:password, if it has one: ``path``, a git-credential-store file (0600).

    The credential never travels in an argv or an environment: git's own ``store`` helper reads it from the
    file (git-credential-store(1): one ``https://user:pass@host`` line per credential), named to git through
    GIT_CONFIG_COUNT/KEY/VALUE (git-config(1) ENVIRONMENT), which holds the file's path only.
    """
    parts = urllib.parse.urlsplit(cfg["url"])
    if not parts.password and not parts.username:
        return None
    line = urllib.parse.urlunsplit(parts._replace(path="", query="", fragment="")) + "\n"
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(line)
    os.replace(tmp, path)
    return path


def pull_env(cfg: dict, credentials: Path | None = None) -> dict[str, str]:
    """The events callback for the playbook (ad-hoc git checkout keeps its own output), the checkout's ansible.cfg,
    and git's credential-store helper on ``credentials`` (see :func:`git_credentials`)."""
    playbook_dir = Path(cfg["checkout"], cfg["playbook"]).parent
    env = dict(os.environ)
    env.update({"ANSIBLE_STDOUT_CALLBACK": CALLBACK, "ANSIBLE_CONFIG": str(playbook_dir / "ansible.cfg"),
                "ANSIBLE_NOCOLOR": "1", "ANSIBLE_FORCE_COLOR": "0", "ANSIBLE_RETRY_FILES_ENABLED": "0"})
    if credentials is not None:
        n = int(env.get("GIT_CONFIG_COUNT") or 0)
        env.update({"GIT_CONFIG_COUNT": str(n + 1), f"GIT_CONFIG_KEY_{n}": "credential.helper",
                    f"GIT_CONFIG_VALUE_{n}": f"store --file={credentials}"})
    return env


def head_commit(checkout: str) -> str:
    try:
        return subprocess.run(["git", "-C", checkout, "rev-parse", "HEAD"], capture_output=True, text=True,
                              timeout=30).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return ""


def upload(url: str, path: Path) -> None:
    req = urllib.request.Request(url, data=path.read_bytes(), method="PUT",
                                 headers={"Content-Type": "application/x-ndjson"})
    with urllib.request.urlopen(req, timeout=60) as resp:
        if resp.status >= 300:
            raise OSError(f"HTTP {resp.status}")


def main(config: str) -> int:
    cfg = json.loads(Path(config).read_text(encoding="utf-8"))
    reports = Path(cfg["reports"])
    reports.mkdir(parents=True, exist_ok=True)
    report, pending = reports / f"{cfg['name']}.jsonl", reports / f"{cfg['name']}.pending"
    creds = git_credentials(cfg, Path(config).with_name("git-credentials"))
    proc = subprocess.run(pull_argv(cfg), env=pull_env(cfg, creds), capture_output=True, text=True)
    events, other = [], []
    for line in proc.stdout.splitlines():
        try:
            ev = json.loads(line) if line.startswith("{") else None
        except ValueError:
            ev = None
        (events.append(line) if isinstance(ev, dict) and "event" in ev else other.append(line))
    sys.stderr.write("\n".join(other + proc.stderr.splitlines()[-40:]) + "\n")
    ran = any('"event": "stats"' in e for e in events)
    if ran or proc.returncode != 0:
        if not ran:     # the clone or ansible-playbook itself failed: say so in the report
            msg = " | ".join(ln.strip() for ln in (other + proc.stderr.splitlines()) if ln.strip())[-1500:]
            msg = msg.replace(cfg["url"], public_url(cfg["url"]))
            events += [json.dumps({"event": "host", "host": cfg["name"], "task": "ansible-pull",
                                   "action": "ansible-pull", "status": "failed", "changed": False,
                                   "msg": msg or f"ansible-pull exited {proc.returncode}"}),
                       json.dumps({"event": "stats", "hosts": {cfg["name"]: {"failures": 1}}})]
        head = {"event": "pull", "host": cfg["name"], "url": public_url(cfg["url"]), "branch": cfg.get("branch"),
                "commit": head_commit(cfg["checkout"]), "rc": proc.returncode, "t": round(time.time(), 3)}
        tmp = report.with_suffix(".tmp")
        tmp.write_text("\n".join([json.dumps(head, sort_keys=True), *events]) + "\n", encoding="utf-8")
        os.replace(tmp, report)
        if cfg.get("collector_url"):
            pending.touch()
    else:
        sys.stderr.write("no new commit: playbook not run, report unchanged\n")
    if cfg.get("collector_url") and pending.exists() and report.exists():
        target = cfg["collector_url"].rstrip("/") + f"/{report.name}"
        try:
            upload(target, report)
        except OSError as exc:
            sys.stderr.write(f"upload to {target} failed ({exc}); retried by the next run\n")
            return proc.returncode or 1
        pending.unlink()
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
