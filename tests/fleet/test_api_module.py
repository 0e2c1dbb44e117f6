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
