"""Benchmark: flash 1, 4 and 8 virtual boards in parallel with the qdl stand-in at a fixed rate.

Prints wall time per run, parallel efficiency (goal: 8 boards within 1.15x the time of 1) and
the station's own CPU time per board (the qdl stand-ins' CPU is the "device side" and reported
separately). Then the dashboard's cost (bench/station_dashboard.py): station CPU per board with
and without `station dashboard` open in Debian's chromium (goal: under 5% more), and the time
from a board event to the tile showing it (goal: under 250 ms).
Usage: python3 bench/station.py [--rate-kbps 4096] [--counts 1,4,8] [--dashboard-rounds 3]
       [--no-dashboard] [--screenshots DIR]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the checkout's provisioner and tests/ before an installed copy

from provisioner import context  # noqa: E402
from provisioner.image.release import write_release  # noqa: E402
from provisioner.manifest import load_manifest  # noqa: E402
from provisioner.sim.board import VirtualBoard  # noqa: E402
from provisioner.sim.bundle import make_bundle  # noqa: E402
from provisioner.sim.qdl import install_wrappers  # noqa: E402
from provisioner.sim.synthetic_models import make_litertlm  # noqa: E402
from provisioner.station.config import StationConfig  # noqa: E402
from provisioner.station.flash import FlashOptions, flash_release  # noqa: E402
from provisioner.station.records import Records  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rate-kbps", type=int, default=4096, help="qdl stand-in transfer rate per board")
    ap.add_argument("--counts", default="1,4,8")
    ap.add_argument("--dashboard-rounds", type=int, default=3, help="flashes of 8 boards with and without")
    ap.add_argument("--no-dashboard", action="store_true", help="skip the dashboard's figures")
    ap.add_argument("--screenshots", type=Path, help="also save PNGs of the dashboard (a failed board) here")
    args = ap.parse_args()
    counts = [int(x) for x in args.counts.split(",")]
    os.environ["PROVISIONER_SIM_QDL_RATE_KBPS"] = str(args.rate_kbps)
    work = Path(tempfile.mkdtemp(prefix="bench-station-"))
    try:
        manifest = load_manifest(ROOT / "examples" / "gemma4-e2b-iq8275.yaml")
        model = make_litertlm(work / "m.litertlm")
        bundle = make_bundle(manifest, work / "bundle", model_files={"gemma-4-e2b": model})
        release = write_release(manifest, bundle, work / "out", simulated=True)
        size = sum(f.stat().st_size for f in bundle.iterdir() if f.is_file())
        print(f"bundle {size / 1e6:.1f} MB, qdl stand-in at {args.rate_kbps} kB/s per board, "
              f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} (ratios in one run are what compare)")
        results = {}
        for n in counts:
            root = work / f"sim{n}"
            wrappers = install_wrappers(root)
            for i in range(n):
                VirtualBoard.create(root, "iq-8275-evk", f"0BE{i:05X}", f"1-{i // 4 + 1}.{i % 4 + 1}").set_state("edl")
            cfg = StationConfig(sysfs_root=root / "sysfs", qdl=str(wrappers["qdl"]), database=root / "db",
                                log_dir=root / "logs")
            r0 = resource.getrusage(resource.RUSAGE_SELF)
            c0 = resource.getrusage(resource.RUSAGE_CHILDREN)
            t0 = time.monotonic()
            with Records(cfg.database) as rec:
                run = flash_release(release, cfg, context.current(), FlashOptions(all_boards=True), records=rec)
            wall = time.monotonic() - t0
            r1 = resource.getrusage(resource.RUSAGE_SELF)
            c1 = resource.getrusage(resource.RUSAGE_CHILDREN)
            if not run.ok:
                print(f"{n} boards: FAILED {[r.error for r in run.failed]}")
                return 1
            own = (r1.ru_utime + r1.ru_stime) - (r0.ru_utime + r0.ru_stime)
            kids = (c1.ru_utime + c1.ru_stime) - (c0.ru_utime + c0.ru_stime)
            results[n] = wall
            print(f"{n:2d} board(s): wall {wall:6.2f} s  station CPU {own / n * 1000:6.1f} ms/board  "
                  f"qdl stand-in CPU {kids / n * 1000:6.1f} ms/board  ratio vs 1 board "
                  f"{wall / results[counts[0]]:.3f}")
        if 1 in results and max(counts) in results:
            n = max(counts)
            ratio = results[n] / results[1]
            print(f"parallel efficiency: {n} boards took {ratio:.3f}x the time of 1 "
                  f"(goal <= 1.15x: {'met' if ratio <= 1.15 else 'NOT met'}); "
                  f"efficiency {1 / ratio * 100:.0f}%")
        if not args.no_dashboard:
            from bench.station_dashboard import dashboard_cost

            dashboard_cost(release, work, rounds=args.dashboard_rounds, screenshots=args.screenshots)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
