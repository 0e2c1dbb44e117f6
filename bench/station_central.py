"""Benchmark: two stations flash 8 virtual boards each at once into one PostgreSQL history.

Four rounds of 2 x 8 boards, each station a real `provisioner station flash` process:

1. baseline: SQLite only (no central database configured);
2. central up: both stations forward to a real PostgreSQL server (Debian's binaries, a throwaway
   cluster from tests/station/pgserver.py);
3. server killed: the server gets SIGKILL (postmaster and backends) while the boards are being
   written, and is restarted a moment later, while they still flash: the stations' forwarders
   send what waited in their outboxes;
4. the same, but the server comes back only after both flashes ended: the attempts wait in the
   outboxes and `provisioner station forward` sends them.

Prints each round's wall time (and its ratio to the baseline: a central database, up or dead,
must not slow a flash), how long an attempt took from its end on the station to its row in the
central history, and the count check: every local attempt in the central history exactly once,
none lost. Usage: python3 bench/station_central.py [--boards 8] [--rate-kbps 1024] [--down-s 2]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the checkout's provisioner and tests/ before an installed copy

import yaml  # noqa: E402

from provisioner.image.release import write_release  # noqa: E402
from provisioner.manifest import load_manifest  # noqa: E402
from provisioner.sim.bundle import make_bundle  # noqa: E402
from provisioner.sim.synthetic_models import make_litertlm  # noqa: E402
from provisioner.station.outbox import Outbox  # noqa: E402
from provisioner.station.records import Records  # noqa: E402
from tests.station.conftest import Station  # noqa: E402
from tests.station.pgserver import PgServer, skip_reason  # noqa: E402


def write_config(st: Station, name: str, url: str | None, pwfile: Path) -> Path:
    data = {"sysfs_root": str(st.config.sysfs_root), "qdl": st.config.qdl, "database": str(st.config.database),
            "log_dir": str(st.config.log_dir), "station": name}
    if url:
        data |= {"records": url, "records_password_file": str(pwfile)}
    path = st.config.database.parent / "station.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def flash_both(release: Path, configs: list[Path], env: dict[str, str], during=None) -> tuple[float, float]:
    """Both stations at once; ``during(t0)`` runs beside them. Returns the wall time until both
    processes exited and the longer of the two flash runs as the stations measured them."""
    t0 = time.monotonic()
    procs = [subprocess.Popen([sys.executable, "-m", "provisioner", "station", "flash", str(release), "--all",
                               "--config", str(c), "--json"], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for c in configs]
    side = threading.Thread(target=during, args=(t0,)) if during else None
    if side:
        side.start()
    outs = [p.communicate(timeout=900) for p in procs]
    wall = time.monotonic() - t0
    if side:
        side.join()
    for p, (_, e) in zip(procs, outs, strict=True):
        if p.returncode != 0:
            raise SystemExit(f"a station failed (exit {p.returncode}): {e.strip()[-500:]}")
    return wall, max(json.loads(o)["duration_s"] for o, _ in outs)


def flashing_now(db: Path) -> int:
    """Boards being written, read through a read-only connection (never in the station's way)."""
    try:
        con = sqlite3.connect(f"{db.absolute().as_uri()}?mode=ro", uri=True, timeout=1.0)
        try:
            return con.execute("SELECT count(*) FROM attempts WHERE state='flashing' AND result='running'"
                               ).fetchone()[0]
        finally:
            con.close()
    except sqlite3.Error:
        return 0


def local_attempts(db: Path) -> list[dict]:
    with Records(db, writer=False) as rec:
        return rec.history()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--boards", type=int, default=8, help="boards per station")
    ap.add_argument("--rate-kbps", type=int, default=1024, help="qdl stand-in transfer rate per board")
    ap.add_argument("--down-s", type=float, default=2.0,
                    help="seconds the killed server stays down when it comes back during the flash")
    args = ap.parse_args()
    why = skip_reason()
    if why:
        print(f"skipped: {why}")
        return 0
    work = Path(tempfile.mkdtemp(prefix="bench-central-"))
    pg = PgServer()
    try:
        pg.start()
        password = os.urandom(16).hex()
        url = pg.make_db("records", "station", password)
        pwfile = work / "records.pw"
        pwfile.write_text(password + "\n")
        pwfile.chmod(0o600)
        manifest = load_manifest(ROOT / "examples" / "gemma4-e2b-iq8275.yaml")
        model = make_litertlm(work / "m.litertlm")
        release = write_release(manifest, make_bundle(manifest, work / "bundle", model_files={"gemma-4-e2b": model}),
                                work / "out", simulated=True)
        env = dict(os.environ, PYTHONPATH=str(ROOT), PROVISIONER_SIM_QDL_RATE_KBPS=str(args.rate_kbps))
        n = args.boards
        print(f"2 stations x {n} boards, qdl stand-in at {args.rate_kbps} kB/s per board, {os.cpu_count()} CPUs, "
              f"load average {os.getloadavg()[0]:.1f}; PostgreSQL {pg.bin.parent.name} on 127.0.0.1:{pg.port}")

        # round 1: SQLite only
        base = [Station(work / f"base-{k}") for k in "ab"]
        for k, st in enumerate(base):
            st.add(n, start=k * 0x40)
        w_base, f_base = flash_both(release, [write_config(st, f"base-{k}", None, pwfile) for k, st in zip("ab", base,
                                                                                                   strict=True)], env)
        print(f"baseline (SQLite only):       wall {w_base:6.2f} s, flash {f_base:6.2f} s")

        # rounds 2 to 4: the same two stations, central database configured
        stations = [Station(work / f"st-{k}") for k in "ab"]
        boards = [st.add(n, start=k * 0x40) for k, st in enumerate(stations)]
        configs = [write_config(st, f"bench-{k}", url, pwfile) for k, st in zip("ab", stations, strict=True)]
        w_up, f_up = flash_both(release, configs, env)
        there = pg.count("records", "SELECT count(*) FROM station_attempts")[0][0]
        lat = [r for (r,) in pg.count("records", "SELECT extract(epoch FROM received - ended)::float8 "
                                                 "FROM station_attempts")]
        print(f"central up:                   wall {w_up:6.2f} s, flash {f_up:6.2f} s ({f_up / f_base:.2f}x baseline); "
              f"attempt end -> central row: median {statistics.median(lat) * 1000:.0f} ms, "
              f"max {max(lat) * 1000:.0f} ms; {there} of {2 * n} there when the flashes exited")

        def killed_round(label: str, back_during: bool) -> None:
            for bl in boards:
                for vb in bl:
                    vb.set_state("edl")
            killed: dict[str, float] = {}

            def kill_in_the_middle(t0: float) -> None:
                # wait until boards are being written, then SIGKILL the server (and all its backends)
                deadline = time.monotonic() + 120
                while time.monotonic() < deadline:
                    if sum(flashing_now(st.config.database) for st in stations) >= n // 2:
                        break
                    time.sleep(0.05)
                killed["at"] = time.monotonic() - t0
                pg.kill()
                if back_during:
                    time.sleep(args.down_s)
                    pg.start()
                    killed["back"] = time.monotonic() - t0

            before = pg.count("records", "SELECT count(*) FROM station_attempts")[0][0] if pg.proc else 0
            w_kill, f_kill = flash_both(release, configs, env, during=kill_in_the_middle)
            if pg.proc is None:
                pg.start()
                killed["back"] = w_kill
            sent_by_forwarders = pg.count("records", "SELECT count(*) FROM station_attempts")[0][0] - before
            waiting = []
            for st in stations:
                ob = Outbox(st.config.database)
                waiting.append(ob.backlog())
                ob.close()
            t0 = time.monotonic()
            for c in configs:
                subprocess.run([sys.executable, "-m", "provisioner", "station", "forward", "--config", str(c)],
                               env=env, check=True, stdout=subprocess.DEVNULL)
            drain = time.monotonic() - t0
            print(f"{label}: killed at {killed['at']:.1f} s, back at {killed['back']:.1f} s; "
                  f"wall {w_kill:6.2f} s, flash {f_kill:6.2f} s ({f_kill / f_base:.2f}x baseline); "
                  f"{sent_by_forwarders} sent by the stations' forwarders, "
                  f"{sum(waiting)} left in the outboxes, sent by `station forward` in {drain:.2f} s")

        killed_round("server killed, back during the flash", True)
        killed_round("server killed, back after the flash ", False)

        # the count: every local attempt of both stations in the central history, exactly once
        local = {(name, a["id"]) for st, name in zip(stations, ("bench-a", "bench-b"), strict=True)
                 for a in local_attempts(st.config.database)}
        rows = pg.count("records", "SELECT station, attempt_id FROM station_attempts")
        central = [(s, int(i)) for s, i in rows]
        dup = len(central) - len(set(central))
        lost = local - set(central)
        extra = set(central) - local
        results = {r for (r,) in pg.count("records", "SELECT DISTINCT result FROM station_attempts")}
        print(f"attempts: {len(local)} on the stations, {len(central)} in the central history; "
              f"lost {len(lost)}, duplicated {dup}, unknown {len(extra)}; results {sorted(results)}")
        ok = not lost and not dup and not extra and len(local) == 6 * n
        print("every attempt in the central history exactly once: " + ("yes" if ok else "NO"))
        return 0 if ok else 1
    finally:
        pg.cleanup()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
