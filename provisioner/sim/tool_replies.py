"""SIMULATED model behaviour for tool prompts and JSON instructions: what the Genie stand-in answers.

A Genie model takes one prompt string. When that prompt declares tools in a model family's own format,
a real instruction-tuned model answers with a call in that family's syntax when a declared tool answers
the question, in text after a tool result, and in JSON when told to. This module plays that model, from
the families' public documentation only (it never imports the service's parser or renderer: a stand-in
that shared their reading of a format would agree with them by construction):

- Llama 3.1 (Meta, "Llama 3.1 prompt format", llama.com/docs/model-cards-and-prompt-formats/llama3_1/,
  "JSON based tool calling"): tools are JSON objects in the first user turn after the instruction
  "Given the following functions ..."; the answer is one bare ``{"name": ..., "parameters": {...}}``;
  tool results come back in turns of role ``ipython``.
- Llama-3.1-Nemotron-Nano (NVIDIA's model card, huggingface.co/nvidia/Llama-3.1-Nemotron-Nano-8B-v1,
  and its tool-calling template): tools in ``<AVAILABLE_TOOLS>[...]</AVAILABLE_TOOLS>`` in the system
  turn; calls ``<TOOLCALL>[{"name": ..., "arguments": {...}}, ...]</TOOLCALL>``; results come back as a
  user turn ``<TOOL_RESPONSE>[...]</TOOL_RESPONSE>``.
- Qwen 2.5 (Qwen docs, "Function Calling", qwen.readthedocs.io/en/latest/framework/function_call.html):
  tools inside ``<tools></tools>`` in the system turn; each call ``<tool_call>\\n{"name": ...,
  "arguments": {...}}\\n</tool_call>``; results as user turns of ``<tool_response>`` blocks.

The "model" is a keyword matcher: a tool is relevant when a word of its name (beside verbs such as get)
is a word of the question; arguments come from the question (places after "in"/"for"/"at", enum values
named, numbers). One call per place when the question names several (parallel calls), except for
Llama 3.1, whose format has one call per answer.
"""

from __future__ import annotations

import json
import re
from typing import Any

from provisioner.sim.npu_outcome import answer_for

_LLAMA_TURN = re.compile(r"<\|start_header_id\|>(\w+)<\|end_header_id\|>\n\n(.*?)(?:<\|eot_id\|>|<\|eom_id\|>|$)", re.S)
_CHATML_TURN = re.compile(r"<\|im_start\|>(\w+)\n?(.*?)(?:<\|im_end\|>|$)", re.S)
_PLACE = re.compile(r"\b(?:in|for|at|of|from)\s+([A-Z][\w'-]*(?:[ ,]+[A-Z][\w'-]*)*)")
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
_GENERIC_WORDS = {"get", "set", "fetch", "find", "list", "lookup", "look", "up", "current", "query", "the", "a",
                  "an", "of", "for", "and", "to", "by", "info", "data"}


def _decode_all(text: str) -> list[Any]:
    """The JSON values written one after the other at the start of ``text`` (blanks between)."""
    dec, out, i = json.JSONDecoder(), [], 0
    while True:
        while i < len(text) and text[i] in " \t\r\n,":
            i += 1
        if i >= len(text) or text[i] not in "[{":
            return out
        try:
            value, i = dec.raw_decode(text, i)
        except ValueError:
            return out
        out.append(value)


def _function(tool: Any) -> dict[str, Any] | None:
    if isinstance(tool, dict) and isinstance(tool.get("function"), dict):
        tool = tool["function"]
    return tool if isinstance(tool, dict) and isinstance(tool.get("name"), str) else None


def read_prompt(prompt: str) -> dict[str, Any] | None:
    """The family, declared tools and turns of a tool prompt, or None for a prompt without tools."""
    if "<AVAILABLE_TOOLS>" in prompt:
        family, turns = "nemotron-nano", _LLAMA_TURN.findall(prompt)
        raw = prompt.split("<AVAILABLE_TOOLS>", 1)[1].split("</AVAILABLE_TOOLS>", 1)[0]
        found = _decode_all(raw)
        tools = found[0] if found and isinstance(found[0], list) else []
    elif "<|im_start|>" in prompt and "<tools>" in prompt:
        family, turns = "qwen2.5", _CHATML_TURN.findall(prompt)
        # the system turn names the tags first ("within <tools></tools> XML tags:"), then holds the block
        tools = _decode_all(prompt.rsplit("</tools>", 1)[0].rsplit("<tools>", 1)[1])
    elif "<|start_header_id|>" in prompt and "Given the following functions" in prompt:
        family, turns = "llama3.1", _LLAMA_TURN.findall(prompt)
        after = prompt.split("Do not use variables.", 1)[-1]
        tools = _decode_all(after)
    else:
        return None
    fns = [f for f in (_function(t) for t in tools) if f]
    return {"family": family, "tools": fns, "turns": [(r, t.strip()) for r, t in turns]} if fns else None


