#!/usr/bin/env python3
"""Fleet verify at 5, 20 and 50 virtual boards vs two baselines on the same boards, in one run.

Prints wall time and controller CPU seconds per board for:
  verify      the real `fleet verify` (all checks + smoke inference): one module call per board,
              judged on the controller (provisioner.fleet.verdict)
  per-check   one Ansible task per check (8 tasks: slurp/stat/command, smoke inference last)
  one-shell   a single shell task per board doing the same reads and the smoke inference (the floor)
All three run with the same settings (pipelining, ControlPersist, forks = boards) through the same
runner. Goal: verify within 1.5x the one-shell floor at 50 boards.

Needs root (virtual boards are sshd in mount namespaces). Usage: python3 bench/fleet.py [--sizes 5,20,50]
"""

from __future__ import annotations

import os
import sys

# bench/ holds scripts named like stdlib modules (inspect.py): never import from the script's own folder
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]

import argparse  # noqa: E402
import json  # noqa: E402
import resource  # noqa: E402
import shlex  # noqa: E402
import shutil  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import yaml  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from provisioner import catalog, layout  # noqa: E402
from provisioner.contracts import inventory  # noqa: E402
from provisioner.fleet.inventory import group_vars  # noqa: E402
from provisioner.fleet.runner import ansible_env, run_playbook  # noqa: E402
from provisioner.fleet.serve_config import smoke_run  # noqa: E402
from provisioner.process import run_streaming  # noqa: E402
from tests.fleet.simfleet import BoardSpec, build_fleet, can_run  # noqa: E402

PER_CHECK = """---
- name: Baseline - one task per check
  hosts: all
  gather_facts: false
  tasks:
    - name: Identity
      ansible.builtin.slurp:
        src: /sys/devices/soc0/machine
    - name: Release
      ansible.builtin.slurp:
        src: /etc/os-release
    - name: FastRPC device
      ansible.builtin.stat:
        path: /dev/fastrpc-cdsp
    - name: cdsprpcd
      ansible.builtin.command: systemctl is-active cdsprpcd.service
      changed_when: false
    - name: QAIRT host library
      ansible.builtin.stat:
        path: "{{ bench_qairt_lib }}"
    - name: Model
      ansible.builtin.stat:
        path: "{{ bench_model_dir }}"
    - name: Service memlock
      ansible.builtin.command: "systemctl show -p LimitMEMLOCK {{ bench_unit }}"
      changed_when: false
    - name: Smoke inference
      ansible.builtin.shell: "{{ bench_smoke }}"
      changed_when: false
"""

ONE_SHELL = """---
- name: Baseline - one shell task per board
  hosts: all
  gather_facts: false
  tasks:
    - name: Everything in one shell command
      ansible.builtin.shell: "{{ bench_all }}"
      changed_when: false
"""


def bench_vars(board_id: str) -> dict[str, str]:
    """Per board type: the same reads and the same smoke inference argv as verify, as shell text."""
    b = catalog.board(board_id)
    gv = group_vars(board_id)
    m = inventory.ModelVars.from_vars(gv["edge_llm_models"][0])
    run = smoke_run(b, m, inventory.SMOKE_PROMPT, inventory.SMOKE_MAX_TOKENS)
    def q(text: str) -> str:           # quote, keeping $W (the temp dir) expandable
        if "{work}" not in text:
            return shlex.quote(text)
        head, tail = text.split("{work}", 1)
        return shlex.quote(head) + '"$W"' + shlex.quote(tail)

    writes = " ".join(f"printf %s {shlex.quote(c)} > {q(p)};" for p, c in run["files"].items())
    env = " ".join(f"{k}={shlex.quote(v)}" for k, v in run["env"].items())
    argv = " ".join(q(a) for a in run["argv"])
    smoke = f"W=$(mktemp -d); {writes} cd {shlex.quote(run['cwd'])} && env {env} {argv}; rc=$?; rm -rf \"$W\"; " \
            "exit $rc"
    unit = layout.SERVE_UNIT.replace("@.", f"@{m.name}.")
    reads = (f"cat {layout.SOC0_MACHINE} {layout.SOC0_SOC_ID} {layout.OS_RELEASE} {layout.DOWNLOAD_MODE_PARAM}; "
             f"stat -c '%U:%G %a' {layout.FASTRPC_DEVICE}; systemctl is-active {layout.FASTRPC_SERVICE}; "
             f"systemctl show -p LimitMEMLOCK {unit}; ls {layout.qairt_host_lib_dir(b, m.qairt)} >/dev/null; "
             f"sha256sum {layout.model_current(m.name)}/* >/dev/null; ")
    return {"bench_qairt_lib": f"{layout.qairt_host_lib_dir(b, m.qairt)}/libQnnHtp.so",
            "bench_model_dir": layout.model_current(m.name), "bench_unit": unit, "bench_smoke": smoke,
            "bench_all": reads + smoke}


