"""The station loses nothing under kill -9 and full disks.

Real faults, not mocks: ``provisioner station flash`` runs as a subprocess on virtual boards and
is SIGKILLed while qdl writes them; the records database and per-board logs live on a small
tmpfs (we are root) that is full before the start or fills up mid-flash.
"""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from provisioner.cli import main
from provisioner.station.records import FAILED, INTERRUPTED, OUTCOME_PREFIX, PASSED, Records
from tests.station.conftest import qdl_pids

ROOT = Path(__file__).resolve().parents[2]
RELEASE_ID = "gemma4-e2b-iq8275-2026.11"


def _start_station(station, release: Path, db: Path, *, qdl: str | None = None, rate_kbps: int = 400,
                   config: Path | None = None, serials: list[str] | None = None) -> subprocess.Popen:
    env = dict(os.environ, PROVISIONER_SIM_QDL_RATE_KBPS=str(rate_kbps), PYTHONPATH=str(ROOT))
    argv = [sys.executable, "-m", "provisioner", "station", "flash", str(release),
            "--qdl", qdl or station.config.qdl, "--sysfs-root", str(station.config.sysfs_root), "--db", str(db),
            "--json"]
    argv += [a for s in serials for a in ("--serial", s)] if serials else ["--all"]
    if config:
        argv += ["--config", str(config)]
    return subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def _wait_flashing(db: Path, station, n: int, timeout_s: float = 30) -> list[dict]:
    """Until ``n`` attempts are in state ``flashing`` and their qdl runs."""
    deadline = time.monotonic() + timeout_s
    rows: list[dict] = []
    while time.monotonic() < deadline:
        if db.exists():
            with Records(db, writer=False) as rec:
                rows = rec.history()
            if (len(rows) == n and all(r["state"] == "flashing" for r in rows)
                    and len(qdl_pids(station.root)) == n):
                return rows
        time.sleep(0.05)
    raise AssertionError(f"station never flashed {n} board(s): {rows}")


def _gone(pids: list[int], timeout_s: float = 5) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not [p for p in pids if Path(f"/proc/{p}/cmdline").exists()
                and Path(f"/proc/{p}/cmdline").read_bytes()]:
            return True
        time.sleep(0.05)
    return False


def _kill_all(proc: subprocess.Popen, station) -> None:
    if proc.poll() is None:
        proc.kill()
        proc.wait()
    for pid in qdl_pids(station.root):
        os.kill(pid, signal.SIGKILL)


# -- kill -9 ---------------------------------------------------------------------------------------

def _quiet_qdl(station, *, keep_death_signal: bool) -> Path:
    """qdl behind a wrapper that sends its output to a file instead of the station's pipe.

    Like a real qdl in the middle of a large partition (it prints nothing for minutes), it gets
    no broken pipe when the station dies; only the parent-death signal can end it. With
    ``keep_death_signal=False`` it also clears that, like a qdl with file capabilities (prctl(2):
    the setting is cleared on execve of such a binary).
    """
    path = station.root / "bin" / ("qdl-quiet" if keep_death_signal else "qdl-caps")
    qdl, out = str(station.config.qdl), str(station.root / f"{path.name}.out")
    path.write_text(f"#!{sys.executable}\nimport ctypes, os, sys\n"
                    + ("" if keep_death_signal else "ctypes.CDLL(None).prctl(1, 0, 0, 0, 0)\n")
                    + "if sys.argv[1:2] != ['--version']:\n"
                    f"    fd = os.open({out!r}, os.O_WRONLY | os.O_CREAT | os.O_APPEND)\n"
                    "    os.dup2(fd, 1)\n    os.dup2(fd, 2)\n"
                    f"os.execv({qdl!r}, [{qdl!r}] + sys.argv[1:])\n")
    path.chmod(0o755)
    return path


def test_kill_9_of_the_station_ends_its_qdl(station, release_8275, tmp_path):
    """qdl dies with the station (parent-death signal), so nothing writes the boards any more."""
    station.add(2)
    db = tmp_path / "station.db"
    proc = _start_station(station, release_8275, db, qdl=str(_quiet_qdl(station, keep_death_signal=True)),
                          rate_kbps=40)
    try:
        _wait_flashing(db, station, 2)
        qdls = qdl_pids(station.root)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        assert _gone(qdls), f"qdl outlived the station: {qdl_pids(station.root)}"
    finally:
        _kill_all(proc, station)
    with Records(db) as rec:
        hist = rec.history()
        notes = rec.recovery_notes
    assert {h["result"] for h in hist} == {INTERRUPTED}
    assert sorted(notes) == sorted(f"attempt {h['id']} (board {h['serial']}): marked interrupted (the station "
                                   "process died)" for h in hist)


