"""`fleet launch` on virtual boards, then real HTTP completions through edge-llm-serve on the board."""

from __future__ import annotations

import http.client
import json
import os
import socket
import stat
import subprocess

import pytest
import yaml

from provisioner import context
from provisioner.fleet.runner import FleetOptions, run_fleet, run_playbook
from provisioner.fleet.shared.onboard import serve
from tests.fleet.simfleet import BoardSpec, build_fleet, can_run, free_port
from tests.sim.realtext import real_completion

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
        first = run_fleet("launch", fleet.inventory, context.current(),
                          FleetOptions(log_path=base / "launch.log",
                                       extra_args=("edge_llm_serve_health_retries=3", "edge_llm_serve_health_delay=1",
                                                   "edge_llm_serve_health_timeout=2")),
                          on_event=_count_tasks(fleet))
        yield fleet, ports, first
    finally:
        fleet.stop()
        blocker.close()


def _count_tasks(fleet):
    """An on_event hook recording each board's task results (what HostOutcome.tasks counts) in fleet.tasks."""
    fleet.tasks = {}

    def on_event(event):
        if event.get("event") == "host":
            fleet.tasks.setdefault(event["host"], []).append(event["action"])
    return on_event


def _token(fleet, board):
    """The board's token where launch put it on the controller (beside the inventory)."""
    return (fleet.inventory.parent / ".edge-llm-tokens" / board).read_text().strip()


def _req(port, method, path, body=None, headers=None, token=None):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        conn.request(method, path, body=body,
                     headers={**(headers or {}), **({"Authorization": f"Bearer {token}"} if token else {})})
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read() or b"{}")
    finally:
        conn.close()


def test_launch_reports_healthy_boards_and_the_one_whose_service_cannot_start(launched):
    fleet, _ports, first = launched
    assert first.row("srv-8275").verdict == "pass", first.row("srv-8275").reason
    assert first.row("srv-9075").verdict == "pass", first.row("srv-9075").reason
    busy = first.row("busy-8275")
    port = fleet.specs["busy-8275"].vars["edge_llm_serve_port_base"]
    assert busy.verdict == "fail"
    assert f"could not listen on 127.0.0.1:{port}: the port is taken by another process" in busy.reason


@pytest.mark.parametrize("board", ["srv-8275", "srv-9075"])
def test_completion_through_the_service(launched, board):
    fleet, ports, _ = launched
    status, health = _req(ports[board], "GET", "/health")
    assert status == 200 and health["status"] == "ok"
    prompt = "Explain gravity in one short English sentence."
    status, out = _req(ports[board], "POST", "/v1/completions", json.dumps({"prompt": prompt, "max_tokens": 64}),
                       {"Content-Type": "application/json"}, token=_token(fleet, board))
    assert status == 200, out
    text = out["choices"][0]["text"]
    real = real_completion(prompt, 64) if board == "srv-8275" else None
    if real is not None:
        assert text == real         # Google's runtime wrote it (the tiny model's words); the NPU only paced it
    else:
        assert serve.coherence(text)[0] and "gravity" in text.lower()
    assert out["usage"]["completion_tokens"] > 0 and out["usage"]["total_tokens"] > out["usage"]["prompt_tokens"]
    assert out["timing"]["decode_tok_s"] > 0 and out["timing"]["ttft_s"] > 0


def test_openai_tool_loop_and_json_schema_on_the_genie_board(launched):
    """The official client's agent loop (call, role tool result, answer) and a json_schema answer, through
    the IQ-9075's own service: the serve config fleet launch wrote names the model's tool format."""
    import openai
    fleet, ports, _ = launched
    c = openai.OpenAI(base_url=f"http://127.0.0.1:{ports['srv-9075']}/v1", api_key=_token(fleet, "srv-9075"),
                      max_retries=0, timeout=120)
    assert c.models.retrieve("nemotron-nano-8b").model_extra["capabilities"]["tools"] is True
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
    msgs = [{"role": "user", "content": "What's the weather in Lisbon right now?"}]
    first = c.chat.completions.create(model="nemotron-nano-8b", messages=msgs, tools=tools)
    (call,) = first.choices[0].message.tool_calls
    assert first.choices[0].finish_reason == "tool_calls" and json.loads(call.function.arguments) == {"city": "Lisbon"}
    msgs += [{"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
             {"role": "tool", "tool_call_id": call.id, "content": "rain, 14 C"}]
    second = c.chat.completions.create(model="nemotron-nano-8b", messages=msgs, tools=tools, stream=True)
    assert "rain, 14 C" in "".join(ch.choices[0].delta.content or "" for ch in second if ch.choices)
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"],
              "additionalProperties": False}
    out = c.chat.completions.create(model="nemotron-nano-8b", messages=[
        {"role": "user", "content": "Describe the weather in Lisbon."}],
        response_format={"type": "json_schema", "json_schema": {"name": "place", "schema": schema}})
    assert json.loads(out.choices[0].message.content) == {"city": "Lisbon"}


