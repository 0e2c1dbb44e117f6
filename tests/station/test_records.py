"""Station records: survive kill -9 mid-flash, one writer at a time, history and inventory."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from provisioner.cli import main
from provisioner.contracts.inventory import group_name
from provisioner.errors import StationError
from provisioner.station.inventory_export import build_inventory
from provisioner.station.records import INTERRUPTED, PASSED, Records
from tests.station.conftest import qdl_pids

ROOT = Path(__file__).resolve().parents[2]




def test_kill_9_mid_flash_leaves_a_consistent_database(station, release_8275, tmp_path):
    station.add(2)
    db = tmp_path / "station.db"
    env = dict(os.environ, PROVISIONER_SIM_QDL_RATE_KBPS="400", PYTHONPATH=str(ROOT))
    proc = subprocess.Popen([sys.executable, "-m", "provisioner", "station", "flash", str(release_8275), "--all",
                             "--qdl", station.config.qdl, "--sysfs-root", str(station.config.sysfs_root),
                             "--db", str(db), "--json"], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        rows: list = []
        while time.monotonic() < deadline:
            if db.exists():
                with Records(db, writer=False) as rec:
                    rows = rec.history()
                if len(rows) == 2 and all(r["state"] == "flashing" for r in rows):
                    break
            time.sleep(0.1)
        assert len(rows) == 2 and {r["result"] for r in rows} == {"running"}
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
        for pid in qdl_pids(station.root):
            os.kill(pid, signal.SIGKILL)
    # the next station start marks both attempts interrupted, nothing else changes
    with Records(db) as rec:
        assert sorted(rec.recovered) == sorted(r["id"] for r in rows)
        hist = rec.history()
    assert {h["result"] for h in hist} == {INTERRUPTED}
    assert all(h["ended"] and h["state"] == "flashing" and "died" in h["error"] for h in hist)
    with Records(db) as rec:
        assert rec.recovered == []  # idempotent


def test_database_locked_by_another_station_process(tmp_path, capsys, release_8275, station):
    db = tmp_path / "station.db"
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys,time; from provisioner.station.records import Records; "
         f"r = Records({str(db)!r}); print('ready', flush=True); time.sleep(30)"],
        stdout=subprocess.PIPE, text=True, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    try:
        assert holder.stdout.readline().strip() == "ready"
        with pytest.raises(StationError, match=rf"station database {db} is in use by another station process "
                                               rf"\(pid {holder.pid} on"):
            Records(db)
        station.add(1)
        rc = main(["station", "flash", str(release_8275), "--all", "--qdl", station.config.qdl,
                   "--sysfs-root", str(station.config.sysfs_root), "--db", str(db)])
        err = capsys.readouterr().err
        assert rc == 2 and err.count("\n") == 1 and "in use by another station process" in err
        # readers still work while a station holds the lock
        with Records(db, writer=False) as rec:
            assert rec.history() == []
    finally:
        holder.kill()
        holder.wait()
    with Records(db):
        pass  # lock released when the holder died


def test_sqlite_write_lock_is_a_one_line_error(tmp_path):
    db = tmp_path / "station.db"
    with Records(db) as rec:
        rec.board_seen("0AA94EFD", slot="slot 1")
    other = __import__("sqlite3").connect(db, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    try:
        with Records(db, writer=False, busy_timeout_s=0.2) as rec, \
                pytest.raises(StationError, match="locked by another station process"):
            rec.board_seen("0AA94EFD", slot="slot 2")
    finally:
        other.execute("ROLLBACK")
        other.close()


def test_inventory_groups_passed_boards_per_board_type(tmp_path):
    with Records(tmp_path / "db") as rec:
        for serial, board, result in (("0AA94E00", "iq-8275-evk", PASSED), ("0AA94E01", "iq-9075-evk", PASSED),
                                      ("0AA94E02", "iq-8275-evk", "failed")):
            rec.board_seen(serial, slot=f"slot {serial[-1]}", board=board)
            aid = rec.start_attempt(serial, slot=f"slot {serial[-1]}", board=board, release_id="r1",
                                    artifacts={"rootfs.img": "ab" * 32}, qdl_version="qdl 2.5", log_path=None)
            ident = {"hostname": f"h{serial[-1]}", "ip": "10.0.0.5"} if serial.endswith("0") else None
            rec.finish_attempt(aid, result, identity=ident)
            if ident:
                rec.set_identity(serial, ident, "10.0.0.5")
        # a later failed attempt un-passes a board; a later pass re-passes it
        aid = rec.start_attempt("0AA94E01", slot="slot 1", board="iq-9075-evk", release_id="r2", artifacts={},
                                qdl_version="qdl 2.5", log_path=None)
        rec.finish_attempt(aid, "failed", error="boom")
        inv = build_inventory(rec, {"0AA94E02": "10.9.9.9:22"})
    groups = inv["all"]["children"]
    assert list(groups) == [group_name("iq-8275-evk")] == ["iq_8275_evk"]
    # named by the release's host name rule (the default here: no rule was recorded), not by what the board says
    assert groups["iq_8275_evk"]["hosts"] == {"iq-8275-0aa94e00": {
        "ansible_host": "10.0.0.5", "ansible_user": "root", "edge_llm_board": "iq-8275-evk",
        "edge_llm_expected_build_id": "r1", "edge_llm_serial": "0AA94E00", "edge_llm_slot": "slot 0"}}


def test_history_without_database_is_a_clear_error(tmp_path, capsys):
    assert main(["station", "history", "--db", str(tmp_path / "none.db")]) == 2
    assert "no station database" in capsys.readouterr().err


def test_config_never_holds_the_password(tmp_path):
    from provisioner.station.config import load_config

    cfg = tmp_path / "station.yaml"
    cfg.write_text(yaml.safe_dump({"credential": {"password": "x", "env": "A"}}))
    with pytest.raises(StationError, match="credential.password is not allowed"):
        load_config(cfg)
    cfg.write_text(yaml.safe_dump({"credential": {"file": "pw"}, "slots": {"1-4.2": {"name": "slot 3",
                                                                                       "board": "iq-9075-evk"}},
                                   "consoles": {"slot 3": "/dev/ttyUSB3"}}))
    c = load_config(cfg)
    assert c.credential.file == tmp_path / "pw" and c.slot_name("1-4.2") == "slot 3"
    assert c.console_for("0AA94EFD", "1-4.2") == "/dev/ttyUSB3" and c.boards["1-4.2"] == "iq-9075-evk"


def test_ctrl_c_stops_qdl_and_records_interrupted(station, release_8275, tmp_path):
    station.add(2)
    db = tmp_path / "station.db"
    env = dict(os.environ, PROVISIONER_SIM_QDL_RATE_KBPS="400", PYTHONPATH=str(ROOT))
    proc = subprocess.Popen([sys.executable, "-m", "provisioner", "station", "flash", str(release_8275), "--all",
                             "--qdl", station.config.qdl, "--sysfs-root", str(station.config.sysfs_root),
                             "--db", str(db), "--json"], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if db.exists():
                with Records(db, writer=False) as rec:
                    rows = rec.history()
                if len(rows) == 2 and all(r["state"] == "flashing" for r in rows):
                    break
            time.sleep(0.1)
        assert qdl_pids(station.root)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130 and "interrupted" in err
    deadline = time.monotonic() + 5
    while qdl_pids(station.root) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert qdl_pids(station.root) == []
    with Records(db) as rec:
        hist = rec.history()
        assert rec.recovered == []
    assert {h["result"] for h in hist} == {INTERRUPTED}
    assert all(h["error"] == "interrupted by the operator" for h in hist)


def test_a_corrupt_database_met_while_writing_is_one_station_error(tmp_path, monkeypatch):
    """SQLite reports corruption (SQLITE_CORRUPT) as DatabaseError, not OperationalError: the station
    must still say which database is unusable in one line, not crash with a traceback."""
    import sqlite3

    rec = Records(tmp_path / "station.db")
    try:
        def corrupt(body):
            raise sqlite3.DatabaseError("database disk image is malformed")

        monkeypatch.setattr(rec, "_transaction", corrupt)
        with pytest.raises(StationError, match="station.db is unusable"):
            rec.board_seen("0AA94EFD")
    finally:
        rec.close()


def test_a_corrupt_database_met_while_reading_is_one_line(tmp_path, monkeypatch):
    """Corruption SQLite finds only when a query reaches a damaged page (DatabaseError on read): every
    reader (history, events, boards, passed boards) says which database is unusable in one line."""
    import sqlite3

    class Damaged:
        def execute(self, *_a):
            raise sqlite3.DatabaseError("database disk image is malformed")

    rec = Records(tmp_path / "station.db")
    try:
        real = rec.db
        monkeypatch.setattr(rec, "db", Damaged())
        for read in (rec.history, rec.boards, rec.passed_boards, lambda: rec.events(1)):
            with pytest.raises(StationError, match="station.db is unusable"):
                read()
    finally:
        rec.db = real
        rec.close()


def test_export_inventory_mistakes_are_one_line_and_inventories_keep_their_own_keys(tmp_path, capsys):
    db = tmp_path / "station.db"
    with Records(db) as rec:
        rec.board_seen("0AA94E00", slot="slot 0", board="iq-8275-evk")
        aid = rec.start_attempt("0AA94E00", slot="slot 0", board="iq-8275-evk", release_id="r1", artifacts={},
                                qdl_version="qdl 2.5", log_path=None)
        rec.finish_attempt(aid, PASSED)
    folder = tmp_path / "inv"
    folder.mkdir()
    for args, why in ((["--address", "0AA94E00=10.0.0.7:ssh"], "is not host[:port]"),
                      (["--address", "0AA94E00=10.0.0.7:99999"], "is not host[:port]"),
                      (["--address", "0AA94EFF=[fe80::1"], "is not host[:port]"),
                      (["--out", str(folder)], "is a folder"),
                      (["--out", "/proc/edge-llm-inv.yml"], "cannot write")):
        assert main(["station", "export-inventory", "--db", str(db), *args]) == 2, args
        err = capsys.readouterr().err
        assert why in err and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "known_hosts").exists() and list(folder.iterdir()) == []
    # two inventories in one folder: each its own pinned keys, named after it
    for name, addr in (("line1", "0AA94E00=[fe80::1]:2222"), ("line2", "0AA94E00=fe80::2")):
        assert main(["station", "export-inventory", "--db", str(db), "--out", str(folder / f"{name}.yml"),
                     "--address", addr]) == 0
    for name, host, port in (("line1", "fe80::1", 2222), ("line2", "fe80::2", None)):
        (hv,) = yaml.safe_load((folder / f"{name}.yml").read_text())["all"]["children"]["iq_8275_evk"][
            "hosts"].values()
        assert f"UserKnownHostsFile={folder / name}.known_hosts" in hv["ansible_ssh_common_args"]
        assert hv["ansible_host"] == host and hv.get("ansible_port") == port
        assert (folder / f"{name}.known_hosts").is_file()
