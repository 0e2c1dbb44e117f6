"""`provisioner station dashboard` without a browser: the tile rules, the HTTP guard, the history
API and the qdl log links, on a real station database written by real flashes of virtual boards."""

from __future__ import annotations

import http.client
import json
import urllib.error
import urllib.parse
import urllib.request

import pytest

from provisioner import context
from provisioner.cli import main
from provisioner.station.dashboard import DashboardServer, DashboardSettings
from provisioner.station.flash import FlashOptions, flash_release
from provisioner.station.records import Records
from provisioner.station.tiles import SlotBoard

TOKEN = "0123456789abcdef-station-token"


def ev(serial, step, kind, attempt=1, slot="slot 1", **detail):
    return {"serial": serial, "slot": slot, "step": step, "kind": kind, "attempt": attempt, "detail": detail,
            "ts": 1000.0}


def test_a_tile_follows_a_board_from_edl_to_its_outcome_and_only_forward():
    b = SlotBoard(["slot 1", "slot 2"])
    assert [t["phase"] for t in b.snapshot()] == ["empty", "empty"]
    seen = []
    for msg in (ev("S1", "attempt", "start", release="r1"), ev("S1", "state", "state", state="edl"),
                ev("S1", "state", "state", state="flashing"),
                ev("S1", "flash", "progress", partition="rootfs", done=3, total=12, rate_kbs=4096.0),
                ev("S1", "state", "state", state="flashed"), ev("S1", "boot", "start"),
                ev("S1", "boot", "progress", check="identity"), ev("S1", "state", "state", state="booted"),
                ev("S1", "state", "state", state="flashing"),      # a late datagram never goes back
                ev("S1", "attempt", "stop", result="passed", error=None)):
        b.apply_event(msg)
        seen.append(b.tiles["slot 1"].phase)
    assert seen == ["edl", "edl", "flashing", "flashing", "flashed", "booting", "boot-check", "boot-check",
                    "boot-check", "passed"]
    t = b.tiles["slot 1"].as_dict()
    assert (t["serial"], t["release"], t["label"], t["done"], t["total"]) == ("S1", "r1", "passed", 3, 12)


def test_a_failed_tile_keeps_one_line_of_reason_until_another_board_is_plugged_in():
    b = SlotBoard(["slot 1"])
    b.apply_event(ev("S1", "attempt", "start", release="r1"))
    b.apply_event(ev("S1", "attempt", "stop", result="failed",
                     error="board S1: qdl: firehose NAK -> see the log\nline two" + "x" * 500))
    t = b.tiles["slot 1"]
    assert t.phase == "failed" and t.reason == "board S1: qdl: firehose NAK" and "\n" not in t.reason
    assert b.apply_scan({"slot 1": "S1"}) == ["slot 1"] and b.tiles["slot 1"].phase == "failed"  # same board, back
    b.apply_scan({"slot 1": "S2"})
    assert (b.tiles["slot 1"].phase, b.tiles["slot 1"].serial, b.tiles["slot 1"].reason) == ("edl", "S2", None)
    b.apply_scan({})
    assert b.tiles["slot 1"].phase == "empty"


def test_recorded_attempts_fill_tiles_a_dashboard_missed_and_a_dead_station_shows_interrupted():
    b = SlotBoard([])
    rows = [{"id": 4, "slot": "slot 1", "serial": "S1", "release_id": "r1", "board": "iq-8275-evk", "result": "running",
             "state": "flashed", "error": None, "last_step": ("boot", "start"), "tries": 1},
            {"id": 5, "slot": "slot 2", "serial": "S2", "release_id": "r1", "board": "iq-8275-evk", "result": "failed",
             "state": "failed", "error": "board S2 dropped out of EDL", "last_step": None, "tries": 3},
            {"id": 6, "slot": "slot 3", "serial": "S3", "release_id": "r1", "board": None, "result": "running",
             "state": "flashing", "error": None, "last_step": None, "tries": 1}]
    assert sorted(b.apply_attempts(rows, dead={6})) == ["slot 1", "slot 2", "slot 3"]
    assert [(t["slot"], t["phase"], t["reason"]) for t in b.snapshot()] == [
        ("slot 1", "booting", None), ("slot 2", "failed", "board S2 dropped out of EDL"),
        ("slot 3", "interrupted", "the station process ended during this attempt")]
    assert b.apply_event({"serial": 7, "step": None}) == [] and b.apply_event({}) == []   # junk changes nothing