def test_tools_and_json_schema_on_the_litert_board_never_pass_off_an_unchecked_answer(launched):
    """The IQ-8275's service on Google's real runtime (the tiny random-weight model): it says what it
    offers, takes an agent loop's second turn, and a json_schema answer the model cannot write is a 500
    the client sees, with the model's words, after one retry; never a 200 with text that is not JSON."""
    import openai
    fleet, ports, _ = launched
    c = openai.OpenAI(base_url=f"http://127.0.0.1:{ports['srv-8275']}/v1", api_key=_token(fleet, "srv-8275"),
                      max_retries=0, timeout=120)
    caps = c.models.retrieve("gemma-4-e2b").model_extra["capabilities"]
    assert caps["json_schema"] is True and caps["grammar"] is False
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
    msgs = [{"role": "user", "content": "What's the weather in Lisbon?"},
            {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function", "function": {
                "name": "get_weather", "arguments": '{"city": "Lisbon"}'}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "rain, 14 C"}]
    if caps["tools"]:
        out = c.chat.completions.create(model="gemma-4-e2b", messages=msgs, tools=tools, max_tokens=8)
        assert out.choices[0].finish_reason in ("stop", "length", "tool_calls")
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    with pytest.raises(openai.InternalServerError) as exc:    # random weights write no JSON
        c.chat.completions.create(model="gemma-4-e2b", max_tokens=16, messages=[
            {"role": "user", "content": "Describe the weather in Lisbon."}],
            response_format={"type": "json_schema", "json_schema": {"name": "place", "schema": schema}})
    err = exc.value
    assert err.body["code"] == "response_format_unmet" and err.body["model_output"]
    assert err.response.headers["x-should-retry"] == "false" and "(also on the retry)" in err.body["message"]


def test_openai_tool_loop_on_the_litert_board_runs_the_runtimes_own_processor(launched):
    """The agent loop through the IQ-8275's own service. Its Gemma-4 .litertlm names llm_model_type gemma4, so the
    service offers tools; the board's stand-in answers with Google's real runtime on the tiny model re-packed
    as gemma4, so that runtime's Gemma 4 processor renders the tools, the call and its result. The weights are
    random: the checks are on structure (the tools and the tool's result reach the model), never on words;
    json_schema there is the test above's."""
    import openai
    if real_completion("x", 1) is None:
        pytest.skip("the virtual boards answer with modelled text here (no real LiteRT-LM runtime)")
    fleet, ports, _ = launched
    model = "gemma-4-e2b"
    c = openai.OpenAI(base_url=f"http://127.0.0.1:{ports['srv-8275']}/v1", api_key=_token(fleet, "srv-8275"),
                      max_retries=0, timeout=120)
    assert c.models.retrieve(model).model_extra["capabilities"]["tools"] is True
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
    msgs = [{"role": "user", "content": "What's the weather in Lisbon right now?"}]
    first = c.chat.completions.create(model=model, messages=msgs, tools=tools, max_tokens=8)
    plain = c.chat.completions.create(model=model, messages=msgs, max_tokens=8)
    assert first.choices[0].finish_reason in ("stop", "length", "tool_calls")
    assert first.choices[0].message.content != plain.choices[0].message.content     # the tools were rendered
    call = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Lisbon"}'}}
    answers = set()
    for result in ("rain, 14 C", "sunny, 30 C"):
        turn = msgs + [{"role": "assistant", "content": None, "tool_calls": [call]},
                       {"role": "tool", "tool_call_id": "call_1", "content": result}]
        streamed = c.chat.completions.create(model=model, messages=turn, tools=tools, max_tokens=8, stream=True)
        answers.add("".join(ch.choices[0].delta.content or "" for ch in streamed if ch.choices))
    assert len(answers) == 2 and "" not in answers                              # the tool's result reached it


