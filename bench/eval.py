#!/usr/bin/env python3
"""`provisioner fleet eval` with the default suite on 16 virtual boards: wall time and controller CPU per board.

Starts N virtual boards (alternating iq-8275-evk, whose service generates with Google's real LiteRT-LM
runtime on a tiny random-weight model, and iq-9075-evk, whose Genie stand-in answers), launches their
service, then runs the command a user runs, ``provisioner fleet eval -i INV --forks N --report R``, and
prints wall time and controller CPU (the CLI, ansible-playbook and its ssh clients: RUSAGE_CHILDREN) per
board, beside the floor: one ``ansible.builtin.shell: "true"`` task per board through the same runner
settings, the pure controller overhead of one task. Wall also holds the boards' own work (every case of
the suite is one chat completion on the board). The scores are printed per board type for the record:
the IQ-8275 boards' are low because their model's weights are random, not because anything is broken.

Needs root (virtual boards are mount namespaces with sshd). Usage: python3 bench/eval.py [--boards 16]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from provisioner import context  # noqa: E402
from provisioner.eval.suite import load_suite  # noqa: E402
from provisioner.fleet.runner import FleetOptions, ansible_env, run_fleet  # noqa: E402
from provisioner.process import run_streaming  # noqa: E402
from tests.fleet.simfleet import FLOOR, BoardSpec, build_fleet, can_run, free_port  # noqa: E402


def children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--boards", type=int, default=16)
    args = ap.parse_args()
    why = can_run()
    if why:
        print(f"skipped: {why}")
        return 0
    n = args.boards
    suite = load_suite("default")
    with tempfile.TemporaryDirectory(prefix="bench-eval-") as tmp:
        base = Path(tmp)
        specs = [BoardSpec(f"e{i:02d}-{k}", f"iq-{k}-evk", vars={"edge_llm_serve_port_base": free_port()})
                 for i in range(n) for k in (("8275", "9075")[i % 2],)]
        t0 = time.monotonic()
        fleet = build_fleet(base / "sim", specs, cache=base / "cache", base_index=900)
        try:
            launched = run_fleet("launch", fleet.inventory, context.current(), FleetOptions(forks=n))
            up = sum(r.verdict == "pass" for r in launched.rows)
            print(f"{n} boards started and launched in {time.monotonic() - t0:.1f} s ({up} serving)")
            report = base / "eval.json"
            env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}",
                   "COLUMNS": "200"}
            argv = [sys.executable, "-m", "provisioner", "fleet", "eval", "-i", str(fleet.inventory),
                    "--forks", str(n), "--report", str(report)]
            cpu0, t1 = children_cpu(), time.monotonic()
            proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=3600, check=False)
            wall, cpu = time.monotonic() - t1, children_cpu() - cpu0
            scores = json.loads(report.with_name("eval.eval.json").read_text()) if proc.returncode in (0, 1) else {}
            playbook = base / "floor.yml"
            playbook.write_text(FLOOR)
            fenv = ansible_env(forks=n, base=env)
            fenv["ANSIBLE_STDOUT_CALLBACK"] = "default"
            cpu0, t2 = children_cpu(), time.monotonic()
            run_streaming(["ansible-playbook", "-i", str(fleet.inventory), str(playbook)], env=fenv)
            fwall, fcpu = time.monotonic() - t2, children_cpu() - cpu0
        finally:
            fleet.stop()
    if not scores:
        print(f"fleet eval failed (exit {proc.returncode}): {(proc.stderr or proc.stdout).strip()[-400:]}")
        return 1
    print(f"suite {suite.name}: {len(suite.cases)} cases per model, {n} boards, forks {n}")
    for name, w, c in (("fleet eval", wall, cpu), ("floor", fwall, fcpu)):
        print(f"{name:11}: wall {w:6.1f} s ({w / n:5.2f} s per board), controller CPU {c / n:5.2f} s per board")
    print(f"ratio      : wall {wall / max(fwall, 1e-9):.1f}x, CPU {cpu / max(fcpu, 1e-9):.1f}x the one-task floor")
    by_type: dict[str, list[float]] = {}
    for b in scores["boards"]:
        for res in b["models"].values():
            by_type.setdefault(b["type"] or "?", []).append(res["score"])
    for kind, vals in sorted(by_type.items()):
        print(f"score      : {kind}: mean {sum(vals) / len(vals):.2f} over {len(vals)} board models")
    return 0


if __name__ == "__main__":
    sys.exit(main())