def test_a_surviving_qdl_is_reported_and_ended_before_the_board_is_flashed_again(station, release_8275, tmp_path):
    board = station.add(1)[0]
    db = tmp_path / "station.db"
    proc = _start_station(station, release_8275, db, qdl=str(_quiet_qdl(station, keep_death_signal=False)),
                          rate_kbps=40)
    try:
        _wait_flashing(db, station, 1)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        with Records(db, writer=False) as rec:
            first = rec.history()[0]
        assert qdl_pids(station.root) == [first.get("qdl_pid")]  # still writing the board, holding its USB
        rerun = _start_station(station, release_8275, db, rate_kbps=0, serials=[board.serial])
        _, err = rerun.communicate(timeout=120)
    finally:
        _kill_all(proc, station)
    assert rerun.returncode == 0, err
    assert (f"warning: attempt {first['id']} (board {board.serial}): the station died while qdl pid "
            f"{first['qdl_pid']} was writing the board; ended it") in " ".join(err.split())
    assert qdl_pids(station.root) == []
    with Records(db, writer=False) as rec:
        hist = {h["id"]: h for h in rec.history()}
    assert hist[first["id"]]["result"] == INTERRUPTED
    assert f"its qdl (pid {first['qdl_pid']}) was still running and was ended" in hist[first["id"]]["error"]
    assert [h["result"] for i, h in hist.items() if i != first["id"]] == [PASSED]
    assert board.reload().state != "edl"  # flashed and reset by the second run, no "Resource busy"


# -- full disks ------------------------------------------------------------------------------------

@pytest.fixture
def small_disk(tmp_path):
    """A 4 MiB tmpfs: room for the records, a 1 MiB reserve and the logs, not for much more."""
    mnt = tmp_path / "disk"
    mnt.mkdir()
    cp = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mnt)], capture_output=True,
                        text=True)
    if cp.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {cp.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def _fill(mnt: Path, name: str = "filler") -> Path:
    """Write into ``mnt`` until the filesystem is full."""
    path = mnt / name
    chunk = b"\0" * 65536
    with open(path, "ab", buffering=0) as f:
        while True:
            try:
                f.write(chunk)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC
                break
    for size in (4096, 512, 1):  # the last partial blocks too
        try:
            with open(path, "ab", buffering=0) as f:
                while True:
                    f.write(b"\0" * size)
        except OSError:
            pass
    return path


def _config(tmp_path: Path, mnt: Path) -> Path:
    cfg = tmp_path / "station.yaml"
    cfg.write_text(yaml.safe_dump({"log_dir": str(mnt / "logs")}))
    return cfg


def test_full_disk_at_start_is_one_line_naming_the_filesystem(station, release_8275, small_disk, tmp_path,
                                                              capsys):
    boards = station.add(1)
    _fill(small_disk)
    db = small_disk / "station.db"
    rc = main(["station", "flash", str(release_8275), "--all", "--qdl", station.config.qdl, "--sysfs-root",
               str(station.config.sysfs_root), "--db", str(db), "--config", str(_config(tmp_path, small_disk))])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1, err
    assert err.startswith(f"error: station records: no space left on {small_disk} (sqlite database {db}) -> "
                          f"free space on {small_disk}"), err
    assert boards[0].reload().state == "edl"  # nothing was flashed that could not be recorded


def test_full_log_folder_at_start_is_refused(station, release_8275, small_disk, tmp_path, capsys):
    """Records on a roomy disk, logs on a full one: refused before any board is touched."""
    boards = station.add(1)
    _fill(small_disk)
    rc = main(["station", "flash", str(release_8275), "--all", "--qdl", station.config.qdl, "--sysfs-root",
               str(station.config.sysfs_root), "--db", str(tmp_path / "station.db"),
               "--config", str(_config(tmp_path, small_disk))])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1
    assert f"no space left on {small_disk} (per-board log folder {small_disk / 'logs'})" in err
    assert boards[0].reload().state == "edl"


def test_disk_filling_up_mid_flash_keeps_every_outcome(station, release_8275, small_disk, tmp_path):
    boards = station.add(2)
    db = small_disk / "station.db"
    proc = _start_station(station, release_8275, db, config=_config(tmp_path, small_disk))
    try:
        rows = _wait_flashing(db, station, 2)
        filler = _fill(small_disk)
        _, err = proc.communicate(timeout=120)
    finally:
        _kill_all(proc, station)
    lines = err.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: station records: no space "
                                                                            f"left on {small_disk} ("), err
    for b in boards:
        assert f"{b.serial} passed" in lines[0]
        assert b.reload().state != "edl"   # both boards were flashed and reset
    with Records(db, writer=False) as rec:
        hist = {h["id"]: h for h in rec.history()}
    assert {h["result"] for h in hist.values()} == {PASSED} and set(hist) == {r["id"] for r in rows}
    # whatever filled the disk goes on writing: the next start says so, on one line, and changes nothing
    more = _fill(small_disk, "more")
    again = subprocess.run([sys.executable, "-m", "provisioner", "station", "flash", str(release_8275), "--all",
                            "--qdl", station.config.qdl, "--sysfs-root", str(station.config.sysfs_root),
                            "--db", str(db)], capture_output=True, text=True, env=dict(os.environ,
                                                                                       PYTHONPATH=str(ROOT)))
    assert again.returncode == 2 and again.stderr.count("\n") == 1
    assert f"no space left on {small_disk} (sqlite database {db})" in again.stderr
    filler.unlink()
    more.unlink()
    with Records(db) as rec:
        assert rec.recovered == [] and {h["result"] for h in rec.history()} == {PASSED}
        assert rec.reserve.path.stat().st_size > 0  # room kept again for the next full disk


