"""`fleet launch` on virtual boards, then real HTTP completions through edge-llm-serve on the board."""

from __future__ import annotations

import http.client
import json
import socket
import subprocess

import pytest

from provisioner.fleet.api import run_fleet
from provisioner.fleet.onboard import serve
from tests.fleet.simfleet import BoardSpec, build_fleet, can_run, free_port

pytestmark = [pytest.mark.root, pytest.mark.slow,
              pytest.mark.skipif(can_run() is not None, reason=str(can_run()))]


@pytest.fixture(scope="module")
def launched(tmp_path_factory):
    base = tmp_path_factory.mktemp("fleet-launch")
    blocker = socket.socket()
    blocker.bind(("127.0.0.1", 0))
    blocker.listen(1)                                   # something else already owns this board's port
    ports = {"srv-8275": free_port(), "srv-9075": free_port()}
    specs = [BoardSpec(n, b, vars={"edge_llm_serve_port_base": ports[n]})
             for n, b in (("srv-8275", "iq-8275-evk"), ("srv-9075", "iq-9075-evk"))]
    specs.append(BoardSpec("busy-8275", "iq-8275-evk",
                           vars={"edge_llm_serve_port_base": blocker.getsockname()[1]}))
    fleet = build_fleet(base / "sim", specs, cache=base / "cache", base_index=300)
    try:
        first = run_fleet("launch", fleet.inventory, extra_args=["edge_llm_serve_health_retries=3",
                                                                  "edge_llm_serve_health_delay=1",
                                                                  "edge_llm_serve_health_timeout=2"])
        yield fleet, ports, first
    finally:
        fleet.stop()
        blocker.close()


def _req(port, method, path, body=None, headers=None):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read() or b"{}")
    finally:
        conn.close()


def test_launch_reports_healthy_boards_and_the_one_whose_service_cannot_start(launched):
    _fleet, _ports, first = launched
    assert first.row("srv-8275").verdict == "pass", first.row("srv-8275").reason
    assert first.row("srv-9075").verdict == "pass", first.row("srv-9075").reason
    busy = first.row("busy-8275")
    assert busy.verdict == "fail" and "health" in busy.reason.lower()


@pytest.mark.parametrize("board", ["srv-8275", "srv-9075"])
def test_completion_through_the_service(launched, board):
    _fleet, ports, _ = launched
    status, health = _req(ports[board], "GET", "/health")
    assert status == 200 and health["status"] == "ok"
    status, out = _req(ports[board], "POST", "/v1/completions",
                       json.dumps({"prompt": "Explain gravity in one short English sentence.", "max_tokens": 64}),
                       {"Content-Type": "application/json"})
    assert status == 200, out
    text = out["choices"][0]["text"]
    assert serve.coherence(text)[0] and "gravity" in text.lower()
    assert out["usage"]["completion_tokens"] > 0 and out["usage"]["total_tokens"] > out["usage"]["prompt_tokens"]
    assert out["timing"]["decode_tok_s"] > 0 and out["timing"]["ttft_s"] > 0


def test_service_rejects_bad_requests_and_never_runs_a_shell(launched, tmp_path):
    _fleet, ports, _ = launched
    port = ports["srv-8275"]
    assert _req(port, "POST", "/v1/completions", b"{not json", {"Content-Type": "application/json"})[0] == 400
    assert _req(port, "POST", "/v1/completions", json.dumps({"prompt": 3}))[0] == 400
    big = json.dumps({"prompt": "x" * 70000}).encode()
    assert _req(port, "POST", "/v1/completions", big)[0] == 413
    assert _req(port, "GET", "/v1/nothing")[0] == 404
    marker = tmp_path / "pwned"
    evil = f"$(touch {marker}); `touch {marker}` | touch {marker} && echo hi"
    status, out = _req(port, "POST", "/v1/completions", json.dumps({"prompt": evil}))
    assert status == 200 and not marker.exists()


def test_unit_has_memlock_fastrpc_group_and_the_models_qairt(launched):
    from provisioner.sim import host

    fleet, _, _ = launched
    argv = host.ssh_argv(fleet.boards["srv-9075"], "systemctl", "show", "-p", "LimitMEMLOCK", "-p",
                         "Environment", "-p", "ActiveState", "edge-llm-serve@nemotron-nano-8b.service")
    out = subprocess.run(argv, capture_output=True, text=True, timeout=60).stdout
    assert "LimitMEMLOCK=infinity" in out and "ActiveState=active" in out
    assert "ADSP_LIBRARY_PATH=/opt/qairt/2.45.0.260326/lib/hexagon-v73/unsigned" in out
    unit = (fleet.rootfs("srv-9075") / "etc/systemd/system/edge-llm-serve@.service").read_text()
    assert "SupplementaryGroups=fastrpc" in unit and "Restart=on-failure" in unit


def test_second_launch_changes_nothing(launched):
    fleet, _, _ = launched
    again = run_fleet("launch", fleet.inventory, limit="srv-8275:srv-9075")
    assert all(r.verdict == "pass" and r.changed == 0 for r in again.rows), \
        [(r.board, r.changed, r.reason) for r in again.rows]


def test_benchmark_collects_medians_per_board(launched, tmp_path):
    fleet, _, _ = launched
    out_dir = tmp_path / "bench"
    out_dir.mkdir()
    res = run_fleet("benchmark", fleet.inventory, limit="srv-8275:srv-9075",
                    extra_vars={"edge_llm_benchmark_runs": 3, "edge_llm_benchmark_dir": str(out_dir)})
    for name, model in (("srv-8275", "gemma-4-e2b"), ("srv-9075", "nemotron-nano-8b")):
        row = res.row(name)
        assert row.verdict == "pass", row.reason
        bench = row.details["benchmark"][model]
        assert bench["n"] == 3 and bench["failed"] == 0
        decs = sorted(r["decode_tok_s"] for r in bench["runs"])
        assert bench["median_decode_tok_s"] == round(decs[1], 2)
        assert row.decode_tok_s == bench["median_decode_tok_s"] >= bench["min_decode_tok_s"]
        saved = json.loads((out_dir / f"{name}.json").read_text())      # collected on the controller
        assert saved["benchmark"][model]["median_decode_tok_s"] == bench["median_decode_tok_s"]
