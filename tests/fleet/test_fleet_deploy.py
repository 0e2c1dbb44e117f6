"""`fleet deploy` / `rollback` against virtual boards of both types, with a real artifact server.

Boards pull from the server (its access log proves what moved), versions land in their own
directories, a version is health-gated and committed (`<version>.committed`) before `current`
switches to it atomically with `previous` kept, a failed gate leaves `current` on the version that
worked, and a second run on an up-to-date fleet changes nothing and transfers nothing. A controller
that died after the `current` switch (current on an uncommitted version) is re-gated on the rerun.
Both boards run `fleet launch`'s service from the start: edge-llm-serve loads its model once, so a
switch must restart it onto the new version (and its QAIRT), and a later launch must not undo that.
"""

from __future__ import annotations

import http.client
import io
import json
import os
import shutil
import subprocess
import tarfile
import threading
import time
from pathlib import Path

import pytest
import yaml

from provisioner import catalog, context
from provisioner.contracts import board as on_board
from provisioner.fleet.runner import FleetOptions, run_fleet
from provisioner.fleet.shared import deploy_index
from provisioner.hashing import sha256_file
from tests.fleet.artserver import ArtifactServer
from tests.fleet.simfleet import BoardSpec, build_fleet, can_run, free_port

pytestmark = [pytest.mark.root, pytest.mark.slow,
              pytest.mark.skipif(can_run() is not None, reason=str(can_run()))]

NEW_QAIRT = "2.45.0.260401"
GEMMA = "gemma-4-e2b"
NEMO = "nemotron-nano-8b"
GEMMA_FILE = catalog.models()[GEMMA].file


def _qairt_tarball(out: Path, version: str) -> Path:
    """A QAIRT subset for both boards (stub libs carry the build id like the real ones; libGenie.so is the
    virtual boards' C-API stand-in, which edge-llm-serve binds once a deploy restarts it onto this QAIRT)."""
    from provisioner.sim import cstandins, runtime

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        seen = set()
        for bid in ("iq-8275-evk", "iq-9075-evk"):
            for f in on_board.qairt_files(catalog.board(bid), version, with_genie=True):
                rel = f.removeprefix(on_board.qairt_dir(version) + "/")
                if rel in seen:
                    continue
                seen.add(rel)
                if rel.endswith("genie-t2t-run"):
                    data, mode = runtime.runtime_executable("genie-t2t-run").encode(), 0o755
                elif Path(rel).name in cstandins.LIBRARIES:
                    data, mode = cstandins.library_bytes(Path(rel).name, version), 0o755
                else:
                    data, mode = runtime.stub_library(Path(rel).name, version), 0o755
                info = tarfile.TarInfo(rel)
                info.size, info.mode = len(data), mode
                tar.addfile(info, io.BytesIO(data))
        data = f"qairt: {version}\n".encode()
        info = tarfile.TarInfo("sdk.yaml")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(buf.getvalue())
    return out


def add_gemma(root: Path, **kw) -> str:
    from provisioner.sim import synthetic_models as sm

    tmp = root / ".tmp-gemma.litertlm"
    sm.make_litertlm(tmp, **kw)
    version = sha256_file(tmp)[:16]
    d = root / "models" / GEMMA / version
    d.mkdir(parents=True, exist_ok=True)
    shutil.move(tmp, d / GEMMA_FILE)
    return version


