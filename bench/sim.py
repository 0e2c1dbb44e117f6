#!/usr/bin/env python3
"""Benchmark: bring up 1, 16 and 64 booted virtual boards and tear them down.

Prints wall time for ``up`` and ``down`` and the summed RSS of every sim process (supervisor,
per-board namespace agents, sshd, services) once all boards are booted, and for the largest count
how that RSS splits by process kind. Goal: 64 boards < 2 GB.
Timings on shared CI machines are noisy: read ratios, never treat one number as pass/fail.

    python3 bench/sim.py [--counts 1,16,64] [--boot-scale 0]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout's provisioner first

from provisioner.sim import control  # noqa: E402


def _ancestors() -> set[int]:
    out, pid = set(), os.getpid()
    while pid > 1:
        out.add(pid)
        pid = int(Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[1])
    return out


def sim_processes(root: Path) -> list[int]:
    """Processes started for this sim root: the supervisor, and everything in board namespaces."""
    needle = str(root).encode()
    skip = _ancestors()
    found = set()
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) in skip:
            continue
        try:
            if needle in (d / "cmdline").read_bytes():
                found.add(int(d.name))
        except OSError:
            continue
    # children of those (sshd sessions, services) even if their command line does not name the root
    changed = True
    while changed:
        changed = False
        for d in Path("/proc").iterdir():
            if not d.name.isdigit() or int(d.name) in found or int(d.name) in skip:
                continue
            try:
                ppid = int((d / "stat").read_text().split(")")[-1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            if ppid in found:
                found.add(int(d.name))
                changed = True
    return sorted(found)


def rss_bytes(pids: list[int]) -> int:
    total = 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) * 1024
        except OSError:
            continue
    return total


def kind(pid: int) -> str:
    """What a sim process is, for the per-kind breakdown (where the memory goes per board)."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return "gone"
    text = b" ".join(argv)
    if b"provisioner.sim.supervisor" in text:
        return "supervisor"
    if b"provisioner.sim.host" in text or argv[:2] == [b"/bin/sh", b"/run/edge-llm-sim/agent"]:
        return "namespace agent"
    if argv[0].endswith(b"/sshd-socket"):
        return "ssh socket (sshd-socket)"
    if argv[0].startswith((b"sshd", b"/usr/sbin/sshd")):
        return "sshd"
    return "other (services, sessions)"


def breakdown(pids: list[int]) -> dict[str, tuple[int, float]]:
    """kind -> (processes, RSS MB)."""
    out: dict[str, tuple[int, float]] = {}
    for pid in pids:
        k = kind(pid)
        n, mb = out.get(k, (0, 0.0))
        out[k] = (n + 1, mb + rss_bytes([pid]) / 2**20)
    return out


def pss_bytes(pids: list[int]) -> int:
    """Proportional set size: shared interpreter pages counted once across processes."""
    total = 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    total += int(line.split()[1]) * 1024
        except OSError:
            continue
    return total


def run(count: int, board: str) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="simbench-") as tmp:
        root = Path(tmp) / "sim"
        t0 = time.monotonic()
        res = control.up(count, board, root=root, timeout_s=600)
        up_s = time.monotonic() - t0
        time.sleep(0.5)
        pids = sim_processes(root)
        rss = rss_bytes(pids)
        pss = pss_bytes(pids)
        kinds = breakdown(pids)
        with_ssh = sum(1 for b in res.boards if b.reload().ssh)
        t0 = time.monotonic()
        control.down(root)
        down_s = time.monotonic() - t0
        left = sim_processes(root)
    return {"boards": count, "up_s": up_s, "down_s": down_s, "processes": len(pids), "rss_mb": rss / 2**20,
            "pss_mb": pss / 2**20, "with_ssh": with_ssh, "left": len(left), "kinds": kinds}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--counts", default="1,16,64")
    ap.add_argument("--board", default="iq-8275-evk")
    ap.add_argument("--boot-scale", default="0", help="PROVISIONER_SIM_BOOT_SCALE (0 = no artificial delays)")
    args = ap.parse_args()
    os.environ["PROVISIONER_SIM_BOOT_SCALE"] = args.boot_scale
    rows = [run(int(n), args.board) for n in args.counts.split(",")]
    print(f"{'boards':>6} {'up s':>7} {'s/board':>8} {'down s':>7} {'procs':>6} {'RSS MB':>8} {'MB/board':>9} "
          f"{'PSS MB':>7} {'ssh':>4} {'left':>4}")
    for r in rows:
        print(f"{r['boards']:>6} {r['up_s']:>7.1f} {r['up_s'] / r['boards']:>8.2f} {r['down_s']:>7.1f} "
              f"{r['processes']:>6} {r['rss_mb']:>8.0f} {r['rss_mb'] / r['boards']:>9.1f} {r['pss_mb']:>7.0f} "
              f"{r['with_ssh']:>4} "
              f"{r['left']:>4}")
    big = rows[-1]
    print(f"where the RSS goes at {big['boards']} boards:")
    for k, (n, mb) in sorted(big["kinds"].items(), key=lambda kv: -kv[1][1]):
        print(f"  {k:<28} {n:>4} processes {mb:>8.0f} MB  ({mb / n:.1f} MB each, {mb / big['boards']:.1f} MB/board)")
    print(f"goal: {big['boards']} boards < 2048 MB RSS -> measured {big['rss_mb']:.0f} MB "
          f"({big['rss_mb'] / 2048:.0%} of budget; PSS {big['pss_mb']:.0f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
