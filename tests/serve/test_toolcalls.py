"""edge_llm_serve.toolcalls: OpenAI tool calls in the Genie families' own text formats.

The recorded outputs (tests/fixtures/toolcalls/*.json) are written as each family's public source shows
them (cited in each file). Every output is also fed in two pieces at every split point and one character
at a time: what a streaming client joins from the deltas must be what the one-shot answer holds.
"""

from __future__ import annotations

import itertools
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "layers/meta-edge-llm/recipes-ai/edge-llm-serve/files"))
from edge_llm_serve import toolcalls as tc  # noqa: E402

FIXTURES = ROOT / "tests/fixtures/toolcalls"
FILES = {p.stem: json.loads(p.read_text(encoding="utf-8")) for p in sorted(FIXTURES.glob("*.json"))}
CASES = [(fam, c) for fam, d in FILES.items() for c in d["cases"]]
WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
TIME = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}}


def ids():
    n = itertools.count()
    return lambda: f"call_{next(n)}"


def req(family: str, **extra) -> tc.Prepared:
    return tc.prepare({"messages": [{"role": "user", "content": "hi"}], "tools": FILES[family]["tools"], **extra})


def stream(family: str, pieces: list[str], finish: str = "stop", r: tc.Prepared | None = None):
    p = tc.parser(family, r, ids())
    deltas = [d for piece in pieces for d in p.feed(piece)]
    tail, reason = p.finish(finish)
    return deltas + tail, reason, p.problems


def test_every_family_has_recorded_outputs():
    assert set(FILES) == set(tc.FAMILIES)
    assert all(d["source"] and d["cases"] for d in FILES.values())


@pytest.mark.parametrize(("family", "case"), CASES, ids=[f"{f}: {c['name']}" for f, c in CASES])
def test_recorded_output_parses_to_openai_calls(family, case):
    out = tc.parse_output(family, case["output"], req(family), finish_reason=case.get("finish_reason", "stop"),
                          new_id=ids())
    assert out.content == case["content"]
    got = [(c["function"]["name"], c["function"]["arguments"]) for c in out.tool_calls]
    want = case["calls"]
    assert [n for n, _ in got] == [n for n, _ in want]
    for (_, raw), (_, exp) in zip(got, want, strict=True):
        assert isinstance(raw, str)
        assert (json.loads(raw) if isinstance(exp, dict) else raw) == exp
    assert [c["id"] for c in out.tool_calls] == [f"call_{i}" for i in range(len(want))]
    assert all(c["type"] == "function" for c in out.tool_calls)
    assert len(out.problems) == case.get("parser_problems", 0), out.problems
    expected_reason = case.get("finish_reason", "tool_calls" if want else "stop")
    assert out.finish_reason == expected_reason
    if "parser_problems" not in case:
        problems = tc.validate_calls(out.tool_calls, FILES[family]["tools"])
        assert len(problems) == case.get("validate_problems", 0), problems
    assert bool(out.tool_calls) == bool(want)


@pytest.mark.parametrize(("family", "case"), CASES, ids=[f"{f}: {c['name']}" for f, c in CASES])
def test_streaming_at_every_boundary_equals_the_one_shot_parse(family, case):
    text, finish = case["output"], case.get("finish_reason", "stop")
    one = tc.parse_output(family, text, finish_reason=finish, new_id=ids())
    splits = [[text[:i], text[i:]] for i in range(len(text) + 1)] + [list(text)]
    splits += [[text[:i], text[i:j], text[j:]] for i in range(0, len(text), 7) for j in range(i, len(text), 5)]
    for pieces in splits:
        deltas, reason, problems = stream(family, pieces, finish)
        content, calls = tc.collect(deltas)
        assert (content or None) == (one.content or None), pieces
        assert calls == one.tool_calls, pieces
        assert reason == one.finish_reason and problems == one.problems, pieces
        for d in deltas:   # OpenAI's delta shapes: text, a call's head, or an argument fragment
            assert set(d) in ({"content"}, {"tool_calls"})
            if "content" in d:
                assert d["content"]
            for t in d.get("tool_calls", ()):
                assert set(t) in ({"index", "id", "type", "function"}, {"index", "function"})
                assert set(t["function"]) == ({"name", "arguments"} if "id" in t else {"arguments"})


