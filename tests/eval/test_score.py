"""Scoring answers: each check kind right and wrong, tool calls by value, untrusted text kept as text."""

from __future__ import annotations

import json

from provisioner.eval.score import judge, score_model, worst
from provisioner.eval.suite import load_suite

SUITE = load_suite("default")
CASES = {c.id: c for c in SUITE.cases}


def _text(t):
    return {"status": 200, "content": t, "tool_calls": [], "finish_reason": "stop"}


def _calls(*calls):
    return {"status": 200, "content": None, "finish_reason": "tool_calls",
            "tool_calls": [{"id": f"c{i}", "type": "function",
                            "function": {"name": n, "arguments": json.dumps(a)}} for i, (n, a) in enumerate(calls)]}


def _ok(case, answer):
    return judge(CASES[case], answer, SUITE.tools).ok


def test_golden_checks_accept_real_phrasings_and_refuse_wrong_ones():
    assert _ok("capital-france", _text("The capital of France is Paris."))
    assert not _ok("capital-france", _text("The capital of France is Lyon."))
    assert _ok("add-small", _text("2 + 3 = 5")) and _ok("add-small", _text("5"))
    assert not _ok("add-small", _text("2 + 3 alitiesmallalitiesmall"))
    assert _ok("largest-planet", _text("Jupiter.")) and not _ok("largest-planet", _text("Jupiter is the largest."))
    assert _ok("json-capital", _text('```json\n{"country": "japan", "capital": "Tokyo"}\n```'))
    assert not _ok("json-capital", _text('{"country": "Japan", "capital": "Kyoto"}'))
    assert not _ok("json-capital", _text("Tokyo"))
    assert _ok("gravity", _text("Gravity is the force that pulls masses together."))


def test_tool_calls_are_checked_by_tool_arguments_and_count():
    assert _ok("weather-one-city", _calls(("get_weather", {"city": "paris"})))
    assert _ok("weather-one-city", _calls(("get_weather", {"city": "Paris", "unit": "celsius"})))
    assert not _ok("weather-one-city", _calls(("get_time", {"city": "Paris"})))
    assert not _ok("weather-one-city", _calls(("get_weather", {"city": "Lyon"})))
    assert not _ok("weather-one-city", _calls(("get_weather", {"city": "Paris", "country": "FR"})))
    assert not _ok("weather-one-city", _text("It is sunny in Paris."))
    assert _ok("no-tool-needed", _text("42")) and not _ok("no-tool-needed", _calls(("get_time", {"city": "X"})))
    both = [("get_weather", {"city": "Tokyo"}), ("get_weather", {"city": "Paris"})]
    assert _ok("weather-two-cities", _calls(*both))
    assert not _ok("weather-two-cities", _calls(both[0]))
    assert not _ok("weather-two-cities", _calls(both[0], both[0]))
    bad_json = _calls(("get_weather", {}))
    bad_json["tool_calls"][0]["function"]["arguments"] = "{city: Paris"
    assert not _ok("weather-one-city", bad_json)


def test_score_per_category_and_the_worst_failure_shows_the_models_words():
    answers = {c.id: _text("\x1b[31mThe capital of alitiesmallalitiesmall") for c in SUITE.cases}
    answers["capital-france"] = _text("Paris")
    answers["no-tool-needed"] = {"error": "HTTP 400: tools not supported"}
    res = score_model(SUITE, answers)
    assert res["passed"] == 1 and res["total"] == len(SUITE.cases)
    assert res["categories"]["knowledge"] == {"passed": 1, "total": 3, "score": 0.3333}
    assert res["categories"]["no-call"]["passed"] == 0
    line = worst(res)
    assert line.startswith("company-qualcomm: expected regex") and "alitiesmall" in line
    assert "\x1b" in res["failures"][0]["got"]      # kept as text; the report makes it visible
    nocall = next(f for f in res["failures"] if f["case"] == "no-tool-needed")
    assert nocall["got"] == "(no answer: HTTP 400: tools not supported)"


def test_an_answer_the_service_refused_shows_the_models_words_beside_the_error():
    """The service's 500 for an unfit answer carries error.model_output; the board module keeps it as the
    answer's content and the report shows it, so fleet eval says what the model actually wrote."""
    import http.server
    import sys
    import threading
    from pathlib import Path

    collections = Path(__file__).resolve().parents[2] / "playbooks" / "collections"
    if str(collections) not in sys.path:
        sys.path.insert(0, str(collections))
    from ansible_collections.edge_llm.fleet.plugins.modules import eval as eval_module

    class Service(http.server.BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 (http.server naming)
            self.rfile.read(int(self.headers["Content-Length"]))
            data = json.dumps({"error": {"message": "tool_choice demanded a tool call and the model answered "
                                         "without one (also on the retry)", "type": "server_error", "param": None,
                                         "code": "tool_choice_unmet", "model_output": "It is sunny in Paris."}})
            self.send_response(500)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data.encode())

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Service)
    threading.Thread(target=server.handle_request, daemon=True).start()
    try:
        got = eval_module.ask({"bind": "127.0.0.1", "port": server.server_address[1]}, "t",
                              {"messages": [{"role": "user", "content": "Weather in Paris?"}]}, 10, 2000)
    finally:
        server.server_close()
    assert got["status"] == 500 and got["content"] == "It is sunny in Paris."
    verdict = judge(next(c for c in SUITE.cases if c.category == "tool-call"), got, SUITE.tools)
    assert not verdict.ok and verdict.got.startswith("(no answer: HTTP 500: tool_choice demanded")
    assert verdict.got.endswith("the model said: It is sunny in Paris.")
