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
3. the model's text goes through ``parser(family, prepared)`` chunk by chunk (streaming deltas) or
   ``parse_output`` at once (a message with ``content`` and ``tool_calls``);
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
        if "parameters" in f and not isinstance(f["parameters"], dict):
            raise ToolRequestError(f"{where}.function.parameters", "must be a JSON Schema object")
    return tools


def _check_choice(choice: Any, tools: list[dict[str, Any]]) -> tuple[str, str | None]:
    """OpenAI's default: "auto" with tools, "none" without."""
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
    raise ToolRequestError("tool_choice", 'must be "auto", "none", "required" or '
                                          '{"type": "function", "function": {"name": ...}}')


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
    choice, name = _check_choice(body.get("tool_choice"), tools)
    return Prepared(_check_messages(body.get("messages")), tools, choice, name)


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

    def message(self) -> dict[str, Any]:
        msg: dict[str, Any] = {"role": "assistant", "content": self.content}
        if self.tool_calls:
            msg["tool_calls"] = self.tool_calls
        return msg


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
    are not a JSON object, required arguments missing. Empty when every call fits."""
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
        schema = declared[name].get("parameters") or {}
        missing = [k for k in schema.get("required") or () if k not in args]
        if missing:
            problems.append(f"{where}: missing required argument(s) {', '.join(missing)}")
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