def add_nemotron(root: Path, version: str, qairt: str, **kw) -> str:
    from provisioner.sim import synthetic_models as sm

    d = root / "models" / NEMO / version
    sm.make_genie_bundle(d, qairt_full=qairt + "154327", **kw)
    (d / on_board.MODEL_META).write_text(json.dumps({"qairt": qairt, "kind": "genie"}))
    return version


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    base = tmp_path_factory.mktemp("fleet-deploy")
    # the serve port in the inventory, where fleet launch and fleet deploy both read it
    fleet = build_fleet(base / "sim", [BoardSpec(b, bid, vars={"edge_llm_serve_port_base": free_port()})
                                       for b, bid in (("dep-8275", "iq-8275-evk"), ("dep-9075", "iq-9075-evk"))],
                        cache=base / "cache", base_index=100)
    launched = run_fleet("launch", fleet.inventory, context.current())
    assert all(r.verdict == "pass" for r in launched.rows), [r.reason for r in launched.rows]
    art = base / "artifacts"
    _qairt_tarball(art / "qairt" / f"{NEW_QAIRT}.tar.gz", NEW_QAIRT)
    versions = {GEMMA: add_gemma(art, n_dispatch_ops=3), NEMO: add_nemotron(art, "v2", NEW_QAIRT, part_size=8192)}
    server = ArtifactServer(art)
    try:
        yield fleet, server, art, versions
    finally:
        server.close()
        fleet.stop()


def deploy(fleet, index, on_event=None, **kw):
    ev = {"edge_llm_deploy_index": index, "edge_llm_deploy_serial": "100%", "edge_llm_deploy_max_fail_percentage": 100}
    return run_fleet("deploy", fleet.inventory, context.current(), FleetOptions(extra_vars=ev, **kw), on_event=on_event)


def current(fleet, board: str, model: str) -> str | None:
    link = fleet.rootfs(board) / on_board.model_current(model).lstrip("/")
    return os.readlink(link) if link.is_symlink() else None


def committed(fleet, board: str, model: str, version: str) -> bool:
    mark = f"{on_board.model_version_dir(model, version)}{deploy_index.COMMITTED}"
    return (fleet.rootfs(board) / mark.lstrip("/")).is_file()


def relink(fleet, board: str, model: str, link: str, version: str) -> None:
    """Point the board's ``current``/``previous`` at ``version`` the way a deploy does (symlink + rename)."""
    path = fleet.rootfs(board) / f"{on_board.model_dir(model)}/{link}".lstrip("/")
    tmp = path.with_name(f".{link}.tmp")
    tmp.unlink(missing_ok=True)
    os.symlink(version, tmp)
    os.replace(tmp, path)


def gate_statuses(events: list[dict]) -> list[str]:
    """Outcome of every health gate that ran ("ok" / "failed"), as the deploy task's payload reports it."""
    return [m["gate"] for e in events if e.get("event") == "host" and isinstance(e.get("edge_llm"), dict)
            for m in (e["edge_llm"].get("models") or {}).values() if m.get("gate")]


def tasks_per_board(events: list[dict]) -> dict[str, int]:
    """Task results per board on the controller (what HostOutcome.tasks counts): each costs controller CPU."""
    out: dict[str, int] = {}
    for e in events:
        if e.get("event") == "host":
            out[e["host"]] = out.get(e["host"], 0) + 1
    return out


def previous(fleet, board: str, model: str) -> str | None:
    link = fleet.rootfs(board) / f"{on_board.model_dir(model)}/{deploy_index.PREVIOUS}".lstrip("/")
    return os.readlink(link) if link.is_symlink() else None


BOARD_MODEL = {"dep-8275": GEMMA, "dep-9075": NEMO}


def serving(fleet, board: str, model: str) -> tuple[str, str, str]:
    """(main PID, version directory it runs in, its LD_LIBRARY_PATH) of the model's running service."""
    from provisioner.sim import host

    unit = f"edge-llm-serve@{model}.service"
    script = f"p=$(systemctl show -p MainPID --value {unit}); echo $p; readlink /proc/$p/cwd; cat /proc/$p/environ"
    out = subprocess.run(host.ssh_argv(fleet.boards[board], "sh", "-c", f"'{script}'"), capture_output=True,
                         text=True, timeout=60).stdout
    pid, cwd, environ = ([*out.split("\n", 2), "", "", ""])[:3]
    env = dict(e.partition("=")[::2] for e in environ.split("\0") if "=" in e)
    return pid.strip(), os.path.basename(cwd.strip()), env.get("LD_LIBRARY_PATH", "")


