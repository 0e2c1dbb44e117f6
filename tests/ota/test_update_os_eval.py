"""fleet update-os with the release's eval gate (verify.eval -> release.json fleet.eval) on a virtual sota board.

The IQ-8275 board's service generates with Google's real LiteRT-LM runtime on a tiny random-weight model:
its answers are real words and wrong, so the suite scores low there, truly. With a min_score above that,
the new image passes every other check of the health gate and is still rolled back, the reason naming the
score and the worst failure.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from provisioner import context
from provisioner.eval.suite import load_suite
from provisioner.fleet.runner import run_fleet
from tests.fleet.simfleet import BoardSpec, build_fleet, can_run, free_port
from tests.ota import otafleet as of

pytestmark = [pytest.mark.root, pytest.mark.slow,
              pytest.mark.skipif(can_run() is not None or not os.path.exists("/usr/bin/ostree"),
                                 reason=str(can_run() or "no ostree"))]


def test_an_image_whose_model_scores_below_the_release_min_score_is_rolled_back(tmp_path):
    base = tmp_path
    fleet = build_fleet(base / "sim", [BoardSpec("ev-8275", "iq-8275-evk",
                                                 vars={**of.SIM_VARS, "edge_llm_serve_port_base": free_port()})],
                        cache=base / "cache", base_index=760)
    try:
        repo = base / "srv"
        rootfs = fleet.rootfs("ev-8275")
        rel1, c1 = of.build_release(base, "base-1", of.image_tree(rootfs, base, "base-1"))
        rel2, c2 = of.build_release(base, "os-2", of.image_tree(rootfs, base, "os-2",
                                                                {"usr/lib/edge-llm/fix.txt": b"fixed\n"}))
        of.publish(rel1, repo)
        of.publish(rel2, repo)
        of.make_ota_boards(fleet, repo, c1)
        launch = run_fleet("launch", fleet.inventory, context.current())
        assert launch.row("ev-8275").verdict == "pass", launch.row("ev-8275").reason
        # what `build` writes from a manifest's verify: {eval: {suite: default, min_score: 0.5}}
        meta = rel2 / "release.json"
        data = json.loads(meta.read_text())
        data.setdefault("fleet", {})["eval"] = {"suite": load_suite("default").raw, "source": "default",
                                                "min_score": 0.5}
        meta.write_text(json.dumps(data))
        with of.serving(fleet, base, repo) as server:
            report = base / "r.json"
            proc = subprocess.run([sys.executable, "-m", "provisioner", "fleet", "update-os", "-i",
                                   str(fleet.inventory), "--release", str(rel2), "--repo", server.url,
                                   "--report", str(report)], capture_output=True, text=True, timeout=900,
                                  env={**os.environ, "COLUMNS": "250"})
        assert proc.returncode == 1, proc.stdout + proc.stderr
        row = json.loads(report.read_text())["boards"][0]
        assert row["verdict"] == "fail" and "rolled back" in row["reason"], row
        assert "eval: gemma-4-e2b scored" in row["reason"] and "below min_score 0.5" in row["reason"], row["reason"]
        assert "worst: " in row["reason"], row["reason"]
        assert of.booted(fleet, "ev-8275") == c1
    finally:
        fleet.stop()
