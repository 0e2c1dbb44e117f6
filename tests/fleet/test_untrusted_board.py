"""What a board answers is never templated on the controller, whatever it holds.

A board is untrusted: its files can say anything. Here a virtual board's os-release, its release
document, its model.json and its service config carry a Jinja template in every value (one that would
create a marker file on the controller if Ansible ever rendered it), and fleet verify, launch and
benchmark run over real SSH. The template must reach the report as the text it is, and nothing may run.
"""

from __future__ import annotations

import json

import pytest

from provisioner import context
from provisioner.fleet.runner import FleetOptions, run_fleet
from tests.fleet.simfleet import BoardSpec, build_fleet, can_run, free_port
from tests.fleet.test_untrusted_inputs import planted, string_paths

pytestmark = [pytest.mark.root, pytest.mark.slow, pytest.mark.skipif(can_run() is not None, reason=str(can_run()))]


def poison_json(path, evil: str) -> None:
    data = json.loads(path.read_text())
    for p in string_paths(data):
        data = planted(data, p, evil)
    path.write_text(json.dumps(data))


def test_templates_in_every_board_reply_run_nothing(tmp_path):
    marker = tmp_path / "pwned"
    evil = "{{ lookup('pipe', 'touch " + str(marker) + "') }}"
    fleet = build_fleet(tmp_path / "sim", [BoardSpec("evil-8275", "iq-8275-evk",
                                                     vars={"edge_llm_serve_port_base": free_port()})],
                        cache=tmp_path / "cache", base_index=700)
    try:
        root = fleet.rootfs("evil-8275")
        launched = run_fleet("launch", fleet.inventory, context.current())
        assert launched.row("evil-8275").verdict == "pass", launched.row("evil-8275").reason
        osr = root / "etc/os-release"
        osr.write_text("".join(f'{line.split("=", 1)[0]}="{evil}"\n' for line in osr.read_text().splitlines()
                               if "=" in line))
        for doc in [root / "etc/edge-llm/release.json", *root.glob("opt/edge-llm/models/*/*/model.json"),
                    *root.glob("etc/edge-llm/serve/*.json")]:
            poison_json(doc, evil)
        reports = {a: run_fleet(a, fleet.inventory, context.current(),
                                FleetOptions(extra_vars={"edge_llm_benchmark_runs": 1} if a == "benchmark"
                                             else None))
                   for a in ("verify", "benchmark", "launch")}
    finally:
        fleet.stop()
    assert not marker.exists(), "a board's reply was templated on the controller"
    verify = reports["verify"].row("evil-8275")
    assert verify.verdict == "fail"                       # the board's BUILD_ID is not the release's
    assert "lookup('pipe'" in json.dumps(verify.details) + verify.reason   # reported as the text it is
