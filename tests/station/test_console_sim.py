"""The console path against booted virtual EVKs (supervisor-driven ptys): identity, download_mode,
reboot edl, and flash + boot check that reads the new BUILD_ID back."""

from __future__ import annotations

import json

import pytest

from provisioner import context
from provisioner.cli import main
from provisioner.sim import control
from provisioner.station.config import Credential
from provisioner.station.console import ConsoleDriver
from provisioner.station.flash import FlashOptions, flash_release, scan
from provisioner.station.inventory_export import build_inventory
from provisioner.station.records import Records

from .test_flash import _assert_flashed


@pytest.fixture
def booted(station, monkeypatch):
    """Booted boards (no network: the console is all we use here) with the QLI root password."""
    monkeypatch.setenv("PROVISIONER_SIM_BOOT_SCALE", "0")
    monkeypatch.setenv("PROVISIONER_CONSOLE_PASSWORD", "oelinux123")

    def up(n=1, faults=("unreachable",)):
        return control.up(n, "iq-8275-evk", root=station.root, faults=faults).boards

    yield up
    control.down(station.root)


def test_identity_and_download_mode_via_cli(booted, capsys):
    vb = booted()[0]
    port = str(vb.console_link)
    assert main(["console", port, "--identity", "--download-mode", "1", "--run", "uname -m", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    ident = out["identity"]
    assert (ident["machine"], ident["soc_id"], ident["serial"]) == ("QCS8275", 675, vb.serial)
    assert ident["compatible"] == ["qcom,monaco-evk", "qcom,qcs8300"]
    assert ident["build_id"] == vb.reload().data["build_id"]
    assert out["download_mode"] == 1 and vb.reload().data["download_mode"] == 1
    assert out["commands"][0]["output"].strip() == "aarch64"
    assert "oelinux123" not in json.dumps(out)


def test_slow_login_is_waited_for_and_never_leaks_the_password(booted, monkeypatch, tmp_path):
    """``login`` takes 2.5 s to print ``Password:`` (loaded board): the driver must wait for it
    instead of nudging the line, or its Enter is read as an empty password, the real password
    lands at the next login prompt, is echoed onto the console and the login is refused."""
    monkeypatch.setenv("PROVISIONER_SIM_LOGIN_DELAY_S", "2.5")
    vb = booted()[0]
    log = tmp_path / "console.log"
    with ConsoleDriver(str(vb.console_link), env=context.current().env, credential=Credential(), prompt_timeout_s=30,
                       log_path=log) as con:
        con.ensure_shell()
        assert con.run("uname -m").output.strip() == "aarch64"
    assert "oelinux123" not in log.read_text()
    assert b"oelinux123" not in vb.log_path.read_bytes()


def test_stalled_board_late_prompts_are_not_answered_twice(booted, monkeypatch, tmp_path):
    """Every typed line takes 5 s to reach the board (stalled board or starved host): login
    prompts asked for by earlier nudges arrive seconds after the user name was typed. Answering
    one would type the user name as the password and the password at a login prompt (echoed)."""
    monkeypatch.setenv("PROVISIONER_SIM_CONSOLE_LAG_S", "5")
    vb = booted()[0]
    log = tmp_path / "console.log"
    with ConsoleDriver(str(vb.console_link), env=context.current().env, credential=Credential(), prompt_timeout_s=60,
                       log_path=log) as con:
        con.ensure_shell()
    assert "Login incorrect" not in log.read_text()
    assert b"oelinux123" not in vb.log_path.read_bytes()


def test_console_edl_then_scan_sees_it(booted, station, capsys, tmp_path):
    vb = booted()[0]
    slots = tmp_path / "slots.yaml"
    slots.write_text(f'"{vb.slot}": "slot 7"\n')
    db = tmp_path / "scan.db"
    assert main(["station", "scan", "--sysfs-root", str(station.config.sysfs_root), "--console",
                 str(vb.console_link), "--slots", str(slots), "--db", str(db), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["edl"] == [] and out["consoles"][0]["board"] == "iq-8275-evk"
    assert out["consoles"][0]["identity"]["serial"] == vb.serial
    assert main(["console", str(vb.console_link), "--edl"]) == 0
    capsys.readouterr()
    from provisioner.station import edl

    dev = edl.wait_for_device(station.config.sysfs_root, vb.serial, timeout_s=10)
    assert dev is not None and dev.port == vb.slot
    assert main(["station", "scan", "--sysfs-root", str(station.config.sysfs_root), "--slots", str(slots),
                 "--db", str(db), "--json"]) == 0
    assert [(d["serial"], d["mode"], d["slot"]) for d in json.loads(capsys.readouterr().out)["edl"]] == [
        (vb.serial, "edl", "slot 7")]
    with Records(db, writer=False) as rec:
        seen = rec.boards()
    assert [(b["serial"], b["mode"], b["slot"], b["board"]) for b in seen] == [
        (vb.serial, "edl", "slot 7", "iq-8275-evk")]
    assert seen[0]["identity"]["machine"] == "QCS8275"


def test_flash_with_boot_check_reads_new_release_back(booted, station, release_8275, tmp_path, capsys):
    """Booted boards, consoles given on the command line: the station sends each to EDL over its
    console, flashes it, watches it boot and reads the new BUILD_ID back."""
    boards = booted(2)
    old = boards[0].reload().data["build_id"]
    db = tmp_path / "station.db"
    argv = ["station", "flash", str(release_8275), "--qdl", station.config.qdl, "--sysfs-root",
            str(station.config.sysfs_root), "--db", str(db), "--boot-check", "--boot-timeout", "30", "--json"]
    for b in boards:
        argv += ["--serial", b.serial, "--console", f"{b.serial}={b.console_link}"]
    assert main(argv) == 0, capsys.readouterr().err
    run = json.loads(capsys.readouterr().out)
    with Records(db, writer=False) as rec:
        inv = build_inventory(rec)
        hist = rec.history()
    for r, b in zip(run["boards"], boards, strict=True):
        assert r["state"] == "verified" and r["identity"]["build_id"] == "gemma4-e2b-iq8275-2026.11" != old
        # the example is a production image: root cannot log in on the console, the banner tells
        assert r["identity"]["source"] == "console banner"
        assert "edge-llm release gemma4-e2b-iq8275-2026.11" in b.log_path.read_text(errors="replace")
        _assert_flashed(b.reload(), next((release_8275 / "flash").iterdir()))
    assert {h["identity"]["build_id"] for h in hist} == {"gemma4-e2b-iq8275-2026.11"}
    hosts = inv["all"]["children"]["iq_8275_evk"]["hosts"]
    assert sorted(hosts) == sorted(r["identity"]["hostname"] for r in run["boards"])


def test_debug_image_boot_check_logs_in_and_a_production_board_cannot_be_sent_to_edl(booted, station,
                                                                                      release_8275,
                                                                                      release_8275_debug, capsys):
    """Debug image: the station logs in after the reboot and checks soc0 machine and serial too.
    Production image on the board: the next flash cannot send it to EDL over the console, and
    says what to do instead."""
    vb = booted(1)[0]
    station.config.consoles = {vb.serial: str(vb.console_link)}
    with Records(station.config.database) as rec:
        run = flash_release(release_8275_debug, station.config, context.current(),
                            FlashOptions(serials=(vb.serial,), boot_check=True, boot_timeout_s=30, edl_timeout_s=15),
                            records=rec)
        assert run.ok, [r.error for r in run.results]
        ident = run.results[0].identity
        assert "source" not in ident
        assert (ident["build_id"], ident["machine"], ident["serial"]) == (
            "gemma4-e2b-iq8275-2026.11-debug", "QCS8275", vb.serial)

        run = flash_release(release_8275, station.config, context.current(),
                            FlashOptions(serials=(vb.serial,), boot_check=True, boot_timeout_s=30, edl_timeout_s=15),
                            records=rec)
        assert run.ok and run.results[0].identity["source"] == "console banner"
        seen = scan(station.config, [str(vb.console_link)], env=context.current().env).consoles[0]
        assert seen.identity["build_id"] == "gemma4-e2b-iq8275-2026.11" and "refused" in seen.error
        assert main(["console", str(vb.console_link), "--identity"]) == 2
        err = capsys.readouterr().err
        assert "refused on a board running release gemma4-e2b-iq8275-2026.11" in err and "use SSH" in err
        run = flash_release(release_8275, station.config, context.current(),
                            FlashOptions(serials=(vb.serial,), edl_timeout_s=15), records=rec)
    assert not run.ok
    assert "root cannot log in on its console" in run.results[0].error
    assert "hold the EDL button" in run.results[0].error


def test_console_option_must_be_board_equals_tty(station, release_8275, capsys):
    assert main(["station", "flash", str(release_8275), "--all", "--console", "/dev/ttyUSB0"]) == 2
    assert "--console '/dev/ttyUSB0' is not BOARD=TTY" in capsys.readouterr().err


def test_board_without_prompt_fails_with_port_named(booted, capsys):
    vb = booted(faults=("unreachable", "no-prompt"))[0]
    port = str(vb.console_link)
    assert main(["console", port, "--identity", "--timeout", "1.5"]) == 2
    err = capsys.readouterr().err
    assert f"console {port}: no login or shell prompt within 1.5 s" in err


def test_already_logged_in_board_is_reused(booted):
    vb = booted()[0]
    with ConsoleDriver(str(vb.console_link), env=context.current().env, credential=Credential(),
                       prompt_timeout_s=5) as con:
        con.ensure_shell()
    # the shell stays logged in on the line (like a real UART); no password needed the second time
    with ConsoleDriver(str(vb.console_link), env=context.current().env, credential=Credential(env="NO_SUCH_VAR"),
                       prompt_timeout_s=5) as con:
        assert con.run("whoami").output.strip() == "root"


def test_download_mode_by_name_reads_back_as_the_same_mode_number(booted, capsys):
    """A newer qcom_scm prints ``off``/``full`` (Linux qcom_scm.c download_mode_name[]): the station
    still reports 0 before and 1 after setting it, as it does for a kernel printing 0/1."""
    vb = booted()[0]
    vb.update(qcom_scm_names=True, download_mode=0)
    port = str(vb.console_link)
    assert main(["console", port, "--identity", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["identity"]["download_mode"] == 0          # read "off"
    assert main(["console", port, "--identity", "--download-mode", "1", "--run",
                 "cat /sys/module/qcom_scm/parameters/download_mode", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["commands"][0]["output"].strip() == "full"
    assert out["download_mode"] == 1 and out["identity"]["download_mode"] == 1
    assert vb.reload().data["download_mode"] == 1
