"""Board consoles over real ptys (pyserial), driven by the sim supervisor."""

from __future__ import annotations

import os
import time

import pytest
import serial

from provisioner import catalog
from provisioner.sim import control, supervisor
from provisioner.sim.board import VirtualBoard
from provisioner.station.edl import scan_edl

from .simcore import read_until

PASSWORD = "oelinux123"


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    old = os.environ.get("PROVISIONER_SIM_BOOT_SCALE")
    os.environ["PROVISIONER_SIM_BOOT_SCALE"] = "0"
    root = tmp_path_factory.mktemp("console") / "sim"
    try:
        res = control.up(1, "iq-8275-evk", root=root, timeout_s=60)
        yield root, res.boards[0]
    finally:
        control.down(root)
        if old is None:
            os.environ.pop("PROVISIONER_SIM_BOOT_SCALE", None)
        else:
            os.environ["PROVISIONER_SIM_BOOT_SCALE"] = old


def _open(vb: VirtualBoard) -> serial.Serial:
    return serial.Serial(str(vb.console_link), 115200, timeout=0.2)


def _login(ser, vb) -> None:
    host = vb.reload().hostname
    ser.write(b"\r")
    buf = read_until(ser, b" login: ", b":~# ")
    if buf.endswith(b":~# "):
        return
    ser.write(b"root\r")
    read_until(ser, b"Password: ")
    ser.write(PASSWORD.encode() + b"\r")
    read_until(ser, f"root@{host}:~# ".encode())


def _cmd(ser, vb, line: str) -> bytes:
    ser.reset_input_buffer()
    ser.write(line.encode() + b"\r")
    out = read_until(ser, f"root@{vb.hostname}:~# ".encode())
    body = out.split(b"\r\n", 1)[1] if b"\r\n" in out else out
    return body.rsplit(f"root@{vb.hostname}".encode(), 1)[0]


def _reboot_and_wait(vb: VirtualBoard, after_seq: int = -1) -> None:
    """Wait until the board is booted again after power event number ``after_seq``."""
    deadline = time.monotonic() + 30
    while vb.reload().state != "booted" or vb.console is None or vb.data.get("power_seq", 0) <= after_seq:
        assert time.monotonic() < deadline, vb.state
        time.sleep(0.05)


def test_login_identity_and_shell(sim):
    root, vb = sim
    b = catalog.board("iq-8275-evk")
    with _open(vb) as ser:
        ser.write(b"\r")
        read_until(ser, f"{vb.hostname} login: ".encode())
        ser.write(b"root\r")
        read_until(ser, b"Password: ")
        ser.write(b"wrong-password\r")
        out = read_until(ser, b"Login incorrect")
        assert b"wrong-password" not in out                 # never echoed
        _login(ser, vb)
        assert _cmd(ser, vb, "cat /sys/devices/soc0/machine").strip() == b.soc0_machine.encode()
        assert _cmd(ser, vb, "cat /sys/devices/soc0/soc_id").strip() == str(b.soc_id).encode()
        compat = _cmd(ser, vb, "cat /proc/device-tree/compatible")
        assert compat == b"".join(c.encode() + b"\0" for c in b.dt_compatible)
        assert _cmd(ser, vb, "cat /proc/device-tree/model").rstrip(b"\0") == b.dt_model.encode()
        osrel = _cmd(ser, vb, "cat /etc/os-release")
        assert b'BUILD_ID="sim-iq-8275-evk-example"' in osrel    # from the flashed rootfs
        assert _cmd(ser, vb, "ulimit -l").strip() == b"unlimited"  # the image's limits.d
        assert b"aarch64 GNU/Linux" in _cmd(ser, vb, "uname -a")
        assert _cmd(ser, vb, "frobnicate").strip() == b"-sh: frobnicate: command not found"
    log = vb.log_path.read_bytes()
    assert b"Qualcomm Linux 2.0" in log and PASSWORD.encode() not in log and b"wrong-password" not in log


def test_session_survives_reopening_the_port(sim):
    root, vb = sim
    with _open(vb) as ser:
        _login(ser, vb)
    with _open(vb) as ser:
        ser.write(b"\r")
        read_until(ser, f"root@{vb.hostname}:~# ".encode())


def test_cdsp_fault_reboots_with_download_mode_0_and_parks_in_ramdump_with_1(sim):
    root, vb = sim
    with _open(vb) as ser:
        _login(ser, vb)
        assert _cmd(ser, vb, "cat /sys/module/qcom_scm/parameters/download_mode").strip() == b"0"
        seq = vb.reload().data["power_seq"]
        ser.write(b"echo 1 > /sys/kernel/debug/remoteproc/remoteproc1/crash\r")
        read_until(ser, b"crash detected in cdsp")
    _reboot_and_wait(vb, seq)
    assert scan_edl(root / "sysfs") == []
    with _open(vb) as ser:
        _login(ser, vb)
        _cmd(ser, vb, "echo 1 > /sys/module/qcom_scm/parameters/download_mode")
        assert vb.reload().download_mode == 1
        ser.write(b"echo 1 > /sys/kernel/debug/remoteproc/remoteproc1/crash\r")
        read_until(ser, b"entering crash dump mode")
    supervisor.wait_for_state(vb, "ramdump", 10)
    (dev,) = scan_edl(root / "sysfs")
    assert dev.mode == "ramdump" and dev.serial == vb.serial
    control.power_cycle(vb)                                 # only a power cycle leaves ramdump
    _reboot_and_wait(vb)
    assert vb.download_mode == 0                            # back to the image's cmdline setting
    assert scan_edl(root / "sysfs") == []


def test_reboot_edl_makes_the_board_appear_in_sysfs(sim):
    root, vb = sim
    with _open(vb) as ser:
        _login(ser, vb)
        ser.write(b"reboot edl\r")
        read_until(ser, b"Restarting system with command 'edl'")
    supervisor.wait_for_state(vb, "edl", 10)
    (dev,) = scan_edl(root / "sysfs")
    assert (dev.serial, dev.port, dev.mode) == (vb.serial, vb.slot, "edl")
    control.power_cycle(vb)
    _reboot_and_wait(vb)


def test_no_prompt_fault_never_offers_a_login(sim):
    root, vb = sim
    vb.add_fault("no-prompt")
    try:
        control.power_cycle(vb)
        with _open(vb) as ser:
            _reboot_and_wait(vb)
            ser.write(b"\r")
            time.sleep(1.0)
            seen = ser.read(ser.in_waiting or 1)
            assert b"login:" not in seen
        assert b"\x00\xff" in vb.log_path.read_bytes()       # line noise at power-on, like a real UART
    finally:
        vb.clear_fault("no-prompt")
        control.power_cycle(vb)
        _reboot_and_wait(vb)
