"""Our own Python dependencies' executables are found beside the interpreter, venv not activated."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from provisioner import tools
from provisioner.errors import FleetError, UserError

ROOT = Path(__file__).resolve().parents[1]
VENV_BIN = Path(sys.executable).parent


def _bare_env() -> dict[str, str]:
    """An environment whose PATH lacks the venv's bin/ (a user calling /path/to/venv/bin/provisioner)."""
    path = os.pathsep.join(p for p in ("/usr/local/bin", "/usr/bin", "/bin") if Path(p) != VENV_BIN)
    return {"PATH": path, "HOME": os.environ.get("HOME", "/root"), "LANG": "C.UTF-8"}


def test_fleet_reads_the_inventory_when_called_by_absolute_path_without_the_venv_on_path():
    if any((Path(p) / "ansible-inventory").exists() for p in _bare_env()["PATH"].split(os.pathsep)):
        pytest.skip("ansible-inventory is installed system-wide: PATH alone would find it")
    proc = subprocess.run([str(VENV_BIN / "provisioner"), "fleet", "verify", "-i", str(ROOT / "inventory/example.yml"),
                           "--limit", "no_such_host"], capture_output=True, text=True, env=_bare_env(), timeout=120)
    # it got as far as asking ansible-inventory for the hosts: the limit matched nothing
    assert proc.returncode == 2, proc.stderr
    assert "no hosts match --limit no_such_host" in proc.stderr + proc.stdout
    assert "not found" not in proc.stderr + proc.stdout


def test_missing_dependency_names_the_pip_package(monkeypatch, tmp_path):
    monkeypatch.setattr(tools, "scripts_dirs", lambda: [tmp_path])
    with pytest.raises(FleetError) as err:
        tools.require("ansible-playbook", path=str(tmp_path), error=FleetError)
    assert "ansible-playbook not found" in err.value.message
    assert err.value.hint == f"{sys.executable} -m pip install ansible-core"
    with pytest.raises(UserError) as err:
        tools.require("kas", path=str(tmp_path))
    assert err.value.hint.endswith("pip install kas") and "apt" not in err.value.hint


def test_beside_the_interpreter_wins_over_path(monkeypatch, tmp_path):
    ours, theirs = tmp_path / "venv-bin", tmp_path / "usr-bin"
    for d in (ours, theirs):
        d.mkdir()
        (d / "kas").write_text("#!/bin/sh\n")
        (d / "kas").chmod(0o755)
    monkeypatch.setattr(tools, "scripts_dirs", lambda: [ours])
    assert tools.find("kas", path=str(theirs)) == str(ours / "kas")
