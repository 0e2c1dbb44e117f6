"""Calls a runtime parsed itself (LiteRT-LM's Conversation API) reach the client as OpenAI tool calls.

On the real runtime the tiny random-weight model never writes a call block, so the path from an engine's
``figures["tool_calls"]`` (the contract LiteRtEngine fills from the runtime's message, see
engines/litert.py ``openai_tool_calls``) to the client's ``message.tool_calls`` / ``delta.tool_calls`` is
driven here by an engine that returns calls as the runtime's processor would: in-process, through the
service's real HTTP stack, with the official ``openai`` client.
"""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path

import openai
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "layers/meta-edge-llm/recipes-ai/edge-llm-serve/files"))

from edge_llm_serve.config import DEFAULTS  # noqa: E402
from edge_llm_serve.engines.base import Engine  # noqa: E402
from edge_llm_serve.startup import serve  # noqa: E402

from tests.serve.conftest import TOKEN, free_port  # noqa: E402

TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]


class ParsingRuntime(Engine):
    """Answers each job with the calls queued in ``calls`` (one list per generation), as a runtime whose
    own processor parsed them: text through emit, calls in figures."""

    capabilities = {"tools": True, "json_object": True, "json_schema": True, "grammar": False,
                    "constrained": False}

    def __init__(self, cfg, calls):
        super().__init__(cfg)
        self.calls = list(calls)
        self.generations = 0

    def load(self) -> None:
        self.init_s = 0.0

    def generate(self, job, emit):
        self.generations += 1
        calls = self.calls.pop(0) if self.calls else []
        if not calls:
            emit("It is sunny.")
        return {"tool_calls": calls, "decode_tokens": 4}

    def cancel(self, job) -> None:
        pass


def call(name: str, args: dict, ident: str = "call_0") -> dict:
    return {"id": ident, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}


@pytest.fixture
def service(tmp_path):
    started = []

    def start(calls):
        token = tmp_path / "token"
        token.write_text(TOKEN)
        token.chmod(0o600)
        port = free_port()
        cfg = {**DEFAULTS, "runtime": "litert_lm", "model": "m", "bind": "127.0.0.1", "port": port,
               "token_file": str(token)}
        engine = ParsingRuntime(cfg, calls)
        svc = serve(cfg, engine)
        threading.Thread(target=svc.serve_forever, daemon=True).start()
        started.append(svc)
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=TOKEN, max_retries=0)
        for _ in range(200):
            if svc.scheduler.ready:
                break
            threading.Event().wait(0.01)
        return client, engine

    yield start
    for svc in started:
        svc.shutdown()
        svc.server_close()


def ask(client, **kw):
    return client.chat.completions.create(model="m", tools=TOOLS, **kw,
                                          messages=[{"role": "user", "content": "Weather in Paris?"}])


def test_a_parsed_call_is_the_answers_tool_call(service):
    client, _ = service([[call("get_weather", {"city": "Paris"})]])
    choice = ask(client).choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content is None
    (tc,) = choice.message.tool_calls
    assert tc.function.name == "get_weather" and json.loads(tc.function.arguments) == {"city": "Paris"}


def test_a_parsed_call_streams_as_delta_tool_calls(service):
    client, _ = service([[call("get_weather", {"city": "Paris"}), call("get_weather", {"city": "Oslo"}, "call_1")]])
    names: dict[int, str] = {}
    args: dict[int, str] = {}
    finish = None
    for chunk in ask(client, stream=True):
        for ch in chunk.choices:
            for d in ch.delta.tool_calls or []:
                names[d.index] = names.get(d.index, "") + (d.function.name or "")
                args[d.index] = args.get(d.index, "") + (d.function.arguments or "")
            finish = ch.finish_reason or finish
    assert finish == "tool_calls"
    assert names == {0: "get_weather", 1: "get_weather"}
    assert [json.loads(args[i])["city"] for i in (0, 1)] == ["Paris", "Oslo"]


def test_a_parsed_call_to_an_undeclared_tool_is_retried_then_refused(service):
    client, engine = service([[call("launch_rocket", {})], [call("launch_rocket", {})]])
    with pytest.raises(openai.APIStatusError) as err:
        ask(client)
    assert err.value.status_code == 500
    assert err.value.body["code"] == "invalid_tool_call"
    assert engine.generations == 2, "one retry, then the client's error"


def test_a_retry_that_calls_a_declared_tool_is_the_answer(service):
    client, engine = service([[call("launch_rocket", {})], [call("get_weather", {"city": "Paris"})]])
    (tc,) = ask(client).choices[0].message.tool_calls
    assert tc.function.name == "get_weather" and engine.generations == 2
