"""edge-llm-serve through the official openai client: chat, completions, streaming, models, errors."""

from __future__ import annotations

import http.client
import json

import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families


def client(board) -> openai.OpenAI:
    return openai.OpenAI(base_url=board.url + "/v1", api_key=board.token or "none", max_retries=0, timeout=20)


def raw(board, method, path, body=None, headers=None):
    c = http.client.HTTPConnection("127.0.0.1", board.port, timeout=20)
    try:
        c.request(method, path, body=body, headers=board.headers() | (headers or {}))
        r = c.getresponse()
        return r.status, dict(r.getheaders()), r.read()
    finally:
        c.close()


@pytest.mark.parametrize("runtime", ["litert_lm", "genie"])
def test_chat_completions_models_and_streaming(start_board, runtime):
    board = start_board(runtime)
    c = client(board)
    assert [m.id for m in c.models.list().data] == [json.loads(board.cfg_path.read_text())["model"]]
    out = c.chat.completions.create(model=c.models.list().data[0].id, max_tokens=5,
                                    messages=[{"role": "user", "content": "hello"}])
    assert out.choices[0].message.content == "alpha beta gamma delta epsilon "
    assert out.choices[0].finish_reason == "length"
    assert out.usage.completion_tokens == 5 and out.usage.total_tokens > 5
    pieces = []
    stream = c.chat.completions.create(model=out.model, stream=True, messages=[{"role": "user", "content": "hi"}],
                                       stream_options={"include_usage": True})
    usage = None
    for ch in stream:
        if ch.choices and ch.choices[0].delta.content:
            pieces.append(ch.choices[0].delta.content)
        usage = ch.usage or usage
    assert "".join(pieces) == "alpha beta gamma delta epsilon zeta eta theta "
    assert len(pieces) == 8 and usage.completion_tokens == 8
    comp = c.completions.create(model=out.model, prompt="once", max_tokens=3, stop=["gamma"])
    assert comp.choices[0].text == "alpha beta "
    streamed = "".join(ch.choices[0].text for ch in c.completions.create(model=out.model, prompt="x", stream=True))
    assert streamed.startswith("alpha beta")


def test_sse_ends_with_done(start_board):
    board = start_board()
    status, headers, body = raw(board, "POST", "/v1/completions", json.dumps({"prompt": "p", "stream": True}),
                                {"Content-Type": "application/json"})
    assert status == 200 and headers["Content-Type"] == "text/event-stream"
    events = [e for e in body.decode().split("\n\n") if e]
    assert events[-1] == "data: [DONE]" and all(e.startswith("data: ") for e in events)


@pytest.mark.parametrize("runtime,runtime_error", [("litert_lm", "NPU executor failed"),
                                                   ("genie", "GenieDialog_query returned")])
def test_errors_are_openai_error_objects(start_board, runtime, runtime_error):
    board = start_board(runtime)
    model = json.loads(board.cfg_path.read_text())["model"]
    c = client(board)
    with pytest.raises(openai.NotFoundError) as exc:
        c.chat.completions.create(model="gpt-4", messages=[{"role": "user", "content": "x"}])
    assert exc.value.body["code"] == "model_not_found"
    with pytest.raises(openai.BadRequestError) as exc:
        c.chat.completions.create(model=model, messages=[{"role": "user", "content": "x"}], max_tokens=0)
    assert exc.value.body["param"] == "max_tokens"
    with pytest.raises(openai.BadRequestError):
        c.chat.completions.create(model=model, messages=[{"role": "assistant", "content": "x"}])
    with pytest.raises(openai.InternalServerError) as exc:   # the runtime reports an error
        c.completions.create(model=model, prompt="FAIL please")
    assert runtime_error in exc.value.body["message"]   # the library's own error text
    status, _, body = raw(board, "GET", "/v2/nothing")
    assert status == 404 and json.loads(body)["error"]["type"] == "invalid_request_error"


def test_nemotron_thinking_switch_reaches_the_template(start_board):
    board = start_board("genie")
    from provisioner.fleet.shared.onboard import serve
    cfg = serve.load_config(str(board.cfg_path))
    job = serve.make_job(cfg, "chat", {"messages": [{"role": "user", "content": "q"}]})
    assert "system<|end_header_id|>\n\ndetailed thinking off<|eot_id|>" in job.prompt
    job = serve.make_job(cfg, "chat", {"messages": [{"role": "system", "content": "detailed thinking on"},
                                                    {"role": "user", "content": "q"}]})
    assert "detailed thinking on<|eot_id|>" in job.prompt and "thinking off" not in job.prompt
    assert job.prompt.endswith("<|start_header_id|>assistant<|end_header_id|>\n\n")


def test_metrics_parse_as_prometheus_text(start_board):
    board = start_board()
    client(board).completions.create(model="gemma-4-e2b", prompt="x", max_tokens=4)
    raw(board, "POST", "/v1/completions", b"{", {"Content-Type": "application/json"})
    status, headers, body = raw(board, "GET", "/metrics")
    assert status == 200 and headers["Content-Type"].startswith("text/plain")
    fams = {f.name: f for f in text_string_to_metric_families(body.decode())}
    req = {(s.labels["endpoint"], s.labels["status"]): s.value for s in fams["edge_llm_requests"].samples}
    assert req[("/v1/completions", "200")] == 1 and req[("/v1/completions", "400")] == 1
    assert fams["edge_llm_generated_tokens"].samples[0].value == 4
    ttft = {s.name: s.value for s in fams["edge_llm_time_to_first_token_seconds"].samples if "le" not in s.labels}
    assert ttft["edge_llm_time_to_first_token_seconds_count"] == 1
    assert fams["edge_llm_decode_tokens_per_second"].type == "histogram"
    assert fams["edge_llm_queue_depth"].samples[0].value == 0
    assert "edge_llm_runtime_errors" in fams


@pytest.mark.parametrize("n", [True, 1.0, 2, "1"])
def test_n_other_than_the_integer_1_is_refused_by_name(n):
    # Before: true and 1.0 passed, since they compare equal to 1; every other field refuses a bool.
    from provisioner.fleet.shared.onboard import serve
    cfg = {"model": "m", "runtime": "litert_lm"}
    with pytest.raises(serve.BadRequest) as exc:
        serve.make_job(cfg, "chat", {"messages": [{"role": "user", "content": "q"}], "n": n})
    assert exc.value.status == 400 and exc.value.param == "n"
    assert serve.make_job(cfg, "chat", {"messages": [{"role": "user", "content": "q"}], "n": 1}).prompt
