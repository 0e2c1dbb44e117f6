"""Tool calls and structured output through the official ``openai`` client, on the Genie stand-in.

The board-less stand-in runs with ``answers=1``: its modelled model (provisioner/sim/tool_replies.py,
written from the families' public docs, independent of the service's parser) answers a tool prompt
in the family's own syntax, a tool result in text, and a JSON instruction in JSON. So each test sees
the service do the whole job: render the family's prompt, read the model's text back into OpenAI's
``tool_calls``, and refuse to pass off an answer that does not honour the request.
"""

from __future__ import annotations

import json
import re
import urllib.request
from typing import Optional

import openai
import pydantic
import pytest

from tests.serve.conftest import TOKEN

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather conditions for a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"},
                                                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
                   "required": ["city"]}}}
TIME = {"type": "function", "function": {
    "name": "get_time", "description": "The current local time in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
TOOLS = [WEATHER, TIME]
FAMILIES = ("nemotron-nano", "llama3.1", "qwen2.5")
MODEL = "nemotron-nano-4b"


def board_for(start_board, family: str | None = "nemotron-nano"):
    extra = {"tool_format": family} if family else {}
    return start_board("genie", timings={"answers": 1, "ttft_ms": 2, "decode_ms": 1}, **extra)


def client(board) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{board.url}/v1", api_key=TOKEN, max_retries=0, timeout=30)


def prompt_tokens(board) -> int:
    req = urllib.request.Request(f"{board.url}/metrics", headers=board.headers())
    with urllib.request.urlopen(req, timeout=10) as r:
        return int(re.search(r"^edge_llm_prompt_tokens_total (\d+)", r.read().decode(), re.M).group(1))


def streamed(c: openai.OpenAI, **kw) -> tuple[str, list[dict], str, list]:
    """(content, calls, finish_reason, chunks) of a streamed answer, joined as a client does."""
    chunks = list(c.chat.completions.create(model=MODEL, stream=True, **kw))
    text, calls, finish = [], {}, None
    for ch in chunks:
        choice = ch.choices[0]
        finish = choice.finish_reason or finish
        text.append(choice.delta.content or "")
        for tc in choice.delta.tool_calls or ():
            c = calls.setdefault(tc.index, {"id": None, "name": "", "arguments": ""})
            c["id"] = tc.id or c["id"]
            if tc.function:
                c["name"] += tc.function.name or ""
                c["arguments"] += tc.function.arguments or ""
    return "".join(text), [calls[i] for i in sorted(calls)], finish, chunks


@pytest.mark.parametrize("family", FAMILIES)
def test_two_turn_tool_loop_not_streamed(start_board, family):
    c = client(board_for(start_board, family))
    msgs = [{"role": "user", "content": "What's the weather like in Paris right now?"}]
    first = c.chat.completions.create(model=MODEL, messages=msgs, tools=TOOLS)
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    (call,) = choice.message.tool_calls
    assert call.type == "function" and call.function.name == "get_weather" and call.id
    assert json.loads(call.function.arguments) == {"city": "Paris"}
    msgs += [choice.message.model_dump(exclude_none=True),
             {"role": "tool", "tool_call_id": call.id, "content": "sunny, 21 C"}]
    assert msgs[1]["role"] == "assistant" and "content" not in msgs[1]     # what agent loops send back
    msgs[1]["content"] = None
    second = c.chat.completions.create(model=MODEL, messages=msgs, tools=TOOLS)
    assert second.choices[0].finish_reason == "stop" and not second.choices[0].message.tool_calls
    assert "sunny, 21 C" in second.choices[0].message.content


@pytest.mark.parametrize("family", FAMILIES)
def test_two_turn_tool_loop_streamed(start_board, family):
    c = client(board_for(start_board, family))
    msgs = [{"role": "user", "content": "What time is it in Tokyo at the moment?"}]
    text, calls, finish, chunks = streamed(c, messages=msgs, tools=TOOLS)
    assert finish == "tool_calls" and text == ""
    assert [(x["name"], json.loads(x["arguments"])) for x in calls] == [("get_time", {"city": "Tokyo"})]
    # the call's header (index, id, name) comes first, its arguments after it in pieces
    pieces = [tc for ch in chunks for tc in (ch.choices[0].delta.tool_calls or ())]
    assert pieces[0].id and pieces[0].function.name == "get_time" and not pieces[0].function.arguments
    assert all(p.id is None and p.function.name is None for p in pieces[1:]) and len(pieces) >= 2
    fn = {"name": "get_time", "arguments": calls[0]["arguments"]}
    msgs += [{"role": "assistant", "content": None, "tool_calls": [{"id": calls[0]["id"], "type": "function",
                                                                    "function": fn}]},
        {"role": "tool", "tool_call_id": calls[0]["id"], "content": "09:41"}]
    text, calls, finish, _ = streamed(c, messages=msgs, tools=TOOLS)
    assert finish == "stop" and not calls and "09:41" in text


def test_parallel_calls_and_parallel_tool_calls_false(start_board):
    c = client(board_for(start_board))
    msgs = [{"role": "user", "content": "What is the weather in Paris and in Tokyo right now?"}]
    out = c.chat.completions.create(model=MODEL, messages=msgs, tools=TOOLS)
    assert [json.loads(t.function.arguments)["city"] for t in out.choices[0].message.tool_calls] == ["Paris", "Tokyo"]
    out = c.chat.completions.create(model=MODEL, messages=msgs, tools=TOOLS, parallel_tool_calls=False)
    assert [json.loads(t.function.arguments)["city"] for t in out.choices[0].message.tool_calls] == ["Paris"]


def test_each_tool_choice_mode(start_board):
    c = client(board_for(start_board))
    ask = [{"role": "user", "content": "What's the weather like in Paris right now?"}]
    none = c.chat.completions.create(model=MODEL, messages=ask, tools=TOOLS, tool_choice="none")
    assert none.choices[0].message.tool_calls is None and none.choices[0].message.content
    assert none.choices[0].finish_reason == "stop"
    auto = c.chat.completions.create(model=MODEL, messages=ask, tools=TOOLS, tool_choice="auto")
    assert auto.choices[0].message.tool_calls[0].function.name == "get_weather"
    required = c.chat.completions.create(model=MODEL, messages=ask, tools=TOOLS, tool_choice="required")
    assert required.choices[0].message.tool_calls[0].function.name == "get_weather"
    # streamed, a forced call is held until it is judged, then sent as header and argument pieces
    text, calls, finish, _ = streamed(c, messages=ask, tools=TOOLS, tool_choice="required")
    assert finish == "tool_calls" and text == "" and [x["name"] for x in calls] == ["get_weather"]
    assert json.loads(calls[0]["arguments"]) == {"city": "Paris"}
    named = c.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "What time is it in Oslo?"}],
                                      tools=TOOLS, tool_choice={"type": "function", "function": {"name": "get_time"}})
    assert [(t.function.name, json.loads(t.function.arguments)) for t in named.choices[0].message.tool_calls] == \
        [("get_time", {"city": "Oslo"})]
    # no tool answers arithmetic: "auto" answers in text, without a call
    plain = c.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "What is 7 times 6?"}],
                                      tools=TOOLS)
    assert plain.choices[0].message.tool_calls is None and plain.choices[0].finish_reason == "stop"


