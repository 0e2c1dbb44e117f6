"""edge_llm.fleet.api's probe: a launch passes only when the board's token is accepted and its absence refused."""

from __future__ import annotations

import importlib.util
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace

import pytest

COLLECTIONS = Path(__file__).resolve().parents[2] / "playbooks/collections"
MODULE = COLLECTIONS / "ansible_collections/edge_llm/fleet/plugins/modules/api.py"


def _api():
    # the module imports its client from the collection's module_utils, as AnsiballZ ships it
    if str(COLLECTIONS) not in sys.path:
        sys.path.insert(0, str(COLLECTIONS))
    spec = importlib.util.spec_from_file_location("edge_llm_fleet_api", MODULE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(autouse=True)
def no_unit_here(monkeypatch):
    """These services are threads of the test, not systemd units: the listener check (who holds the port,
    tests/fleet/test_fleet_launch.py checks it on virtual boards) has no unit to ask about, so it is let pass."""
    monkeypatch.setattr(_api().serve_client, "listener_problem", lambda inst: None)


class _Open(BaseHTTPRequestHandler):
    """A service that answers every request, with or without a bearer token."""

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def open_service():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Open)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield [{"model": "m", "port": srv.server_address[1], "bind": "127.0.0.1"}]
    srv.shutdown()
    srv.server_close()


def test_probe_fails_when_the_token_file_cannot_be_read(tmp_path, open_service):
    # Before: an unreadable token made the probe skip the 401 check and report "none (loopback)" as a pass.
    api = _api()
    missing = tmp_path / "api-token"
    module = SimpleNamespace(params={"address": None, "token_file": str(missing)})
    _, problems = api.probe(module, open_service, api.read_token(str(missing)))
    assert problems and str(missing) in problems[0]


def test_probe_fails_an_api_that_answers_without_the_token(tmp_path, open_service):
    api = _api()
    token = tmp_path / "api-token"
    token.write_text("t0ken\n")
    module = SimpleNamespace(params={"address": None, "token_file": str(token)})
    payload, problems = api.probe(module, open_service, api.read_token(str(token)))
    assert payload["endpoints"] == {"m": f"http://127.0.0.1:{open_service[0]['port']}/v1"}
    assert problems == ["m: GET /v1/models without a token answered 200, not 401"]


class _FastStreamSlowRuntime(BaseHTTPRequestHandler):
    """A service whose chunks reach the client at once, while the runtime it reports decoded at 4 tok/s
    (a board that fell off the NPU behind a client that cannot tell, e.g. buffered output)."""

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.server.bodies.append(body)
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        for word in ("An ", "NPU ", "runs ", "neural ", "networks."):
            self.wfile.write(b'data: {"choices": [{"delta": {"content": "%s"}}]}\n\n' % word.encode())
        self.wfile.write(b'data: {"choices": [], "usage": {"completion_tokens": 5}, '
                         b'"timing": {"decode_tok_s": 4.0}}\n\n')
        self.wfile.write(b"data: [DONE]\n\n")

    def log_message(self, *args) -> None:
        pass


def test_the_api_gate_judges_the_runtimes_own_rate_too(tmp_path):
    import json

    from provisioner.contracts import inventory
    from provisioner.fleet import verify

    srv = ThreadingHTTPServer(("127.0.0.1", 0), _FastStreamSlowRuntime)
    srv.bodies = []
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        inst = [{"model": "m", "port": srv.server_address[1], "bind": "127.0.0.1"}]
        client = _api().serve_client          # the collection's module_utils, as the module imports it
        payload, problems = client.bench(inst, "t0ken", None, runs=1, prompt="hi", max_tokens=8, timeout=10)
    finally:
        srv.shutdown()
        srv.server_close()
    assert not problems
    assert json.loads(srv.bodies[0])["stream_options"] == {"include_usage": True}
    fig = payload["api"]["m"]
    assert fig["median_runtime_decode_tok_s"] == 4.0
    expect = inventory.HostVars.from_vars({"edge_llm_board": "iq-8275-evk", "edge_llm_models": [
        {"name": "m", "kind": "litertlm", "qairt": "2.44.0.260225", "min_decode_tok_s": 10.0}]})
    (check,) = verify.api_checks(expect, payload["api"])
    assert not check.ok and "decode 4.0 tok/s" in check.detail