def api(fleet, board: str, method: str, path: str, body: dict | None = None) -> tuple[int, dict]:
    """One request to the board's service (loopback port from the inventory, token from fleet launch)."""
    port = fleet.specs[board].vars["edge_llm_serve_port_base"]
    token = (fleet.inventory.parent / ".edge-llm-tokens" / board).read_text().strip()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    try:
        conn.request(method, path, body=json.dumps(body) if body else None,
                     headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read() or b"{}")
    finally:
        conn.close()


def assert_serves(fleet, board: str, model: str, version: str, qairt: str | None = None) -> None:
    """The service answers through the API from ``version``'s directory (and QAIRT ``qairt``'s libraries)."""
    _pid, cwd, ld = serving(fleet, board, model)
    assert cwd == version, (board, cwd, version)
    if qairt:
        assert f"/opt/qairt/{qairt}/" in ld, ld
    status, health = api(fleet, board, "GET", "/health")
    assert status == 200 and health["model"] == model, health
    status, out = api(fleet, board, "POST", "/v1/chat/completions",
                      {"messages": [{"role": "user", "content": "Explain gravity in one short sentence."}],
                       "max_tokens": 32})
    assert status == 200 and out["choices"][0]["message"]["content"], out


def test_deploy_check_run_then_real_then_idempotent(env):
    fleet, server, art, versions = env
    index = deploy_index.build_index(art, server.url)
    before = {b: current(fleet, b, m) for b, m in BOARD_MODEL.items()}
    for b, m in BOARD_MODEL.items():
        assert_serves(fleet, b, m, before[b])                      # launched on the image's version
    pids = {b: serving(fleet, b, m)[0] for b, m in BOARD_MODEL.items()}

    mark = server.mark()
    checked = deploy(fleet, index, dry_run=True)
    assert all(r.verdict == "pass" for r in checked.rows), [r.reason for r in checked.rows]
    assert all(r.changed > 0 for r in checked.rows)              # check mode reports what would change
    assert server.since(mark) == []                               # ... and transfers nothing
    assert {b: current(fleet, b, m) for b, m in BOARD_MODEL.items()} == before
    assert not any(committed(fleet, b, m, versions[m]) for b, m in BOARD_MODEL.items())
    assert {b: serving(fleet, b, m)[0] for b, m in BOARD_MODEL.items()} == pids     # nothing restarted

    mark = server.mark()
    first = deploy(fleet, index)
    assert all(r.verdict == "pass" for r in first.rows), [r.reason for r in first.rows]
    hits = server.since(mark)
    assert {h.path for h in hits} >= {f"/qairt/{NEW_QAIRT}.tar.gz", f"/models/{GEMMA}/{versions[GEMMA]}/{GEMMA_FILE}"}
    assert all(h.status == 200 for h in hits)
    assert first.row("dep-8275").bytes_downloaded > 0
    for b, m in BOARD_MODEL.items():
        assert current(fleet, b, m) == versions[m]
        assert committed(fleet, b, m, versions[m])                 # gated, then committed
        assert previous(fleet, b, m) == before[b]                  # the old version is kept
        assert (fleet.rootfs(b) / on_board.model_version_dir(m, before[b]).lstrip("/")).is_dir()
    # the running services were restarted onto the new versions; nemotron's on the QAIRT it now needs
    assert_serves(fleet, "dep-8275", GEMMA, versions[GEMMA])
    assert_serves(fleet, "dep-9075", NEMO, versions[NEMO], NEW_QAIRT)
    config = json.loads((fleet.rootfs("dep-9075") / f"etc/edge-llm/serve/{NEMO}.json").read_text())
    assert f"/opt/qairt/{NEW_QAIRT}/" in config["env"]["LD_LIBRARY_PATH"]
    assert config["port"] == fleet.specs["dep-9075"].vars["edge_llm_serve_port_base"]
    qdir = fleet.rootfs("dep-9075") / on_board.qairt_dir(NEW_QAIRT).lstrip("/")
    assert (qdir / "sdk.yaml").read_text() == f"qairt: {NEW_QAIRT}\n"
    assert not list((fleet.rootfs("dep-9075") / on_board.QAIRT_ROOT.lstrip("/")).glob("*.partial"))

    mark = server.mark()
    events: list[dict] = []
    second = deploy(fleet, index, on_event=events.append)
    assert all(r.verdict == "pass" and r.changed == 0 and r.bytes_downloaded == 0 for r in second.rows), \
        [(r.board, r.changed, r.reason) for r in second.rows]
    assert server.since(mark) == []                               # nothing transferred
    assert gate_statuses(events) == []                            # committed versions are not gated again


