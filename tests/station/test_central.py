"""Central station records on a real PostgreSQL server: several stations, one history.

The server is Debian's ``postgresql`` binaries in a throwaway cluster (tests/station/pgserver.py),
killed with SIGKILL and restarted where the tests say so; stations are the real CLI over virtual
boards. Skipped with one line where the server binaries or psycopg are missing (.ci/run installs
both).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest
import yaml

from provisioner import context
from provisioner.cli import main
from provisioner.errors import StationError
from provisioner.station.config import load_config
from provisioner.station.history import history_reader
from provisioner.station.outbox import Outbox
from provisioner.station.records import Records
from tests.station.conftest import Station
from tests.station.pgserver import PgServer, skip_reason

ROOT = Path(__file__).resolve().parents[2]
SKIP = skip_reason()


@pytest.fixture(scope="module")
def pg():
    if SKIP:
        pytest.skip(SKIP)
    server = PgServer()
    server.start()
    yield server
    server.cleanup()


class Central:
    """One database and login role on the shared test server, and the password in a file."""

    def __init__(self, pg: PgServer, tmp: Path) -> None:
        self.pg = pg
        self.name = "rec_" + uuid.uuid4().hex[:8]
        self.password = "pw-" + uuid.uuid4().hex
        self.url = pg.make_db(self.name, self.name, self.password)
        self.pwfile = tmp / "records.pw"
        self.pwfile.write_text(self.password + "\n")
        self.pwfile.chmod(0o600)

    def rows(self) -> list[tuple]:
        return self.pg.count(self.name, "SELECT station, serial, result, attempt_id FROM station_attempts "
                                        "ORDER BY station, serial")


@pytest.fixture
def central(pg, tmp_path) -> Central:
    return Central(pg, tmp_path)


def station_yaml(st: Station, name: str, central: Central | None, **extra) -> Path:
    cfg = st.config
    data = {"sysfs_root": str(cfg.sysfs_root), "qdl": cfg.qdl, "database": str(cfg.database),
            "log_dir": str(cfg.log_dir), "station": name}
    if central is not None:
        data |= {"records": central.url, "records_password_file": str(central.pwfile)}
    data |= extra
    path = cfg.database.parent / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def flash_cmd(release: Path, config: Path) -> list[str]:
    return [sys.executable, "-m", "provisioner", "station", "flash", str(release), "--all", "--config", str(config),
            "--json"]


def run_env(**extra: str) -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(ROOT), **extra)


def local_ids(db: Path) -> list[int]:
    with Records(db, writer=False) as rec:
        return sorted(r["id"] for r in rec.history())


# -- settings (no server needed) -----------------------------------------------------------------
def test_a_password_in_the_url_is_refused_and_never_printed(tmp_path):
    cfg = tmp_path / "station.yaml"
    cfg.write_text(yaml.safe_dump({"records": "postgresql://station:hunter2@db.example:5432/records"}))
    with pytest.raises(StationError) as exc:
        load_config(cfg)
    text = f"{exc.value.message} {exc.value.hint}"
    assert "contains a password" in text and "hunter2" not in text and "station:***@" in text
    cfg.write_text(yaml.safe_dump({"records": "postgresql://station@db.example/records?password=hunter2"}))
    with pytest.raises(StationError) as exc:
        load_config(cfg)
    assert "hunter2" not in exc.value.message
    cfg.write_text(yaml.safe_dump({"records": "mysql://db.example/records"}))
    with pytest.raises(StationError, match="must be a postgresql:// URL"):
        load_config(cfg)
    cfg.write_text(yaml.safe_dump({"records": "postgresql://station@db.example/records",
                                   "records_password_file": "records.pw", "station": "bench-a"}))
    c = load_config(cfg).central
    assert c is not None and c.password_file == tmp_path / "records.pw" and c.station == "bench-a"
    cfg.write_text(yaml.safe_dump({"log_dir": "logs"}))
    assert load_config(cfg).central is None                 # SQLite alone stays the default


# -- a real server --------------------------------------------------------------------------------
def test_two_stations_flashing_at_once_write_one_history(pg, central, release_8275, tmp_path):
    a, b = Station(tmp_path / "a"), Station(tmp_path / "b")
    a.add(3)
    b.add(3, start=8)
    procs = [subprocess.Popen(flash_cmd(release_8275, station_yaml(st, name, central)), env=run_env(),
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
             for st, name in ((a, "bench-a"), (b, "bench-b"))]
    errs = [p.communicate(timeout=300)[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], errs
    rows = central.rows()
    assert [(s, r) for s, _, r, _ in rows] == [("bench-a", "passed")] * 3 + [("bench-b", "passed")] * 3
    assert {s for _, s, _, _ in rows} == {f"0AA94E{i:02X}" for i in (0, 1, 2, 8, 9, 10)}
    # every station's own ids, each once
    assert sorted(i for s, _, _, i in rows if s == "bench-a") == local_ids(a.config.database)
    # and `station history` on either station reads the shared history, filtered, naming the station
    cfg = station_yaml(a, "bench-a", central)
    proc = subprocess.run([sys.executable, "-m", "provisioner", "station", "history", "--config", str(cfg),
                           "--serial", "0aa94e09", "--json"], env=run_env(), capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    import json
    hist = json.loads(proc.stdout)
    assert [(h["station"], h["serial"], h["result"]) for h in hist] == [("bench-b", "0AA94E09", "passed")]
    assert main(["station", "history", "--config", str(cfg), "--outcome", "failed", "--json"]) == 0
    # the dashboard's reader searches every station; only this station's rows link a local qdl log
    reader = history_reader(load_config(cfg), context.current().env)
    try:
        found = reader.search(serial="0aa94e", limit=50)
        assert sorted((r["station"], bool(r["log_path"])) for r in found) == \
            [("bench-a", True)] * 3 + [("bench-b", False)] * 3
        assert reader.attempt(found[-1]["id"]) is not None and reader.latest_by_slot()
    finally:
        reader.close()
    # with the central database unreachable the search answers from this station alone
    dead = station_yaml(a, "bench-a", None, records=f"postgresql://x@127.0.0.1:{_closed_port()}/db")
    reader = history_reader(load_config(dead), context.current().env)
    try:
        assert {r["station"] for r in reader.search(release="gemma4")} == {"bench-a"} and reader.error
    finally:
        reader.close()


def test_the_server_killed_mid_run_loses_nothing_and_the_backlog_drains(pg, central, release_8275, tmp_path):
    st = Station(tmp_path)
    st.add(4)
    cfg = station_yaml(st, "bench-k", central)
    db = st.config.database
    proc = subprocess.Popen(flash_cmd(release_8275, cfg), env=run_env(PROVISIONER_SIM_QDL_RATE_KBPS="800"),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        # kill -9 the server while the boards are being written
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if db.exists():
                with Records(db, writer=False) as rec:
                    if sum(r["state"] == "flashing" for r in rec.history()) >= 2:
                        break
            time.sleep(0.05)
        pg.kill()
        _, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
        if pg.proc is None:
            pg.start()
    assert proc.returncode == 0, err                      # the flash did not stop
    assert "wait in the local outbox" in err and central.password not in err
    with Records(db, writer=False) as rec:
        assert {r["result"] for r in rec.history()} == {"passed"}
    ob = Outbox(db)
    try:
        assert ob.backlog() >= 1
    finally:
        ob.close()
    # the server is back (restarted by the fixture above): `station forward` drains the backlog
    assert main(["station", "forward", "--config", str(cfg)]) == 0
    rows = central.rows()
    assert sorted(i for *_, i in rows) == local_ids(db)   # every attempt, once
    assert main(["station", "forward", "--config", str(cfg)]) == 0
    assert len(central.rows()) == 4


def test_a_server_that_stops_answering_never_holds_up_a_flash(pg, central, release_8275, tmp_path):
    st = Station(tmp_path)
    st.add(1)
    st.add(1, faults=("slow",), start=1)                 # done a few seconds after the first board
    cfg = station_yaml(st, "bench-s", central)
    proc = subprocess.Popen(flash_cmd(release_8275, cfg), env=run_env(), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(_rows_or_none(central)) < 1:
            time.sleep(0.05)
        assert len(central.rows()) == 1                   # the forwarder is connected and delivered
        pg.freeze()                                       # then the server stops answering, mid-run
        _, err = proc.communicate(timeout=120)
    finally:
        pg.freeze(False)
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert "did not answer" in err and "1 attempt(s) wait in the local outbox" in err, (err, central.rows())
    with Records(st.config.database, writer=False) as rec:
        assert [r["result"] for r in rec.history()] == ["passed", "passed"]
    assert main(["station", "forward", "--config", str(cfg)]) == 0
    assert len(central.rows()) == 2


def _rows_or_none(central: Central) -> list:
    try:
        return central.rows()
    except Exception:   # the table is created by the first delivery
        return []


def test_a_duplicate_delivery_after_a_crash_is_not_a_duplicate_record(pg, central, release_8275, tmp_path):
    st = Station(tmp_path)
    st.add(2)
    cfg = station_yaml(st, "bench-d", None)            # flash without a central database first
    assert main(["station", "flash", str(release_8275), "--all", "--config", str(cfg), "--json"]) == 0
    cfg = station_yaml(st, "bench-d", central)
    # a forwarder that dies by SIGKILL right after the server's COMMIT, before the local "sent" mark
    crash = ("import os, signal, sys\n"
             "from provisioner.station.config import load_config\n"
             "from provisioner.station.outbox import Central, Outbox\n"
             "cfg = load_config(sys.argv[1]); ob = Outbox(cfg.database)\n"
             "got = Central(cfg.central, dict(os.environ)).deliver(ob.station_db, ob.pending())\n"
             "assert len(got.inserted) == 2\n"
             "os.kill(os.getpid(), signal.SIGKILL)\n")
    proc = subprocess.run([sys.executable, "-c", crash, str(cfg)], env=run_env(), capture_output=True, text=True)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert len(central.rows()) == 2
    ob = Outbox(st.config.database)
    try:
        assert ob.backlog() == 2                        # the crash left them in the outbox
    finally:
        ob.close()
    assert main(["station", "forward", "--config", str(cfg), "--json"]) == 0
    assert len(central.rows()) == 2                     # delivered again, stored once
    ob = Outbox(st.config.database)
    try:
        assert ob.backlog() == 0
    finally:
        ob.close()


def test_wrong_password_or_unreachable_server_is_one_line(pg, central, release_8275, tmp_path, capsys):
    st = Station(tmp_path)
    st.add(1)
    cfg = station_yaml(st, "bench-w", central)
    central.pwfile.write_text("not-the-password\n")
    # flashing goes on with one warning line; the attempt waits in the outbox
    assert main(["station", "flash", str(release_8275), "--all", "--config", str(cfg), "--json"]) == 0
    err = capsys.readouterr().err
    assert "password authentication failed" in err and "not-the-password" not in err
    assert main(["station", "history", "--config", str(cfg)]) == 2
    err = capsys.readouterr().err.strip()
    assert "password authentication failed" in err and len(err.splitlines()) == 1
    assert "not-the-password" not in err and central.url in err
    # a port nobody listens on
    dead = station_yaml(st, "bench-w", None, records=f"postgresql://x@127.0.0.1:{_closed_port()}/db")
    assert main(["station", "history", "--config", str(dead)]) == 2
    err = capsys.readouterr().err.strip()
    assert "refused" in err and "pass --local" in err and len(err.splitlines()) == 1
    # a URI libpq cannot parse is a station.yaml mistake, not a server to check
    typo = station_yaml(st, "bench-w", None, records="postgresql://st@[::1/db")
    assert main(["station", "history", "--config", str(typo)]) == 2
    assert "fix records: in station.yaml" in capsys.readouterr().err
    # --local still reads this station's own database
    assert main(["station", "history", "--config", str(dead), "--local", "--json"]) == 0
    assert '"0AA94E00"' in capsys.readouterr().out


def _closed_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_password_is_never_in_argv_a_child_environment_or_a_log(pg, central, release_8275, tmp_path):
    st = Station(tmp_path)
    st.add(2)
    cfg = station_yaml(st, "bench-p", None, records=central.url, records_password_env="STATION_RECORDS_PW")
    secret = central.password.encode()
    proc = subprocess.Popen(flash_cmd(release_8275, cfg),
                            env=run_env(STATION_RECORDS_PW=central.password, PROVISIONER_SIM_QDL_RATE_KBPS="1500"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    seen: list[str] = []
    children = 0
    done = threading.Event()

    def watch() -> None:
        nonlocal children
        while not done.is_set():
            for d in Path("/proc").iterdir():
                if not d.name.isdigit() or int(d.name) == proc.pid:
                    continue    # the station itself was given the variable by its operator
                try:
                    if secret in (d / "cmdline").read_bytes():
                        seen.append(f"argv of {d.name}")
                    env = (d / "environ").read_bytes()
                    if f"PROVISIONER_SIM_ROOT={st.root}".encode() in env:
                        children += 1
                        if secret in env:
                            seen.append(f"environment of child {d.name}")
                except OSError:
                    continue
            time.sleep(0.05)

    t = threading.Thread(target=watch)
    t.start()
    try:
        out, err = proc.communicate(timeout=300)
    finally:
        done.set()
        t.join()
    assert proc.returncode == 0, err
    assert children and not seen
    assert secret not in out and secret not in err
    for f in [*st.config.log_dir.rglob("*"), pg.log, *tmp_path.glob("*.yaml")]:
        if f.is_file():
            assert secret not in f.read_bytes(), f
    assert len(central.rows()) == 2


def test_columns_added_to_the_local_attempts_later_travel_to_the_central_record(pg, central, tmp_path):
    db = tmp_path / "station.db"
    with Records(db) as rec:
        aid = rec.start_attempt("0AA94E00", slot="slot 1", board="iq-8275-evk", release_id="r1", artifacts={},
                                qdl_version="2.5", log_path=None)
        rec.db.execute("ALTER TABLE attempts ADD COLUMN decode_tok_s REAL")
        rec.db.execute("ALTER TABLE attempts ADD COLUMN raw BLOB")
        rec.db.execute("UPDATE attempts SET decode_tok_s=32.1, raw=x'00ff' WHERE id=?", (aid,))
        rec.finish_attempt(aid, "passed", identity={"serial": "0AA94E00"})
    cfg = tmp_path / "station.yaml"
    cfg.write_text(yaml.safe_dump({"database": str(db), "records": central.url,
                                   "records_password_file": str(central.pwfile), "station": "bench-c"}))
    assert main(["station", "forward", "--config", str(cfg)]) == 0
    (record,) = [r for (r,) in central.pg.count(central.name, "SELECT record FROM station_attempts")]
    assert record["decode_tok_s"] == 32.1 and record["identity"] == {"serial": "0AA94E00"} and record["raw"]
    assert main(["station", "history", "--config", str(cfg), "--json"]) == 0


def test_a_row_the_server_cannot_store_never_blocks_the_rest_of_the_history(pg, central, tmp_path, capsys):
    """NUL characters (board text off a noisy UART) are dropped on the way; a value the server
    still refuses (here an infinite figure, which JSON cannot hold) sets that one attempt aside,
    reported, and every other attempt - before and after it - reaches the central history."""
    db = tmp_path / "station.db"
    with Records(db) as rec:
        rec.db.execute("ALTER TABLE attempts ADD COLUMN decode_tok_s REAL")
        ids = []
        for n in range(3):
            aid = rec.start_attempt(f"0AA94E0{n}", slot=f"slot\x00{n}", board="iq-8275-evk", release_id="r1",
                                    artifacts={}, qdl_version="2.5", log_path=None)
            rec.finish_attempt(aid, "failed", error="BUILD_ID is 'x\x00y'", identity={"hostname": "evk\x00"})
            ids.append(aid)
        rec.db.execute("UPDATE attempts SET decode_tok_s=9e999 WHERE id=?", (ids[1],))
    cfg = tmp_path / "station.yaml"
    cfg.write_text(yaml.safe_dump({"database": str(db), "records": central.url,
                                   "records_password_file": str(central.pwfile), "station": "bench-n"}))
    assert main(["station", "forward", "--config", str(cfg)]) == 0
    out = capsys.readouterr().out
    assert f"attempt {ids[1]} refused" in out and "set aside" in out and "2 attempt(s) sent" in out
    stored = central.pg.count(central.name, "SELECT attempt_id, slot, error, record FROM station_attempts "
                                            "ORDER BY attempt_id")
    assert [(a, s, e, r["identity"]["hostname"]) for a, s, e, r in stored] == [
        (ids[0], "slot0", "BUILD_ID is 'xy'", "evk"), (ids[2], "slot2", "BUILD_ID is 'xy'", "evk")]
    # the refused one is not sent again and again: the next forward has nothing to do
    assert main(["station", "forward", "--config", str(cfg)]) == 0
    assert "0 attempt(s) sent, 0 already there, 0 waiting" in capsys.readouterr().out


def test_a_central_row_that_is_not_an_attempt_record_is_skipped_and_counted(pg, central, tmp_path, capsys):
    db = tmp_path / "station.db"
    with Records(db) as rec:
        aid = rec.start_attempt("0AA94E00", slot="slot 1", board="iq-8275-evk", release_id="r1", artifacts={},
                                qdl_version="2.5", log_path=None)
        rec.finish_attempt(aid, "passed")
    cfg = tmp_path / "station.yaml"
    cfg.write_text(yaml.safe_dump({"database": str(db), "records": central.url,
                                   "records_password_file": str(central.pwfile), "station": "bench-m"}))
    assert main(["station", "forward", "--config", str(cfg)]) == 0
    for n, record in enumerate(('"just text"', '[1, 2]', '{"id": 7}')):   # by hand, or another version's
        central.pg.count(central.name, "INSERT INTO station_attempts (station_db, attempt_id, station, serial, "
                                       "result, started, record) VALUES (gen_random_uuid(), %s, 'other', 'X', "
                                       "'passed', now(), %s::jsonb) RETURNING attempt_id", (n, record))
    capsys.readouterr()
    assert main(["station", "history", "--config", str(cfg)]) == 0
    out = capsys.readouterr().out
    assert "0AA94E00" in out and "3 central row(s) skipped" in out
    reader = history_reader(load_config(cfg), context.current().env)
    try:
        assert [r["serial"] for r in reader.search()] == ["0AA94E00"] and reader.error is None
    finally:
        reader.close()
