"""Fleet verify's FastRPC device check against what QLI's fastrpc udev rule sets.

fastrpc 1.0.6 (meta-qcom recipes-support/fastrpc/fastrpc_1.0.6.bb @ ef0004df) installs
60-fastrpc.rules from github.com/qualcomm/fastrpc (files/60-fastrpc.rules, 05b9e02):
OWNER="fastrpc", GROUP="fastrpc", MODE="0660" on /dev/fastrpc-cdsp. Exactly that passes.
"""

from __future__ import annotations

import pytest

from provisioner.fleet import verify


def _probe(owner: str, group: str, mode: str) -> dict:
    return {"stat": {"fastrpc_device": {"exists": True, "owner": owner, "group": group, "mode": mode, "type": "char"},
                     "fastrpc_lib": {"exists": True, "mode": "0755", "owner": "root", "group": "root"}},
            "units_active": {"cdsprpcd": "active"},
            "groups": {"fastrpc": {"exists": True, "members": ["llm"]}}}


def _fastrpc(probe: dict) -> list[verify.Check]:
    return [c for c in verify._fastrpc_checks(probe, "llm") if c.name == "fastrpc"]


def test_the_udev_rules_owner_group_and_mode_pass() -> None:
    (c,) = _fastrpc(_probe("fastrpc", "fastrpc", "0660"))
    assert c.ok, c.detail
    assert "fastrpc:fastrpc 0660" in c.detail


@pytest.mark.parametrize("mode", ["0666", "0664", "0662", "0661", "0777"])
def test_world_accessible_device_is_refused_in_one_line(mode: str) -> None:
    (c,) = _fastrpc(_probe("fastrpc", "fastrpc", mode))
    assert not c.ok
    assert "world-accessible" in c.detail and f"fastrpc:fastrpc {mode}" in c.detail
    assert "\n" not in c.detail
    assert c.as_dict()["diagnosis"] == "fastrpc-perms"


@pytest.mark.parametrize(("owner", "group", "mode"), [
    ("root", "fastrpc", "0660"),        # right group and mode, wrong owner (not what the rule sets)
    ("fastrpc", "render", "0660"),      # the older 71-fastrpc.rules group
    ("fastrpc", "fastrpc", "0600"),     # group cannot open it
    ("fastrpc", "fastrpc", "0670"),     # group-executable: not the rule's mode
])
def test_anything_but_the_rules_triple_is_refused(owner: str, group: str, mode: str) -> None:
    (c,) = _fastrpc(_probe(owner, group, mode))
    assert not c.ok
    assert f"{owner}:{group} {mode}" in c.detail and "want fastrpc:fastrpc 0660" in c.detail
