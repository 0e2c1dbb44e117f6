"""Controller tuning: forks, pipelining, ControlPersist and strategy are defaults a user can see and override."""

from __future__ import annotations

from provisioner import context
from provisioner.fleet.runner import (
    DEFAULT_FORKS,
    FleetOptions,
    ansible_env,
    describe_tuning,
    fleet_forks,
    run_playbook,
)

BASE = {"PATH": "/usr/bin:/bin", "HOME": "/root", "LANG": "C.UTF-8"}


def test_defaults_are_pipelining_control_persist_and_forks_sized_to_the_fleet():
    env = ansible_env(forks=fleet_forks(16, None, BASE), base=BASE)
    assert describe_tuning(env) == "forks 16, pipelining on, ControlPersist 300s, strategy linear"
    assert fleet_forks(10_000, None, BASE) == DEFAULT_FORKS <= 256      # a big fleet queues, the controller does not


def test_user_settings_win_as_in_ansibles_precedence():
    user = {**BASE, "ANSIBLE_PIPELINING": "False", "ANSIBLE_SSH_ARGS": "-o ControlMaster=auto -o ControlPersist=60s",
            "ANSIBLE_STRATEGY": "free", "ANSIBLE_FORKS": "7"}
    env = ansible_env(forks=fleet_forks(16, None, user), base=user)
    assert describe_tuning(env) == "forks 7, pipelining off, ControlPersist 60s, strategy free"
    assert fleet_forks(16, 4, user) == 4                                 # --forks beats ANSIBLE_FORKS


def test_a_run_reports_its_tuning_once_before_ansible_starts(tmp_path):
    inv = tmp_path / "inventory.yml"
    inv.write_text("all:\n  hosts: {}\n", encoding="utf-8")
    events: list[dict] = []
    run_playbook("verify", inv, context.RunContext(BASE), FleetOptions(forks=3, timeout_s=120), on_event=events.append)
    tuning = [e for e in events if e.get("event") == "tuning"]
    assert tuning == [{"event": "tuning", "line": "forks 3, pipelining on, ControlPersist 300s, strategy linear"}]
    assert events[0] is tuning[0]
