"""`provisioner rehearse --ota` end to end: flash, launch, then a whole-image update of the same boards."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from tests.fleet.simfleet import can_run

pytestmark = pytest.mark.skipif(can_run() is not None or shutil.which("ostree") is None,
                                reason=str(can_run() or "needs the ostree CLI"))


@pytest.fixture
def work(tmp_path):
    yield tmp_path / "rehearsal"
    # ostree deployments are immutable (chattr +i); tmp must be removable
    subprocess.run(["chattr", "-R", "-i", str(tmp_path)], check=False, capture_output=True)


def _rehearse(work, fault: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "provisioner", "rehearse", "--ota", "--boards", "2",
                           "--fault", fault, "--work-dir", str(work), "--json"],
                          capture_output=True, text=True, timeout=900,
                          env={**os.environ, "PATH": f"{os.path.dirname(sys.executable)}:{os.environ['PATH']}"})


def test_rehearse_ota_updates_one_board_and_rolls_back_the_one_that_does_not_boot(work):
    """Two boards, one per lane: the IQ-8275 one has ota-no-boot (the new deployment never comes up),
    the IQ-9075 one takes the update. The report says which, from and to which commit, and why.
    Then once more in the same work dir (with ota-bad-npu): a rerun passes the same steps."""
    proc = _rehearse(work, "ota-no-boot")
    assert "Traceback" not in proc.stderr
    assert proc.returncode == 1, proc.stderr[-3000:]           # a board failed its update: checked and unfit
    report = json.loads(proc.stdout)
    steps = {s["name"]: s for s in report["steps"]}
    for name in ("completion", "ota release", "ota publish", "ota boards", "fleet update-os"):
        assert steps[name]["ok"], steps[name]
    assert "delta from" in steps["ota publish"]["detail"]
    rows = {b["board"]: b for b in report["boards"]}
    good, bad = rows["iq-9075-evk"], rows["iq-8275-evk"]
    # the verify columns are there again (host name mapped to its serial through the inventory)
    assert good["verdict"] == "pass" and good["host"].startswith("iq-9075-")
    assert good["update_os"]["outcome"] == "updated" and good["update_os"]["verdict"] == "pass"
    assert good["update_os"]["from"] != good["update_os"]["to"]
    assert good["update_os"]["bytes_pulled"] > 0
    assert bad["faults"] == ["ota-no-boot"]
    assert bad["update_os"]["outcome"] == "rolled back"
    assert "did not boot" in bad["update_os"]["reason"]
    # the good board runs the new release: its BUILD_ID is the second release's
    on_board = json.loads((work / "ota" / "update-os-nemotron-nano-iq9075-2026.11.json").read_text())
    checks = {c["check"]: c for c in on_board["boards"][0]["checks"]}
    assert checks["release"]["detail"] == "BUILD_ID nemotron-nano-iq9075-2026.11-ota1"

    # the same work dir again, another fault: the rehearsal's releases are new commits under the same ids,
    # and its publish starts from its own empty repository instead of refusing them
    again = _rehearse(work, "ota-bad-npu")
    assert again.returncode == 1, again.stderr[-3000:]
    report = json.loads(again.stdout)
    steps = {s["name"]: s for s in report["steps"]}
    for name in ("ota release", "ota publish", "ota boards", "fleet update-os"):
        assert steps[name]["ok"], steps[name]
    rows = {b["board"]: b for b in report["boards"]}
    assert rows["iq-9075-evk"]["update_os"]["outcome"] == "updated"
    assert rows["iq-8275-evk"]["update_os"]["outcome"] == "rolled back"