def test_launch_gives_each_board_a_private_token_and_refuses_requests_without_it(launched):
    fleet, ports, first = launched
    tokens = {b: _token(fleet, b) for b in ports}
    assert len(set(tokens.values())) == 2 and all(len(t) >= 32 for t in tokens.values())
    for board, port in ports.items():
        status, out = _req(port, "POST", "/v1/completions", json.dumps({"prompt": "hi"}))
        assert status == 401 and out["error"]["message"], out
        assert _req(port, "GET", "/v1/models", token="x" * 43)[0] == 401
        assert _req(port, "GET", "/v1/models", token=tokens[board])[0] == 200
        ctl = fleet.inventory.parent / ".edge-llm-tokens" / board
        assert stat.S_IMODE(ctl.stat().st_mode) == 0o600
        assert stat.S_IMODE(ctl.parent.stat().st_mode) == 0o700
        on_board = fleet.rootfs(board) / "etc/edge-llm/serve/api-token"
        st = on_board.stat()
        assert stat.S_IMODE(st.st_mode) == 0o600 and on_board.read_text().strip() == tokens[board]
        assert st.st_uid == _board_uid(fleet, board, "llm") != 0
        config = json.loads(next((fleet.rootfs(board) / "etc/edge-llm/serve").glob("*.json")).read_text())
        assert config["token_file"] == "/etc/edge-llm/serve/api-token" and config["bind"] == "127.0.0.1"
        assert config["max_connections"] > 0 and config["idle_timeout_s"] > 0
    # never in ansible's output (the log of the run) or the report
    log = (fleet.root.parent / "launch.log").read_text()
    report = json.dumps(first.as_dict())
    for t in tokens.values():
        assert t not in log and t not in report


def _board_uid(fleet, board, user):
    for line in (fleet.rootfs(board) / "etc/passwd").read_text().splitlines():
        f = line.split(":")
        if f[0] == user:
            return int(f[2])
    raise AssertionError(f"{user} not in the board's passwd")


def test_launch_reports_each_boards_endpoint(launched):
    _fleet, ports, first = launched
    assert first.row("srv-8275").endpoints == {"gemma-4-e2b": f"http://127.0.0.1:{ports['srv-8275']}/v1"}
    assert first.row("srv-9075").endpoints == {"nemotron-nano-8b": f"http://127.0.0.1:{ports['srv-9075']}/v1"}
    assert f"http://127.0.0.1:{ports['srv-8275']}/v1" in first.row("srv-8275").cells()
    assert first.row("busy-8275").endpoints == {}


def test_service_rejects_bad_requests_and_never_runs_a_shell(launched, tmp_path):
    fleet, ports, _ = launched
    port = ports["srv-8275"]
    tok = _token(fleet, "srv-8275")
    assert _req(port, "POST", "/v1/completions", b"{not json", {"Content-Type": "application/json"}, tok)[0] == 400
    assert _req(port, "POST", "/v1/completions", json.dumps({"prompt": 3}), token=tok)[0] == 400
    big = json.dumps({"prompt": "x" * 70000}).encode()
    assert _req(port, "POST", "/v1/completions", big, token=tok)[0] == 413
    assert _req(port, "GET", "/v1/nothing", token=tok)[0] == 404
    marker = tmp_path / "pwned"
    evil = f"$(touch {marker}); `touch {marker}` | touch {marker} && echo hi"
    status, out = _req(port, "POST", "/v1/completions", json.dumps({"prompt": evil}), token=tok)
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
    before = {b: _token(fleet, b) for b in ("srv-8275", "srv-9075")}
    again = run_fleet("launch", fleet.inventory, context.current(), FleetOptions(limit="srv-8275:srv-9075"))
    assert all(r.verdict == "pass" and r.changed == 0 for r in again.rows), \
        [(r.board, r.changed, r.reason) for r in again.rows]
    assert {b: _token(fleet, b) for b in before} == before          # the rerun kept each board's token


