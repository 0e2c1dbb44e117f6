"""ansible-pull mode on virtual boards: the board clones the playbooks, verifies itself, reports back.

A bare git repo in tmp holds the fleet playbooks (as an ops team would publish them). pull.yml
(role edge_llm_pull) is pushed once over real SSH; then the board's edge-llm-pull.service is
started through its service manager, runs real ansible-pull against the repo, and PUTs its report
to a collector on 127.0.0.1. `provisioner fleet report --from-pull` turns the collected files into
the usual fleet report. The board's ansible-core is the controller's (the sim's python and site
packages, put into a venv at the role's default path), standing in for the wheelhouse install.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from provisioner import context
from provisioner.fleet.runner import ansible_env
from tests.fleet.simfleet import REPO, BoardSpec, build_fleet, can_run

BOARD = "pull-8275"
PULL_DIR = "/opt/edge-llm/pull"
SIM = "/run/edge-llm-sim"


def _git(*args: str, cwd: Path) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "ops", "GIT_AUTHOR_EMAIL": "ops@example", "GIT_COMMITTER_NAME": "ops",
           "GIT_COMMITTER_EMAIL": "ops@example"}
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout.strip()


class Collector:
    """A static HTTP PUT target: each board's report lands as <dir>/<board>.jsonl; every PUT is logged."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.puts: list[str] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_PUT(self) -> None:  # noqa: N802 - http.server's name
                name = Path(self.path).name
                data = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                (outer.root / name).write_bytes(data)
                outer.puts.append(name)
                self.send_response(201)
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/reports"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def _board_venv(ssh) -> None:
    """What the wheelhouse install would leave: <dir>/venv with ansible-pull, ansible, ansible-playbook."""
    venv = f"{PULL_DIR}/venv"
    scripts = {"ansible-pull": "pull", "ansible": "adhoc", "ansible-playbook": "playbook"}
    cmd = [f"{SIM}/python3 -m venv --without-pip {venv}",
           f"printf '%s\\n' {SIM}/site {SIM}/src > $({venv}/bin/python3 -c 'import site; "
           f"print(site.getsitepackages()[0])')/edge-llm-sim.pth"]
    for exe, mod in scripts.items():
        cmd.append(f"printf '#!{venv}/bin/python3\\nfrom ansible.cli.{mod} import main\\nmain()\\n' > {venv}/bin/{exe}"
                   f" && chmod 755 {venv}/bin/{exe}")
    ssh(" && ".join(cmd))       # one remote command line (ssh joins its arguments with spaces)


def _start_pull(ssh, timeout_s: float = 240) -> str:
    """Start the pull service (what the timer does) and wait for the oneshot run to end; returns its journal."""
    ssh("systemctl", "start", "edge-llm-pull.service")
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        state = ssh("systemctl", "is-active", "edge-llm-pull.service", check=False).strip()
        if state not in ("active", "activating"):
            break
        time.sleep(0.5)
    else:
        pytest.fail("edge-llm-pull.service did not finish")
    return ssh("cat", f"{SIM}/systemd/journal/edge-llm-pull.service.log", check=False)


def _report(collected: Path, inventory: Path, out: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "provisioner", "fleet", "report", "--from-pull", str(collected),
                           "-i", str(inventory), "--report", str(out)], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "COLUMNS": "250"})


