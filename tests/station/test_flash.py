"""Flashing virtual EVKs in parallel with the qdl stand-in: bytes on the LUNs, faults, old qdl,
records, history and inventory."""

from __future__ import annotations

import json
import os

import pytest
import yaml

from provisioner import context
from provisioner.cli import main
from provisioner.errors import StationError
from provisioner.station import edl
from provisioner.station.flash import FlashOptions, flash_release
from provisioner.station.flashxml import find_flash_xml, parse_rawprogram
from provisioner.station.qdl import detect_qdl
from provisioner.station.records import Records


def _assert_flashed(board, bundle):
    """Every non-GPT image of the bundle is at its start sector on the board's LUN images."""
    ss = board.sector_size
    checked = 0
    for xml in find_flash_xml(bundle)[0]:
        for op in parse_rawprogram(xml):
            if op.skipped or op.erase or "GPT" in op.label:
                continue
            want = (bundle / op.filename).read_bytes()
            with open(board.lun_path(op.lun), "rb") as f:
                f.seek(op.start(board.lun_size(op.lun) // ss) * ss)
                assert f.read(len(want)) == want, f"{board.serial}: {op.label} not written"
            checked += 1
    assert checked >= 10


def test_parallel_flash_writes_every_board(station, release_8275):
    boards = station.add(3)
    events = []
    with Records(station.config.database) as rec:
        run = flash_release(release_8275, station.config, context.current(),
                            FlashOptions(all_boards=True), records=rec, listener=events.append)
        hist = rec.history()
    assert run.ok and [r.serial for r in run.results] == [b.serial for b in boards]
    bundle = next((release_8275 / "flash").iterdir())
    for b in boards:
        _assert_flashed(b.reload(), bundle)
    assert {h["result"] for h in hist} == {"passed"} and len(hist) == 3
    assert hist[0]["qdl_version"] == "qdl 2.5" and hist[0]["release_id"] == "gemma4-e2b-iq8275-2026.11"
    assert hist[0]["artifacts"]["rootfs.img"] == json.loads((release_8275 / "release.json").read_text())[
        "artifacts"][[a["path"] for a in json.loads((release_8275 / "release.json").read_text())["artifacts"]]
                     .index("rootfs.img")]["sha256"]
    progress = [e for e in events if e.kind == "progress" and e.detail.get("partition")]
    assert {e.detail["partition"] for e in progress} >= {"efi", "rootfs"}
    assert all((station.config.log_dir).rglob(f"{b.serial}-qdl.log") for b in boards)


def test_edl_drop_fails_alone(station, release_8275):
    good = station.add(2)
    bad = station.add(1, faults=("edl-drop",), start=2)[0]
    with Records(station.config.database) as rec:
        run = flash_release(release_8275, station.config, context.current(),
                            FlashOptions(all_boards=True, retries=1, reappear_timeout_s=1.0), records=rec)
        hist = {h["serial"]: h for h in rec.history()}
    res = {r.serial: r for r in run.results}
    assert not run.ok and [r.serial for r in run.failed] == [bad.serial]
    assert "dropped out of EDL" in res[bad.serial].error and "LIBUSB_ERROR_NO_DEVICE" in res[bad.serial].error
    assert all(res[g.serial].ok for g in good)
    assert hist[bad.serial]["result"] == "failed" and hist[bad.serial]["state"] == "failed"
    with Records(station.config.database, writer=False) as rec:
        rec_events = rec.events(hist[bad.serial]["id"])
    assert [e["kind"] for e in rec_events if e["step"] == "flash"] == ["start", "retry", "error"]


def test_transient_drop_is_retried_when_the_board_comes_back(station, release_8275, monkeypatch):
    """The device falls off once; it re-enumerates in EDL; the second qdl run succeeds."""
    board = station.add(1)[0]
    bundle = next((release_8275 / "flash").iterdir())
    # first run drops at rootfs; a watcher puts the board back into EDL like a replug would
    import threading
    import time

    monkeypatch.setenv("PROVISIONER_SIM_QDL_DROP_AT", "rootfs")

    def replug():
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if board.reload().state == "off":
                monkeypatch.delenv("PROVISIONER_SIM_QDL_DROP_AT")
                board.set_state("edl")
                return
            time.sleep(0.05)

    t = threading.Thread(target=replug)
    t.start()
    # the run's environment is this process's, live (not the copy context.current() takes): the replug
    # above takes the simulator's drop knob away between the two qdl runs
    run = flash_release(release_8275, station.config, context.RunContext(os.environ),
                        FlashOptions(serials=(board.serial,), retries=2, reappear_timeout_s=10))
    t.join()
    assert run.ok and run.results[0].tries == 2
    _assert_flashed(board.reload(), bundle)


def test_old_qdl_is_detected_and_refused_for_parallel(station, release_8275):
    station.add(2)
    old = str(station.wrappers["qdl-2022"])
    info = detect_qdl(old, context.current().env)
    assert not info.has_serial and info.version is None
    station.config.qdl = old
    with pytest.raises(StationError, match=r"no --serial.*2 boards.*qdl-native"):
        flash_release(release_8275, station.config, context.current(), FlashOptions(all_boards=True))
    with pytest.raises(StationError, match="--allow-old-qdl"):
        flash_release(release_8275, station.config, context.current(), FlashOptions(serials=("0AA94E00",)))
    # with the flag, still refused while two boards are in EDL (old qdl picks whichever it finds)
    with pytest.raises(StationError, match="cannot choose"):
        flash_release(release_8275, station.config, context.current(), FlashOptions(serials=("0AA94E00",),
                                                                                    allow_old_qdl=True))


def test_old_qdl_one_board_alone_with_flag(station, release_8275):
    board = station.add(1)[0]
    station.config.qdl = str(station.wrappers["qdl-2022"])
    run = flash_release(release_8275, station.config, context.current(), FlashOptions(serials=(board.serial,),
                                                                                      allow_old_qdl=True))
    assert run.ok and "no --serial" in run.qdl.describe()
    _assert_flashed(board.reload(), next((release_8275 / "flash").iterdir()))


def test_qdl_missing(station, release_8275):
    station.add(1)
    station.config.qdl = str(station.root / "bin" / "no-such-qdl")
    with pytest.raises(StationError, match=r"qdl not found at .*bitbake qdl-native"):
        flash_release(release_8275, station.config, context.current(), FlashOptions(all_boards=True))


def test_unknown_serial_and_no_devices(station, release_8275):
    with pytest.raises(StationError, match=f"no boards in EDL on this station \\(sysfs root {station.root}"):
        flash_release(release_8275, station.config, context.current(), FlashOptions(all_boards=True))
    station.add(1)
    with pytest.raises(StationError, match=r"board DEADBEEF is not connected.*0AA94E00"):
        flash_release(release_8275, station.config, context.current(), FlashOptions(serials=("deadbeef",)))
    assert station.add(1, start=1)[0].reload().state == "edl"  # nothing was touched


def test_scan_reads_serial_port_and_mode(station):
    station.add(2)
    vb = station.add(1, state="ramdump", start=2)[0]
    devs = edl.scan_edl(station.config.sysfs_root, {"1-4.1": "slot 1"})
    assert [(d.serial, d.port, d.mode, d.slot) for d in devs] == [
        ("0AA94E00", "1-4.1", "edl", "slot 1"), ("0AA94E01", "1-4.2", "edl", None), (vb.serial, "1-4.3", "ramdump",
                                                                                      None)]


def test_cli_flash_history_inventory(station, release_8275, tmp_path, capsys):
    station.add(2)
    cfg = tmp_path / "station.yaml"
    cfg.write_text(yaml.safe_dump({"sysfs_root": str(station.config.sysfs_root), "qdl": station.config.qdl,
                                   "database": "station.db", "slots": {"1-4.1": "slot 1", "1-4.2": "slot 2"}}))
    assert main(["station", "flash", str(release_8275), "--all", "--config", str(cfg), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["ok"] and [b["slot"] for b in out["boards"]] == ["slot 1", "slot 2"]
    assert main(["station", "history", "--config", str(cfg), "--serial", "0AA94E01", "--json"]) == 0
    hist = json.loads(capsys.readouterr().out)
    assert [h["result"] for h in hist] == ["passed"]
    inv_path = tmp_path / "inv.yml"
    assert main(["station", "export-inventory", "--config", str(cfg), "--out", str(inv_path),
                 "--address", "0AA94E00=10.1.2.3:2222"]) == 0
    inv = yaml.safe_load(inv_path.read_text())
    hosts = inv["all"]["children"]["iq_8275_evk"]["hosts"]
    assert len(hosts) == 2
    h0 = next(v for v in hosts.values() if v["edge_llm_serial"] == "0AA94E00")
    assert (h0["ansible_host"], h0["ansible_port"], h0["edge_llm_slot"]) == ("10.1.2.3", 2222, "slot 1")


def test_cli_exit_status_when_a_board_fails(station, release_8275, tmp_path, capsys):
    station.add(1)
    station.add(1, faults=("edl-drop",), start=1)
    rc = main(["station", "flash", str(release_8275), "--all", "--qdl", station.config.qdl, "--sysfs-root",
               str(station.config.sysfs_root), "--db", str(tmp_path / "db.sqlite"), "--retries", "0"])
    err = capsys.readouterr().err
    assert rc == 1 and "1 of 2 board(s) failed: 0AA94E01" in err


def test_slot_wired_to_another_board_type_is_refused(station, release_8275):
    station.add(1)
    station.config.boards = {"1-4.1": "iq-9075-evk"}
    station.config.slots = {"1-4.1": "slot 1"}
    with pytest.raises(StationError, match="slot slot 1 holds a iq-9075-evk, the release is for iq-8275-evk"):
        flash_release(release_8275, station.config, context.current(), FlashOptions(all_boards=True))


def test_jobs_limits_parallelism(station, release_8275):
    station.add(3)
    running, peak = set(), []

    def listener(ev):
        if ev.kind == "state" and ev.detail["state"] == "flashing":
            running.add(ev.serial)
            peak.append(len(running))
        if ev.kind == "state" and ev.detail["state"] in ("flashed", "failed"):
            running.discard(ev.serial)

    run = flash_release(release_8275, station.config, context.current(), FlashOptions(all_boards=True, jobs=1),
                        listener=listener)
    assert run.ok and max(peak) == 1


def test_qdl_timeout_when_the_board_never_shows_up(station, release_8275, tmp_path):
    """qdl waits forever for a missing device; the driver's own timeout ends it with a clear error."""
    from provisioner.station.bundle import preflight
    from provisioner.station.qdl import QdlDriver

    station.add(1)
    pf = preflight(release_8275)
    drv = QdlDriver(detect_qdl(station.config.qdl, context.current().env), env=context.current().env)
    out = drv.flash(pf.qdl_args(), serial="0FFFFFFF", planned=[], log_path=tmp_path / "q.log", timeout_s=1.5)
    assert not out.ok and out.timed_out
    assert out.error == "qdl did not see board 0FFFFFFF in EDL within 1.5 s"
    assert "none match serial" in (tmp_path / "q.log").read_text()


@pytest.mark.parametrize("usage,has_serial", [
    ("Usage: qdl [--debug] [--serial <NUM>] [--storage <emmc|nand|ufs>] <prog.mbn> [<program> <patch> ...]", True),
    ("Usage: qdl [--debug] [--storage <emmc|nand|ufs>] [--finalize-provisioning] [--include <PATH>] <prog.mbn>",
     False),
])
def test_qdl_without_version_option(tmp_path, usage, has_serial):
    """qdl 2.0/2.1 have --serial but no --version; Debian's 2022 qdl has neither."""
    fake = tmp_path / "qdl"
    fake.write_text(f"#!/bin/sh\necho \"qdl: unrecognized option '$1'\" >&2\necho '{usage}' >&2\nexit 1\n")
    fake.chmod(0o755)
    info = detect_qdl(str(fake), context.current().env)
    assert info.version is None and info.has_serial is has_serial and not info.has_version_option


@pytest.mark.parametrize("line", ["zeros_33sectors.bin to big for apdp_a truncated to 65536",    # qdl <= 2.7
                                  "zeros_33sectors.bin too big for apdp_a truncated to 65536"])  # qdl 2.8
def test_qdl_truncation_line_is_a_warning_in_either_spelling(line):
    from provisioner.station.qdl import QdlProgress

    prog = QdlProgress()
    assert prog.feed(line) and prog.warnings == [line] and prog.errors == []


def test_a_slow_records_database_does_not_hold_back_a_boards_qdl(station, release_8275, monkeypatch):
    """Each records write is an fsync'ed transaction; a board queues its events and starts qdl
    without waiting for them (eight boards used to start one after another behind forty
    commits). Every event is still in the database before the attempt's outcome."""
    import threading

    board = station.add(1)[0]
    gate, armed, stalled = threading.Event(), [], []
    orig_write, orig_start = Records._write, Records.start_attempt

    def slow_write(self, body):
        if armed and not gate.wait(timeout=10):      # the database is stuck until qdl runs
            stalled.append(True)
        return orig_write(self, body)

    def start_attempt(self, *a, **kw):
        aid = orig_start(self, *a, **kw)
        armed.append(aid)
        return aid

    def listener(ev):
        if ev.kind == "process":
            gate.set()

    monkeypatch.setattr(Records, "_write", slow_write)
    monkeypatch.setattr(Records, "start_attempt", start_attempt)
    with Records(station.config.database) as rec:
        run = flash_release(release_8275, station.config, context.current(), FlashOptions(all_boards=True), records=rec,
                            listener=listener)
        steps = [(e["step"], e["kind"]) for e in rec.events(armed[0])]
        hist = rec.history(board.serial)
    assert run.ok and not stalled
    assert ("flash", "start") in steps and ("flash", "stop") in steps
    assert hist[0]["result"] == "passed" and hist[0]["state"] == "flashed" and hist[0]["qdl_pid"]
