#!/usr/bin/env python3
"""Every fleet operation at 16/64(/256) virtual boards against the one-task floor, in one run.

For each size and operation (verify, launch, benchmark, deploy, rollback, update-os) it runs the
command a user runs, `provisioner fleet <op>` (CLI -> provisioner.fleet.runner -> ansible-playbook,
the playbooks as they are on this checkout), and prints wall time and controller CPU seconds per board
(CPU of the waited-for children: the CLI, ansible-playbook and its ssh clients, RUSAGE_CHILDREN).
In the same run, on the same boards and through the same runner settings, it runs the floor: one
``ansible.builtin.shell: "true"`` task per board -- the pure controller overhead of one task, no board
work. Ratios are op/floor for wall time and for controller CPU per board; the goal is "within 1.5x the
floor at 64 boards". CPU is the figure that grows with the fleet (the controller pays it per board);
wall also holds the boards' own work (downloads, inference, the update-os reboot).

Settings: forks = boards, deploy and update-os in one batch (serial 100%) so rolling batches do not
hide the per-board cost, benchmark with --runs 1. Every deploy size ships new model versions
(QAIRT only once: a board that got it at an earlier size has it already).
update-os runs last (it turns boards into OSTree boards) on the iq-8275-evk half of each size: the
OSTree test releases (tests/ota/otafleet.py) are built for that branch.

An operation whose precondition fails at a size (boards do not start, no ostree CLI, an earlier op
failed) is printed as skipped with the reason. ``--strategies linear,mitogen_linear,mitogen_free``
reruns verify, benchmark and the floor with each strategy and prints the gain over linear (mitogen
strategies need the `mitogen` package in this interpreter, e.g. a separate venv:
``python3 -m venv /tmp/vm && /tmp/vm/bin/pip install -e . mitogen pytest && /tmp/vm/bin/python bench/fleet.py``).

Needs root (virtual boards are mount namespaces with sshd -i per connection).
Usage: python3 bench/fleet.py [--sizes 16,64,256] [--ops verify,deploy,...] [--strategies linear,mitogen_linear]
"""

from __future__ import annotations

import argparse  # noqa: E402
import json  # noqa: E402
import os
import resource  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import sys
import tempfile  # noqa: E402
import time  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import yaml  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from provisioner.fleet.runner import ansible_env  # noqa: E402
from provisioner.process import run_streaming  # noqa: E402
from tests.fleet.simfleet import FLOOR, BoardSpec, SimFleet, build_fleet, can_run  # noqa: E402

#: run order: launch and benchmark serve the image's models first, then deploy and its rollback (launched
#: after this bench's deploy, the iq-9075-evk boards' service kept answering /health with 503: a board-side
#: question for the deploy/serve tests, not a controller cost)
OPS = ("verify", "launch", "benchmark", "deploy", "rollback", "update-os")
GOAL = 1.5
GOAL_SIZE = 64
STRATEGY_OPS = ("verify", "benchmark")      # idempotent: rerunning them per strategy measures the same work

@dataclass
class Result:
    wall: float = 0.0
    cpu: float = 0.0
    boards: int = 0
    passed: int = 0
    skipped: str = ""
    note: str = ""

    @property
    def cpu_per_board(self) -> float:
        return self.cpu / max(1, self.boards)


