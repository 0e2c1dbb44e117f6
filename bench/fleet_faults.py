"""Fault matrix, fleet rows: the fleet, the build inputs and the caches under faults and hostile input.

Each row drives the production code a user would (the ``provisioner`` CLI, ``run_fleet`` with the real
``ansible-playbook`` over real SSH to virtual boards, the layer's login check) through one fault and
returns (what was lost, what the tool said, what the next run did). bench/faults.py prints this table
below the station's. Needs root (virtual boards are mount namespaces with sshd -i per connection). The cache row needs a
bitbake checkout (``--bitbake DIR``, or bitbake-hashserv on PATH). Usage: python3 bench/fleet_faults.py
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the checkout's provisioner and tests/ before an installed copy

import importlib.util  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402
import signal  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import threading  # noqa: E402
from collections.abc import Callable  # noqa: E402
from typing import Any  # noqa: E402

import yaml  # noqa: E402

from provisioner import catalog, context  # noqa: E402
from provisioner.contracts import board as on_board  # noqa: E402
from provisioner.errors import FleetError  # noqa: E402
from provisioner.fleet import run_fleet  # noqa: E402
from provisioner.fleet.runner import EventCollector, FleetOptions, ansible_env  # noqa: E402
from provisioner.fleet.shared import deploy_index  # noqa: E402
from provisioner.fleet.shared.inventory import group_name  # noqa: E402
from provisioner.hashing import sha256_file  # noqa: E402
from provisioner.manifest import load_manifest  # noqa: E402
from provisioner.process import run_streaming  # noqa: E402
from provisioner.sim import bundle, host  # noqa: E402
from provisioner.sim import synthetic_models as sm  # noqa: E402
from provisioner.sim.board import VirtualBoard  # noqa: E402

EXAMPLE = ROOT / "examples" / "gemma4-e2b-iq8275.yaml"
GEMMA = "gemma-4-e2b"


def _load(name: str) -> Any:
    """A sibling bench script (bench/ is no package: loaded by path)."""
    spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name(f"{name}.py"))
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


inputs = _load("input_faults")
Row, Server, cli, _row = inputs.Row, inputs.Server, inputs.cli, inputs._row

# -- virtual fleet (booted boards with the synthetic image's rootfs, like the fleet tests build them) ---------

class Fleet:
    def __init__(self, work: Path, names: list[str]) -> None:
        self.root = work / "sim"
        m = load_manifest(EXAMPLE)
        tree = work / "rootfs"
        bundle.build_rootfs_tree(m, tree, {m.models[0].name: sm.make_litertlm(work / catalog.models()[GEMMA].file)})
        key = host.controller_key(self.root)
        self.boards: dict[str, VirtualBoard] = {}
        hosts = {}
        for i, name in enumerate(names):
            b = VirtualBoard.create(self.root, "iq-8275-evk", f"{0xBF000000 + i:08X}", f"1-{i + 1}", state="off",
                                    download_mode=0, hostname=name)
            shutil.copytree(tree, b.rootfs_dir, symlinks=True)
            b.set_state("booted")
            addr, port = host.start_host(b, time_scale=0.0)
            self.boards[name] = b
            hosts[name] = {"ansible_host": addr, "ansible_port": port, "ansible_user": "root",
                           "ansible_ssh_private_key_file": str(key), "ansible_python_interpreter":
                           "/run/edge-llm-sim/python3", "ansible_ssh_common_args":
                           f"-o UserKnownHostsFile={host.known_hosts(self.root)} -o StrictHostKeyChecking=yes"}
        self.inventory = work / "inventory.yml"
        self.inventory.write_text(yaml.safe_dump({"all": {"children": {group_name("iq-8275-evk"): {"hosts": hosts}}}}))

    def path(self, board: str, p: str) -> Path:
        return self.boards[board].rootfs_dir / p.lstrip("/")

    def current(self, board: str) -> str | None:
        link = self.path(board, on_board.model_current(GEMMA))
        return os.readlink(link) if link.is_symlink() else None

    def committed(self, board: str, version: str) -> bool:
        return self.path(board, on_board.model_version_dir(GEMMA, version) + deploy_index.COMMITTED).is_file()

    def ssh(self, board: str, *cmd: str) -> str:
        return subprocess.run(host.ssh_argv(self.boards[board], *cmd), capture_output=True, text=True,
                              timeout=60).stdout.strip()

    def stop(self) -> None:
        for b in self.boards.values():
            host.stop_host(b)


def add_gemma(server: Server, sub: str, **kw: object) -> str:
    """A model version in a new release folder ``sub`` of the server (deploys read from there on), named by
    its sha256 prefix like a release publishes it."""
    server.sub = sub
    art = server.root / sub
    art.mkdir(parents=True, exist_ok=True)
    tmp = art / ".tmp.litertlm"
    sm.make_litertlm(tmp, **kw)
    version = sha256_file(tmp)[:16]
    d = art / "models" / GEMMA / version
    d.mkdir(parents=True, exist_ok=True)
    tmp.rename(d / catalog.models()[GEMMA].file)
    return version


def deploy(fleet: Fleet, art: Server, board: str, on_event: Callable[[dict], None] | None = None):
    """Deploy what the server's newest release folder (``art.sub``) holds, as ``fleet deploy`` does."""
    index = deploy_index.build_index(art.root / art.sub, f"{art.url}/{art.sub}")
    ev = {"edge_llm_deploy_index": index, "edge_llm_deploy_serial": "100%"}
    return run_fleet("deploy", fleet.inventory, context.current(), FleetOptions(limit=board, extra_vars=ev),
                     on_event=on_event)