def test_stream_sends_arguments_while_they_arrive_and_holds_back_only_a_possible_marker():
    p = tc.parser("qwen2.5", new_id=ids())
    assert p.feed("Checking the weather <tool_") == [{"content": "Checking the weather"}]
    assert p.feed('call>\n{"name": "get_weather", "argu') == [{"tool_calls": [
        {"index": 0, "id": "call_0", "type": "function", "function": {"name": "get_weather", "arguments": ""}}]}]
    assert p.feed('ments": {"city": "Pa') == [{"tool_calls": [{"index": 0, "function": {"arguments": '{"city": "Pa'}}]}]
    assert p.feed('ris"}}\n</tool_call>') == [{"tool_calls": [{"index": 0, "function": {"arguments": 'ris"}'}}]}]
    assert p.finish() == ([], "tool_calls")
    p = tc.parser("qwen2.5", new_id=ids())
    assert p.feed("a <tool") == [{"content": "a"}]
    assert p.feed("box> b") == [{"content": " <toolbox> b"}]
    assert p.finish() == ([], "stop")


def test_malformed_output_is_reported_not_raised():
    for family in tc.FAMILIES:
        for junk in ("<tool_call>{", "<TOOLCALL>[{]", '{"name": 5}', "<|python_tag|>", '{"name": "x", "arguments": tru',
                     '<tool_call>{"name": "a\\u12"}</tool_call>', "<TOOLCALL>[1, 2]</TOOLCALL>", "\x00{\"\\"):
            out = tc.parse_output(family, junk, new_id=ids())
            assert isinstance(out.problems, list)
            assert all(isinstance(c["function"]["arguments"], str) for c in out.tool_calls)