@pytest.mark.parametrize("stream", [False, True])
def test_required_unmet_is_an_error_the_client_sees_after_one_retry(start_board, stream):
    board = board_for(start_board)
    c = client(board)
    ask = [{"role": "user", "content": "What is 7 times 6?"}]
    with pytest.raises(openai.InternalServerError) as exc:
        if stream:
            list(c.chat.completions.create(model=MODEL, messages=ask, tools=TOOLS, tool_choice="required",
                                           stream=True))
        else:
            c.chat.completions.create(model=MODEL, messages=ask, tools=TOOLS, tool_choice="required")
    err = exc.value.body
    assert err["code"] == "tool_choice_unmet" and "(also on the retry)" in err["message"]
    assert err["model_output"] and exc.value.response.headers["x-should-retry"] == "false"
    # a named function the model does not call at first: the retry tells it what was wrong (it called
    # get_weather, get_time was demanded), and the modelled model, reading that turn, calls get_time
    before = prompt_tokens(board)
    out = c.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Weather in Rome?"}],
                                    tools=TOOLS, tool_choice={"type": "function", "function": {"name": "get_time"}})
    assert [t.function.name for t in out.choices[0].message.tool_calls] == ["get_time"]
    assert out.usage.prompt_tokens < prompt_tokens(board) - before      # it took the retry to get there
    # the refused request ran twice, no more (the answer and one retry), and the retry was not the same
    # prompt again (a deterministic model would answer it the same): it carries the model's answer and
    # a correction turn, so it is longer than the first run's prompt, which an "auto" run measures
    before = prompt_tokens(board)
    c.chat.completions.create(model=MODEL, messages=ask, tools=TOOLS, tool_choice="auto")
    once = prompt_tokens(board) - before
    with pytest.raises(openai.InternalServerError):
        c.chat.completions.create(model=MODEL, messages=ask, tools=TOOLS, tool_choice="required")
    both = prompt_tokens(board) - before - once
    assert 2 * once < both < 3 * once, (once, both)