def test_launch_costs_one_task_per_board_first_time_and_on_a_rerun(launched):
    """Controller CPU is linear in tasks x boards: the whole launch (files, systemd, health, API probe) is one
    task, with no per-board argument-spec task beside it."""
    fleet, _, _ = launched
    one = ["edge_llm.fleet.serve"]
    assert fleet.tasks == {"srv-8275": one, "srv-9075": one, "busy-8275": one}
    again = run_playbook("launch", fleet.inventory, context.current(), FleetOptions(limit="srv-8275:srv-9075"))
    assert {h: (o.tasks, o.changed, o.status) for h, o in again.hosts.items()} == \
        {"srv-8275": (1, 0, "ok"), "srv-9075": (1, 0, "ok")}


def _main_pid(fleet, board, unit):
    from provisioner.sim import host

    argv = host.ssh_argv(fleet.boards[board], "systemctl", "show", "-p", "MainPID", "--value", unit)
    return subprocess.run(argv, capture_output=True, text=True, timeout=60).stdout.strip()


def test_check_mode_reports_a_changed_config_and_touches_nothing_then_launch_restarts_that_instance(launched):
    fleet, ports, _ = launched
    unit = "edge-llm-serve@gemma-4-e2b.service"
    config = fleet.rootfs("srv-8275") / "etc/edge-llm/serve/gemma-4-e2b.json"
    drifted = config.read_text().replace('"idle_timeout_s": 10', '"idle_timeout_s": 99')
    assert drifted != config.read_text()
    config.write_text(drifted)
    pid = _main_pid(fleet, "srv-8275", unit)
    dry = run_playbook("launch", fleet.inventory, context.current(),
                       FleetOptions(limit="srv-8275:srv-9075", dry_run=True))
    assert dry.hosts["srv-8275"].changed == 1 and dry.hosts["srv-9075"].changed == 0
    step = dry.hosts["srv-8275"].payload("launch")
    assert step["written"] == ["/etc/edge-llm/serve/gemma-4-e2b.json"]
    assert step["restarted"] == [unit] and step["check_mode"]
    assert config.read_text() == drifted and _main_pid(fleet, "srv-8275", unit) == pid    # nothing touched
    fixed = run_playbook("launch", fleet.inventory, context.current(), FleetOptions(limit="srv-8275"))
    step = fixed.hosts["srv-8275"].payload("launch")
    assert fixed.hosts["srv-8275"].status == "ok" and step["restarted"] == [unit] and not step["daemon_reload"]
    assert '"idle_timeout_s": 10' in config.read_text() and _main_pid(fleet, "srv-8275", unit) != pid
    assert _req(ports["srv-8275"], "GET", "/health")[0] == 200


def test_benchmark_collects_medians_per_board(launched, tmp_path):
    fleet, _, _ = launched
    out_dir = tmp_path / "bench"
    out_dir.mkdir()
    log = tmp_path / "bench.log"
    res = run_fleet("benchmark", fleet.inventory, context.RunContext({**os.environ, "ANSIBLE_VERBOSITY": "3"}),
                    FleetOptions(limit="srv-8275:srv-9075",
                                 extra_vars={"edge_llm_benchmark_runs": 3, "edge_llm_benchmark_dir": str(out_dir)},
                                 log_path=log), on_event=_count_tasks(fleet))
    one = ["edge_llm.fleet.benchmark"]                 # smoke runs, API bench and the JSON file: one task
    assert fleet.tasks == {"srv-8275": one, "srv-9075": one}
    # ... and one board call: the ssh connection plugin logs one EXEC per command it runs on a board (-vvv)
    execs = [ln for ln in log.read_text().splitlines() if "SSH: EXEC" in ln]
    groups = yaml.safe_load(fleet.inventory.read_text())["all"]["children"]
    for name in ("srv-8275", "srv-9075"):
        port = next(g["hosts"][name]["ansible_port"] for g in groups.values() if name in g["hosts"])
        assert sum(f"-o Port={port} " in ln for ln in execs) == 1, [ln[:200] for ln in execs]
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
        api = row.api[model]                                           # streamed through edge-llm-serve
        assert api["n"] == 3 and api["failed"] == 0 and len(api["runs"]) == 3
        assert all(r["ttft_s"] > 0 and r["tokens"] > 1 for r in api["runs"])
        assert api["median_ttft_s"] == sorted(r["ttft_s"] for r in api["runs"])[1]
        assert api["median_decode_tok_s"] > 0 and saved["api"][model]["median_ttft_s"] == api["median_ttft_s"]
        ttft, dec = row.api_figures()
        assert row.cells()[7] == f"{ttft:.3f} / {dec:.1f}"