def test_launch_after_a_deploy_to_another_qairt_keeps_the_new_version_serving(env):
    """The inventory still pins nemotron's old QAIRT: launch says which qairt to set and touches nothing;
    with the inventory updated it finds the board as deploy left it (same rule, nothing to write)."""
    fleet, _server, _art, versions = env
    pid = serving(fleet, "dep-9075", NEMO)[0]
    again = run_fleet("launch", fleet.inventory, context.current())
    row = again.row("dep-9075")
    assert row.verdict != "pass" and f'set qairt: "{NEW_QAIRT}" for {NEMO}' in row.reason, row.reason
    assert again.row("dep-8275").verdict == "pass" and again.row("dep-8275").changed == 0
    assert serving(fleet, "dep-9075", NEMO)[0] == pid                  # not restarted onto the old QAIRT
    assert_serves(fleet, "dep-9075", NEMO, versions[NEMO], NEW_QAIRT)
    group = yaml.safe_load((Path(__file__).parents[2] / "playbooks/group_vars/iq_9075_evk.yml").read_text())
    models = [dict(m, qairt=NEW_QAIRT) if m["name"] == NEMO else m for m in group["edge_llm_models"]]
    updated = run_fleet("launch", fleet.inventory, context.current(),
                        FleetOptions(limit="dep-9075", extra_vars={"edge_llm_models": models}))
    assert updated.row("dep-9075").verdict == "pass" and updated.row("dep-9075").changed == 0, \
        (updated.row("dep-9075").reason, updated.row("dep-9075").changed)
    assert serving(fleet, "dep-9075", NEMO)[0] == pid


def test_rollback_swaps_current_and_previous(env):
    fleet, _server, _art, versions = env
    old = {b: previous(fleet, b, m) for b, m in BOARD_MODEL.items()}
    assert all(old.values())
    rb = run_fleet("rollback", fleet.inventory, context.current())
    assert all(r.verdict == "pass" for r in rb.rows), [r.reason for r in rb.rows]
    for b, m in BOARD_MODEL.items():
        assert current(fleet, b, m) == old[b]
        assert previous(fleet, b, m) == versions[m]                # and the rolled-back one is kept
    # the services run the previous versions again, nemotron on its own (the image's) QAIRT
    assert_serves(fleet, "dep-8275", GEMMA, old["dep-8275"])
    assert_serves(fleet, "dep-9075", NEMO, old["dep-9075"], catalog.models()[NEMO].qairt)


def test_deploy_and_rollback_cost_one_task_per_board(env, tmp_path):
    """A fleet of hundreds runs from one controller: every task on every board costs controller CPU, so a
    deploy (pull, gate, commit, switch - or nothing on an up-to-date board) and a rollback are one task each."""
    fleet, server, _, _versions = env
    src = tmp_path / "one-task"
    v = add_gemma(src, n_dispatch_ops=11)
    shutil.copytree(src, server.root / "one-task")
    index = deploy_index.build_index(server.root / "one-task", server.url + "/one-task")
    for expect_gates in (["ok"], []):                  # a new version, then the same index on an up-to-date board
        events: list[dict] = []
        res = deploy(fleet, index, on_event=events.append)
        assert all(r.verdict == "pass" for r in res.rows), [r.reason for r in res.rows]
        assert tasks_per_board(events) == {b: 1 for b in BOARD_MODEL}, tasks_per_board(events)
        assert gate_statuses(events) == expect_gates
    assert current(fleet, "dep-8275", GEMMA) == v
    events = []
    rb = run_fleet("rollback", fleet.inventory, context.current(), FleetOptions(limit="dep-8275"),
                   on_event=events.append)
    assert rb.row("dep-8275").verdict == "pass", rb.row("dep-8275").reason
    assert tasks_per_board(events) == {"dep-8275": 1}, tasks_per_board(events)
    assert gate_statuses(events) == ["ok"]
    assert previous(fleet, "dep-8275", GEMMA) == v and committed(fleet, "dep-8275", GEMMA, current(fleet, "dep-8275",
                                                                                                       GEMMA))