def test_tool_requests_that_cannot_be_carried_are_400_naming_the_field(start_board):
    c = client(board_for(start_board))
    ask = [{"role": "user", "content": "hi"}]
    for kw, param in ((dict(tools=[{"type": "retrieval"}]), "tools[0]"),
                      (dict(tools=TOOLS, tool_choice="sometimes"), "tool_choice"),
                      (dict(tools=TOOLS, tool_choice={"type": "function", "function": {"name": "nope"}}),
                       "tool_choice.function.name"),
                      (dict(tool_choice="required"), "tool_choice")):
        with pytest.raises(openai.BadRequestError) as exc:
            c.chat.completions.create(model=MODEL, messages=ask, **kw)
        assert exc.value.body["param"] == param and isinstance(exc.value.body["code"], str)
    with pytest.raises(openai.BadRequestError) as exc:      # a tool result must say which call it answers
        c.chat.completions.create(model=MODEL, messages=ask + [{"role": "tool", "content": "x"}], tools=TOOLS)
    assert exc.value.body["param"] == "messages[1].tool_call_id"


def test_without_a_tool_format_tools_are_refused_and_models_say_so(start_board):
    c = client(board_for(start_board, None))
    caps = c.models.retrieve(MODEL).model_extra["capabilities"]
    assert caps == {"tools": False, "json_object": True, "json_schema": True, "grammar": False, "constrained": False}
    with pytest.raises(openai.BadRequestError) as exc:
        c.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}], tools=TOOLS)
    assert exc.value.body["param"] == "tools" and exc.value.body["code"] == "unsupported_parameter"
    out = c.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}], tools=TOOLS,
                                    tool_choice="none")     # nothing to call: honoured as asked
    assert out.choices[0].message.content
    with pytest.raises(openai.BadRequestError) as exc:      # a tool loop's history needs the format too
        c.chat.completions.create(model=MODEL, messages=[
            {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "sunny"}])
    assert exc.value.body["param"] == "messages" and "no tool-call format" in exc.value.body["message"]


def test_models_list_and_one_model_state_capabilities(start_board):
    c = client(board_for(start_board))
    listed = c.models.list().data[0].model_extra["capabilities"]
    assert listed == c.models.retrieve(MODEL).model_extra["capabilities"]
    assert listed["tools"] and listed["json_object"] and listed["json_schema"] and not listed["grammar"]


CITY = {"type": "object", "properties": {"name": {"type": "string"}, "population": {"type": "integer", "minimum": 0},
                                         "kind": {"type": "string", "enum": ["capital", "town"]}},
        "required": ["name", "population", "kind"], "additionalProperties": False}


def json_answer(c, ask, rf, stream: bool) -> tuple[str, str]:
    """(content, finish_reason) of one response_format request, streamed or whole."""
    if stream:
        text, _, finish, _ = streamed(c, messages=ask, response_format=rf)
        return text, finish
    out = c.chat.completions.create(model=MODEL, messages=ask, response_format=rf)
    return out.choices[0].message.content, out.choices[0].finish_reason


@pytest.mark.parametrize("stream", [False, True])
def test_json_object_and_json_schema_answers_are_json(start_board, stream):
    c = client(board_for(start_board))
    ask = [{"role": "user", "content": "Describe the capital city of France."}]
    fmt = {"type": "json_schema", "json_schema": {"name": "city", "schema": CITY, "strict": True}}
    for rf in ({"type": "json_object"}, fmt):
        text, finish = json_answer(c, ask, rf, stream)
        value = json.loads(text)
        assert isinstance(value, dict) and finish == "stop"
        if rf is fmt:
            assert set(value) == {"name", "population", "kind"} and value["name"] == "France"
            assert value["kind"] == "capital" and isinstance(value["population"], int)


def test_json_schema_the_model_cannot_meet_is_an_error_after_one_retry(start_board):
    c = client(board_for(start_board))
    tight = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 2}}, "required": ["name"]}
    with pytest.raises(openai.InternalServerError) as exc:
        c.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Name a city in France."}],
                                  response_format={"type": "json_schema",
                                                   "json_schema": {"name": "t", "schema": tight}})
    assert exc.value.body["code"] == "response_format_unmet" and "longer than 2" in exc.value.body["message"]
    assert "(also on the retry)" in exc.value.body["message"]


def test_bad_response_formats_are_400_naming_response_format(start_board):
    c = client(board_for(start_board))
    ask = [{"role": "user", "content": "hi"}]
    cases = ({"type": "xml"},
             {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object", "anyOf": []}}},
             {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "string", "pattern": "^a"}}},
             {"type": "json_schema", "json_schema": {"schema": {"type": "object"}}})
    for rf in cases:
        with pytest.raises(openai.BadRequestError) as exc:
            c.chat.completions.create(model=MODEL, messages=ask, response_format=rf)
        assert exc.value.body["param"] == "response_format" and "'response_format'" in exc.value.body["message"]
    with pytest.raises(openai.BadRequestError) as exc:
        c.chat.completions.create(model=MODEL, messages=ask, response_format=cases[2])
    assert "'pattern'" in exc.value.body["message"] and exc.value.body["code"] == "unsupported_schema"
    out = c.chat.completions.create(model=MODEL, messages=ask, response_format={"type": "text"})
    assert out.choices[0].message.content