IMPOSTOR = r'''
import http.server, json, sys
class H(http.server.BaseHTTPRequestHandler):
    def _answer(self):
        print(json.dumps({"path": self.path, "auth": self.headers.get("Authorization")}), flush=True)
        body = json.dumps({"status": "ok", "object": "list", "data": []}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    do_GET = do_POST = _answer
    def log_message(self, *a):
        pass
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
'''


def _as_nobody(script: str, *args: str) -> subprocess.Popen:
    return subprocess.Popen(["python3", "-c", script, *args], user=65534, group=65534, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd="/")


def test_the_socket_unit_holds_the_port_while_the_service_is_down(launched):
    """Launch's edge-llm-serve@<model>.socket keeps the port while the service is stopped: a local user cannot
    take it, and the next client starts the service on it (socket activation)."""
    from provisioner.sim import host

    fleet, ports, _ = launched
    board, unit = "srv-8275", "edge-llm-serve@gemma-4-e2b.service"
    subprocess.run(host.ssh_argv(fleet.boards[board], "systemctl", "stop", unit), check=True, timeout=60)
    squat = _as_nobody("import socket, sys\ns = socket.socket()\ns.bind(('127.0.0.1', int(sys.argv[1])))",
                       str(ports[board]))
    assert squat.wait(30) != 0 and "Address already in use" in squat.communicate()[1]
    answers = [_req(ports[board], "GET", "/health")[0]]            # the connection starts the service ...
    while answers[-1] == 503 and len(answers) < 300:               # ... which answers 503 while loading
        subprocess.run(["sleep", "0.1"], check=True)
        answers.append(_req(ports[board], "GET", "/health")[0])
    assert answers[-1] == 200, answers
    assert _main_pid(fleet, board, unit) not in ("", "0")


def test_a_squatted_port_gets_no_token_and_fails_launch_and_benchmark(launched):
    """Socket and service both stopped (by hand), a local user takes the port: launch cannot open the socket
    and says so, and benchmark refuses to send the token to a listener that is not the unit's process."""
    from provisioner.sim import host

    fleet, ports, _ = launched
    board, unit = "srv-8275", "edge-llm-serve@gemma-4-e2b"
    subprocess.run(host.ssh_argv(fleet.boards[board], "systemctl", "stop", f"{unit}.socket", f"{unit}.service"),
                   check=True, timeout=60)
    impostor = _as_nobody(IMPOSTOR, str(ports[board]))
    try:
        for _ in range(100):                              # wait until it listens (it answers /health 200)
            try:
                if _req(ports[board], "GET", "/health")[0] == 200:
                    break
            except OSError:
                pass
            subprocess.run(["sleep", "0.1"], check=True)
        bench = run_fleet("benchmark", fleet.inventory, context.current(),
                          FleetOptions(limit=board, extra_vars={"edge_llm_benchmark_runs": 1}))
        launch = run_fleet("launch", fleet.inventory, context.current(),
                           FleetOptions(limit=board, extra_args=("edge_llm_serve_health_retries=2",
                                                                 "edge_llm_serve_health_delay=1")))
    finally:
        impostor.kill()
    asked = [json.loads(line) for line in impostor.communicate()[0].splitlines()]
    assert all(a["auth"] is None for a in asked), asked         # the board's token never left for the impostor
    row = bench.row(board)
    assert row.verdict == "fail"
    assert f"port {ports[board]} is held by pid {impostor.pid} (uid 65534)" in row.reason, row.reason
    assert launch.row(board).verdict == "fail"
    assert f"could not listen on 127.0.0.1:{ports[board]}: the port is taken" in launch.row(board).reason
    again = run_fleet("launch", fleet.inventory, context.current(), FleetOptions(limit=board))  # the port is free again
    assert again.row(board).verdict == "pass", again.row(board).reason