@pytest.fixture
def flashed(station, release_8275):
    """A station database with one passed and one failed attempt (real flashes of virtual boards)."""
    ok, bad = station.add(2)
    bad.add_fault("edl-drop")
    station.config.slots = {ok.slot: "slot 1", bad.slot: "slot 2"}
    with Records(station.config.database) as rec:
        flash_release(release_8275, station.config, context.current(), FlashOptions(all_boards=True, retries=0),
                      records=rec)
    return station, ok, bad


def _get(url, headers=None):
    req = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.headers, r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers, exc.read().decode()


def test_history_search_and_qdl_log_links(flashed):
    station, ok, bad = flashed
    with DashboardServer(station.config, DashboardSettings(port=0)) as srv:
        status, headers, body = _get(srv.url + "api/history?result=failed")
        assert status == 200 and "script-src 'self'" in headers["Content-Security-Policy"]
        rows = json.loads(body)["attempts"]
        assert [(r["serial"], r["slot"], r["result"]) for r in rows] == [(bad.serial, "slot 2", "failed")]
        assert rows[0]["error"] and rows[0]["release_id"] == "gemma4-e2b-iq8275-2026.11"
        status, headers, log = _get(srv.url + rows[0]["log_url"].lstrip("/"))
        assert status == 200 and headers["Content-Type"].startswith("text/plain")
        assert f"# qdl log of attempt {rows[0]['id']}" in log and "station outcome" in log
        by_serial = json.loads(_get(srv.url + "api/history?serial=" + ok.serial.lower()[-4:])[2])["attempts"]
        assert [r["serial"] for r in by_serial] == [ok.serial]
        assert json.loads(_get(srv.url + "api/history?release=iq8275-2026.11&result=passed")[2])["attempts"][0][
            "serial"] == ok.serial
        assert json.loads(_get(srv.url + "api/history?release=%25")[2])["attempts"] == []   # no LIKE wildcards
        for bad_query, why in (("result=exploded", "result must be one of"), ("limit=x", "whole number"),
                               ("limit=0", "between 1 and 1000"), ("serial=" + "A" * 200, "longer than")):
            status, _, body = _get(srv.url + "api/history?" + bad_query)
            assert status == 400 and why in json.loads(body)["error"]
        assert _get(srv.url + "log/999")[0] == 404 and _get(srv.url + "log/abc")[0] == 404
        assert _get(srv.url + "static/../../records.py")[0] == 404


def test_read_only_and_loopback_names_only(flashed):
    station, *_ = flashed
    with DashboardServer(station.config, DashboardSettings(port=0)) as srv:
        u = urllib.parse.urlsplit(srv.url)
        conn = http.client.HTTPConnection(u.hostname, u.port, timeout=10)
        conn.request("GET", "/api/history", headers={"Host": f"attacker.example:{u.port}"})   # DNS rebinding
        assert conn.getresponse().status == 421
        conn.close()
        req = urllib.request.Request(srv.url + "api/history", method="POST", data=b"x")
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(req, timeout=10)
        assert err.value.code == 405


def test_with_a_token_nothing_is_served_before_login(flashed):
    station, *_ = flashed
    with DashboardServer(station.config, DashboardSettings(port=0, token=TOKEN)) as srv:
        assert _get(srv.url + "api/history")[0] == 401
        assert _get(srv.url + "events")[0] == 401
        assert _get(srv.url + "log/1")[0] == 401
        status, _, page = _get(srv.url)                                   # redirected to the login form
        assert status == 200 and 'name="token"' in page
        assert _get(srv.url + "api/history", {"Authorization": "Bearer " + TOKEN})[0] == 200
        opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor())
        wrong = opener.open(urllib.request.Request(srv.url + "login", data=b"token=guess"), timeout=10).read()
        assert b"not this dashboard" in wrong
        opener.open(urllib.request.Request(srv.url + "login", data=urllib.parse.urlencode(
            {"token": TOKEN}).encode()), timeout=10)
        with opener.open(srv.url + "api/history", timeout=10) as r:
            assert r.status == 200 and json.loads(r.read())["attempts"]
        jar = [h for h in opener.handlers if isinstance(h, urllib.request.HTTPCookieProcessor)][0].cookiejar
        assert all(TOKEN not in c.value for c in jar) and len(list(jar)) == 1