def test_failed_health_gate_rolls_back(env, tmp_path):
    fleet, server, _, _versions = env
    before = {b: current(fleet, b, m) for b, m in BOARD_MODEL.items()}
    bad = tmp_path / "bad"
    bad_gemma = add_gemma(bad, n_dispatch_ops=4, truncate_to=20000)         # runtime: TF_LITE_PREFILL_DECODE...
    add_nemotron(bad, "v3-soc0", "2.45.0.260326", soc_model=0)             # loads, then garbage (wrong soc_model)
    shutil.copytree(bad, server.root / "bad")
    index = deploy_index.build_index(server.root / "bad", server.url + "/bad")
    res = deploy(fleet, index)
    for b, m in BOARD_MODEL.items():
        row = res.row(b)
        assert row.verdict == "fail"
        assert "health gate failed" in row.reason and f"current stays on {before[b]}" in row.reason, row.reason
        assert current(fleet, b, m) == before[b]                   # still the version that worked
    assert "incoherent" in res.row("dep-9075").reason
    assert "TF_LITE_PREFILL_DECODE" in res.row("dep-8275").reason or "exit" in res.row("dep-8275").reason
    assert (fleet.rootfs("dep-8275") / on_board.model_version_dir(GEMMA, bad_gemma).lstrip("/")).is_dir()
    assert not committed(fleet, "dep-8275", GEMMA, bad_gemma)


def test_checksum_mismatch_and_disk_full_leave_current_alone(env, tmp_path):
    fleet, server, _, _versions = env
    before = {b: current(fleet, b, m) for b, m in BOARD_MODEL.items()}
    src = tmp_path / "cs"
    v = add_gemma(src, n_dispatch_ops=5)
    add_nemotron(src, "v4-huge", "2.45.0.260326", part_size=4096)
    shutil.copytree(src, server.root / "cs")
    index = deploy_index.build_index(server.root / "cs", server.url + "/cs")
    gemma, nemo = (next(m for m in index["models"] if m["name"] == n) for n in (GEMMA, NEMO))
    gemma["files"][0]["sha256"] = "0" * 64                                   # the server's copy is not it
    nemo["files"][0]["size"] = 1 << 50                                       # far more than the disk holds
    mark = server.mark()
    res = deploy(fleet, index)
    assert res.row("dep-8275").verdict == "fail" and "checksum mismatch" in res.row("dep-8275").reason
    assert res.row("dep-9075").verdict == "fail" and "disk full" in res.row("dep-9075").reason
    assert not any(h.path.startswith(f"/cs/models/{NEMO}/") for h in server.since(mark))   # refused up front
    vdir = fleet.rootfs("dep-8275") / on_board.model_version_dir(GEMMA, v).lstrip("/")
    assert not vdir.exists()
    assert not list(vdir.parent.glob(f"{v}.partial/*.part"))                 # the bad download is gone
    assert {b: current(fleet, b, m) for b, m in BOARD_MODEL.items()} == before


