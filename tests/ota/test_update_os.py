"""fleet update-os on virtual sota boards (real OSTree sysroots and ESP; the firmware is simulated)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from provisioner import context
from provisioner.errors import SimError
from provisioner.fleet.runner import FleetOptions, run_fleet
from tests.fleet.simfleet import BoardSpec, build_fleet, can_run, free_port
from tests.ota import otafleet as of

pytestmark = pytest.mark.skipif(can_run() is not None or not os.path.exists("/usr/bin/ostree"),
                                reason=str(can_run() or "no ostree"))


def _update(fleet, release, url, report, *more):
    proc = subprocess.run([sys.executable, "-m", "provisioner", "fleet", "update-os", "-i", str(fleet.inventory),
                           "--release", str(release), "--repo", url, "--report", str(report), *more],
                          capture_output=True, text=True, timeout=600, env={**os.environ, "COLUMNS": "250"})
    return proc, {b["board"]: b for b in json.loads(report.read_text())["boards"]}


@pytest.fixture(scope="module")
def ota(tmp_path_factory):
    base = tmp_path_factory.mktemp("update-os")
    specs = [BoardSpec("good-8275", "iq-8275-evk", vars={**of.SIM_VARS, "edge_llm_serve_port_base": free_port()}),
             BoardSpec("noboot-8275", "iq-8275-evk", faults=("ota-no-boot",), vars=of.SIM_VARS),
             BoardSpec("badnpu-8275", "iq-8275-evk", faults=("ota-bad-npu",),
                       vars={**of.SIM_VARS, "edge_llm_serve_port_base": free_port()}),
             BoardSpec("cut-8275", "iq-8275-evk", faults=("ota-disconnect",), vars=of.SIM_VARS),
             BoardSpec("killed-8275", "iq-8275-evk", vars=of.SIM_VARS),
             # rolling order is the inventory's (sorted): the failing board's batch comes first
             BoardSpec("mf1-noboot-8275", "iq-8275-evk", faults=("ota-no-boot",), vars=of.SIM_VARS),
             BoardSpec("mf2-good-8275", "iq-8275-evk", vars=of.SIM_VARS),
             BoardSpec("mf3-good-8275", "iq-8275-evk", vars=of.SIM_VARS),
             BoardSpec("moved-8275", "iq-8275-evk", vars=of.SIM_VARS),
             BoardSpec("plain-8275", "iq-8275-evk", vars=of.SIM_VARS)]          # flashed without OSTree
    fleet = build_fleet(base / "sim", specs, cache=base / "cache")
    repo = base / "srv"
    rootfs = fleet.rootfs("good-8275")
    rel1, c1 = of.build_release(base, "base-1", of.image_tree(rootfs, base, "base-1"))
    rel2, c2 = of.build_release(base, "os-2", of.image_tree(rootfs, base, "os-2",
                                                            {"usr/lib/edge-llm/security-fix.txt": b"fixed\n" * 100}))
    of.publish(rel1, repo)
    assert f"static delta {c1[:12]} -> {c2[:12]}" in of.publish(rel2, repo)
    of.make_ota_boards(fleet, repo, c1, skip=("plain-8275",))
    # two boards serve their models (fleet launch enables the instance, so it starts again after the OTA
    # reboot and the gate also goes through the API); the others were never launched
    launch = run_fleet("launch", fleet.inventory, context.current(),
                       FleetOptions(limit="good-8275,badnpu-8275", log_path=base / "launch.log"))
    assert {r.board: r.verdict for r in launch.rows} == {"good-8275": "pass", "badnpu-8275": "pass"}, \
        [(r.board, r.reason) for r in launch.rows]
    with of.serving(fleet, base, repo) as server:
        yield fleet, base, server, c1, c2, rel2


def test_update_commits_good_board_and_rolls_back_bad_ones(ota):
    fleet, base, server, c1, c2, rel = ota
    mark = server.mark()
    proc, rows = _update(fleet, rel, server.url, base / "r1.json", "--serial", "3", "--max-fail-percentage", "100",
                         "--limit", "good-8275,noboot-8275,badnpu-8275")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert rows["good-8275"]["verdict"] == "pass", rows["good-8275"]
    assert of.booted(fleet, "good-8275") == c2
    assert "pending" not in of.record(fleet, "good-8275")
    assert rows["noboot-8275"]["reason"].startswith(f"update to {c2[:12]} rolled back: the new deployment")
    assert "did not boot" in rows["noboot-8275"]["reason"]
    assert rows["noboot-8275"]["details"]["update_os"]["outcome"] == "rolled back"
    assert of.booted(fleet, "noboot-8275") == c1
    assert rows["badnpu-8275"]["verdict"] == "fail"
    assert "rolled back" in rows["badnpu-8275"]["reason"] and "tok/s" in rows["badnpu-8275"]["reason"]
    assert of.booted(fleet, "badnpu-8275") == c1
    # the static delta was used: what each board pulled is far less than the full commit
    hits = server.since(mark)
    assert any("/deltas/" in h.path for h in hits)
    per_board = sum(h.sent for h in hits) / 3
    full = of.full_commit_size(base / "srv", c2, base)
    assert 0 < per_board < full / 4
    # the report says what the board pulled, as ostree counted it (KiB granularity)
    assert 0 < rows["good-8275"]["bytes_downloaded"] <= per_board + 1024
    assert rows["good-8275"]["details"]["update_os"]["outcome"] == "updated"
    # the gate also streamed a completion through the serving API and judged it by the board type's floor
    assert rows["good-8275"]["details"]["update_os"]["api"] == "ran"
    api_checks = [c for c in rows["good-8275"]["checks"] if c["check"].startswith("api:")]
    assert api_checks and all(c["ok"] and "through http://127.0.0.1:" in c["detail"] for c in api_checks)
    assert rows["good-8275"]["api"] and all(a["median_decode_tok_s"] for a in rows["good-8275"]["api"].values())


def test_rerun_on_updated_board_changes_and_transfers_nothing(ota):
    fleet, base, server, c1, c2, rel = ota
    mark = server.mark()
    proc, rows = _update(fleet, rel, server.url, base / "r2.json", "--limit", "good-8275")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert rows["good-8275"]["verdict"] == "pass" and rows["good-8275"]["changed"] == 0
    assert rows["good-8275"]["bytes_downloaded"] == 0
    assert rows["good-8275"]["details"]["update_os"]["outcome"] == "up-to-date"
    assert server.since(mark) == []
    assert of.booted(fleet, "good-8275") == c2


def test_cut_pull_resumes_and_the_update_completes(ota):
    fleet, base, server, c1, c2, rel = ota
    proc, rows = _update(fleet, rel, server.url, base / "r-cut.json", "--limit", "cut-8275")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert rows["cut-8275"]["verdict"] == "pass", rows["cut-8275"]
    assert (fleet.boards["cut-8275"].dir / "sysroot/.edge-llm-sim-disconnected").exists()    # the link was cut
    assert of.booted(fleet, "cut-8275") == c2
    # nobody launched the service on this board: the API step is skipped and the report says so
    assert rows["cut-8275"]["details"]["update_os"]["api"].startswith("skipped: no serving instance enabled")


def test_max_fail_percentage_stops_the_rollout_before_the_next_batch(ota):
    """A batch of two with one failure is 50 % > 0 %: the next batch is never touched. (A batch that
    fails entirely would stop any play; this one half-passes, so only max_fail_percentage stops it.)"""
    fleet, base, server, c1, c2, rel = ota
    proc, rows = _update(fleet, rel, server.url, base / "r-mf.json",
                         "--limit", "mf1-noboot-8275,mf2-good-8275,mf3-good-8275",
                         "--serial", "2", "--max-fail-percentage", "0")
    assert proc.returncode != 0, proc.stdout + proc.stderr
    assert "rolled back" in rows["mf1-noboot-8275"]["reason"]
    assert rows["mf2-good-8275"]["verdict"] == "pass" and of.booted(fleet, "mf2-good-8275") == c2
    assert of.booted(fleet, "mf3-good-8275") == c1                 # the next batch: never touched
    assert of.deployments(fleet, "mf3-good-8275") == [c1]
    assert of.record(fleet, "mf3-good-8275") == {}
    assert rows.get("mf3-good-8275", {}).get("changed", 0) == 0


def _wait_for_ssh(board, timeout_s=120):
    """Until a reboot the killed run may have started is over and the board's sshd accepts a connection.

    The controller dies with its ansible-playbook (and its workers); the board's power-cycle, once asked
    for, goes on by itself (provisioner.sim.ostree_board reboot, detached), as a real board's would.
    """
    from provisioner.sim import host

    deadline = time.monotonic() + timeout_s
    time.sleep(1)
    while time.monotonic() < deadline and subprocess.run(
            ["pgrep", "-f", f"ostree_board reboot {board.root} {board.serial}"], capture_output=True).returncode == 0:
        time.sleep(0.2)
    while time.monotonic() < deadline:
        try:
            if subprocess.run(host.ssh_argv(board, "true"), capture_output=True, timeout=60).returncode == 0:
                return
        except SimError:                 # between the power-cycle's stop and start: no address yet
            pass
        time.sleep(0.5)
    log = board.dir / "host" / "reboot.log"
    raise AssertionError(f"board never came back: {log.read_text() if log.is_file() else 'no reboot.log'}")


def test_a_board_whose_remote_names_an_old_url_pulls_from_this_runs_repo(ota):
    """The repository moved: the board's edge-llm remote still names the old URL (nothing answers there), and
    update-os --repo names the new one. The board pulls from --repo and its remote now names it."""
    fleet, base, server, c1, c2, rel = ota
    repo = fleet.boards["moved-8275"].dir / "sysroot/ostree/repo"
    of.ostree(f"--repo={repo}", "remote", "add", "--no-gpg-verify", "edge-llm", f"http://127.0.0.1:{free_port()}/old")
    mark = server.mark()
    proc, rows = _update(fleet, rel, server.url, base / "r-moved.json", "--limit", "moved-8275")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert rows["moved-8275"]["verdict"] == "pass", rows["moved-8275"]
    assert of.booted(fleet, "moved-8275") == c2
    assert any("/deltas/" in h.path for h in server.since(mark))          # pulled from this run's repository
    assert of.ostree(f"--repo={repo}", "remote", "show-url", "edge-llm") == server.url


def test_a_board_without_ostree_is_named_as_such_with_and_without_check(ota):
    """A board flashed without OSTree cannot take a whole-image update: --check must not promise one."""
    fleet, base, server, c1, c2, rel = ota
    for more in (("--check",), ()):
        proc, rows = _update(fleet, rel, server.url, base / "r-plain.json", "--limit", "plain-8275", *more)
        assert proc.returncode == 1, proc.stdout + proc.stderr
        row = rows["plain-8275"]
        assert row["verdict"] == "fail" and "not an OSTree board" in row["reason"], row
        assert "would update" not in json.dumps(row) and "not an OSTree board" in proc.stdout + proc.stderr
    assert not (fleet.boards["plain-8275"].dir / "sysroot").exists()


def test_killed_update_reruns_to_a_clean_deployment(ota):
    fleet, base, server, c1, c2, rel = ota
    log = base / "killed.log"
    argv = [sys.executable, "-m", "provisioner", "fleet", "update-os", "-i", str(fleet.inventory), "--release",
            str(rel), "--repo", server.url, "--limit", "killed-8275", "--log", str(log)]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:     # kill the controller once the deployment is staged
        if log.is_file() and "Reboot and wait for the board" in log.read_text(errors="replace"):
            os.killpg(proc.pid, signal.SIGKILL)
            break
        time.sleep(0.1)
    proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    _wait_for_ssh(fleet.boards["killed-8275"])      # the board was mid-reboot: the rerun starts once it is back
    proc2, rows = _update(fleet, rel, server.url, base / "r-killed.json", "--limit", "killed-8275")
    assert proc2.returncode == 0, proc2.stdout + proc2.stderr
    assert rows["killed-8275"]["verdict"] == "pass", rows["killed-8275"]
    assert of.booted(fleet, "killed-8275") == c2
    assert of.deployments(fleet, "killed-8275") == sorted([c1, c2])      # one of each, nothing half-deployed
    assert "pending" not in of.record(fleet, "killed-8275")
    assert not list((fleet.boards["killed-8275"].dir / "sysroot/ostree/repo/state").glob("*.commitpartial"))


def test_up_to_date_board_costs_one_task(ota):
    """An up-to-date board is one board call (the ostree module's stage step finds nothing to do), so a
    rerun over a fleet costs one task per board on the board, not one per ostree command (the old role
    ran an assert, a shell probe, set_facts, skipped includes and a debug on each board), and no argument-spec
    task runs beside it."""
    fleet, base, server, c1, c2, rel = ota
    data = json.loads((rel / "release.json").read_text())
    tasks: dict[str, list[str]] = {}

    def count(event):
        if event.get("event") == "host":
            tasks.setdefault(event["host"], []).append(str(event.get("action")))

    report = run_fleet("update-os", fleet.inventory, context.current(),
                       FleetOptions(limit="good-8275",
                                    extra_vars={**of.SIM_VARS, "edge_llm_update_os_repo_url": server.url,
                                                "edge_llm_update_os_branch": data["ota"]["branch"],
                                                "edge_llm_update_os_commit": data["ota"]["commit"]}),
                       on_event=count)
    assert of.booted(fleet, "good-8275") == c2
    assert [r.verdict for r in report.rows] == ["pass"]
    assert tasks["good-8275"] == ["edge_llm.fleet.ostree"], tasks     # no argument-spec task beside it
