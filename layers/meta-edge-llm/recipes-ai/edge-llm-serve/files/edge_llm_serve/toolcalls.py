"""OpenAI tool calls (``tools``, ``tool_choice``, ``tool_calls``) for models driven by prompt text (Genie).

The model families whose formats are known here, each from its public source (cited in
``toolcalls_render``): ``llama3.1`` (Meta's Llama 3.1 prompt format: JSON ``{"name", "parameters"}``,
built-ins after ``<|python_tag|>``, results in role ``ipython``), ``nemotron-nano``
(Llama-3.1-Nemotron-Nano: ``<AVAILABLE_TOOLS>`` in, ``<TOOLCALL>[...]</TOOLCALL>`` out, the
``detailed thinking on/off`` switch) and ``qwen2.5`` (``<tools>`` in the system turn,
``<tool_call>`` out, ``<tool_response>`` results).

What a caller does with one request:

1. ``prepare(body)`` checks ``messages``/``tools``/``tool_choice`` (``ToolRequestError`` names the field
   for a 400) and gives a ``Prepared`` request;
2. ``render(family, prepared)`` is the prompt text (the tool prompt is left out for ``"none"``, and a
   named function is the only one shown);
3. the model's text goes through ``parser(family, prepared)`` chunk by chunk (streaming deltas; the
   service reads every answer this way, through answer_check.Judge). ``parse_output`` reads a whole
   text at once through the same parser: the reference the recorded-output tests and bench/toolcalls.py
   hold the streamed reading against;
4. ``validate_calls`` lists calls that do not fit the declared tools, and ``choice_unmet`` says whether
   ``"required"`` or a named function was honoured (the service retries once, then answers an error
   the client can see: a model cannot be forced here, there is no constrained decoding in Genie).

Pure standard library, no I/O: the service and the tests call it alike.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from . import schema_check
from .toolcalls_render import (
    SYNTAX,
    ToolRequestError,
    render_llama31,
    render_nemotron_nano,
    render_qwen25,
    text_of,
)
from .toolcalls_stream import StreamParser

__all__ = ["FAMILIES", "ParsedOutput", "Prepared", "StreamParser", "ToolRequestError", "choice_unmet",
           "parse_output", "parser", "prepare", "render", "validate_calls"]

FAMILIES = tuple(SYNTAX)
#: the fields of OpenAI's FunctionDefinition (openai 3.57.0, types/shared_params/function_definition.py)
FUNCTION_FIELDS = frozenset({"name", "description", "parameters", "strict"})
ROLES = ("system", "developer", "user", "assistant", "tool", "ipython")


@dataclass(frozen=True)
class Prepared:
    """A checked request: its messages, declared tools and the ``tool_choice`` mode.

    ``choice`` is "auto", "none", "required" or "function" (then ``name`` is the function).
    """

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] = field(default_factory=list)
    choice: str = "none"
    name: str | None = None

    @property
    def shown_tools(self) -> list[dict[str, Any]] | None:
        """The tools the prompt describes: none for "none", only the named one when one is forced."""
        if self.choice == "none" or not self.tools:
            return None
        if self.choice == "function":
            return [t for t in self.tools if t["function"]["name"] == self.name]
        return self.tools


def _check_tools(tools: Any) -> list[dict[str, Any]]:
    if tools is None:
        return []
    if not isinstance(tools, list):
        raise ToolRequestError("tools", "must be a list of {\"type\": \"function\", \"function\": {...}}")
    seen: set[str] = set()
    for n, t in enumerate(tools):
        where = f"tools[{n}]"
        if not isinstance(t, dict) or t.get("type") != "function" or not isinstance(t.get("function"), dict):
            raise ToolRequestError(where, 'only {"type": "function", "function": {...}} tools are supported')
        f = t["function"]
        name = f.get("name")
        if not isinstance(name, str) or not name or not all(c.isalnum() or c in "_-" for c in name) \
                or len(name) > 64:
            raise ToolRequestError(f"{where}.function.name", "must be 1-64 letters, digits, '_' or '-'")
        if name in seen:
            raise ToolRequestError(f"{where}.function.name", f"{name!r} is declared twice")
        seen.add(name)
        extra = sorted(set(f) - FUNCTION_FIELDS)
        if extra:
            raise ToolRequestError(f"{where}.function.{extra[0]}", f"tool {name!r}: not a field of an OpenAI "
                                   f"function definition (known: {', '.join(sorted(FUNCTION_FIELDS))})")
        strict = f.get("strict")
        if strict is not None and not isinstance(strict, bool):
            raise ToolRequestError(f"{where}.function.strict", f"tool {name!r}: must be true or false")
        params = f.get("parameters")
        if params is None:
            continue
        if not isinstance(params, dict):
            raise ToolRequestError(f"{where}.function.parameters", f"tool {name!r}: must be a JSON Schema object")
        # the arguments are checked against this schema (validate_calls): a keyword the checker
        # cannot enforce is refused, never left unchecked
        found = schema_check.unsupported(params, f"{where}.function.parameters")
        if found is None and strict:
            found = schema_check.not_strict(params, f"{where}.function.parameters")
        if found:
            raise ToolRequestError(found[0], f"tool {name!r}: {found[1]}")
    return tools


def _check_choice(choice: Any, tools: list[dict[str, Any]]) -> tuple[str, str | None] | tuple[str, None, set[str]]:
    """(mode, forced name[, allowed names]); OpenAI's default: "auto" with tools, "none" without."""
    if choice is None:
        return ("auto" if tools else "none"), None
    if choice in ("auto", "none", "required"):
        if choice != "none" and not tools:
            raise ToolRequestError("tool_choice", f'"{choice}" needs at least one entry in tools')
        return choice, None
    if isinstance(choice, dict) and choice.get("type") == "function" and isinstance(choice.get("function"), dict):
        name = choice["function"].get("name")
        if name not in {t["function"]["name"] for t in tools}:
            raise ToolRequestError("tool_choice.function.name", f"{name!r} is not one of the declared tools")
        return "function", name
    if isinstance(choice, dict) and choice.get("type") == "allowed_tools":
        return _allowed(choice.get("allowed_tools"), tools)
    raise ToolRequestError("tool_choice", 'must be "auto", "none", "required", '
                                          '{"type": "function", "function": {"name": ...}} or '
                                          '{"type": "allowed_tools", "allowed_tools": {"mode", "tools"}}')