def test_board_reboot_mid_download_resumes_and_never_switches_to_a_partial(env, tmp_path):
    from provisioner.sim import host

    fleet, server, _, _versions = env
    before = current(fleet, "dep-8275", GEMMA)
    src = tmp_path / "slow"
    v = add_gemma(src, n_dispatch_ops=6, pad_to=4 << 20)
    shutil.copytree(src, server.root / "slow")
    index = deploy_index.build_index(server.root / "slow", server.url + "/slow")
    url_path = f"/slow/models/{GEMMA}/{v}/{GEMMA_FILE}"
    server.throttle[url_path] = 0.1                                          # 64 KiB per 100 ms
    part = fleet.rootfs("dep-8275") / f"{on_board.model_version_dir(GEMMA, v)}.partial/{GEMMA_FILE}.part".lstrip("/")
    result: dict = {}
    worker = threading.Thread(target=lambda: result.update(run=deploy(fleet, index, limit="dep-8275")))
    worker.start()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not (part.exists() and part.stat().st_size >= 256 << 10):
        time.sleep(0.05)
    board = fleet.boards["dep-8275"]
    host.stop_host(board)                                                    # power cut mid-download
    worker.join(120)
    assert result["run"].row("dep-8275").verdict in ("unreachable", "fail")
    assert current(fleet, "dep-8275", GEMMA) == before                       # never the half-written version
    assert not (fleet.rootfs("dep-8275") / on_board.model_version_dir(GEMMA, v).lstrip("/")).exists()
    have = part.stat().st_size
    assert 0 < have < (4 << 20)

    host.start_host(board, time_scale=0)                                     # boots again (same address)
    server.throttle.clear()
    # the cut download's handler notices the dead peer only at a later write: wait until its hit is logged,
    # so it lands before the mark and is never taken for the resumed request
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not any(h.path == url_path for h in server.since(0)):
        time.sleep(0.05)
    mark = server.mark()
    res = deploy(fleet, index, limit="dep-8275")
    assert res.row("dep-8275").verdict == "pass", res.row("dep-8275").reason
    resumed = [h for h in server.since(mark) if h.path == url_path]
    assert resumed and resumed[0].status == 206 and resumed[0].range == f"bytes={have}-"
    assert resumed[0].sent == (4 << 20) - have
    assert current(fleet, "dep-8275", GEMMA) == v


def test_rerun_after_a_crash_past_the_switch_gates_the_uncommitted_current(env, tmp_path):
    """The controller died right after `current` moved (no commit mark): the rerun gates it, then commits."""
    fleet, server, _, _versions = env
    src = tmp_path / "crash"
    v = add_gemma(src, n_dispatch_ops=7)
    shutil.copytree(src, server.root / "crash")
    index = deploy_index.build_index(server.root / "crash", server.url + "/crash")
    assert deploy(fleet, index, limit="dep-8275").row("dep-8275").verdict == "pass"
    assert current(fleet, "dep-8275", GEMMA) == v
    mark_file = fleet.rootfs("dep-8275") / f"{on_board.model_version_dir(GEMMA, v)}{deploy_index.COMMITTED}".lstrip("/")
    mark_file.unlink()                                   # the crash state: current switched, never committed

    events: list[dict] = []
    mark = server.mark()
    res = deploy(fleet, index, limit="dep-8275", on_event=events.append)
    assert res.row("dep-8275").verdict == "pass", res.row("dep-8275").reason
    assert gate_statuses(events) == ["ok"]               # the gate ran again ...
    assert committed(fleet, "dep-8275", GEMMA, v)        # ... and only then was the version committed
    assert server.since(mark) == []                      # nothing pulled again


def test_rerun_takes_current_off_an_uncommitted_version_that_fails_its_gate(env, tmp_path):
    fleet, server, _, _versions = env
    good = current(fleet, "dep-8275", GEMMA)
    assert good and committed(fleet, "dep-8275", GEMMA, good)
    src = tmp_path / "crashbad"
    bad = add_gemma(src, n_dispatch_ops=8, truncate_to=20000)
    shutil.copytree(src, server.root / "crashbad")
    index = deploy_index.build_index(server.root / "crashbad", server.url + "/crashbad")
    assert deploy(fleet, index, limit="dep-8275").row("dep-8275").verdict == "fail"   # installed, not committed
    relink(fleet, "dep-8275", GEMMA, deploy_index.PREVIOUS, good)   # what a run that died after the switch left
    relink(fleet, "dep-8275", GEMMA, "current", bad)

    for outcome in (f"current rolled back to {good}", f"current stays on {good}"):   # and on every rerun after
        res = deploy(fleet, index, limit="dep-8275")
        row = res.row("dep-8275")
        assert row.verdict == "fail"
        assert f"health gate failed: {GEMMA} {bad} not committed, {outcome} (" in row.reason, row.reason
        assert current(fleet, "dep-8275", GEMMA) == good
        assert not committed(fleet, "dep-8275", GEMMA, bad)


