"""ansible-pull mode: the git URL's credential is never in an argv or an environment, and git still finds it."""

from __future__ import annotations

import importlib.util
import os
import stat
import subprocess
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "playbooks/roles/edge_llm_pull/files/edge-llm-pull.py"
SECRET = "s3cret-Pa55"


def pull_script():
    spec = importlib.util.spec_from_file_location("edge_llm_pull_script", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def cfg(tmp_path: Path, url: str) -> dict:
    return {"ansible_pull": "/opt/edge-llm/pull/venv/bin/ansible-pull", "url": url,
            "checkout": str(tmp_path / "checkout"), "inventory": str(tmp_path / "inventory.yml"), "name": "b1",
            "branch": "main", "only_if_changed": True, "playbook": "local.yml", "reports": str(tmp_path / "r")}


def test_the_credential_goes_to_a_private_file_not_to_argv_or_environment(tmp_path):
    mod = pull_script()
    c = cfg(tmp_path, f"https://fleet:{SECRET}@git.lan/fleet.git")
    creds = mod.git_credentials(c, tmp_path / "git-credentials")
    argv, env = mod.pull_argv(c), mod.pull_env(c, creds)
    assert "https://git.lan/fleet.git" in argv
    assert not any(SECRET in a for a in argv)
    assert not any(SECRET in v for v in env.values())
    assert stat.S_IMODE(creds.stat().st_mode) == 0o600 and SECRET in creds.read_text()
    # real git, configured only through that environment, finds the credential for the URL's host
    asked = subprocess.run(["git", "credential", "fill"], input="protocol=https\nhost=git.lan\n\n", env=env,
                           capture_output=True, text=True, timeout=30)
    assert asked.returncode == 0, asked.stderr
    assert f"password={SECRET}" in asked.stdout and "username=fleet" in asked.stdout


def test_a_url_without_credential_writes_nothing(tmp_path):
    mod = pull_script()
    c = cfg(tmp_path, "https://git.lan/fleet.git")
    assert mod.git_credentials(c, tmp_path / "git-credentials") is None
    assert not (tmp_path / "git-credentials").exists()
    assert mod.pull_env(c, None).get("GIT_CONFIG_COUNT") == os.environ.get("GIT_CONFIG_COUNT")