def _tool_result(family: str, role: str, text: str) -> str | None:
    if family == "llama3.1" and role == "ipython":
        return text
    if family == "nemotron-nano" and role == "user" and text.startswith("<TOOL_RESPONSE>"):
        return text[len("<TOOL_RESPONSE>"):].rsplit("</TOOL_RESPONSE>", 1)[0].strip()
    if family == "qwen2.5" and role == "user" and "<tool_response>" in text:
        return " ".join(p.split("</tool_response>")[0].strip() for p in text.split("<tool_response>")[1:])
    return None


def _question(family: str, turns: list[tuple[str, str]]) -> str:
    for role, text in reversed(turns):
        if role == "user" and _tool_result(family, role, text) is None:
            if family == "llama3.1" and "Given the following functions" in text:
                # the question follows the tool objects in the same turn
                body = text.split("Do not use variables.", 1)[-1]
                dec, i = json.JSONDecoder(), 0
                while True:
                    j = body.find("{", i)
                    if j < 0 or body[i:j].strip():
                        break
                    try:
                        _, i = dec.raw_decode(body, j)
                    except ValueError:
                        break
                return body[i:].strip()
            return text
    return ""


def _words(text: str) -> set[str]:
    return {w.lower() for w in re.findall(r"[A-Za-z]+", text)}


def _relevant(fns: list[dict[str, Any]], question: str) -> list[dict[str, Any]]:
    """The tools a word of the question names (beside generic verbs), the best-fitting ones only: those
    whose required arguments the question fills, then those whose description shares most words with it."""
    asked = _words(question)
    named = [f for f in fns if {w for w in f["name"].lower().replace("-", "_").split("_")
                                if w and w not in _GENERIC_WORDS} & asked]

    def rank(fn: dict[str, Any]) -> tuple[bool, int]:
        filled = all(a is not None for c in _calls(fn, question, False) for a in c["missing"])
        return filled, len(_words(str(fn.get("description") or "")) & asked)
    best = max((rank(f) for f in named), default=None)
    return [f for f in named if rank(f) == best]


def _places(question: str) -> list[str]:
    out: list[str] = []
    for m in _PLACE.finditer(question):
        for part in re.split(r",?\s+and\s+|,\s*", m.group(1)):
            if part and part not in out:
                out.append(part.strip())
    return out


_PLACE_WORDS = {"city", "location", "place", "country", "region", "town", "address", "destination", "origin"}
_DATE = re.compile(r"\b\d{4}-\d{2}-\d{2}\b|\b(?:today|tomorrow|yesterday)\b", re.I)


def _value(name: str, spec: dict[str, Any], question: str, place: str | None) -> Any:
    kind = spec.get("type")
    about = _words(name.replace("_", " ") + " " + str(spec.get("description") or ""))
    if isinstance(spec.get("enum"), list) and spec["enum"]:
        named = [e for e in spec["enum"] if str(e).lower() in question.lower()]
        return named[0] if named else None
    if kind in ("number", "integer"):
        nums = _NUMBER.findall(question)
        return (int(float(nums[0])) if kind == "integer" else float(nums[0])) if nums else None
    if kind == "boolean":
        return True
    if kind == "string" or kind is None:
        if about & _PLACE_WORDS:
            return place
        if about & {"date", "day"}:
            m = _DATE.search(question)
            return m.group(0) if m else None
        quoted = re.findall(r'"([^"]+)"', question)
        return quoted[0] if quoted else None
    return None


def _calls(fn: dict[str, Any], question: str, parallel: bool) -> list[dict[str, Any]]:
    params = fn.get("parameters") if isinstance(fn.get("parameters"), dict) else {}
    props = params.get("properties") if isinstance(params.get("properties"), dict) else {}
    required = [r for r in params.get("required") or () if isinstance(r, str)]
    places = _places(question) or [None]
    out = []
    for place in places if parallel else places[:1]:
        args: dict[str, Any] = {}
        for name, spec in props.items():
            v = _value(name, spec if isinstance(spec, dict) else {}, question, place)
            if v is None and name in required and isinstance(spec, dict) and spec.get("enum"):
                v = spec["enum"][0]
            if v is not None:
                args[name] = v
        # a required argument the question does not give: the model makes one up (a wrong call)
        missing = [args.setdefault(r, None) for r in required if r not in args]
        args = {k: ("unknown" if v is None else v) for k, v in args.items()}
        out.append({"name": fn["name"], "args": args, "missing": missing})
    return out


