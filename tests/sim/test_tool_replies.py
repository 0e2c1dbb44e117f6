"""The Genie stand-in's modelled model on tool prompts: the family's own syntax, as the service reads it.

The stand-in writes its calls from the families' public docs (provisioner/sim/tool_replies.py); the
service renders and parses them with its own code. Here the service's renderer builds the prompts and
its parser reads the stand-in's answers, so a drift between the two readings of a format shows up.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from provisioner.sim import npu, tool_replies

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "layers/meta-edge-llm/recipes-ai/edge-llm-serve/files"))
from edge_llm_serve import toolcalls  # noqa: E402

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "toolcalls"
FAMILIES = ("llama3.1", "nemotron-nano", "qwen2.5")


def fixture_tools(family: str) -> list[dict]:
    """The recorded outputs' own tools (each fixture names its public source), built-ins left out."""
    tools = json.loads((FIXTURES / f"{family}.json").read_text())["tools"]
    return [t for t in tools if t["function"].get("description") != "built-in"]


@pytest.mark.parametrize("family", FAMILIES)
def test_a_question_a_declared_tool_answers_gets_a_call_in_the_familys_syntax(family):
    tools = fixture_tools(family)
    name = tools[0]["function"]["name"]
    word = [w for w in name.split("_") if w not in ("get", "current")][0]
    req = toolcalls.prepare({"messages": [{"role": "user", "content": f"What is the {word} in Boston right now?"}],
                             "tools": tools})
    out = npu.modelled_text(toolcalls.render(family, req))
    parsed = toolcalls.parse_output(family, out, req)
    assert parsed.content is None and not parsed.problems, out
    (call,) = parsed.tool_calls
    args = json.loads(call["function"]["arguments"])
    assert call["function"]["name"] == name and "Boston" in json.dumps(args)
    assert not toolcalls.validate_calls(parsed.tool_calls, tools)


@pytest.mark.parametrize("family", FAMILIES)
def test_no_call_when_no_tool_answers_and_text_after_a_tool_result(family):
    tools = fixture_tools(family)
    req = toolcalls.prepare({"messages": [{"role": "user", "content": "What is 2+3?"}], "tools": tools})
    parsed = toolcalls.parse_output(family, npu.modelled_text(toolcalls.render(family, req)), req)
    assert not parsed.tool_calls and "5" in parsed.content
    name = tools[0]["function"]["name"]
    req = toolcalls.prepare({"tools": tools, "messages": [
        {"role": "user", "content": "Look it up in Boston"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": name, "arguments": '{"location": "Boston"}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "72 and sunny"}]})
    parsed = toolcalls.parse_output(family, npu.modelled_text(toolcalls.render(family, req)), req)
    assert not parsed.tool_calls and "72 and sunny" in parsed.content


def test_prompts_without_tools_are_not_tool_prompts():
    assert tool_replies.read_prompt("<|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>") is None
    assert tool_replies.tool_reply("user: what is the weather in Paris?\nassistant:") is None


def test_a_json_instruction_with_a_schema_gets_json_that_fits_it():
    schema = {"type": "object", "properties": {"city": {"type": "string"}, "rank": {"type": "integer"},
                                               "kind": {"type": "string", "enum": ["capital", "town"]}}}
    prompt = ("<|start_header_id|>user<|end_header_id|>\n\nTell me about the capital city of France.\n\nAnswer with "
              "one JSON object. It must conform to this JSON Schema: " + json.dumps(schema) + "<|eot_id|>")
    value = json.loads(npu.modelled_text(prompt))
    assert value == {"city": "France", "rank": 0, "kind": "capital"}
