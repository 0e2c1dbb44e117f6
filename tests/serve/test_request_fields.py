"""Every request field of OpenAI's chat and completions APIs is honoured or refused by name, on the real runtime.

The fields are read from the official ``openai`` package's request types (``openai.types.chat.
completion_create_params`` and ``openai.types.completion_create_params``), so a field a newer client
knows is sent too: the service answers it (a field it honours) or refuses it with a 400 whose ``param``
names it and whose message says why; it never answers as if the field were not there.
"""

from __future__ import annotations

import json
import typing
import urllib.error
import urllib.request

import openai
import pytest

from provisioner.fleet.shared.onboard import serve
from tests.serve import test_real_runtime as real_runtime
from tests.serve.conftest import TOKEN

real_board = real_runtime.real_board          # the real runtime's fixtures (tiny.litertlm, backend cpu)
reference = real_runtime.reference
client = real_runtime.client

#: a value of each field that asks for something (not the field's neutral "off" value)
SAMPLES: dict[str, object] = {
    "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}],
    "tool_choice": "required", "parallel_tool_calls": True, "functions": [{"name": "f", "parameters": {}}],
    "function_call": "auto", "response_format": {"type": "json_object"}, "logprobs": True, "top_logprobs": 2,
    "logit_bias": {"50256": -100}, "frequency_penalty": 0.5, "presence_penalty": 0.5, "audio": {"voice": "alloy",
    "format": "wav"}, "modalities": ["text", "audio"], "prediction": {"type": "content", "content": "x"},
    "reasoning_effort": "low", "verbosity": "low", "web_search_options": {}, "store": True,
    "metadata": {"k": "v"}, "service_tier": "flex", "moderation": {"enabled": True}, "prompt_cache_key": "k",
    "prompt_cache_retention": "24h", "prompt_cache_options": {}, "user": "u-1", "safety_identifier": "s-1",
    "best_of": 2, "echo": True, "suffix": " end",
    # honoured ones
    "max_tokens": 2, "max_completion_tokens": 2, "temperature": 0.5, "top_p": 1.0, "stop": ["\n\n"], "seed": 7,
    "stream": False, "stream_options": {"include_usage": True}, "n": 1,
}
SKIP_WALK = {"model", "messages", "prompt"}     # sent with every request


def fields(params: type) -> list[str]:
    """The request fields a TypedDict of the openai package declares (its bases included), plus ``stream``."""
    return sorted(set(typing.get_type_hints(params)) | {"stream"})