def _write_calls(family: str, calls: list[dict[str, Any]]) -> str:
    if family == "llama3.1":          # one JSON call per answer, key "parameters"
        return json.dumps({"name": calls[0]["name"], "parameters": calls[0]["args"]})
    if family == "nemotron-nano":
        return "<TOOLCALL>" + json.dumps([{"name": c["name"], "arguments": c["args"]} for c in calls]) + "</TOOLCALL>"
    return "\n".join("<tool_call>\n" + json.dumps({"name": c["name"], "arguments": c["args"]}) + "\n</tool_call>"
                     for c in calls)


def _last_call_name(family: str, turns: list[tuple[str, str]]) -> str:
    for role, text in reversed(turns):
        if role == "assistant":
            m = re.search(r'"name":\s*"([^"]+)"', text)
            if m:
                return m.group(1)
    return "the tool"


def tool_reply(prompt: str) -> str | None:
    """What a model of the prompt's family answers to a tool prompt, or None when the prompt has no tools
    (or, after a tool result, the text answer using it)."""
    read = read_prompt(prompt)
    if read is None:
        return None
    family, turns = read["family"], read["turns"]
    last = turns[-1] if turns and turns[-1][0] != "assistant" else (turns[-2] if len(turns) > 1 else ("", ""))
    result = _tool_result(family, *last)
    if result is not None:
        name = _last_call_name(family, turns)
        return f"According to {name}: {result.strip('[]')}."
    question = _question(family, turns)
    wanted = _relevant(read["tools"], question)
    if not wanted:
        return None
    calls = [c for fn in wanted for c in _calls(fn, question, family != "llama3.1")]
    return _write_calls(family, calls)


# --------------------------------------------------------------------------- JSON instructions
def _schema_after(text: str) -> dict[str, Any] | None:
    at = text.find("JSON Schema:")
    if at < 0:
        return None
    found = _decode_all(text[at + len("JSON Schema:"):])
    return found[0] if found and isinstance(found[0], dict) else None


def _fill(schema: dict[str, Any], question: str, answer: str, root: dict[str, Any] | None = None) -> Any:
    root = schema if root is None else root
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/"):          # a local reference (pydantic's nested models)
        target: Any = root
        for part in ref[2:].split("/"):
            target = target.get(part, {}) if isinstance(target, dict) else {}
        return _fill(target if isinstance(target, dict) else {}, question, answer, root)
    for key in ("anyOf", "oneOf"):                              # Optional[X]: the first alternative
        if isinstance(schema.get(key), list) and schema[key] and isinstance(schema[key][0], dict):
            return _fill(schema[key][0], question, answer, root)
    kind = schema.get("type")
    kind = kind[0] if isinstance(kind, list) and kind else kind
    if "const" in schema:
        return schema["const"]
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        named = [e for e in schema["enum"] if str(e).lower() in (question + " " + answer).lower()]
        return (named or schema["enum"])[0]
    if kind == "object" or "properties" in schema:
        props = schema.get("properties") or {}
        return {k: _fill(v if isinstance(v, dict) else {}, question, answer, root) for k, v in props.items()}
    if kind == "array":
        return [_fill(schema.get("items") if isinstance(schema.get("items"), dict) else {}, question, answer, root)]
    if kind in ("integer", "number"):
        nums = _NUMBER.findall(answer) or _NUMBER.findall(question) or ["0"]
        v = float(nums[0])
        lo = schema.get("minimum")
        v = max(v, lo) if isinstance(lo, (int, float)) else v
        return int(v) if kind == "integer" else v
    if kind == "boolean":
        return True
    if kind == "null":
        return None
    places = _places(question)
    return places[0] if places else answer.rstrip(".")


def json_reply(prompt: str, answer: str) -> str | None:
    """A JSON answer when the prompt's last request asks for one (an object, or one fitting a schema
    given after "JSON Schema:"), else None. ``answer`` is the model's text answer to the question."""
    if "JSON" not in prompt[-4000:]:
        return None
    tail = prompt[-4000:]
    # habits of real chat models, asked for by the question: JSON in a Markdown fence, a number
    # beyond any float (the service must answer both sensibly)
    if "huge number" in tail:
        return '{"n": 1' + "0" * 400 + "}"
    fence = ("```json\n", "\n```") if "fenced" in tail else ("", "")
    schema = _schema_after(tail)
    if schema is not None:
        return fence[0] + json.dumps(_fill(schema, tail, answer, schema)) + fence[1]
    if re.search(r"\bJSON object\b", tail):
        try:
            if isinstance(json.loads(answer), dict):
                return fence[0] + answer + fence[1]
        except ValueError:
            pass
        return fence[0] + json.dumps({"answer": answer}) + fence[1]
    return None


def modelled_answer(prompt: str) -> str:
    """The modelled model's whole answer: a call in the family's syntax for a tool prompt a declared tool
    answers, JSON when the prompt asks for it, else the coherent text answer (npu_outcome.answer_for)."""
    text = answer_for(prompt)
    return tool_reply(prompt) or json_reply(prompt, text) or text