def children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def timed(fn) -> tuple[float, float, object]:
    cpu0, t0 = children_cpu(), time.monotonic()
    out = fn()
    return time.monotonic() - t0, children_cpu() - cpu0, out


def run_raw(playbook: Path, inventory: Path, forks: int) -> int:
    env = ansible_env(forks=forks)
    env["ANSIBLE_STDOUT_CALLBACK"] = "default"          # plain output; parsed by nobody
    res = run_streaming(["ansible-playbook", "-i", str(inventory), str(playbook)], env=env)
    return res.returncode


def subset_inventory(full: Path, names: list[str], out: Path, extra: dict[str, dict[str, str]]) -> Path:
    data = yaml.safe_load(full.read_text())
    groups = {}
    for g, node in data["all"]["children"].items():
        hosts = {h: v for h, v in node["hosts"].items() if h in names}
        if hosts:
            groups[g] = {"hosts": hosts, "vars": extra[g]}
    out.write_text(yaml.safe_dump({"all": {"children": groups}}))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="5,20,50")
    ap.add_argument("--keep", action="store_true", help="keep the sim root")
    ap.add_argument("--mitogen", type=Path, help="also run verify with Mitogen's mitogen_linear strategy from this "
                                                 "unpacked mitogen wheel (pip download mitogen; unzip)")
    args = ap.parse_args()
    why = can_run()
    if why:
        print(f"bench/fleet.py: cannot run here: {why}", file=sys.stderr)
        return 2
    sizes = sorted(int(s) for s in args.sizes.split(","))
    base = Path(tempfile.mkdtemp(prefix="edge-llm-bench-fleet-"))
    specs = [BoardSpec(f"b{i:03d}-{'8275' if i % 2 == 0 else '9075'}",
                     "iq-8275-evk" if i % 2 == 0 else "iq-9075-evk") for i in range(max(sizes))]
    t0 = time.monotonic()
    fleet = build_fleet(base / "sim", specs, cache=base / "cache")
    print(f"# {len(specs)} virtual boards up in {time.monotonic() - t0:.1f} s", flush=True)
    extra = {g.replace("-", "_"): bench_vars(g) for g in ("iq-8275-evk", "iq-9075-evk")}
    pb_dir = base / "pb"
    pb_dir.mkdir()
    (pb_dir / "per_check.yml").write_text(PER_CHECK)
    (pb_dir / "one_shell.yml").write_text(ONE_SHELL)
    results = []
    try:
        # warm-up: first ssh connections and python bytecode caches on every board
        inv_all = subset_inventory(fleet.inventory, [s.name for s in specs], base / "inv-all.yml", extra)
        run_raw(pb_dir / "one_shell.yml", inv_all, len(specs))
        for n in sizes:
            names = [s.name for s in specs[:n]]
            inv = subset_inventory(fleet.inventory, names, base / f"inv-{n}.yml", extra)
            row = {"boards": n}
            wall, cpu, run = timed(lambda inv=inv, n=n: run_playbook("verify", inv, forks=n))
            failed = run.failed + run.unreachable
            row["verify"] = (wall, cpu, len(failed))
            wall, cpu, rc = timed(lambda inv=inv, n=n: run_raw(pb_dir / "per_check.yml", inv, n))
            row["per_check"] = (wall, cpu, rc)
            wall, cpu, rc = timed(lambda inv=inv, n=n: run_raw(pb_dir / "one_shell.yml", inv, n))
            row["one_shell"] = (wall, cpu, rc)
            if args.mitogen:
                menv = {"ANSIBLE_STRATEGY_PLUGINS": str(args.mitogen / "ansible_mitogen/plugins/strategy"),
                        "ANSIBLE_STRATEGY": "mitogen_linear",
                        "PYTHONPATH": f"{args.mitogen}:{os.environ.get('PYTHONPATH', '')}"}
                wall, cpu, run = timed(lambda inv=inv, n=n, menv=menv: run_playbook("verify", inv, forks=n,
                                                                         env={**os.environ, **menv}))
                row["verify_mitogen"] = (wall, cpu, len(run.failed + run.unreachable))
                print(f"{n:3d} boards | verify with mitogen_linear {wall:6.1f} s, {cpu / n:5.2f} cpu-s/board "
                      f"({row['verify_mitogen'][2]} failed)", flush=True)
            results.append(row)
            v, p, s = row["verify"], row["per_check"], row["one_shell"]
            print(f"{n:3d} boards | verify {v[0]:6.1f} s, {v[1] / n:5.2f} cpu-s/board ({v[2]} failed) | "
                  f"per-check {p[0]:6.1f} s, {p[1] / n:5.2f} cpu-s/board | one-shell {s[0]:6.1f} s, "
                  f"{s[1] / n:5.2f} cpu-s/board | verify/one-shell {v[0] / s[0]:.2f}x, "
                  f"per-check/one-shell {p[0] / s[0]:.2f}x", flush=True)
    finally:
        fleet.stop()
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)
    print(json.dumps({"results": results}, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