@dataclass
class Bench:
    """The growing sim fleet and everything the operations need around it."""

    base: Path
    benchmark_runs: int
    fleet: SimFleet | None = None
    hosts: dict[str, dict[str, Any]] = field(default_factory=dict)     # name -> host vars (with serve port)
    groups: dict[str, str] = field(default_factory=dict)               # name -> inventory group
    parts: list[SimFleet] = field(default_factory=list)
    server: Any = None

    # ------------------------------------------------------------------ fleet
    def grow(self, n: int) -> None:
        """Start boards until there are ``n`` (alternating iq-8275-evk / iq-9075-evk)."""
        from provisioner.sim import ports
        from tests.ota import otafleet as of

        have = len(self.hosts)
        if have >= n:
            return
        specs = []
        for i in range(have, n):
            kind = "8275" if i % 2 == 0 else "9075"
            specs.append(BoardSpec(f"b{i:03d}-{kind}", f"iq-{kind}-evk",
                                   vars=dict(of.SIM_VARS) if kind == "8275" else {}))
        part = build_fleet(self.base / f"sim-{have}", specs, cache=self.base / "cache", base_index=have)
        self.parts.append(part)
        data = yaml.safe_load(part.inventory.read_text())
        for grp, node in data["all"]["children"].items():
            for name, hv in node["hosts"].items():
                hv["edge_llm_serve_port_base"] = ports.serve_port_base(part.boards[name])
                self.hosts[name] = hv
                self.groups[name] = grp

    def names(self, n: int, board_id: str | None = None) -> list[str]:
        first = sorted(self.hosts)[:n]
        return [h for h in first if board_id is None or self.groups[h] == board_id.replace("-", "_")
                or self.groups[h] == board_id]

    def inventory(self, names: list[str], tag: str) -> Path:
        groups: dict[str, dict] = {}
        for h in names:
            groups.setdefault(self.groups[h], {"hosts": {}})["hosts"][h] = self.hosts[h]
        path = self.base / f"inv-{tag}.yml"
        path.write_text(yaml.safe_dump({"all": {"children": groups}}, sort_keys=True), encoding="utf-8")
        return path

    def board(self, name: str):
        for p in self.parts:
            if name in p.boards:
                return p.boards[name]
        raise KeyError(name)

    def stop(self) -> None:
        if self.server is not None:
            self.server.close()
        for p in self.parts:
            p.stop()


def children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def strategy_env(strategy: str) -> dict[str, str]:
    """The user's way to pick a strategy: ANSIBLE_STRATEGY (the runner passes ANSIBLE_* on)."""
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}",
           "COLUMNS": "200"}
    env.pop("ANSIBLE_STRATEGY", None)
    if strategy != "linear":
        env["ANSIBLE_STRATEGY"] = strategy
    if strategy.startswith("mitogen"):
        # Mitogen's strategies ship beside its package (ansible_mitogen/plugins/strategy, mitogen on PyPI);
        # Ansible finds them only through ANSIBLE_STRATEGY_PLUGINS. Not a product option: it measured slower.
        import ansible_mitogen  # noqa: PLC0415 - only with --strategies mitogen_*

        env["ANSIBLE_STRATEGY_PLUGINS"] = str(Path(ansible_mitogen.__file__).parent / "plugins" / "strategy")
    return env


def cli(op: str, inv: Path, n: int, report: Path, strategy: str, *more: str) -> Result:
    """``provisioner fleet <op>`` as a user runs it; wall, children CPU and passed boards from --report."""
    argv = [sys.executable, "-m", "provisioner", "fleet", op, "-i", str(inv), "--forks", str(n),
            "--report", str(report), "--log", str(report.with_suffix(".log")), *more]
    report.unlink(missing_ok=True)
    cpu0, t0 = children_cpu(), time.monotonic()
    proc = subprocess.run(argv, capture_output=True, text=True, env=strategy_env(strategy), timeout=3600)
    res = Result(wall=time.monotonic() - t0, cpu=children_cpu() - cpu0, boards=n)
    rows = json.loads(report.read_text())["boards"] if report.is_file() else []
    res.passed = sum(1 for r in rows if r.get("verdict") == "pass")
    if res.passed < n:
        bad = [f"{r['board']}: {r.get('reason') or r.get('verdict')}" for r in rows if r.get("verdict") != "pass"]
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] if not rows else []
        res.note = "; ".join(bad[:2] + tail)[:240]
    return res