def _allowed(spec: Any, tools: list[dict[str, Any]]) -> tuple[str, str | None, set[str]]:
    """OpenAI's ``allowed_tools`` choice (openai 3.57.0, types/chat/chat_completion_allowed_tools_param.py):
    ``mode`` "auto" or "required" over a subset of the declared tools, named as
    ``{"type": "function", "function": {"name": ...}}``. Honoured by offering the model only that subset:
    a call to any other tool is then an unknown function, judged like any unusable call."""
    where = "tool_choice.allowed_tools"
    if not isinstance(spec, dict) or set(spec) - {"mode", "tools"}:
        raise ToolRequestError(where, 'must be {"mode": "auto" or "required", "tools": [...]}')
    mode, picked = spec.get("mode"), spec.get("tools")
    if mode not in ("auto", "required"):
        raise ToolRequestError(f"{where}.mode", 'must be "auto" or "required"')
    declared = {t["function"]["name"] for t in tools}
    if not isinstance(picked, list) or not picked:
        raise ToolRequestError(f"{where}.tools", "must be a non-empty list of declared tools")
    names: set[str] = set()
    for n, t in enumerate(picked):
        name = (t.get("function") or {}).get("name") if isinstance(t, dict) and t.get("type") == "function" and \
            isinstance(t.get("function"), dict) else None
        if name not in declared:
            raise ToolRequestError(f"{where}.tools[{n}]", 'must be {"type": "function", "function": {"name": ...}} '
                                   "naming a declared tool")
        names.add(name)
    return mode, None, names


def _check_messages(messages: Any) -> list[dict[str, Any]]:
    if not isinstance(messages, list) or not messages:
        raise ToolRequestError("messages", "must be a non-empty list")
    for n, m in enumerate(messages):
        where = f"messages[{n}]"
        if not isinstance(m, dict) or m.get("role") not in ROLES:
            raise ToolRequestError(f"{where}.role", f"must be one of {', '.join(ROLES)}")
        calls = m.get("tool_calls")
        if m["role"] == "assistant" and calls is not None:
            if not isinstance(calls, list):
                raise ToolRequestError(f"{where}.tool_calls", "must be a list")
            for k, c in enumerate(calls):
                f = c.get("function") if isinstance(c, dict) else None
                if not isinstance(f, dict) or not isinstance(f.get("name"), str) \
                        or not isinstance(f.get("arguments", ""), str):
                    raise ToolRequestError(f"{where}.tool_calls[{k}]",
                                           'must be {"id", "type": "function", "function": {"name", "arguments"}}')
        elif m.get("content") is None and m["role"] != "assistant":
            raise ToolRequestError(f"{where}.content", "is required for this role")
        if m["role"] == "assistant" and m.get("content") is None and not calls:
            raise ToolRequestError(f"{where}.content", "may be null only beside tool_calls")
        if m["role"] == "tool" and not isinstance(m.get("tool_call_id"), str):
            raise ToolRequestError(f"{where}.tool_call_id", "is required for role tool")
        text_of(m.get("content"), where)
    return messages


def prepare(body: dict[str, Any]) -> Prepared:
    """Check the tool-related fields of an OpenAI chat request (``messages``, ``tools``, ``tool_choice``)."""
    tools = _check_tools(body.get("tools"))
    checked = _check_choice(body.get("tool_choice"), tools)
    if len(checked) == 3:                   # allowed_tools: the model is offered that subset only
        tools = [t for t in tools if t["function"]["name"] in checked[2]]
    return Prepared(_check_messages(body.get("messages")), tools, checked[0], checked[1])


