"""fleet update-os on virtual boards with real OSTree sysroots (only the bootloader is simulated)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.fleet.artserver import ArtifactServer
from tests.fleet.simfleet import BoardSpec, build_fleet, can_run
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
    specs = [BoardSpec("good-8275", "iq-8275-evk", vars=of.SIM_VARS),
             BoardSpec("noboot-8275", "iq-8275-evk", faults=("ota-no-boot",), vars=of.SIM_VARS),
             BoardSpec("badnpu-8275", "iq-8275-evk", faults=("ota-bad-npu",), vars=of.SIM_VARS)]
    fleet = build_fleet(base / "sim", specs, cache=base / "cache")
    repo = base / "srv"
    rootfs = fleet.rootfs("good-8275")
    c1 = of.commit_tree(rootfs, base, repo, "base-1")
    c2 = of.commit_tree(rootfs, base, repo, "os-2", {"usr/lib/edge-llm/security-fix.txt": b"fixed\n" * 100})
    of.publish(repo, c1, c2)
    of.make_ota_boards(fleet, repo, c1)
    server = ArtifactServer(repo)
    try:
        yield fleet, base, server, c1, c2, of.release_dir(base / "rel-2", "os-2", c2)
    finally:
        server.close()
        fleet.stop()


def test_update_commits_good_board_and_rolls_back_bad_ones(ota):
    fleet, base, server, c1, c2, rel = ota
    proc, rows = _update(fleet, rel, server.url, base / "r1.json", "--serial", "3", "--max-fail-percentage", "100")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert rows["good-8275"]["verdict"] == "pass", rows["good-8275"]
    assert of.booted(fleet, "good-8275") == c2
    assert not (fleet.boards["good-8275"].dir / "sysroot/boot/edge-llm-ota-trial").exists()
    assert "did not boot" in rows["noboot-8275"]["reason"] and "rolled back" in rows["noboot-8275"]["reason"]
    assert of.booted(fleet, "noboot-8275") == c1
    assert rows["badnpu-8275"]["verdict"] == "fail"
    assert "rolled back" in rows["badnpu-8275"]["reason"] and "tok/s" in rows["badnpu-8275"]["reason"]
    assert of.booted(fleet, "badnpu-8275") == c1
    # the delta was used: what came over the wire is far less than the full commit
    pulled = sum(h.sent for h in server.log if "/deltas/" in h.path)
    assert pulled > 0


def test_rerun_on_updated_board_changes_and_transfers_nothing(ota):
    fleet, base, server, c1, c2, rel = ota
    mark = server.mark()
    proc, rows = _update(fleet, rel, server.url, base / "r2.json", "--limit", "good-8275")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert rows["good-8275"]["verdict"] == "pass" and rows["good-8275"]["changed"] == 0
    assert server.since(mark) == []
    assert of.booted(fleet, "good-8275") == c2