def floor(inv: Path, n: int, playbook: Path, strategy: str) -> Result:
    """The one-task floor through the same runner settings (ansible_env) the operations get."""
    env = ansible_env(forks=n, base=strategy_env(strategy))
    env["ANSIBLE_STDOUT_CALLBACK"] = "default"
    cpu0, t0 = children_cpu(), time.monotonic()
    rc = run_streaming(["ansible-playbook", "-i", str(inv), str(playbook)], env=env).returncode
    return Result(wall=time.monotonic() - t0, cpu=children_cpu() - cpu0, boards=n, passed=n if rc == 0 else 0,
                  note="" if rc == 0 else f"ansible-playbook rc {rc}")


# ---------------------------------------------------------------------- operations
def deploy_artifacts(b: Bench, n: int) -> tuple[Path, str]:
    """New model versions for this size under the artifact server (QAIRT tarball shared by all sizes)."""
    from tests.fleet import test_fleet_deploy as td
    from tests.fleet.artserver import ArtifactServer

    root = b.base / "artifacts"
    if b.server is None:
        td._qairt_tarball(root / f"s{n}" / "qairt" / f"{td.NEW_QAIRT}.tar.gz", td.NEW_QAIRT)
        b.server = ArtifactServer(root)
    else:
        shutil.copytree(next(root.glob("s*/qairt")), root / f"s{n}" / "qairt")
    td.add_gemma(root / f"s{n}", n_dispatch_ops=3, context=4096 + n)
    td.add_nemotron(root / f"s{n}", f"bench{n}", td.NEW_QAIRT, part_size=8192)
    return root / f"s{n}", f"{b.server.url}/s{n}"


def run_op(b: Bench, op: str, n: int, strategy: str = "linear") -> Result:
    names = b.names(n)
    inv = b.inventory(names, f"{n}")
    report = b.base / f"report-{op}-{n}-{strategy}.json"
    if op == "verify":
        return cli(op, inv, n, report, strategy)
    if op == "deploy":
        art, url = deploy_artifacts(b, n)
        return cli(op, inv, n, report, strategy, "--artifacts", str(art), "--artifact-url", url,
                   "-e", "edge_llm_deploy_serial=100%", "-e", "edge_llm_deploy_max_fail_percentage=100")
    if op == "launch":
        return cli(op, inv, n, report, strategy)
    if op == "benchmark":
        return cli(op, inv, n, report, strategy, "--runs", str(b.benchmark_runs))
    if op == "rollback":
        return cli(op, inv, n, report, strategy, "-e", "edge_llm_deploy_serial=100%")
    raise ValueError(op)


@dataclass
class Ota:
    """OSTree releases for update-os: a base every OTA board is flashed with, then one per size."""

    base: Path
    repo: Path
    server: Any
    releases: dict[int, Path]


def ota_setup(b: Bench, sizes: list[int]) -> Ota:
    """Build and publish the releases, turn every iq-8275-evk board into an OSTree board on the base."""
    from tests.fleet.artserver import ArtifactServer
    from tests.ota import otafleet as of

    base = b.base / "ota"
    base.mkdir(exist_ok=True)
    names = b.names(max(sizes), "iq-8275-evk")
    rootfs = b.board(names[0]).rootfs_dir
    rel1, c1 = of.build_release(base, "base-1", of.image_tree(rootfs, base, "base-1"))
    repo = base / "srv"
    of.publish(rel1, repo)
    releases = {}
    for n in sizes:
        rel, _ = of.build_release(base, f"os-{n}", of.image_tree(rootfs, base, f"os-{n}", {
            "usr/lib/edge-llm/bench-change.txt": f"release for {n} boards\n".encode() * 100}))
        of.publish(rel, repo)
        releases[n] = rel
    sub = SimFleet(base, {h: b.board(h) for h in names}, b.parts[0].inventory, {})
    of.make_ota_boards(sub, repo, c1)
    return Ota(base, repo, ArtifactServer(repo), releases)


