"""The playbooks pass ansible-lint's production profile and ansible-playbook's syntax check, and stay one task
per board on the controller."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
PLAYBOOKS = ("verify.yml", "deploy.yml", "launch.yml", "rollback.yml", "benchmark.yml", "update-os.yml", "pull.yml",
             "local.yml")
ENV = {**os.environ, "ANSIBLE_COLLECTIONS_PATH": str(REPO / "playbooks" / "collections"), "ANSIBLE_NOCOLOR": "1",
       "NO_COLOR": "1"}


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


def _tasks(items):
    for task in items or []:
        yield task
        for key in ("block", "rescue", "always"):
            yield from _tasks(task.get(key))


def test_fleet_action_tasks_pass_no_templated_argument():
    """ansible-core compiles every templated task argument once per board and task in a forked worker (no cache
    across workers): a dozen "{{ edge_llm_x }}" arguments cost the controller more than the board call. The
    edge_llm.fleet actions read those variables by name instead (plugin_utils/board_action.py)."""
    actions = {f"edge_llm.fleet.{p.stem}" for p in
               (REPO / "playbooks/collections/ansible_collections/edge_llm/fleet/plugins/action").glob("*.py")}
    seen = []
    for path in sorted((REPO / "playbooks" / "roles").glob("*/tasks/*.yml")):
        for task in _tasks(yaml.safe_load(path.read_text())):
            for action in actions & set(task):
                seen.append(action)
                assert "{{" not in yaml.safe_dump(task[action]), f"{path.relative_to(REPO)}: {task.get('name')}"
    assert {"edge_llm.fleet.verify", "edge_llm.fleet.serve", "edge_llm.fleet.benchmark", "edge_llm.fleet.deploy",
            "edge_llm.fleet.update_os_gate", "edge_llm.fleet.ostree"} <= set(seen)
