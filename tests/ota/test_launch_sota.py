"""fleet launch on a virtual sota board: /usr is the booted commit (read-only), so launch never writes it.

A newer edge-llm-serve reaches such a board only through an OS update; a launch whose program differs from
the image's keeps the image's, starts the service with it, and says so on the board's row.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys

import pytest

from provisioner.contracts import board as on_board
from provisioner.fleet.shared.onboard import program_bytes
from provisioner.sim import host
from tests.fleet.simfleet import BoardSpec, build_fleet, can_run, free_port
from tests.ota import otafleet as of

pytestmark = pytest.mark.skipif(can_run() is not None or not os.path.exists("/usr/bin/ostree"),
                                reason=str(can_run() or "no ostree"))

BOARD = "sota-8275"


def test_launch_keeps_the_images_service_on_a_read_only_usr(tmp_path):
    fleet = build_fleet(tmp_path / "sim", [BoardSpec(BOARD, "iq-8275-evk",
                                                     vars={**of.SIM_VARS, "edge_llm_serve_port_base": free_port()})],
                        cache=tmp_path / "cache", base_index=470)
    try:
        # the image was built with another edge-llm-serve than the one this controller carries
        image_serve = program_bytes() + b"\n# the image's own build\n"     # a virtual image's form of it
        tree = of.image_tree(fleet.rootfs(BOARD), tmp_path, "base-1", {on_board.SERVE_BIN.lstrip("/"): image_serve})
        rel, commit = of.build_release(tmp_path, "base-1", tree)
        repo = tmp_path / "srv"
        of.publish(rel, repo)
        of.make_ota_boards(fleet, repo, commit)

        def ssh(*command: str) -> subprocess.CompletedProcess:
            return subprocess.run(host.ssh_argv(fleet.boards[BOARD], *command), capture_output=True, timeout=120)

        assert ssh("test", "-e", "/run/ostree-booted").returncode == 0
        assert ssh("touch", "/usr/bin/x").returncode != 0                        # the commit's /usr is read-only

        report = tmp_path / "launch.json"
        proc = subprocess.run([sys.executable, "-m", "provisioner", "fleet", "launch", "-i", str(fleet.inventory),
                               "--report", str(report)], capture_output=True, text=True, timeout=600,
                              env={**os.environ, "COLUMNS": "250"})
        assert "Traceback" not in proc.stdout + proc.stderr
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
        row = json.loads(report.read_text())["boards"][0]
        assert row["verdict"] == "pass", row
        assert f"kept the image's {on_board.SERVE_BIN}" in row["reason"] and "update-os" in row["reason"]
        assert "kept the image's" in proc.stdout                                # the table says so too
        launch = next(s for s in row["details"]["steps"] if s.get("kind") == "launch")
        assert launch["kept_image"] == [on_board.SERVE_BIN] and on_board.SERVE_BIN not in launch["written"]
        served = ssh("sha256sum", on_board.SERVE_BIN).stdout.split()[0].decode()
        assert served == hashlib.sha256(image_serve).hexdigest()
    finally:
        fleet.stop()
        of.unfreeze(tmp_path)