def render(family: str, req: Prepared, *, thinking: bool | None = None, today: str | None = None) -> str:
    """The prompt text for ``family``, ending where the assistant's answer begins.

    ``thinking`` is Nemotron's reasoning switch; ``today`` the date Llama 3.1's system turn carries.
    """
    if family == "llama3.1":
        return render_llama31(req.messages, req.shown_tools, **({"today": today} if today else {}))
    if family == "nemotron-nano":
        return render_nemotron_nano(req.messages, req.shown_tools, thinking)
    if family == "qwen2.5":
        return render_qwen25(req.messages, req.shown_tools)
    raise ValueError(f"unknown model family {family!r} (known: {', '.join(FAMILIES)})")


def parser(family: str, req: Prepared | None = None, new_id: Callable[[], str] | None = None) -> StreamParser:
    """An incremental parser for one answer; with ``tool_choice: "none"`` it only passes text through."""
    if family not in SYNTAX:
        raise ValueError(f"unknown model family {family!r} (known: {', '.join(FAMILIES)})")
    enabled = req is None or req.choice != "none"
    return StreamParser(SYNTAX[family], enabled=enabled, **({"new_id": new_id} if new_id else {}))


@dataclass
class ParsedOutput:
    """One answer as OpenAI's non-streamed message: ``content`` (None when empty beside calls),
    ``tool_calls`` (each with id, type, function name and arguments as a JSON string),
    ``finish_reason`` and the ``problems`` met while reading the calls."""

    content: str | None
    tool_calls: list[dict[str, Any]]
    finish_reason: str
    problems: list[str]


def collect(deltas: list[dict[str, Any]]) -> tuple[str, list[dict[str, Any]]]:
    """Join streamed deltas as a client does: the text, and the calls by index."""
    text, calls = [], {}
    for d in deltas:
        text.append(d.get("content") or "")
        for tc in d.get("tool_calls") or ():
            c = calls.setdefault(tc["index"], {"id": None, "type": "function",
                                               "function": {"name": "", "arguments": ""}})
            if "id" in tc:
                c["id"] = tc["id"]
            f = tc.get("function") or {}
            c["function"]["name"] += f.get("name") or ""
            c["function"]["arguments"] += f.get("arguments") or ""
    return "".join(text), [calls[i] for i in sorted(calls)]


def parse_output(family: str, text: str, req: Prepared | None = None, *, finish_reason: str = "stop",
                 new_id: Callable[[], str] | None = None) -> ParsedOutput:
    """The whole answer at once, through the same parser the stream uses (so both agree)."""
    p = parser(family, req, new_id)
    deltas = p.feed(text)
    tail, reason = p.finish(finish_reason)
    content, calls = collect(deltas + tail)
    return ParsedOutput(content if content or not calls else None, calls, reason, list(p.problems))


def validate_calls(calls: list[dict[str, Any]], tools: list[dict[str, Any]]) -> list[str]:
    """What is wrong with each call against the declared tools: an unknown function, arguments that
    are not a JSON object or do not fit the tool's ``parameters`` schema (schema_check, the same
    checker as ``response_format``). Empty when every call fits."""
    declared = {t["function"]["name"]: t["function"] for t in tools}
    problems = []
    for n, c in enumerate(calls):
        name, raw = c["function"]["name"], c["function"]["arguments"]
        where = f"tool call {n} ({name})"
        if name not in declared:
            problems.append(f"{where}: unknown function (declared: {', '.join(declared) or 'none'})")
            continue
        try:
            args = json.loads(raw)
        except ValueError as e:
            problems.append(f"{where}: arguments are not valid JSON ({e.msg} at character {e.pos})")
            continue
        if not isinstance(args, dict):
            problems.append(f"{where}: arguments are not a JSON object")
            continue
        found = schema_check.problems(args, declared[name].get("parameters") or {}, "arguments")
        if found:
            problems.append(f"{where}: " + "; ".join(found))
    return problems


def choice_unmet(req: Prepared, calls: list[dict[str, Any]], problems: list[str]) -> str | None:
    """Why the answer does not honour ``tool_choice`` ("required" or a named function), or None.

    ``problems`` are those of ``validate_calls`` (and of the parser): a forced call must also be a
    usable one. "auto" and "none" are always met.
    """
    if req.choice in ("auto", "none"):
        return None
    if not calls:
        want = "a tool call" if req.choice == "required" else f"a call to {req.name}"
        return f'tool_choice demanded {want} and the model answered without one'
    if req.choice == "function" and any(c["function"]["name"] != req.name for c in calls):
        other = sorted({c["function"]["name"] for c in calls} - {req.name})
        return f"tool_choice demanded {req.name} and the model called {', '.join(other)}"
    if problems:
        return "the model's tool call is not usable: " + "; ".join(problems)
    return None