@pytest.mark.root
@pytest.mark.slow
@pytest.mark.skipif(can_run() is not None, reason=str(can_run()))
def test_pull_mode_reports_once_per_commit(tmp_path):
    work = tmp_path / "fleet-src"
    shutil.copytree(REPO / "playbooks", work, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    _git("init", "-q", "-b", "main", cwd=work)
    _git("add", "-A", cwd=work)
    _git("commit", "-q", "-m", "fleet playbooks", cwd=work)
    bare = tmp_path / "fleet.git"
    _git("clone", "-q", "--bare", str(work), str(bare), cwd=tmp_path)
    collected = tmp_path / "collected"
    collected.mkdir()
    collector = Collector(collected)
    fleet = build_fleet(tmp_path / "sim", [BoardSpec(BOARD, "iq-8275-evk")], cache=tmp_path / "cache",
                        base_index=400)
    from provisioner.sim import host

    def ssh(*command: str, check: bool = True) -> str:
        proc = subprocess.run(host.ssh_argv(fleet.boards[BOARD], *command), capture_output=True, text=True,
                              timeout=300)
        if check and proc.returncode != 0:
            pytest.fail(f"{command}: rc {proc.returncode}: {proc.stdout[-2000:]} {proc.stderr[-2000:]}")
        return proc.stdout
    try:
        _board_venv(ssh)
        setup = subprocess.run(["ansible-playbook", "-i", str(fleet.inventory), str(REPO / "playbooks/pull.yml"),
                                "-e", f"edge_llm_pull_url={bare}",
                                "-e", f"edge_llm_pull_collector_url={collector.url}"],
                               env={**ansible_env(base=context.current().env), "ANSIBLE_STDOUT_CALLBACK": "default"},
                               capture_output=True, text=True, timeout=300)
        assert setup.returncode == 0, setup.stdout[-3000:] + setup.stderr[-2000:]
        timer = ssh("cat", "/etc/systemd/system/edge-llm-pull.timer")
        assert "RandomizedDelaySec=900" in timer and "OnCalendar=hourly" in timer
        assert ssh("systemctl", "is-enabled", "edge-llm-pull.timer").strip() == "enabled"

        # first run: clones, verifies, uploads
        journal = _start_pull(ssh)
        assert collector.puts == [f"{BOARD}.jsonl"], journal[-3000:]
        first = (collected / f"{BOARD}.jsonl").read_bytes()
        out = tmp_path / "report.json"
        proc = _report(collected, fleet.inventory, out)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
        data = json.loads(out.read_text())
        row = {b["board"]: b for b in data["boards"]}[BOARD]
        assert row["verdict"] == "pass" and row["type"] == "iq-8275-evk"
        assert row["release"] and row["models"] and row["checks"]      # the verify payload, as a push run has it
        assert row["details"]["pull"]["commit"] == _git("rev-parse", "HEAD", cwd=bare)
        assert BOARD in proc.stdout and "pass" in proc.stdout

        # second run, no new commit: --only-if-changed runs nothing, uploads nothing
        journal = _start_pull(ssh)
        assert "no new commit" in journal
        assert collector.puts == [f"{BOARD}.jsonl"]
        assert (collected / f"{BOARD}.jsonl").read_bytes() == first

        # a new commit runs again and reports it
        (work / "README.md").write_text((work / "README.md").read_text() + "\nchanged\n")
        _git("commit", "-q", "-am", "docs", cwd=work)
        _git("push", "-q", str(bare), "main", cwd=work)
        _start_pull(ssh)
        assert collector.puts == [f"{BOARD}.jsonl"] * 2
        data = json.loads(out.read_text()) if _report(collected, fleet.inventory, out).returncode == 0 else None
        assert data and data["boards"][0]["details"]["pull"]["commit"] == _git("rev-parse", "HEAD", cwd=bare)
    finally:
        fleet.stop()
        collector.server.shutdown()


def _run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "provisioner", "fleet", "report", *args], capture_output=True,
                          text=True, timeout=120, env={**os.environ, "COLUMNS": "250"})


def test_report_from_pull_refuses_a_directory_without_reports(tmp_path):
    proc = _run_cli("--from-pull", str(tmp_path))
    assert proc.returncode == 2 and "no pull reports" in proc.stderr and "Traceback" not in proc.stderr


def test_a_board_whose_pull_failed_is_a_failed_row_with_the_reason(tmp_path):
    # what the pull script writes when the clone fails (the playbook never started)
    lines = [{"event": "pull", "host": "b1", "url": "https://git.lan/fleet.git", "branch": "main", "commit": "",
              "rc": 1, "t": 1.0},
             {"event": "host", "host": "b1", "task": "ansible-pull", "action": "ansible-pull", "status": "failed",
              "changed": False, "msg": "fatal: unable to access 'https://git.lan/fleet.git/'"},
             {"event": "stats", "hosts": {"b1": {"failures": 1}}}]
    (tmp_path / "b1.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    out = tmp_path / "r.json"
    proc = _run_cli("--from-pull", str(tmp_path), "--report", str(out))
    assert proc.returncode == 1, proc.stderr
    row = json.loads(out.read_text())["boards"][0]
    assert row["verdict"] == "fail" and "unable to access" in row["reason"]
    assert row["details"]["pull"]["url"] == "https://git.lan/fleet.git"


def test_role_renders_valid_playbooks():
    for pb in ("local.yml", "pull.yml"):
        proc = subprocess.run(["ansible-playbook", "--syntax-check", "-i", "inventory/example.yml", f"playbooks/{pb}"],
                              cwd=REPO, env=ansible_env(base=context.current().env), capture_output=True, text=True,
                              timeout=120)
        assert proc.returncode == 0, proc.stdout + proc.stderr


def test_a_failed_pull_report_carries_no_git_credential(tmp_path):
    # The report is uploaded to the collector and read on the controller; the URL's password must not be in it.
    fake = tmp_path / "ansible-pull"
    fake.write_text("#!/bin/sh\necho \"fatal: could not read from $2\" >&2\nexit 1\n")
    fake.chmod(0o755)
    url = "https://ops:s3cret-pw@git.lan:8443/fleet.git"
    cfg = {"name": "b1", "url": url, "branch": "main", "playbook": "local.yml", "only_if_changed": True,
           "ansible_pull": str(fake), "checkout": str(tmp_path / "checkout"), "inventory": str(tmp_path / "inv.yml"),
           "reports": str(tmp_path / "reports"), "collector_url": ""}
    (tmp_path / "pull.json").write_text(json.dumps(cfg))
    script = REPO / "playbooks/roles/edge_llm_pull/files/edge-llm-pull.py"
    proc = subprocess.run([sys.executable, str(script), str(tmp_path / "pull.json")], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 1
    report = (tmp_path / "reports" / "b1.jsonl").read_text()
    assert "s3cret-pw" not in report and "ops@" not in report
    head = json.loads(report.splitlines()[0])
    assert head["url"] == "https://git.lan:8443/fleet.git"
    assert "could not read from https://git.lan:8443/fleet.git" in json.loads(report.splitlines()[1])["msg"]