def _kill_controller(fleet: Fleet) -> None:
    """kill -9 the whole ansible-playbook process group that runs against this fleet's inventory."""
    for d in Path("/proc").iterdir():
        try:
            cmd = (d / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if d.name.isdigit() and any(c.endswith(b"ansible-playbook") for c in cmd) \
                and str(fleet.inventory).encode() in cmd:
            os.killpg(int(d.name), signal.SIGKILL)


def killed_deploy(fleet: Fleet, art: Server, board: str, when: Callable[[], bool]) -> str:
    """Deploy, and kill -9 the controller the moment the board's state makes ``when`` true.

    The deploy is one task per board (two module calls inside it), so the kill points are read off the
    board's files, polled from the host, rather than off task events."""
    stop = threading.Event()

    def watch() -> None:
        while not stop.wait(0.005):
            if when():
                _kill_controller(fleet)
                return

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        res = deploy(fleet, art, board)
        return f"not killed? verdict {res.row(board).verdict}"
    except FleetError as exc:
        return f"controller killed ({str(exc)[:60]}...)"
    finally:
        stop.set()
        watcher.join()


def gated(events: list[dict]) -> list[str]:
    """Outcome of every health gate that ran, as the deploy task's payload reports it."""
    return [m["gate"] for e in events if e.get("event") == "host" and isinstance(e.get("edge_llm"), dict)
            for m in (e["edge_llm"].get("models") or {}).values() if m.get("gate")]


def rerun(fleet: Fleet, art: Server, board: str) -> str:
    events: list[dict] = []
    n = len(art.hits)
    row = deploy(fleet, art, board, events.append).row(board)
    pulled = sum(1 for h in art.hits[n:] if "/models/" in h["path"])
    why = "" if row.verdict == "pass" else f" ({row.reason[:100]})"
    return (f"{row.verdict}{why}; gate ran: {gated(events) or 'no'}; files pulled: {pulled}; "
            f"current {fleet.current(board)}")


def deploy_killed_at_gate(fleet: Fleet, art: Server) -> Row:
    old, v = fleet.current("dep"), add_gemma(art, "gate", n_dispatch_ops=3)
    # the version is in place (call 1 renamed it) and not committed: the gate is running or being judged
    said = killed_deploy(fleet, art, "dep", lambda: fleet.path("dep", on_board.model_version_dir(GEMMA, v)).is_dir())
    lost = "nothing" if fleet.current("dep") == old and not fleet.committed("dep", v) else \
        f"current moved to {fleet.current('dep')} without a commit"
    return lost, f"{said}; current stays {old}", rerun(fleet, art, "dep") + f", committed {fleet.committed('dep', v)}"


def deploy_killed_after_switch(fleet: Fleet, art: Server) -> Row:
    v = add_gemma(art, "switch", n_dispatch_ops=4)
    said = killed_deploy(fleet, art, "dep", lambda: fleet.current("dep") == v)
    cur = fleet.current("dep")
    lost = "nothing" if cur != v or fleet.committed("dep", v) else "current on an uncommitted version"
    return lost, f"{said}; current {cur}, committed {fleet.committed('dep', cur or '')}", rerun(fleet, art, "dep")


def uncommitted_current(fleet: Fleet, art: Server) -> Row:
    """The board's state when a controller died between a switch and a commit (a hand switch, an old release)."""
    cur = fleet.current("dep") or ""
    fleet.path("dep", on_board.model_version_dir(GEMMA, cur) + deploy_index.COMMITTED).unlink()
    return "nothing", f"current {cur} with no commit mark", rerun(fleet, art, "dep") + \
        f", committed {fleet.committed('dep', cur)}"


def failed_first_install(fleet: Fleet, art: Server) -> Row:
    try:
        launched = run_fleet("launch", fleet.inventory, context.current(), FleetOptions(limit="dep")).row("dep").verdict
    except FleetError as exc:
        launched = f"launch failed: {str(exc)[:60]}"
    for link in ("current", deploy_index.PREVIOUS):          # the model was never on this board
        fleet.path("dep", f"{on_board.model_dir(GEMMA)}/{link}").unlink(missing_ok=True)
    add_gemma(art, "first", n_dispatch_ops=9, truncate_to=20000)
    unit = f"edge-llm-serve@{GEMMA}.service"
    out = []
    for _ in range(2):
        events: list[dict] = []
        row = deploy(fleet, art, "dep", events.append).row("dep")
        if os.environ.get("BENCH_DEBUG"):
            print([(e.get("task"), e.get("status")) for e in events if e.get("event") == "host"], file=sys.stderr)
        state = fleet.ssh("dep", "systemctl", "is-active", unit)
        out.append(f"{row.verdict}, current {fleet.current('dep')}, {unit} {state}")
    reason = row.reason.split(" (")[0]
    lost = "nothing" if fleet.current("dep") is None else "current on a failed version"
    return lost, f"service launched first ({launched}); {out[0]}: {reason[:120]}", out[1]


def world_fastrpc(fleet: Fleet, art: Server) -> Row:
    fleet.ssh("world", "chmod", "0666", on_board.FASTRPC_DEVICE)
    report = fleet.root / "verify.json"
    code, *_ = cli("fleet", "verify", "-i", str(fleet.inventory), "--limit", "world", "--report", str(report))
    row = json.loads(report.read_text())["boards"][0]
    bad = [c for c in row["checks"] if not c["ok"]]
    said = f"exit {code}, failed {[c['check'] for c in bad]}: " + "; ".join(c["detail"] for c in bad)[:120]
    fleet.ssh("world", "chmod", "0660", on_board.FASTRPC_DEVICE)
    code2, *_ = cli("fleet", "verify", "-i", str(fleet.inventory), "--limit", "world", "--report", str(report))
    return ("nothing" if code == 1 and [c["check"] for c in bad] == ["fastrpc"] else "accepted", said,
            f"0660 again: exit {code2}")


FLEET_ROWS = [("4 deploy: controller kill -9 at the health gate", deploy_killed_at_gate),
              ("4 deploy: controller kill -9 right after the current switch", deploy_killed_after_switch),
              ("4 deploy: current on an uncommitted version", uncommitted_current),
              ("4 deploy: failing first install", failed_first_install),
              ("10 /dev/fastrpc-cdsp 0666 (fleet verify)", world_fastrpc)]


EVENTS_PLAY = """- hosts: all
  gather_facts: false
  tasks:
    - name: Wait until GET /health answers 200
      ansible.builtin.uri: {url: "http://127.0.0.1:9/health", timeout: 2, status_code: 200}
"""


def events_detail(work: Path) -> Row:
    (work / "health.yml").write_text(EVENTS_PLAY)
    (work / "local.ini").write_text(f"board-1 ansible_connection=local ansible_python_interpreter={sys.executable}\n")
    events: list[dict] = []
    col = EventCollector(events.append)
    exe = str(Path(sys.executable).parent / "ansible-playbook")
    res = run_streaming([exe, "-i", str(work / "local.ini"), str(work / "health.yml")], on_line=col.line,
                        env=ansible_env(base=context.current().env), timeout_s=120)
    noise = [ln for ln in col.other if "multiple values" in ln or "callback" in ln.lower()]
    b = col.hosts.get("board-1")
    hostev = [(e["status"], e.get("http_status")) for e in events if e.get("event") == "host"]
    ok = b is not None and b.status == "failed" and b.msg and not noise
    return ("nothing" if ok else f"detail lost ({noise[:1]})",
            f"exit {res.returncode}; events {hostev}; {b.failed_task if b else '?'}: {(b.msg if b else '')[:70]}", "")


def main(bitbake: Path | None = None) -> list[tuple[str, str, str, str]]:
    """Run every row; a row that cannot run is a row ('?'), not a crash of the matrix."""
    work = Path(tempfile.mkdtemp(prefix="bench-fleet-faults-"))
    table = inputs.rows(work / "inputs", bitbake)
    (work / "events").mkdir()
    table.append(_row("12 events callback: failed uri (status twice)", lambda: events_detail(work / "events"), work))
    fleet = art = None
    try:
        fleet = Fleet(work / "fleet", ["dep", "world"])
        (work / "art").mkdir()
        art = Server(work / "art")
        for name, fn in FLEET_ROWS:
            table.append(_row(name, lambda fn=fn: fn(fleet, art), work))
    except Exception as exc:  # noqa: BLE001 - the fleet could not come up: say so in the table
        table.append(("virtual fleet", "?", f"bench error: {type(exc).__name__}: {exc}", ""))
    finally:
        if art:
            art.close()
        if fleet:
            fleet.stop()
        shutil.rmtree(work, ignore_errors=True)
    return table


if __name__ == "__main__":
    bb = Path(sys.argv[sys.argv.index("--bitbake") + 1]) if "--bitbake" in sys.argv else None
    rows = main(bb)
    print("fault | what was lost | verdict reported | recovery on rerun\n--- | --- | --- | ---")
    for r in rows:
        print(" | ".join(r))
    sys.exit(0 if all(r[1] == "nothing" for r in rows) else 1)

