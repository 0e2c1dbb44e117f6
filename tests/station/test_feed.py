"""The live feed: a flashing station sends its board events to whoever listens on ``<db>.feed/``."""

from __future__ import annotations

import os
import select
import threading

from provisioner import context
from provisioner.station import feed
from provisioner.station.feed import FeedReceiver, FeedSender, feed_dir
from provisioner.station.flash import FlashOptions, flash_release
from provisioner.station.records import Records
from provisioner.steps import StepEvent


def test_a_listening_dashboard_gets_every_boards_states_progress_and_outcome(station, release_8275, monkeypatch):
    monkeypatch.setenv("PROVISIONER_SIM_QDL_RATE_KBPS", "8192")    # about a second of flashing: progress to see
    ok, bad = station.add(2)
    bad.add_fault("edl-drop")
    rx = FeedReceiver(station.config.database)
    got: list[dict] = []
    done = threading.Event()

    def listen() -> None:     # a dashboard reads as events come (the kernel queues only a few datagrams)
        while not done.is_set():
            select.select([rx], [], [], 0.05)
            got.extend(rx.read())

    th = threading.Thread(target=listen)
    th.start()
    try:
        with Records(station.config.database) as rec:
            flash_release(release_8275, station.config, context.current(), FlashOptions(all_boards=True, retries=0),
                          records=rec)
            attempts = {h["serial"]: h["id"] for h in rec.history()}
    finally:
        done.set()
        th.join()
        got.extend(rx.read())
        rx.close()
    assert not rx.path.exists()
    by = {s: [m for m in got if m["serial"] == s] for s in (ok.serial, bad.serial)}
    for serial, msgs in by.items():
        assert {m["attempt"] for m in msgs} == {attempts[serial]}
        assert msgs[0]["step"] == "attempt" and msgs[0]["kind"] == "start"
        assert msgs[0]["detail"]["release"] == "gemma4-e2b-iq8275-2026.11"
        assert msgs[-1]["step"] == "attempt" and msgs[-1]["kind"] == "stop"
        assert [m["detail"]["state"] for m in msgs if m["kind"] == "state"][:2] == ["edl", "flashing"]
    progress = [m for m in by[ok.serial] if m["kind"] == "progress" and m["detail"].get("partition")]
    assert progress and len(progress) < 29       # partitions are sent a few a second, not each qdl line
    assert not [m for m in got if m["kind"] in ("stop", "process") and m["step"] != "attempt"]
    assert by[ok.serial][-1]["detail"] == {"result": "passed", "error": None}
    assert by[bad.serial][-1]["detail"]["result"] == "failed" and by[bad.serial][-1]["detail"]["error"]


def test_nothing_is_sent_into_a_feed_folder_others_may_write(tmp_path, monkeypatch):
    """A folder another user could write into (or own) is not the station's: a sender stays silent."""
    monkeypatch.setattr(feed, "LOOK_EVERY_S", 0.0)     # look at the folder on every event
    db = tmp_path / "station.db"
    rx = FeedReceiver(db)
    try:
        tx = FeedSender(db, {"S1": 1})
        tx(StepEvent("state", "state", detail={"state": "edl"}, serial="S1", slot="slot 1"))
        tx.flush()
        assert [m["detail"] for m in rx.read()] == [{"state": "edl"}]
        os.chmod(feed_dir(db), 0o777)
        tx(StepEvent("state", "state", detail={"state": "flashing"}, serial="S1", slot="slot 1"))
        tx.flush()
        assert rx.read() == []
        tx.close()
    finally:
        rx.close()


def test_a_sender_without_listeners_and_a_gone_listener_never_fail(tmp_path):
    db = tmp_path / "station.db"
    tx = FeedSender(db)
    tx(StepEvent("state", "state", detail={"state": "edl"}, serial="S1"))   # no folder at all
    rx = FeedReceiver(db)
    rx.sock.close()                                                          # bound path, nobody reading
    tx(StepEvent("state", "state", detail={"state": "edl"}, serial="S1"))
    rx.close()
    tx(StepEvent("state", "state", detail={"state": "edl"}, serial="S1"))
    tx.close()
