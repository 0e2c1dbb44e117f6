"""The playbooks pass ansible-lint's production profile and ansible-playbook's syntax check."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PLAYBOOKS = ("verify.yml", "deploy.yml", "launch.yml", "rollback.yml", "benchmark.yml", "update-os.yml", "pull.yml",
             "local.yml")
ENV = {**os.environ, "ANSIBLE_COLLECTIONS_PATH": str(REPO / "playbooks" / "collections"), "ANSIBLE_NOCOLOR": "1",
       "NO_COLOR": "1"}


@pytest.mark.skipif(shutil.which("ansible-lint") is None, reason="ansible-lint not installed")
def test_ansible_lint_production_profile_is_clean():
    proc = subprocess.run(["ansible-lint", "--nocolor", "--offline", "--profile", "production", "playbooks/"],
                          cwd=REPO, env=ENV, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert "Profile 'production' was required, and it passed" in proc.stdout + proc.stderr


@pytest.mark.parametrize("playbook", PLAYBOOKS)
def test_syntax_check(playbook):
    proc = subprocess.run(["ansible-playbook", "--syntax-check", "-i", "inventory/example.yml",
                           f"playbooks/{playbook}"], cwd=REPO, env=ENV, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