def test_the_bundles_chat_template_decides_the_tool_format(start_board, tmp_path):
    """A bundle exported with its tokenizer_config.json carries the model's chat template: its call marker
    names the format (here <tool_call>, Qwen's), over a serve config that says nothing or something else."""
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "genie_config.json").write_text(json.dumps({"dialog": {"type": "basic"}}))
    template = "{% for m in messages %}{{ m.content }}{% if m.tool_calls %}<tool_call>{% endif %}{% endfor %}"
    (bundle / "tokenizer_config.json").write_text(json.dumps({"chat_template": template}))
    board = start_board("genie", timings={"answers": 1}, model_dir=str(bundle), tool_format="llama3.1")
    c = client(board)
    assert c.models.retrieve(MODEL).model_extra["capabilities"]["tools"] is True
    out = c.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Weather in Oslo now?"}],
                                    tools=TOOLS)
    assert json.loads(out.choices[0].message.tool_calls[0].function.arguments) == {"city": "Oslo"}
    assert "tool calls; the config said llama3.1: using the bundle's" in board.log.read_text()


class Address(pydantic.BaseModel):
    street: str
    zip: Optional[int]  # noqa: UP045 (written the way pydantic users write it)


class CityModel(pydantic.BaseModel):
    name: str
    population: int
    mayor: Optional[str]  # noqa: UP045
    address: Address


@pytest.mark.parametrize("stream", [False, True])
def test_fenced_json_reaches_the_client_as_the_json_that_was_judged(start_board, stream):
    """A model that wraps its JSON in a Markdown fence: the service accepts it, so the client must get
    the JSON alone, or json.loads(content) and the openai client's parse() fail on an accepted answer."""
    c = client(board_for(start_board))
    ask = [{"role": "user", "content": "Describe the capital city of France, fenced."}]
    fmt = {"type": "json_schema", "json_schema": {"name": "city", "schema": CITY, "strict": True}}
    for rf in ({"type": "json_object"}, fmt):
        text, finish = json_answer(c, ask, rf, stream)
        assert "```" not in text and isinstance(json.loads(text), dict) and finish == "stop"


def test_parse_with_a_pydantic_model_with_optional_and_nested_fields(start_board):
    """client.chat.completions.parse(response_format=Model) sends anyOf (Optional) and $ref/$defs (a
    nested model): they are checked, not refused, and the parsed object comes back."""
    c = client(board_for(start_board))
    for words in ("Describe the capital city of France.", "Describe the capital city of France, fenced."):
        out = c.chat.completions.parse(model=MODEL, messages=[{"role": "user", "content": words}],
                                       response_format=CityModel)
        city = out.choices[0].message.parsed
        assert isinstance(city, CityModel) and city.name == "France" and isinstance(city.address, Address)


def test_a_huge_integer_is_checked_as_an_integer_and_answered(start_board):
    """A 400-digit integer is an integer: the checker once raised OverflowError on it, and the client got
    a connection closed without any HTTP answer."""
    c = client(board_for(start_board))
    n = {"type": "json_schema", "json_schema": {"name": "n", "schema": {
        "type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}}}
    for stream in (False, True):
        ask = [{"role": "user", "content": "Give a huge number."}]
        if stream:
            text = streamed(c, messages=ask, response_format=n)[0]
        else:
            text = c.chat.completions.create(model=MODEL, response_format=n, messages=ask).choices[0].message.content
        assert json.loads(text)["n"] == 10 ** 400


def test_tool_fields_on_a_role_openai_does_not_give_them_are_400_naming_the_field(start_board):
    """tool_calls belong to an assistant message and tool_call_id to a tool message (the openai types):
    on a user message they would be silently dropped, so they are refused by name."""
    c = client(board_for(start_board))
    call = {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}
    for extra, field in (({"tool_call_id": "c1"}, "messages[0].tool_call_id"),
                         ({"tool_calls": [call]}, "messages[0].tool_calls")):
        with pytest.raises(openai.BadRequestError) as exc:
            c.chat.completions.create(model=MODEL, tools=TOOLS,
                                      messages=[{"role": "user", "content": "Weather in Rome?", **extra}])
        assert exc.value.body["param"] == field, exc.value.body
        assert "belongs to a message of role" in exc.value.body["message"]