def post(board, path: str, body: dict) -> tuple[int, dict]:
    req = urllib.request.Request(f"{board.url}{path}", data=json.dumps(body).encode(), method="POST",
                                 headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


@pytest.mark.parametrize("kind", ["chat", "completion"])
def test_each_field_of_the_openai_request_types_is_honoured_or_refused_by_name(real_board, kind):
    from openai.types import completion_create_params as completion
    from openai.types.chat import completion_create_params as chat

    board = real_board()
    params = chat.CompletionCreateParamsBase if kind == "chat" else completion.CompletionCreateParamsBase
    path = "/v1/chat/completions" if kind == "chat" else "/v1/completions"
    base = ({"model": "tiny", "messages": [{"role": "user", "content": "Hello"}], "max_tokens": 2} if kind == "chat"
            else {"model": "tiny", "prompt": "Hello", "max_tokens": 2})
    walked = [f for f in fields(params) if f not in SKIP_WALK]
    caps = client(board).models.retrieve("tiny").model_extra["capabilities"]
    # honoured where the engine can: refused by name where /v1/models says it cannot
    unable = {"tools"} if not caps["tools"] else set()
    unable |= {"response_format"} if not caps["json_object"] else set()
    unable.add("tool_choice")       # "required" without tools: refused by name, there is nothing to call
    assert {"tools", "response_format", "max_completion_tokens", "logit_bias"} & set(walked) or kind == "completion"
    for name in walked:
        sample = SAMPLES.get(name, "a value")
        status, body = post(board, path, base | {name: sample})
        # parallel_tool_calls has no value that asks for anything without tools: both are neutral
        neutral = any(sample == n and type(sample) is type(n) for n in serve.NEUTRAL.get(name, ()))
        if (name in serve.HONOURED[kind] and name not in unable) or neutral:
            if name == "response_format" and not caps["constrained"] and status == 500:
                # honoured by checking the answer: the tiny model's random words are no JSON, so after
                # its retry the client gets the documented error with the model's output
                assert body["error"]["code"] == "response_format_unmet" and body["error"]["model_output"], body
                continue
            assert status == 200, (name, body)
            assert body["choices"], (name, body)
        else:
            assert status == 400, (name, status, body)
            err = body["error"]
            assert err["param"] == name and f"'{name}'" in err["message"], (name, err)
            assert isinstance(err["code"], str) and err["type"] == "invalid_request_error", err
            if name in serve.REFUSED:
                assert serve.REFUSED[name] in err["message"]
    # a neutral value (what client libraries send by default) changes nothing, so it is accepted
    neutral = {k: v[0] for k, v in serve.NEUTRAL.items() if k in walked}
    status, body = post(board, path, base | neutral)
    assert status == 200, body


def test_max_completion_tokens_is_honoured_and_an_agent_loops_second_turn_follows_the_capabilities(real_board):
    c = client(real_board())
    out = c.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "Hello"}],
                                    max_completion_tokens=3)
    assert out.usage.completion_tokens == 3 and out.choices[0].finish_reason == "length"
    # assistant tool_calls with content null, then a role "tool" result: what every agent loop sends next;
    # taken where /v1/models says the model offers tools, else refused by name (never run without them)
    loop = dict(model="tiny", max_completion_tokens=3, messages=[
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"}],
        tools=[{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}])
    if c.models.retrieve("tiny").model_extra["capabilities"]["tools"]:
        assert c.chat.completions.create(**loop).choices[0].finish_reason in ("length", "stop", "tool_calls")
    else:
        with pytest.raises(openai.BadRequestError) as exc:
            c.chat.completions.create(**loop)
        assert exc.value.body["param"] in ("tools", "messages") and exc.value.body["code"] == "unsupported_parameter"


def test_one_model_by_id_and_error_codes_are_strings(real_board):
    board = real_board()
    c = client(board)
    model = c.models.retrieve("tiny")
    assert model.id == "tiny" and model.object == "model"
    with pytest.raises(openai.NotFoundError) as exc:
        c.models.retrieve("llama-3-70b")
    assert exc.value.body["code"] == "model_not_found" and exc.value.body["param"] == "model"
    status, body = post(board, "/v1/chat/completions", {"messages": "not a list"})
    assert status == 400 and isinstance(body["error"]["code"], str)
    req = urllib.request.Request(f"{board.url}/v1/models", headers={"Authorization": "Bearer wrong"})
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(req, timeout=10)
    assert isinstance(json.loads(err.value.read())["error"]["code"], str)


def test_a_genie_instance_refuses_the_sampler_fields_it_cannot_set(start_board):
    """Genie's sampler is the model's genie_config.json: temperature, top_p and seed are refused by name there,
    not run as if absent; stop and max_tokens, which the service applies itself, are honoured."""
    board = start_board("genie")
    c = openai.OpenAI(base_url=f"{board.url}/v1", api_key=TOKEN, max_retries=0, timeout=20)
    msgs = [{"role": "user", "content": "hello"}]
    for field, value in (("temperature", 0.7), ("top_p", 0.9), ("seed", 1)):
        with pytest.raises(openai.BadRequestError) as exc:
            c.chat.completions.create(model="nemotron-nano-4b", messages=msgs, max_tokens=2, **{field: value})
        assert exc.value.body["param"] == field and "genie_config.json" in exc.value.body["message"]
    out = c.chat.completions.create(model="nemotron-nano-4b", messages=msgs, max_tokens=5, stop=["gamma"])
    assert out.choices[0].message.content == "alpha beta "


GENIE_MODEL = "nemotron-nano-4b"
STRICT_PARAMS = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"],
                 "additionalProperties": False}