def test_validation_names_unknown_functions_non_objects_and_missing_arguments():
    calls = [{"function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}},
             {"function": {"name": "rm_rf", "arguments": "{}"}},
             {"function": {"name": "get_weather", "arguments": "[1]"}},
             {"function": {"name": "get_weather", "arguments": "{oops"}},
             {"function": {"name": "get_weather", "arguments": "{}"}}]
    problems = tc.validate_calls(calls, [WEATHER, TIME])
    assert len(problems) == 4
    assert problems[0] == "tool call 1 (rm_rf): unknown function (declared: get_weather, get_time)"
    assert "not a JSON object" in problems[1] and "not valid JSON" in problems[2]
    assert "arguments: missing required property 'city'" in problems[3]


def test_arguments_are_checked_against_the_whole_parameter_schema():
    """Types, enums and bounds of the tool's parameters, by the same checker as response_format."""
    tool = {"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}, "unit": {"enum": ["celsius", "fahrenheit"]}}}}}
    calls = [{"function": {"name": "get_weather", "arguments": '{"city": 7, "unit": "kelvin"}'}}]
    problems = tc.validate_calls(calls, [tool])
    assert len(problems) == 1 and "arguments.city: expected string, got integer" in problems[0]
    assert "arguments.unit: must be one of" in problems[0]


@pytest.mark.parametrize(("function", "field"), [
    ({"parameters": {"type": "object", "properties": {"d": {"type": "string", "format": "date"}}}},
     "tools[0].function.parameters.properties.d.format"),
    ({"strict": True, "parameters": {"type": "object", "properties": {"a": {"type": "string"}}}},
     "tools[0].function.parameters.additionalProperties"),
    ({"strict": True, "parameters": {"type": "object", "properties": {"a": {"type": "string"}},
                                     "additionalProperties": False}}, "tools[0].function.parameters.required"),
    ({"strict": "yes"}, "tools[0].function.strict"),
    ({"cache": True}, "tools[0].function.cache"),
])
def test_tool_definitions_the_checker_cannot_hold_are_refused_naming_the_tool(function, field):
    tool = {"type": "function", "function": {"name": "pick", **function}}
    with pytest.raises(tc.ToolRequestError) as exc:
        tc.prepare({"messages": [{"role": "user", "content": "hi"}], "tools": [tool]})
    assert exc.value.field == field and "'pick'" in str(exc.value)


def test_tool_choice_modes():
    base = {"messages": [{"role": "user", "content": "weather in Oslo?"}], "tools": [WEATHER, TIME]}
    auto = tc.prepare(base)
    assert (auto.choice, auto.shown_tools) == ("auto", [WEATHER, TIME])
    assert tc.prepare({"messages": base["messages"]}).choice == "none"
    # "none": no tool prompt, and a call-looking answer stays text
    none = tc.prepare({**base, "tool_choice": "none"})
    for family in tc.FAMILIES:
        assert "get_weather" not in tc.render(family, none)
        assert "get_weather" in tc.render(family, auto)
    out = tc.parse_output("qwen2.5", '<tool_call>{"name": "get_weather", "arguments": {}}</tool_call>', none)
    assert out.tool_calls == [] and out.content.startswith("<tool_call>") and out.finish_reason == "stop"
    # named: only that function is shown, and another call does not satisfy it
    named = tc.prepare({**base, "tool_choice": {"type": "function", "function": {"name": "get_time"}}})
    prompt = tc.render("nemotron-nano", named)
    assert '"name": "get_time"' in prompt and "get_weather" not in prompt
    weather = [{"function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}]
    assert tc.choice_unmet(named, weather, []) == "tool_choice demanded get_time and the model called get_weather"
    assert tc.choice_unmet(named, [], []) == ("tool_choice demanded a call to get_time and the model answered "
                                              "without one")
    required = tc.prepare({**base, "tool_choice": "required"})
    assert tc.choice_unmet(required, [], []) == "tool_choice demanded a tool call and the model answered without one"
    assert tc.choice_unmet(required, weather, []) is None
    assert "not usable" in tc.choice_unmet(required, weather, ["tool call 0 (get_weather): bad"])
    assert tc.choice_unmet(auto, [], []) is None


@pytest.mark.parametrize(("body", "field"), [
    ({"tool_choice": "required"}, "tool_choice"),
    ({"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "nope"}}},
     "tool_choice.function.name"),
    ({"tools": [WEATHER], "tool_choice": "always"}, "tool_choice"),
    ({"tools": [{"type": "retrieval"}]}, "tools[0]"),
    ({"tools": [WEATHER, WEATHER]}, "tools[1].function.name"),
    ({"tools": [{"type": "function", "function": {"name": "a b"}}]}, "tools[0].function.name"),
    ({"messages": [{"role": "assistant", "content": None}]}, "messages[0].content"),
    ({"messages": [{"role": "tool", "content": "x"}]}, "messages[0].tool_call_id"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]},
     "messages[0].content[0]"),
    ({"messages": [{"role": "wizard", "content": "x"}]}, "messages[0].role"),
])
def test_bad_requests_name_the_field(body, field):
    with pytest.raises(tc.ToolRequestError) as e:
        tc.prepare({"messages": [{"role": "user", "content": "hi"}], **body})
    assert e.value.field == field


# ---- rendering: a two-turn agent loop (assistant content null + tool_calls, then a tool result) ----
LOOP = {"messages": [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Weather in Oslo?"},
    {"role": "assistant", "content": None,
     "tool_calls": [{"id": "call_1", "type": "function",
                     "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": '{"temp_c": 4}'}],
    "tools": [WEATHER]}


def test_qwen25_prompt_is_its_chat_template():
    w = json.dumps(WEATHER)
    assert tc.render("qwen2.5", tc.prepare(LOOP)) == (
        "<|im_start|>system\nBe brief.\n\n# Tools\n\nYou may call one or more functions to assist with the user query."
        "\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>\n" + w +
        "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
        '<tool_call></tool_call> XML tags:\n<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}'
        "\n</tool_call><|im_end|>\n<|im_start|>user\nWeather in Oslo?<|im_end|>\n"
        '<|im_start|>assistant\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>'
        "<|im_end|>\n"
        '<|im_start|>user\n<tool_response>\n{"temp_c": 4}\n</tool_response><|im_end|>\n<|im_start|>assistant\n')
    plain = tc.prepare({"messages": [{"role": "user", "content": "hi"}]})
    assert tc.render("qwen2.5", plain) == ("<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a "
                                           "helpful assistant.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n"
                                           "<|im_start|>assistant\n")


def test_llama31_prompt_puts_tools_in_the_first_user_turn_and_results_in_ipython():
    p = tc.render("llama3.1", tc.prepare(LOOP), today="02 Dec 2026")
    assert p.startswith("<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nEnvironment: ipython\n"
                        "Cutting Knowledge Date: December 2023\nToday Date: 02 Dec 2026\n\nBe brief.<|eot_id|>"
                        "<|start_header_id|>user<|end_header_id|>\n\nGiven the following functions, please respond "
                        "with a JSON for a function call with its proper arguments")
    assert json.dumps(WEATHER, indent=4) + "\n\nWeather in Oslo?<|eot_id|>" in p
    assert p.endswith('<|start_header_id|>assistant<|end_header_id|>\n\n{"name": "get_weather", "parameters": '
                      '{"city": "Oslo"}}<|eot_id|><|start_header_id|>ipython<|end_header_id|>\n\n{"temp_c": 4}'
                      "<|eot_id|>"
                      "<|start_header_id|>assistant<|end_header_id|>\n\n")
    builtin = tc.prepare({"messages": [
        {"role": "user", "content": "Weather in Menlo Park?"},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "c", "type": "function", "function": {
            "name": "brave_search", "arguments": '{"query": "Menlo Park weather"}'}}]},
        {"role": "tool", "tool_call_id": "c", "content": "sunny"}],
        "tools": FILES["llama3.1"]["tools"][1:]})
    p = tc.render("llama3.1", builtin)
    assert "Environment: ipython\nTools: brave_search, wolfram_alpha\n\n" in p and "Given the following" not in p
    assert '<|python_tag|>brave_search.call(query="Menlo Park weather")<|eom_id|>' in p


def test_nemotron_prompt_has_the_switch_the_tool_block_and_tool_responses():
    p = tc.render("nemotron-nano", tc.prepare(LOOP), thinking=True)
    assert p.startswith("<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\ndetailed thinking on\n\n"
                        "You can use the following tools to assist the user if required:\n<AVAILABLE_TOOLS>["
                        + json.dumps(WEATHER["function"]) + "]</AVAILABLE_TOOLS>\n\nIf you decide to call any tool(s)")
    # the card: instructions go into the user turn, the system turn is only the switch (+ tools)
    assert "<|start_header_id|>user<|end_header_id|>\n\nBe brief.\n\nWeather in Oslo?<|eot_id|>" in p
    assert p.endswith('<|start_header_id|>assistant<|end_header_id|>\n\n<TOOLCALL>[{"name": "get_weather", '
                      '"arguments": {"city": "Oslo"}}]</TOOLCALL><|eot_id|><|start_header_id|>user<|end_header_id|>'
                      '\n\n<TOOL_RESPONSE>[{"temp_c": 4}]</TOOL_RESPONSE><|eot_id|>'
                      "<|start_header_id|>assistant<|end_header_id|>\n\n")
    own = tc.prepare({"messages": [{"role": "system", "content": "detailed thinking on"},
                                   {"role": "assistant", "content": "<think>x</think>\n\nHello"},
                                   {"role": "user", "content": "hi"}]})
    p = tc.render("nemotron-nano", own)
    assert "system<|end_header_id|>\n\ndetailed thinking on<|eot_id|>" in p and "<think>" not in p
    plain = tc.prepare({"messages": [{"role": "user", "content": "x"}]})
    assert "detailed thinking off" in tc.render("nemotron-nano", plain)


def test_unknown_family_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown model family 'gemma'"):
        tc.render("gemma", tc.prepare(LOOP))


def test_llama_text_opening_with_a_brace_is_not_held_to_the_end():
    p = tc.parser("llama3.1", new_id=ids())
    assert p.feed("{Note") == [{"content": "{Note"}]
    assert p.feed("} fine") == [{"content": "} fine"}]


def test_history_with_tool_calls_renders_when_tool_choice_is_none():
    none = tc.prepare({**LOOP, "tool_choice": "none"})
    assert '<TOOLCALL>[{"name": "get_weather"' in tc.render("nemotron-nano", none)
    assert "<tool_response>\n{\"temp_c\": 4}\n</tool_response>" in tc.render("qwen2.5", none)
    p = tc.render("llama3.1", none)
    assert "ipython<|end_header_id|>\n\n{\"temp_c\": 4}" in p and "Environment: ipython" not in p


def test_assistant_text_beside_calls_is_kept_in_each_format():
    said = {**LOOP, "messages": [*LOOP["messages"][:2], {**LOOP["messages"][2], "content": "Checking."},
                                 LOOP["messages"][3]]}
    r = tc.prepare(said)
    assert 'Checking.\n\n<TOOLCALL>[{"name": "get_weather"' in tc.render("nemotron-nano", r)
    assert '<|im_start|>assistant\nChecking.\n<tool_call>\n{"name": "get_weather"' in tc.render("qwen2.5", r)
