"""`provisioner sim` end to end: boards come up usable and `down` leaves nothing behind."""

from __future__ import annotations

import json
import os
import signal
import sys
import time

import pytest
import yaml

from provisioner.sim import supervisor

from .simcore import mounts_under, run, sim_pids

ENV = dict(os.environ, PROVISIONER_SIM_BOOT_SCALE="0")


def sim(*args: str, timeout: float = 240) -> object:
    return run([sys.executable, "-m", "provisioner", "sim", *args], timeout=timeout, env=ENV)


def _assert_clean(root):
    assert sim_pids(root) == []
    assert mounts_under(root) == []
    devices = root / "sysfs/bus/usb/devices"
    assert not devices.exists() or list(devices.iterdir()) == []
    assert not (root / "boards").exists()


@pytest.fixture
def root(tmp_path):
    r = tmp_path / "sim"
    yield r
    sim("down", "--root", str(r))


def test_sixteen_boards_up_and_down_leave_nothing_behind(root):
    res = sim("up", "16", "--board", "iq-8275-evk", "--root", str(root), "--json")
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    boards = data["boards"]
    assert len(boards) == 16 and all(b["state"] == "booted" for b in boards)
    assert len({b["serial"] for b in boards}) == 16 and len({b["slot"] for b in boards}) == 16
    assert all(b["build_id"] == "sim-iq-8275-evk-example" for b in boards)
    inv = yaml.safe_load((root / "inventory.yml").read_text())
    assert "all" in inv
    st = json.loads(sim("status", "--root", str(root), "--json").stdout)
    assert st["supervisor"] and len(st["boards"]) == 16
    assert all("root_password" not in b for b in st["boards"])
    assert sim_pids(root)                                     # the supervisor (and sshds) really run
    res = sim("down", "--root", str(root))
    assert res.returncode == 0, res.stderr
    _assert_clean(root)


def test_edl_state_and_down_after_kill_9(root):
    res = sim("up", "2", "--board", "iq-9075-evk", "--state", "edl", "--root", str(root), "--json")
    assert res.returncode == 0, res.stderr
    assert len(list((root / "sysfs/bus/usb/devices").iterdir())) == 2
    pid = supervisor.running_pid(root)
    assert pid
    os.kill(pid, signal.SIGKILL)
    time.sleep(0.2)
    res = sim("down", "--root", str(root))
    assert res.returncode == 0, res.stderr
    _assert_clean(root)


def test_bad_input_is_one_line_and_exit_2(root):
    res = sim("up", "1", "--board", "iq-8275-evk", "--fault", "bogus", "--root", str(root))
    assert res.returncode == 2
    assert res.stderr.strip().count("\n") == 0 and "unknown fault 'bogus'" in res.stderr
    res = sim("edl", "DEADBEEF", "--root", str(root))
    assert res.returncode == 2 and "no virtual board" in res.stderr


def test_boards_survive_a_supervisor_killed_9(root):
    import serial

    from provisioner.sim import host
    from provisioner.sim.board import list_boards

    from .simcore import read_until

    res = sim("up", "1", "--board", "iq-8275-evk", "--root", str(root), "--json")
    assert res.returncode == 0, res.stderr
    pid = supervisor.running_pid(root)
    os.kill(pid, signal.SIGKILL)
    while supervisor.running_pid(root) == pid:
        time.sleep(0.05)
    new = supervisor.ensure_running(root)
    assert new != pid
    (vb,) = list_boards(root)
    deadline = time.monotonic() + 20
    while not (vb.reload().console and vb.data.get("pids", {}).get("supervisor") == new and vb.ssh):
        assert time.monotonic() < deadline, vb.data
        time.sleep(0.05)
    assert vb.state == "booted"
    with serial.Serial(str(vb.console_link), 115200, timeout=0.2) as ser:
        ser.write(b"\r")
        read_until(ser, f"{vb.hostname} login: ".encode())
    out = run(host.ssh_argv(vb, "cat", "/sys/devices/soc0/machine"), timeout=30)
    assert out.returncode == 0 and out.stdout.strip() == "QCS8275", out.stderr