def test_cli_refuses_a_lan_bind_without_a_token_and_a_weak_token(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("PROVISIONER_DASHBOARD_TOKEN", raising=False)
    assert main(["station", "dashboard", "--db", str(tmp_path / "s.db"), "--bind", "0.0.0.0"]) == 2
    err = capsys.readouterr().err
    assert "serves the dashboard to the network, and no token is set" in err and "Traceback" not in err
    weak = tmp_path / "tok"
    weak.write_text("short\n")
    assert main(["station", "dashboard", "--db", str(tmp_path / "s.db"), "--bind", "0.0.0.0",
                 "--token-file", str(weak)]) == 2
    err = capsys.readouterr().err
    assert "shorter than 16" in err and "short\n" not in err.split("token in")[0]
    assert main(["station", "dashboard", "--token-file", str(tmp_path / "missing")]) == 2
    assert "unreadable" in capsys.readouterr().err


def test_cli_port_in_use_is_one_line(tmp_path, capsys):
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()
    try:
        assert main(["station", "dashboard", "--db", str(tmp_path / "s.db"), "--port",
                     str(s.getsockname()[1])]) == 2
    finally:
        s.close()
    err = capsys.readouterr().err
    assert "cannot serve the dashboard on 127.0.0.1" in err and "Traceback" not in err


def test_cli_a_feed_folder_others_may_write_or_a_read_only_place_is_one_line(tmp_path, capsys):
    import os

    (tmp_path / "s.db.feed").mkdir(mode=0o777)
    os.chmod(tmp_path / "s.db.feed", 0o777)
    assert main(["station", "dashboard", "--db", str(tmp_path / "s.db"), "--port", "0"]) == 2
    err = capsys.readouterr().err
    assert "is not private to this user" in err and "Traceback" not in err
    (tmp_path / "ro").mkdir()
    (tmp_path / "ro" / "s.db").write_text("")
    os.chmod(tmp_path / "ro", 0o500)
    try:
        if os.access(tmp_path / "ro", os.W_OK):
            return          # root writes anywhere: the folder check above is what applies
        assert main(["station", "dashboard", "--db", str(tmp_path / "ro" / "s.db"), "--port", "0"]) == 2
        assert "cannot create the live feed folder" in capsys.readouterr().err
    finally:
        os.chmod(tmp_path / "ro", 0o700)


def test_odd_requests_get_a_4xx_never_a_crash_and_a_second_loopback_address_answers(station):
    """A non-ASCII cookie and an attempt id beyond SQLite's integers are a client's problem (4xx
    with the security headers); a dashboard bound to 127.0.0.2 answers at the URL it prints."""
    with Records(station.config.database):
        pass
    with DashboardServer(station.config, DashboardSettings(port=0, token=TOKEN)) as srv:
        u = urllib.parse.urlsplit(srv.url)
        conn = http.client.HTTPConnection(u.hostname, u.port, timeout=10)
        conn.putrequest("GET", "/api/history")
        conn.putheader("Cookie", "edge_llm_dashboard=\u00e9t\u00e9".encode())
        conn.endheaders()
        resp = conn.getresponse()
        assert resp.status == 401 and "script-src 'self'" in resp.getheader("Content-Security-Policy")
        conn.close()
    with DashboardServer(station.config, DashboardSettings(port=0)) as srv:
        status, headers, _ = _get(srv.url + "log/99999999999999999999999")
        assert status == 404 and headers["X-Content-Type-Options"] == "nosniff"
        assert _get(srv.url + "log/-1")[0] == 404
    with DashboardServer(station.config, DashboardSettings(bind="127.0.0.2", port=0)) as srv:
        assert srv.url.startswith("http://127.0.0.2:")
        assert _get(srv.url + "api/history")[0] == 200


def test_cli_a_mistyped_db_creates_no_folder(tmp_path, capsys):
    assert main(["station", "dashboard", "--db", str(tmp_path / "typo" / "s.db"), "--port", "0"]) == 2
    err = capsys.readouterr().err
    assert "no such folder" in err and "--db" in err and "Traceback" not in err
    assert not (tmp_path / "typo").exists()


def test_a_search_waiting_on_a_slow_history_holds_up_nothing_else(station):
    """A central database slow to answer a search (here a searcher that waits) delays that search
    only: the qdl logs and the tiles' poll keep their own reader and thread."""
    import threading

    from provisioner.station.history_reader import SqliteHistoryReader

    entered, release = threading.Event(), threading.Event()

    class SlowSearch(SqliteHistoryReader):
        def search(self, **kw):
            entered.set()
            release.wait(30)
            return super().search(**kw)

    with Records(station.config.database):
        pass
    searcher = SlowSearch(station.config.database)
    with DashboardServer(station.config, DashboardSettings(port=0), searcher=searcher) as srv:
        got: list = []
        t = threading.Thread(target=lambda: got.append(_get(srv.url + "api/history")))
        t.start()
        try:
            assert entered.wait(10)
            assert _get(srv.url + "log/999")[0] == 404     # answered while the search still waits
            assert not got
        finally:
            release.set()
            t.join(15)
        assert got and got[0][0] == 200