#: a value for each field of the nested request types walked below
NESTED_SAMPLES: dict[str, object] = {"name": "get_weather", "description": "Current weather in a city.",
                                     "parameters": STRICT_PARAMS, "schema": STRICT_PARAMS, "strict": True}


def test_nested_fields_of_the_openai_types_are_honoured_or_refused_by_name(start_board):
    """The fields inside tools[].function, tool_choice and response_format.json_schema, read from the
    openai package's types, each sent with a value: honoured (200) or a 400 naming the nested field."""
    from openai.types.chat import chat_completion_allowed_tools_param as allowed
    from openai.types.chat import chat_completion_named_tool_choice_param as named
    from openai.types.shared_params import function_definition, response_format_json_schema

    board = start_board("genie", timings={"answers": 1, "ttft_ms": 2, "decode_ms": 1}, tool_format="nemotron-nano")
    ask = [{"role": "user", "content": "What is the weather in Paris?"}]
    base = {"model": GENIE_MODEL, "messages": ask, "max_tokens": 64}
    for name in set(fields(function_definition.FunctionDefinition)) - {"stream"}:
        fn = {"name": "get_weather", name: NESTED_SAMPLES[name]}
        status, body = post(board, "/v1/chat/completions", base | {"tools": [{"type": "function", "function": fn}]})
        assert status == 200, (name, body)
    for name in set(fields(response_format_json_schema.JSONSchema)) - {"stream"}:
        spec = {"name": "city", "schema": STRICT_PARAMS, name: NESTED_SAMPLES[name]}
        status, body = post(board, "/v1/chat/completions", base | {"response_format": {"type": "json_schema",
                                                                                        "json_schema": spec}})
        assert status == 200, (name, body)
    # a field no FunctionDefinition has, and strict over a schema strict mode does not allow: named
    weather = {"type": "function", "function": {"name": "get_weather", "parameters": STRICT_PARAMS}}
    for fn, param in (({"name": "get_weather", "cache_control": {}}, "tools[0].function.cache_control"),
                      ({"name": "get_weather", "strict": True, "parameters": {"type": "object"}},
                       "tools[0].function.parameters.additionalProperties")):
        status, body = post(board, "/v1/chat/completions", base | {"tools": [{"type": "function", "function": fn}]})
        assert status == 400 and body["error"]["param"] == param and "'get_weather'" in body["error"]["message"], body
    # tool_choice forms of the openai types: a named function and allowed_tools are honoured
    assert set(fields(named.ChatCompletionNamedToolChoiceParam)) >= {"type", "function"}
    status, body = post(board, "/v1/chat/completions", base | {"tools": [weather], "tool_choice": {
        "type": "function", "function": {"name": "get_weather"}}})
    assert status == 200 and body["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "get_weather"
    assert set(fields(allowed.ChatCompletionAllowedToolsParam)) >= {"mode", "tools"}
    other = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}}
    choice = {"type": "allowed_tools", "allowed_tools": {"mode": "required", "tools": [
        {"type": "function", "function": {"name": "get_weather"}}]}}
    status, body = post(board, "/v1/chat/completions", base | {"tools": [other, weather], "tool_choice": choice})
    assert status == 200 and body["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "get_weather"
    choice["allowed_tools"]["tools"] = [{"type": "function", "function": {"name": "rm_rf"}}]
    status, body = post(board, "/v1/chat/completions", base | {"tools": [other, weather], "tool_choice": choice})
    assert status == 400 and body["error"]["param"] == "tool_choice.allowed_tools.tools[0]", body
    status, body = post(board, "/v1/chat/completions", base | {"tools": [weather], "tool_choice": {
        "type": "custom", "custom": {"name": "get_weather"}}})
    assert status == 400 and body["error"]["param"] == "tool_choice", body