def test_a_cut_release_fails_the_gate_on_a_board_with_committed_versions(env, tmp_path):
    """The release itself holds a cut file, so its index (and the board's model.json) declares the cut
    size and sha256: the fetch checks pass, and only the smoke run can refuse it - on a board with
    earlier deploys as on a fresh one."""
    fleet, server, _, _versions = env
    src = tmp_path / "good"
    good = add_gemma(src, n_dispatch_ops=5)
    shutil.copytree(src, server.root / "good-before-cut")
    index = deploy_index.build_index(server.root / "good-before-cut", server.url + "/good-before-cut")
    assert deploy(fleet, index, limit="dep-8275").row("dep-8275").verdict == "pass"
    assert current(fleet, "dep-8275", GEMMA) == good and committed(fleet, "dep-8275", GEMMA, good)

    src = tmp_path / "cut"
    bad = add_gemma(src, n_dispatch_ops=9, truncate_to=20000)
    shutil.copytree(src, server.root / "cut")
    index = deploy_index.build_index(server.root / "cut", server.url + "/cut")
    assert [m["size"] for m in index["models"]] == [20000]          # the release declares the cut size
    for _ in range(2):                                               # and a rerun gates it again
        events: list[dict] = []
        row = deploy(fleet, index, limit="dep-8275", on_event=events.append).row("dep-8275")
        assert row.verdict == "fail"
        assert f"health gate failed: {GEMMA} {bad} not committed, current stays on {good} (" in row.reason, row.reason
        assert "TF_LITE_PREFILL_DECODE" in row.reason, row.reason
        assert gate_statuses(events) == ["failed"]
        assert current(fleet, "dep-8275", GEMMA) == good
        assert not committed(fleet, "dep-8275", GEMMA, bad)


def test_failed_first_install_leaves_no_current_and_the_service_stopped(env, tmp_path):
    from provisioner.sim import host

    fleet, server, _, _versions = env
    board = fleet.boards["dep-8275"]
    unit = f"edge-llm-serve@{GEMMA}.service"
    launched = run_fleet("launch", fleet.inventory, context.current(), FleetOptions(limit="dep-8275"))
    assert launched.row("dep-8275").verdict == "pass", launched.row("dep-8275").reason
    for link in ("current", deploy_index.PREVIOUS):         # the model was never on this board
        (fleet.rootfs("dep-8275") / f"{on_board.model_dir(GEMMA)}/{link}".lstrip("/")).unlink()
    src = tmp_path / "first"
    bad = add_gemma(src, n_dispatch_ops=9, truncate_to=20000)
    shutil.copytree(src, server.root / "first")
    index = deploy_index.build_index(server.root / "first", server.url + "/first")

    for _ in range(2):                                   # a rerun does not report pass either
        res = deploy(fleet, index, limit="dep-8275")
        row = res.row("dep-8275")
        assert row.verdict == "fail"
        assert (f"health gate failed: {GEMMA} {bad} not committed, no version to fall back to: current removed, "
                f"{unit} stopped (") in row.reason, row.reason
        link = fleet.rootfs("dep-8275") / on_board.model_current(GEMMA).lstrip("/")
        assert not link.is_symlink() and not link.exists()
        state = subprocess.run(host.ssh_argv(board, "systemctl", "is-active", unit), capture_output=True,
                               text=True, timeout=30).stdout.strip()
        assert state == "inactive"
