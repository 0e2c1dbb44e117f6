#!/usr/bin/env python3
"""Benchmark: memory of the whole simulator for 16, 64 and 256 virtual boards, idle and in a run.

For each board count it brings the boards up (``control.up``, wall time printed) and measures every
process of the sim: the supervisor and everything inside the boards' mount namespaces (holders,
listeners, sshd, services, sessions). The controller's own ssh clients are not the simulator's and
are left out. Three moments:

* ``idle``: all boards booted, nobody connected;
* ``connected``: one persistent ssh connection per board open, as Ansible's ControlPersist keeps
  during a run (``ssh -o ControlMaster=auto -o ControlPersist=...``, the options ansible-core's ssh
  connection plugin passes);
* ``in a task``: over each of those connections one command runs at the same time (``sleep``), the
  way every fork of a play has a module running.

Figures are PSS (``/proc/<pid>/smaps_rollup``: shared pages counted once across processes, the
honest sum for many copies of one program) and, for comparison with older figures, summed RSS.
Goal: 256 boards fit in 2048 MB. Timings on shared machines are noisy; read the memory.

    python3 bench/sim_memory.py [--counts 16,64,256] [--boot-scale 0]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout's provisioner first

from provisioner.sim import control, host, supervisor  # noqa: E402
from provisioner.sim.board import VirtualBoard  # noqa: E402


def sim_pids(root: Path, boards: list[VirtualBoard]) -> list[int]:
    """The supervisor and every process in a board's mount namespace."""
    inodes = set()
    for b in boards:
        with_info = host.host_dir(b) / "agent.json"
        try:
            inodes.add(int(json.loads(with_info.read_text())["mntns"]))
        except (OSError, ValueError, KeyError):
            continue
    out = {supervisor.running_pid(root) or 0}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                if os.stat(f"/proc/{d}/ns/mnt").st_ino in inodes:
                    out.add(int(d))
            except OSError:
                continue
    out.discard(0)
    return sorted(out)


def _field(path: str, name: str) -> int:
    try:
        with open(path, encoding="ascii", errors="replace") as fh:
            for line in fh:
                if line.startswith(name):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def measure(root: Path, boards: list[VirtualBoard]) -> dict[str, float]:
    pids = sim_pids(root, boards)
    sshd = 0
    for p in pids:
        try:
            if Path(f"/proc/{p}/comm").read_text().strip() == "sshd":
                sshd += 1
        except OSError:
            continue
    return {"procs": len(pids), "sshd": sshd,
            "pss_mb": sum(_field(f"/proc/{p}/smaps_rollup", "Pss:") for p in pids) / 2**20,
            "rss_mb": sum(_field(f"/proc/{p}/status", "VmRSS:") for p in pids) / 2**20}


def _ssh(b: VirtualBoard, control_dir: Path, *command: str) -> list[str]:
    argv = host.ssh_argv(b, *command)
    return [argv[0], "-o", "ControlMaster=auto", "-o", "ControlPersist=300",
            "-o", f"ControlPath={control_dir}/%C", *argv[1:]]


def run(count: int, board: str) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="simmem-") as tmp:
        root = Path(tmp) / "sim"
        cdir = Path(tmp) / "cp"
        cdir.mkdir()
        t0 = time.monotonic()
        try:
            res = control.up(count, board, root=root, timeout_s=max(180.0, 2.0 * count))
            up_s = time.monotonic() - t0
            boards = [b for b in res.boards if b.reload().ssh]     # a board whose host failed has no address
            failed = [ln for ln in (root / "supervisor.log").read_text(errors="replace").splitlines()
                      if "failed" in ln][:3]
            time.sleep(1.0)
            idle = measure(root, boards)
            with ThreadPoolExecutor(max_workers=8) as pool:
                opened = list(pool.map(lambda b: subprocess.run(_ssh(b, cdir, "true"), stdin=subprocess.DEVNULL,
                                                                capture_output=True, timeout=120).returncode,
                                       boards))
            time.sleep(0.5)
            connected = measure(root, boards)
            tasks = [subprocess.Popen(_ssh(b, cdir, "sleep", "8"), stdin=subprocess.DEVNULL,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for b in boards]
            time.sleep(3.0)
            in_task = measure(root, boards)
            for t in tasks:
                t.wait(timeout=120)
            for b in boards:
                argv = _ssh(b, cdir)             # ends with the destination: close its master
                subprocess.run([*argv[:-1], "-O", "exit", argv[-1]], capture_output=True, timeout=30,
                               stdin=subprocess.DEVNULL)
        finally:
            control.down(root)
    for line in failed:
        print(f"  {count} boards: {line}", flush=True)
    return {"boards": count, "up_s": up_s, "ok": sum(1 for r in opened if r == 0), "idle": idle,
            "connected": connected, "in a task": in_task}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--counts", default="16,64,256")
    ap.add_argument("--board", default="iq-8275-evk")
    ap.add_argument("--boot-scale", default="0", help="PROVISIONER_SIM_BOOT_SCALE (0 = no artificial delays)")
    args = ap.parse_args()
    os.environ["PROVISIONER_SIM_BOOT_SCALE"] = args.boot_scale
    print(f"{'boards':>6} {'up s':>6} {'ssh ok':>6}  {'moment':<10} {'procs':>6} {'sshd':>5} {'PSS MB':>7} "
          f"{'PSS/board':>9} {'RSS MB':>7}", flush=True)
    rows = []
    for n in args.counts.split(","):
        r = run(int(n), args.board)
        rows.append(r)
        for moment in ("idle", "connected", "in a task"):
            m = r[moment]
            print(f"{r['boards']:>6} {r['up_s']:>6.1f} {r['ok']:>6}  {moment:<10} {m['procs']:>6} {m['sshd']:>5} "
                  f"{m['pss_mb']:>7.0f} {m['pss_mb'] / r['boards']:>9.2f} {m['rss_mb']:>7.0f}", flush=True)
    big = rows[-1]
    worst = max(big[m]["pss_mb"] for m in ("idle", "connected", "in a task"))
    print(f"goal: {big['boards']} boards fit in 2048 MB -> worst moment {worst:.0f} MB PSS "
          f"({worst / 2048:.0%} of budget)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
