"""Wall time of a 4-board and a 16-board rehearsal, per stage, so the slowest stage shows.

Run as root: ``python3 bench/rehearse.py [--boards 4 16]``. Prints a table per run and the
16/4 ratio per stage (1.0 = the stage does not grow with the fleet; 4.0 = linear).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout's provisioner first

import argparse  # noqa: E402
import os  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

from provisioner import context  # noqa: E402
from provisioner.rehearse import Rehearsal, RehearsalOptions  # noqa: E402
from provisioner.ui import Reporter  # noqa: E402


def run(boards: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix=f"bench-rehearse-{boards}-") as tmp:
        t0 = time.monotonic()
        ctx = context.current(Reporter(quiet=True))
        report = Rehearsal(RehearsalOptions(boards=boards, work_dir=Path(tmp)), ctx).run()
        total = time.monotonic() - t0
    stages = {s.name: s.duration_s for s in report.steps}
    stages["TOTAL"] = total
    print(f"\n{boards} boards: {'ok' if report.ok else 'FAILED'}")
    for name, secs in stages.items():
        print(f"  {name:<14} {secs:8.1f} s")
    return stages


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--boards", type=int, nargs="+", default=[4, 16])
    args = ap.parse_args()
    print(f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at the start "
          "(the machine may be shared: compare the ratios of one run)")
    runs = {n: run(n) for n in args.boards}
    if len(runs) >= 2:
        lo, hi = min(runs), max(runs)
        print(f"\nper-stage ratio {hi}/{lo} boards (boards x{hi / lo:g}):")
        for name in runs[lo]:
            a, b = runs[lo][name], runs[hi].get(name, 0.0)
            print(f"  {name:<14} {b / a if a > 0.05 else float('nan'):6.2f}")
        slowest = max((k for k in runs[hi] if k != "TOTAL"), key=lambda k: runs[hi][k])
        print(f"slowest stage at {hi} boards: {slowest} ({runs[hi][slowest]:.1f} s)")


if __name__ == "__main__":
    main()
