"""Answers checked before the client takes them: tool calls and ``response_format`` JSON.

A runtime that only produces text (Genie) has no way to force a call or a JSON shape, so the service
reads the answer (the family's call syntax through :mod:`.toolcalls`, JSON through :mod:`.schema_check`)
and decides: a fitting answer goes to the client as OpenAI's ``tool_calls`` / content; one that does
not fit is :class:`Unfit`, and the handler runs the request once more, then answers the error. Never a
silent answer without the call that ``tool_choice`` demanded, never unchecked JSON.

Streaming: text and calls flow as they are read when nothing has to be decided first (``tool_choice``
"auto"); with "required", a named function or a ``response_format`` everything is held until the
answer is judged, then sent in the same delta sequence (calls still arrive as a header and argument
pieces). A streamed "auto" answer whose call proves unusable only at its end has already left: it
ends with an error event instead of ``finish_reason``, without a retry. A request without tools and
without ``response_format`` never comes here.
"""

from __future__ import annotations

import json
import re
from typing import Any

from edge_llm_serve import schema_check, toolcalls
from edge_llm_serve.engines.base import Job


class Unfit(Exception):
    """The model's answer does not honour the request; ``code`` is the error's string code and
    ``output`` the model's text (shown to the client, cut, so an evaluation can see what it said)."""

    def __init__(self, message: str, code: str, output: str) -> None:
        super().__init__(message)
        self.code, self.output = code, output


def needed(job: Job) -> bool:
    """True when ``job``'s answer must be read before (or while) it goes out."""
    return (job.tools is not None and job.tools.choice != "none") or job.response_format is not None


#: one fence around the whole answer, its info string (CommonMark 0.31 "Fenced code blocks": the word
#: after the opening backticks, e.g. ``json``) dropped; on one line too, as some models write it
_FENCE = re.compile(r"```[A-Za-z0-9_+-]*\s*(.*?)\s*```", re.S)


def _strip_fence(text: str) -> str:
    """The JSON inside one surrounding Markdown code fence (```json ... ```), or ``text`` unchanged.
    Models trained on chat data often fence JSON even when told not to; the fence carries nothing."""
    t = text.strip()
    found = _FENCE.fullmatch(t)
    return found.group(1) if found else t


def json_body(text: str) -> str:
    """The part of ``text`` that is judged as JSON, and that the client then gets as ``content``: after
    a ``</think>`` block (Nemotron's reasoning, when switched on, comes first), without a code fence.
    The client must get exactly what was judged: ``json.loads(message.content)`` and the openai
    client's ``chat.completions.parse()`` read ``content`` as it is."""
    return _strip_fence(text.split("</think>")[-1])


def json_problems(text: str, fmt: dict[str, Any]) -> str | None:
    """Why ``text`` is not the JSON ``fmt`` asks for, or None."""
    body = json_body(text)
    try:
        value = json.loads(body)
    except ValueError as exc:
        return f"the answer is not JSON ({getattr(exc, 'msg', exc)})"
    if fmt["type"] == "json_object" or fmt.get("schema") in (None, {}):
        return None if isinstance(value, dict) else "the answer is JSON but not an object"
    found = schema_check.problems(value, fmt["schema"])
    return f"the answer does not fit the schema {fmt['name']!r}: " + "; ".join(found) if found else None


class Judge:
    """Reads one answer as it is generated: ``feed`` per text piece, ``finish`` at the end.

    ``family`` is the tool format the service parses (Genie); None when the engine returns calls in
    its figures itself (``done["tool_calls"]``). ``parallel`` False keeps the first call only.
    """

    def __init__(self, job: Job, family: str | None, parallel: bool = True) -> None:
        self.tools = job.tools if job.tools is not None and job.tools.choice != "none" else None
        self.fmt = job.response_format
        self.parallel = parallel
        self.parser = toolcalls.parser(family, self.tools) if self.tools is not None and family else None
        self.hold = self.fmt is not None or (self.tools is not None and self.tools.choice in ("required", "function"))
        self.sent = False           # some delta has gone to the client (no retry can take it back)
        self._all: list[dict[str, Any]] = []
        self._text: list[str] = []

    def _limit(self, deltas: list[dict[str, Any]]) -> list[dict[str, Any]]:
        if self.parallel:
            return deltas
        out = []
        for d in deltas:
            calls = [c for c in d.get("tool_calls") or () if c["index"] == 0]
            if "tool_calls" not in d:
                out.append(d)
            elif calls:
                out.append({**d, "tool_calls": calls})
        return out

    def feed(self, piece: str) -> list[dict[str, Any]]:
        """The deltas to send now for ``piece`` (none while the answer is held)."""
        self._text.append(piece)
        deltas = self._limit(self.parser.feed(piece)) if self.parser else ([{"content": piece}] if piece else [])
        self._all += deltas
        if self.hold:
            return []
        if deltas:
            self.sent = True
        return deltas

    def finish(self, done: dict[str, Any]) -> tuple[list[dict[str, Any]], str, dict[str, Any]]:
        """(deltas still to send, finish_reason, the whole message); :class:`Unfit` when it does not fit."""
        reason = done["finish_reason"]
        problems: list[str] = []
        if self.parser:
            tail, reason = self.parser.finish(reason)
            tail = self._limit(tail)
            problems = list(self.parser.problems)
        else:
            given = (done.get("tool_calls") or []) if self.tools is not None else []
            tail = [{"tool_calls": [{"index": n, **c}]} for n, c in enumerate(given[:None if self.parallel else 1])]
            if tail and reason == "stop":
                reason = "tool_calls"
        # a call block the engine's runtime could not parse (LiteRT-LM): an invalid call, judged like one
        unparsed = done.get("unparsed_tool_calls") if self.tools is not None else None
        self._all += tail
        content, calls = toolcalls.collect(self._all)
        output = unparsed["output"] if unparsed and unparsed.get("output") else "".join(self._text)
        if unparsed:
            raise Unfit(unparsed["why"], "invalid_tool_call", output)
        if self.tools is not None:
            problems += toolcalls.validate_calls(calls, self.tools.tools)
            unmet = toolcalls.choice_unmet(self.tools, calls, problems)
            if unmet:
                raise Unfit(unmet, "tool_choice_unmet" if not calls else "invalid_tool_call", output)
            if problems:
                raise Unfit("the model's tool call does not fit the declared tools: " + "; ".join(problems),
                            "invalid_tool_call", output)
        if self.fmt is not None and not calls:
            why = json_problems(content, self.fmt)
            if why:
                cut = " (the answer was cut at max_tokens)" if reason == "length" else ""
                raise Unfit(f"response_format {self.fmt['type']} not met: {why}{cut}", "response_format_unmet", output)
        out = self._all if self.hold else tail
        if self.fmt is not None and not calls:
            # held (a response_format always holds the answer): nothing has gone out, so the client
            # gets the judged JSON alone, not the fence or the reasoning around it
            content = json_body(content)
            out = [{"content": content}]
        if not self.hold and out:
            self.sent = True
        message: dict[str, Any] = {"role": "assistant", "content": content if content or not calls else None}
        if calls:
            message["tool_calls"] = calls
        return out, reason, message