def run_update_os(b: Bench, ota: Ota, n: int) -> Result:
    names = b.names(n, "iq-8275-evk")
    inv = b.inventory(names, f"ota-{n}")
    # an OSTree board starts from the flashed commit's /etc, as after a sota flash: launch its service
    # there first (not timed), so the gate's serving-API step has the board's own instance to stream to
    launched = cli("launch", inv, len(names), b.base / f"report-launch-ota-{n}.json", "linear")
    if launched.passed < len(names):
        return Result(boards=len(names), skipped=f"launch on the OSTree boards failed: {launched.note}")
    return cli("update-os", inv, len(names), b.base / f"report-update-os-{n}.json", "linear",
               "--release", str(ota.releases[n]), "--repo", ota.server.url, "--serial", str(len(names)),
               "--max-fail-percentage", "100")


# ---------------------------------------------------------------------- output
def line(op: str, n: int, r: Result, fl: Result | None) -> str:
    if r.skipped:
        return f"{n:4d} boards | {op:10} skipped: {r.skipped}"
    text = (f"{r.boards:4d} boards | {op:10} {r.wall:7.1f} s wall, {r.cpu_per_board:5.2f} cpu-s/board "
            f"({r.passed}/{r.boards} pass)")
    if fl is not None and not fl.skipped and fl.wall > 0:
        cpu_x = r.cpu_per_board / max(1e-6, fl.cpu_per_board)
        goal = ""
        if n == GOAL_SIZE and r.passed == r.boards:       # a run that failed boards is not judged
            goal = "  goal met" if cpu_x <= GOAL else f"  goal ({GOAL}x cpu) MISSED"
        text += (f" | floor {fl.wall:6.1f} s, {fl.cpu_per_board:5.2f} cpu-s/board | x floor: wall "
                 f"{r.wall / fl.wall:5.2f}, cpu {cpu_x:5.2f}{goal}")
    if r.note:
        text += f"\n{'':13}   {r.note}"
    return text


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="16,64", help="board counts (default 16,64; the issue's goal adds 256)")
    ap.add_argument("--ops", default=",".join(OPS), help=f"subset of {','.join(OPS)}")
    ap.add_argument("--strategies", default="linear",
                    help="also rerun verify, benchmark and the floor with these strategies "
                         "(e.g. linear,free,mitogen_linear,mitogen_free)")
    ap.add_argument("--benchmark-runs", type=int, default=1)
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    args = ap.parse_args()
    why = can_run()
    if why:
        print(f"bench/fleet.py: cannot run here: {why}", file=sys.stderr)
        return 2
    sizes = sorted({int(s) for s in args.sizes.split(",")})
    ops = [o for o in OPS if o in args.ops.split(",")]
    unknown = set(args.ops.split(",")) - set(OPS)
    if unknown:
        print(f"bench/fleet.py: unknown --ops {', '.join(sorted(unknown))} (use {', '.join(OPS)})", file=sys.stderr)
        return 2
    strategies = [s for s in args.strategies.split(",") if s]
    if "linear" not in strategies:
        strategies.insert(0, "linear")
    with open("/proc/loadavg") as fh:
        print(f"# controller: {os.cpu_count()} cores, load {fh.read().split()[:3]} at start (shared machine)")
    base = Path(tempfile.mkdtemp(prefix="edge-llm-bench-fleet-"))
    (base / "floor.yml").write_text(FLOOR)
    b = Bench(base, args.benchmark_runs)
    out: dict[str, Any] = {"sizes": {}}
    started: list[int] = []
    try:
        for n in sizes:
            rows: dict[str, Result] = {}
            out["sizes"][n] = rows
            t0 = time.monotonic()
            try:
                b.grow(n)
            except Exception as exc:  # noqa: BLE001 - a size that does not fit is a result, not a crash
                reason = f"{n} virtual boards did not start: {str(exc).splitlines()[0][:200]}"
                for op in ops:
                    rows[op] = Result(boards=n, skipped=reason)
                    print(line(op, n, rows[op], None), flush=True)
                break
            added = n - (started[-1] if started else 0)
            started.append(n)
            print(f"# {n} virtual boards up ({time.monotonic() - t0:.0f} s to add {added})", flush=True)
            floor(b.inventory(b.names(n), f"{n}"), n, base / "floor.yml", "linear")   # warm-up: first ssh
            fl = {s: floor(b.inventory(b.names(n), f"{n}"), n, base / "floor.yml", s) for s in strategies}
            rows["floor"] = fl["linear"]
            failed_before: str | None = None
            for op in ops:
                if op == "update-os":
                    continue
                if op in ("benchmark",) and "launch" in ops and rows.get("launch") and rows["launch"].passed < n:
                    rows[op] = Result(boards=n, skipped="launch did not pass on every board")
                elif op == "rollback" and (failed_before or "deploy" not in rows):
                    rows[op] = Result(boards=n, skipped=failed_before or "needs deploy first (a previous version)")
                else:
                    try:
                        rows[op] = run_op(b, op, n)
                    except Exception as exc:  # noqa: BLE001 - report and go on with the next op
                        rows[op] = Result(boards=n, skipped=f"{type(exc).__name__}: {str(exc)[:200]}")
                if op == "deploy" and rows[op].passed < n:
                    failed_before = (f"deploy was skipped ({rows[op].skipped})" if rows[op].skipped
                                     else "deploy did not pass on every board")
                print(line(op, n, rows[op], fl["linear"]), flush=True)
                for s in strategies[1:]:
                    if op in STRATEGY_OPS and not rows[op].skipped:
                        r = run_op(b, op, n, s)
                        rows[f"{op}[{s}]"] = r
                        print(line(f"{op}[{s}]", n, r, fl[s]), flush=True)
                        print(f"{'':13}   gain of {s} over linear (linear/{s}, >1 = better): wall "
                              f"{rows[op].wall / max(1e-6, r.wall):.2f}, cpu {rows[op].cpu / max(1e-6, r.cpu):.2f}",
                              flush=True)
            for s in strategies[1:]:
                rows[f"floor[{s}]"] = fl[s]
                print(f"{n:4d} boards | floor[{s}] {fl[s].wall:6.1f} s, {fl[s].cpu_per_board:5.2f} cpu-s/board "
                      f"vs linear floor {fl['linear'].wall:6.1f} s, {fl['linear'].cpu_per_board:5.2f} cpu-s/board",
                      flush=True)
        if "update-os" in ops and started:
            if not shutil.which("ostree"):
                for n in started:
                    out["sizes"][n]["update-os"] = r = Result(boards=n, skipped="no ostree CLI on the controller")
                    print(line("update-os", n, r, None))
            else:
                t0 = time.monotonic()
                try:
                    ota = ota_setup(b, started)
                except Exception as exc:  # noqa: BLE001
                    ota = None
                    reason = f"OSTree boards could not be made: {type(exc).__name__}: {str(exc)[:200]}"
                if ota is not None:
                    print(f"# OSTree releases and boards ready ({time.monotonic() - t0:.0f} s)", flush=True)
                try:
                    for n in started:
                        names = b.names(n, "iq-8275-evk")
                        if ota is None:
                            r = Result(boards=len(names), skipped=reason)
                            fl_ota = None
                        else:
                            inv = b.inventory(names, f"ota-{n}")
                            floor(inv, len(names), base / "floor.yml", "linear")    # warm-up: sshd restarted
                            fl_ota = floor(inv, len(names), base / "floor.yml", "linear")
                            r = run_update_os(b, ota, n)
                        out["sizes"][n]["update-os"] = r
                        print(line("update-os", n, r, fl_ota), flush=True)
                finally:
                    if ota is not None:
                        ota.server.close()
    finally:
        b.stop()
        from tests.ota import otafleet as of

        of.unfreeze(base)
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)
    print(json.dumps({str(n): {k: vars(v) for k, v in rows.items()} for n, rows in out["sizes"].items()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
