"""The virtual boards' root password reaches the station through a 0600 file, never our environment
(every child - ansible-playbook, ssh, the boards - would inherit an environment variable)."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from types import SimpleNamespace

from provisioner import rehearse
from provisioner.sim import board as sim_board


def test_console_password_is_a_private_file_and_no_child_inherits_it(tmp_path, monkeypatch):
    secret = "sim-root-pw-4711"
    monkeypatch.setattr(sim_board.VirtualBoard, "load",
                        staticmethod(lambda root, serial: SimpleNamespace(data={"root_password": secret})))
    job = SimpleNamespace(lanes=[SimpleNamespace(serials=["SIM0001"])], sim_root=tmp_path, _cred=None)
    before = dict(os.environ)
    cred = rehearse.Rehearsal._credential(job)
    assert cred.secret({}) == secret                                 # the station still logs in
    assert os.environ == before                                      # nothing was added to our environment
    child = subprocess.run([sys.executable, "-c", "import os; print(repr(dict(os.environ)))"],
                           capture_output=True, text=True, check=True).stdout
    assert secret not in child
    path = next(p for p in tmp_path.iterdir() if p.read_text().strip() == secret)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
