"""Reading tool calls out of a model's text as it is generated, as OpenAI chat-completion deltas.

One incremental parser serves both the streamed and the one-shot answer: the one-shot parse feeds the
whole text at once (``toolcalls.parse_output``), so the two cannot disagree, and the tests feed every
split of recorded outputs to prove that the chunking does not change the result.

What it emits (the ``choices[0].delta`` objects of OpenAI's streaming chat completion):

- ``{"content": "..."}`` for plain text. Only what might still become a call marker is held back (a
  tail that is a prefix of the family's opening marker), plus whitespace: whitespace that touches a
  call is dropped, so "Let me check.\\n<tool_call>..." answers "Let me check." and a call.
- ``{"tool_calls": [{"index", "id", "type": "function", "function": {"name", "arguments": ""}}]}``
  as soon as a call's name is complete, then ``{"tool_calls": [{"index", "function": {"arguments":
  "<fragment>"}}]}`` while its argument object arrives. An object is streamed as the model wrote it;
  an argument given as a JSON string (the placeholder style of Nemotron's own format description) is
  sent decoded, in one piece, once complete.

Malformed output never raises: a block from which no call could be read goes back to the text as
written and ``problems`` says why; a call whose name was read but whose arguments break off keeps the
text it had and is reported too (``toolcalls.validate_calls`` then names it to the client).
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

_WS = " \t\r\n"
_LITERAL = re.compile(r"-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?|true|false|null")
# Llama 3.1 built-in tool call: brave_search.call(query="...") (Meta's Llama 3.1 prompt format,
# https://www.llama.com/docs/model-cards-and-prompt-formats/llama3_1/ "Built-in tool calling")
_BUILTIN_CALL = re.compile(r"^\s*([A-Za-z_]\w*)\.call\((.*)\)\s*$", re.S)
_KWARG = re.compile(r'\s*([A-Za-z_]\w*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?', re.S)
_KWARGS = re.compile(r'(?:\s*[A-Za-z_]\w*\s*=\s*"(?:[^"\\]|\\.)*"\s*,?)+\s*', re.S)


def _loads(raw: str) -> Any:
    """json.loads that answers None for text that is not JSON (the model's output is untrusted)."""
    try:
        return json.loads(raw)
    except ValueError:
        return None


@dataclass(frozen=True)
class CallSyntax:
    """How one family marks a call in its output.

    ``start``/``ends``: the marker that opens a call block and the markers that close it (a block
    also ends with the output). ``python_tag``: the block may hold a Llama built-in call
    (``name.call(...)`` or code for the code interpreter) instead of JSON. ``bare_json``: an output
    whose first non-blank character is ``{`` is a call (Llama 3.1's JSON-based tool calling has no
    marker). Inside a block the calls are JSON objects with "name" and "arguments" (or Llama's
    "parameters"), optionally in a list, separated by commas, semicolons or blanks.
    """

    start: str
    ends: tuple[str, ...]
    python_tag: bool = False
    bare_json: bool = False


_STR_STOP = re.compile(r'["\\]')
_BRACKET_STOP = re.compile(r'["{}\[\]]')
_Scan = tuple[int, int, bool]     # where to resume: position, bracket depth, inside a string
_Cache = dict[Any, Any]           # per block: value start -> _Scan, ("obj", start) -> finished object


def _scan_nested(s: str, state: _Scan) -> tuple[int | None, _Scan]:
    """Resume reading a JSON string, object or array; (end, state) with end None while it is open.

    Resumable because a block's text only grows, so a long argument streamed in small pieces costs
    linear time instead of being read again from its start at every piece.
    """
    j, depth, in_str = state
    n = len(s)
    while True:
        if in_str:
            m = _STR_STOP.search(s, j)
            if not m:
                return None, (n, depth, True)
            j = m.start()
            if s[j] == "\\":
                if j + 1 >= n:
                    return None, (j, depth, True)
                j += 2
                continue
            in_str, j = False, j + 1
            if depth == 0:
                return j, (j, 0, False)
            continue
        m = _BRACKET_STOP.search(s, j)
        if not m:
            return None, (n, depth, False)
        j = m.start()
        c = s[j]
        j += 1
        if c == '"':
            in_str = True
        elif c in "{[":
            depth += 1
        else:
            depth -= 1
            if depth == 0:
                return j, (j, 0, False)


def _scan_string(s: str, i: int) -> int | None:
    """End (exclusive) of the JSON string opening at ``s[i]``, or None if it is not closed yet."""
    return _scan_nested(s, (i + 1, 0, True))[0]


def _scan_value(s: str, i: int, final: bool, cache: _Cache | None = None) -> tuple[int | None, bool]:
    """(end, ok) of the JSON value at ``s[i]``: (None, True) incomplete, (None, False) not JSON."""
    c = s[i]
    if c in '"{[':
        hit = cache.get(i) if cache is not None else None
        if isinstance(hit, int):       # finished earlier: its end does not move
            return hit, True
        end, state = _scan_nested(s, hit or ((i + 1, 0, True) if c == '"' else (i, 0, False)))
        if cache is not None:
            cache[i] = end if end is not None else state
        return end, True
    m = _LITERAL.match(s, i)
    if m and (m.end() < len(s) or final):
        return m.end(), True
    if not final and any(w.startswith(s[i:]) for w in ("true", "false", "null")) or (m and not final):
        return None, True
    return None, False


def _skip_ws(s: str, j: int) -> int:
    while j < len(s) and s[j] in _WS:
        j += 1
    return j


def _scan_object(s: str, i: int, final: bool, cache: _Cache | None = None
                 ) -> tuple[dict[str, tuple[int, int | None]], int | None, str]:
    """Fields (key -> value span, end None while open), end and status of the object at ``s[i]``.

    Status: "complete", "partial" (more text may complete it) or "invalid".
    """
    if cache is not None and ("obj", i) in cache:
        return cache[("obj", i)]
    result = _scan_fields(s, i, final, cache)
    if cache is not None and result[2] == "complete":
        cache[("obj", i)] = result
    return result


def _scan_fields(s: str, i: int, final: bool, cache: _Cache | None
                 ) -> tuple[dict[str, tuple[int, int | None]], int | None, str]:
    fields: dict[str, tuple[int, int | None]] = {}
    j = _skip_ws(s, i + 1)
    while True:
        if j >= len(s):
            return fields, None, "partial"
        if s[j] == "}" and not fields:
            return fields, j + 1, "complete"
        if s[j] != '"':
            return fields, None, "invalid"
        e = _scan_string(s, j)
        if e is None:
            return fields, None, "partial"
        key = _loads(s[j:e])
        j = _skip_ws(s, e)
        if j >= len(s):
            return fields, None, "partial"
        if s[j] != ":":
            return fields, None, "invalid"
        j = _skip_ws(s, j + 1)
        if j >= len(s):
            return fields, None, "partial"
        end, ok = _scan_value(s, j, final, cache)
        if not ok:
            return fields, None, "invalid"
        fields[key] = (j, end)
        if end is None:
            return fields, None, "partial"
        j = _skip_ws(s, end)
        if j >= len(s):
            return fields, None, "partial"
        if s[j] == "}":
            return fields, j + 1, "complete"
        if s[j] != ",":
            return fields, None, "invalid"
        j = _skip_ws(s, j + 1)


@dataclass
class _Call:
    index: int | None = None   # OpenAI index, given when the name is read
    name: str = ""
    sent: int = 0              # characters of the raw argument object already sent
    whole: bool = False        # arguments sent in one piece (decoded string, literal, "{}")
    done: bool = False


@dataclass
class StreamParser:
    """Consume a model's text in chunks; ``feed`` and ``finish`` return OpenAI delta objects.

    ``enabled=False`` (``tool_choice: "none"``) passes all text through as content.
    ``new_id`` makes call ids (tests pass a counter; the default is random, like OpenAI's).
    """

    syntax: CallSyntax
    enabled: bool = True
    new_id: Callable[[], str] = field(default=lambda: "call_" + uuid.uuid4().hex[:24])
    problems: list[str] = field(default_factory=list)
    calls: int = 0
    _out: list[dict[str, Any]] = field(default_factory=list)
    _buf: str = ""
    _in_block: bool = False
    _bare: bool = False            # the current block is Llama's marker-less JSON
    _opened: str = ""              # the marker that opened the current block
    _block_calls: list[_Call] = field(default_factory=list)
    _cache: _Cache = field(default_factory=dict)
    _end_from: int = 0             # where to look for the closing marker next
    _started: bool = False         # a non-blank character has been seen (for bare JSON)
    _ws_hold: str = ""
    _dropped_ws: str = ""          # blanks before the current block, given back if it holds no call
    _after_call: bool = False

    # ---- text -------------------------------------------------------------------------------------
    def _text(self, s: str) -> None:
        if not s:
            return
        t = self._ws_hold + s
        if self._after_call:
            t = t.lstrip(_WS)
            if not t:
                self._ws_hold = ""
                return
            self._after_call = False
        body = t.rstrip(_WS)
        self._ws_hold = t[len(body):]
        if body:
            self._out.append({"content": body})

    def _held_marker_prefix(self, s: str) -> int:
        """Length of the longest tail of ``s`` that could begin the opening marker."""
        m = self.syntax.start
        for n in range(min(len(m) - 1, len(s)), 0, -1):
            if m.startswith(s[-n:]):
                return n
        return 0

    # ---- blocks -----------------------------------------------------------------------------------
    def _open_block(self, marker: str, bare: bool) -> None:
        self._in_block, self._bare, self._opened = True, bare, marker
        self._block_calls, self._cache, self._end_from = [], {}, 0
        self._dropped_ws, self._ws_hold = self._ws_hold, ""

    def _emit_header(self, c: _Call) -> None:
        c.index = self.calls
        self.calls += 1
        self._out.append({"tool_calls": [{"index": c.index, "id": self.new_id(), "type": "function",
                                          "function": {"name": c.name, "arguments": ""}}]})

    def _emit_args(self, c: _Call, frag: str) -> None:
        if frag:
            self._out.append({"tool_calls": [{"index": c.index, "function": {"arguments": frag}}]})

    def _advance(self, k: int, s: str, fields: dict[str, tuple[int, int | None]], status: str,
                 done: bool) -> None:
        """Send what is new about the k-th call of the block; ``done``: it will not grow."""
        while len(self._block_calls) <= k:
            self._block_calls.append(_Call())
        c = self._block_calls[k]
        if c.done:
            return
        if c.index is None and "name" in fields and fields["name"][1] is not None:
            a, b = fields["name"]
            name = _loads(s[a:b]) if s[a] == '"' else None
            if isinstance(name, str) and name:
                c.name = name
                self._emit_header(c)
        key = "arguments" if "arguments" in fields else "parameters" if "parameters" in fields else None
        if c.index is not None and key and not c.whole:
            a, b = fields[key]
            if s[a] == "{":
                upto = b if b is not None else len(s)
                self._emit_args(c, s[a + c.sent:upto])
                c.sent = upto - a
            elif b is not None:
                raw = s[a:b]
                value = _loads(raw) if raw[0] == '"' else None
                self._emit_args(c, value if isinstance(value, str) else raw)
                c.whole = True
        if not done:
            return
        c.done = True
        where = "a tool call" if c.index is None else f"tool call {c.index} ({c.name})"
        if c.index is None:
            self.problems.append(f"{where}: no function name could be read from the model's output")
        elif status != "complete":
            self.problems.append(f"{where}: the call's JSON is malformed or cut off")
        elif key is None and c.sent == 0:
            self._emit_args(c, "{}")
            c.whole = True

    def _scan_calls(self, s: str, final: bool) -> int | None:
        """Read the calls in block body ``s``; for bare JSON, return where the block ends (if known)."""
        j = _skip_ws(s, 0)
        if j < len(s) and s[j] == "[":
            j += 1
        k = 0
        while True:
            while j < len(s) and s[j] in _WS + ",;":
                j += 1
            if j >= len(s):
                return None
            if s[j] == "]" and not self._bare:
                return None
            if s[j] != "{":
                if self._bare and k > 0:
                    return j
                if final:
                    self._advance(k, s, {}, "invalid", True)
                return None
            fields, end, status = _scan_object(s, j, final, self._cache)
            self._advance(k, s, fields, status, status != "partial" or final)
            if status == "invalid" and self._bare:   # not JSON after all: the rest is text again
                return j
            if status != "complete" or end is None:
                return None
            j, k = end, k + 1

    def _python_tag_body(self, s: str) -> None:
        """A finished ``<|python_tag|>`` block that is not JSON: a built-in call or interpreter code."""
        c = _Call()
        self._block_calls.append(c)
        m = _BUILTIN_CALL.match(s)
        if m and _KWARGS.fullmatch(m.group(2)):
            args = {k: _loads(f'"{v}"') for k, v in _KWARG.findall(m.group(2))}
            c.name = m.group(1)
        else:  # Meta's format: code for the built-in code interpreter follows the tag as it is
            c.name, args = "code_interpreter", {"code": s.strip()}
        self._emit_header(c)
        self._emit_args(c, json.dumps(args, ensure_ascii=False))
        c.done = c.whole = True

    def _block_step(self, final: bool) -> bool:
        """Work on the open block; True when it ended (the rest of ``_buf`` is text again)."""
        s, rest, ended, stop = self._buf, "", final, None
        if not self._bare:
            hits = [(at, e) for e in self.syntax.ends if (at := s.find(e, self._end_from)) >= 0]
            self._end_from = max(0, len(s) - max(map(len, self.syntax.ends)))
            if hits:
                at, e = min(hits)
                s, rest, ended = s[:at], s[at + len(e):], True
            elif not final:
                cut = max((n for e in self.syntax.ends for n in range(1, len(e))
                           if s.endswith(e[:n])), default=0)
                s = s[:len(s) - cut]
        first = s[_skip_ws(s, 0):_skip_ws(s, 0) + 1]
        if self.syntax.python_tag and not self._bare and first and first not in "[{":
            if ended:
                self._python_tag_body(s)
        elif first:
            stop = self._scan_calls(s, ended)
            if self._bare and stop is not None:
                s, rest, ended = s[:stop], s[stop:], True
        if not ended:
            return False
        if self._bare and not final and stop is None:
            return False
        if not any(c.index is not None for c in self._block_calls):
            if not self._block_calls and s.strip(_WS):
                self.problems.append("a tool-call block held no call the model's format allows")
            closing = "" if self._bare else self._buf[len(s):len(self._buf) - len(rest)]
            self._text(self._dropped_ws + self._opened + s + closing)
        else:
            self._after_call = True
        self._in_block, self._buf = False, rest
        return True

    # ---- public -----------------------------------------------------------------------------------
    def feed(self, chunk: str) -> list[dict[str, Any]]:
        """Take the next piece of generated text; return the deltas it completes."""
        if not self.enabled:
            return [{"content": chunk}] if chunk else []
        self._buf += chunk
        self._run(final=False)
        out, self._out = self._out, []
        return out

    def _run(self, final: bool) -> None:
        while True:
            if self._in_block:
                if not self._block_step(final):
                    return
                continue
            if self.syntax.bare_json and not self._started:
                j = _skip_ws(self._buf, 0)
                if j >= len(self._buf):
                    if final:
                        self._text(self._buf)
                        self._buf = ""
                    return
                self._started = True
                if self._buf[j] == "{":
                    self._buf = self._buf[j:]
                    self._open_block("", bare=True)
                    continue
            at = self._buf.find(self.syntax.start)
            if at >= 0:
                self._text(self._buf[:at])
                self._buf = self._buf[at + len(self.syntax.start):]
                self._open_block(self.syntax.start, bare=False)
                continue
            keep = 0 if final else self._held_marker_prefix(self._buf)
            self._text(self._buf[:len(self._buf) - keep])
            self._buf = self._buf[len(self._buf) - keep:]
            return

    def finish(self, finish_reason: str = "stop") -> tuple[list[dict[str, Any]], str]:
        """End of generation: the last deltas and OpenAI's finish_reason ("tool_calls" when calls
        were sent and the model stopped by itself; "length" stays "length")."""
        if not self.enabled:
            return [], finish_reason
        self._run(final=True)
        if self.calls == 0 and self._ws_hold:
            self._out.append({"content": self._ws_hold})
        self._ws_hold = ""
        out, self._out = self._out, []
        return out, ("tool_calls" if self.calls and finish_reason == "stop" else finish_reason)