def test_outcome_the_database_missed_is_reconciled_from_the_log_at_next_start(small_disk, tmp_path):
    """Database on a disk that is full even after its reserve went; the log on another disk."""
    db = small_disk / "station.db"
    log = tmp_path / "logs" / "0AA94E00-qdl.log"
    log.parent.mkdir()
    log.write_text("flashed \"rootfs\" successfully\n")
    with Records(db) as rec:
        aid = rec.start_attempt("0AA94E00", slot="slot 1", board="iq-8275-evk", release_id=RELEASE_ID,
                                artifacts={}, qdl_version="qdl 2.5", log_path=log)
        failed = rec.start_attempt("0AA94E01", slot="slot 2", board="iq-8275-evk", release_id=RELEASE_ID,
                                   artifacts={}, qdl_version="qdl 2.5", log_path=tmp_path / "logs" / "other.log")
        (small_disk / "station.db.reserve").unlink(missing_ok=True)
        filler = _fill(small_disk)
        assert rec.finish_attempt(aid, PASSED, identity={"build_id": RELEASE_ID}) is False
        assert rec.finish_attempt(failed, FAILED, error="qdl exited 1: boom") is False
        assert str(rec.space_error).startswith(f"station records: no space left on {small_disk} (sqlite database")
    assert log.read_text().splitlines()[-1].startswith(OUTCOME_PREFIX)
    filler.unlink()
    # the next station start (another process) settles both attempts from the logs
    out = subprocess.run([sys.executable, "-c", "from provisioner.station.records import Records\n"
                          f"r = Records({str(db)!r})\nprint(*r.recovery_notes, sep='\\n')"],
                         capture_output=True, text=True, check=True, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert out.stdout.splitlines() == [
        f"attempt {aid} (board 0AA94E00): recorded as passed from the outcome in {log} (the station could not "
        "record it then)",
        f"attempt {failed} (board 0AA94E01): recorded as failed from the outcome in {tmp_path / 'logs/other.log'} "
        "(the station could not record it then)"]
    with Records(db, writer=False) as rec:
        hist = {h["id"]: h for h in rec.history()}
    assert hist[aid]["result"] == PASSED and hist[aid]["identity"] == {"build_id": RELEASE_ID}
    assert hist[failed]["result"] == FAILED and hist[failed]["error"] == "qdl exited 1: boom"


def test_rollback_after_sqlite_full_is_not_an_internal_error(small_disk):
    """SQLite may roll the transaction back by itself after SQLITE_FULL; no 'cannot rollback'."""
    db = small_disk / "station.db"
    with Records(db) as rec:
        (small_disk / "station.db.reserve").unlink(missing_ok=True)  # the room it keeps is used up already
        _fill(small_disk)
        with pytest.raises(Exception) as caught:
            for i in range(200):
                rec.add_event(None, "flash", "progress", detail={"pad": "x" * 4000, "i": i})
    assert type(caught.value).__name__ == "StationError"
    assert str(caught.value).startswith(f"station records: no space left on {small_disk} (sqlite database {db})")
