"""Eval suite files: golden questions with checkable answers and a BFCL-style tool-use set, typed.

A suite is YAML (``provisioner/eval/default.yaml`` is the one the project ships)::

    suite: my-suite                 # a name for reports
    max_tokens: 128                 # per request (a case may say otherwise)
    tools:                          # OpenAI function tools, by name (cases list the ones they offer)
      get_weather:
        description: Current weather in a city.
        parameters: {type: object, properties: {city: {type: string}}, required: [city]}
    cases:
      - id: capital-france
        category: knowledge         # optional: the check's kind otherwise
        ask: What is the capital of France?
        expect: {contains: Paris}
      - id: weather-paris
        ask: What's the weather in Paris right now?
        tools: [get_weather]
        expect: {call: {name: get_weather, arguments: {city: Paris}}}

Checks (one per case, under ``expect``): ``exact`` (the whole answer, case and surrounding punctuation
ignored), ``contains`` (a text or a list of texts, all present, case ignored), ``regex`` (Python ``re``,
searched, case ignored), ``number`` (the answer's last number, within ``tolerance``), ``json`` (fields of
the first JSON object in the answer, by dotted path), ``call`` (exactly one tool call: the tool and its
arguments by value), ``calls`` (parallel calls, any order) and ``no_call: true`` (an answer without a
call: the tool is not needed). Argument values compare as JSON values; a text compares with case and
surrounding spaces ignored; ``{one_of: [...]}`` accepts any of several values.

Every mistake in a file is one line, ``<file>:<where>: <what is wrong> -> <what to do>``, all at once.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from provisioner.errors import UserError
from provisioner.yamlsafe import YamlError, load_yaml

DEFAULT = "default"
DEFAULT_PATH = Path(__file__).with_name("default.yaml")
#: the check kinds, in the order reports list categories that default to them
CHECKS = ("exact", "contains", "regex", "number", "json", "call", "calls", "no_call")
TOOL_CHECKS = ("call", "calls", "no_call")
TOP_KEYS = {"suite", "description", "max_tokens", "temperature", "tools", "cases"}
CASE_KEYS = {"id", "category", "ask", "system", "tools", "tool_choice", "max_tokens", "expect"}
_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
_TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")   # OpenAI's rule for a function name
MAX_CASES = 500
MAX_TOKENS_LIMIT = 4096


class SuiteError(UserError):
    """A suite file that cannot be used: one line per problem (``problems``), all of them at once."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = list(problems)
        head = self.problems[0] if len(self.problems) == 1 else \
            f"{len(self.problems)} problems in the eval suite:\n  " + "\n  ".join(self.problems)
        super().__init__(head)


@dataclass(frozen=True)
class Call:
    """One expected tool call: the tool's name and the arguments checked by value (others may be absent)."""

    name: str
    arguments: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Check:
    """What a right answer looks like: one of :data:`CHECKS`, with its value."""

    kind: str
    value: Any = None              # text, texts, pattern, number, {path: value}, Call, [Call]
    tolerance: float = 0.0         # number

    def describe(self) -> str:
        """The expectation as a reader of the report sees it."""
        if self.kind == "no_call":
            return "no tool call"
        if self.kind == "call":
            return f"call {_call_text(self.value)}"
        if self.kind == "calls":
            return "calls " + " + ".join(_call_text(c) for c in self.value)
        if self.kind == "number":
            return f"number {self.value:g}" + (f" +/- {self.tolerance:g}" if self.tolerance else "")
        if self.kind == "contains" and isinstance(self.value, tuple):
            return "contains " + " and ".join(repr(v) for v in self.value)
        return f"{self.kind} {self.value!r}"


def _call_text(c: Call) -> str:
    return f"{c.name}(" + ", ".join(f"{k}={v!r}" for k, v in c.arguments.items()) + ")"


@dataclass(frozen=True)
class Case:
    id: str
    category: str
    ask: str
    expect: Check
    system: str | None = None
    tools: tuple[str, ...] = ()
    tool_choice: Any = None
    max_tokens: int | None = None


@dataclass(frozen=True)
class Suite:
    """A validated suite; ``raw`` is the data it was read from (what travels to the action plugins)."""

    name: str
    source: str
    cases: tuple[Case, ...]
    tools: dict[str, dict[str, Any]] = field(default_factory=dict)
    max_tokens: int = 128
    temperature: float | None = None       # sent only when the suite sets it (Genie takes no sampler per request)
    raw: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def categories(self) -> list[str]:
        """Categories in first-seen order."""
        return list(dict.fromkeys(c.category for c in self.cases))

    def requests(self) -> list[dict[str, Any]]:
        """One OpenAI chat completion request body per case: ``[{"id": case id, "body": {...}}]``."""
        out = []
        for c in self.cases:
            messages = ([{"role": "system", "content": c.system}] if c.system else []) + \
                [{"role": "user", "content": c.ask}]
            body: dict[str, Any] = {"messages": messages, "max_tokens": c.max_tokens or self.max_tokens}
            if self.temperature is not None:
                body["temperature"] = self.temperature
            if c.tools:
                body["tools"] = [{"type": "function", "function": {"name": t, **self.tools[t]}} for t in c.tools]
                if c.tool_choice is not None:
                    body["tool_choice"] = c.tool_choice
            out.append({"id": c.id, "body": body})
        return out


def load_suite(path: str | Path) -> Suite:
    """Read and validate a suite file (``"default"``: the one the project ships); SuiteError on any mistake."""
    if str(path) == DEFAULT:
        path = DEFAULT_PATH
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise SuiteError([f"{path}: cannot read the eval suite ({exc.strerror or exc}) -> name an existing "
                          f"YAML file, or '{DEFAULT}' for the suite the project ships"]) from None
    try:
        data = load_yaml(text, str(path))
    except YamlError as exc:
        raise SuiteError([str(exc)]) from None
    return parse_suite(data, "default" if path == DEFAULT_PATH else str(path))


def parse_suite(data: Any, source: str) -> Suite:  # noqa: ANN401 - any YAML value
    """Validate suite data (a file's, or the same data handed to an action plugin) into a :class:`Suite`."""
    p = _Problems(source)
    if not isinstance(data, dict):
        raise SuiteError([f"{source}: the top level must be a mapping with 'cases' -> see provisioner/eval/"
                          "default.yaml"])
    p.unknown(data, TOP_KEYS, "")
    max_tokens = _int(p, data.get("max_tokens", 128), "max_tokens")
    temperature = data.get("temperature")
    if temperature is not None and (not isinstance(temperature, int | float) or isinstance(temperature, bool)
                                    or not 0 <= temperature <= 2):
        p.add("temperature", f"must be a number 0..2, got {temperature!r}",
              "leave it out for the runtime's own sampler (Genie's is set in its config), or 0..2")
        temperature = None
    tools = _tools(p, data.get("tools") or {})
    raw_cases = data.get("cases")
    if not isinstance(raw_cases, list) or not raw_cases:
        p.add("cases", "must be a non-empty list of cases", "add cases with id, ask and expect")
        raw_cases = []
    if len(raw_cases) > MAX_CASES:
        p.add("cases", f"{len(raw_cases)} cases, at most {MAX_CASES}", "split the suite")
        raw_cases = raw_cases[:MAX_CASES]
    cases, seen = [], set()
    for i, rc in enumerate(raw_cases):
        cid = rc.get("id") if isinstance(rc, dict) else None
        if isinstance(cid, str) and cid in seen:
            p.add(f"cases[{i}].id", f"{cid!r} is used twice", "give each case its own id")
        seen.add(cid)
        case = _case(p, i, rc, tools)
        if case is not None:
            cases.append(case)
    if p.lines:
        raise SuiteError(p.lines)
    name = data.get("suite")
    return Suite(name=str(name) if name else Path(source).stem, source=source, cases=tuple(cases), tools=tools,
                 max_tokens=max_tokens or 128,
                 temperature=None if temperature is None else float(temperature), raw=data)


class _Problems:
    def __init__(self, source: str) -> None:
        self.source = source
        self.lines: list[str] = []

    def add(self, where: str, what: str, fix: str) -> None:
        self.lines.append(f"{self.source}:{where}: {what} -> {fix}" if where else f"{self.source}: {what} -> {fix}")

    def unknown(self, d: dict[str, Any], allowed: set[str], where: str) -> None:
        for k in d:
            if k not in allowed:
                self.add(f"{where}{'.' if where else ''}{k}", "unknown key",
                         f"use one of: {', '.join(sorted(allowed))}")


def _int(p: _Problems, v: Any, where: str) -> int | None:  # noqa: ANN401
    if v is None:
        return None
    if not isinstance(v, int) or isinstance(v, bool) or not 1 <= v <= MAX_TOKENS_LIMIT:
        p.add(where, f"must be an integer 1..{MAX_TOKENS_LIMIT}, got {v!r}", "e.g. 128")
        return None
    return v


def _tools(p: _Problems, raw: Any) -> dict[str, dict[str, Any]]:  # noqa: ANN401
    if not isinstance(raw, dict):
        p.add("tools", "must be a mapping of tool name -> {description, parameters}", "see the default suite")
        return {}
    out = {}
    for name, spec in raw.items():
        where = f"tools.{name}"
        if not isinstance(name, str) or not _TOOL_NAME.match(name):
            p.add(where, "a tool name is 1-64 letters, digits, _ or -", "rename the tool")
            continue
        if not isinstance(spec, dict):
            p.add(where, "must be a mapping with description and parameters", "see the default suite")
            continue
        p.unknown(spec, {"description", "parameters"}, where)
        params = spec.get("parameters", {"type": "object", "properties": {}})
        if not isinstance(params, dict) or params.get("type") != "object" or \
                not isinstance(params.get("properties", {}), dict):
            p.add(f"{where}.parameters", "must be a JSON schema of type object with properties",
                  "e.g. {type: object, properties: {city: {type: string}}, required: [city]}")
            continue
        req = params.get("required", [])
        missing = [r for r in req if r not in params.get("properties", {})] if isinstance(req, list) else ["?"]
        if missing:
            p.add(f"{where}.parameters.required", f"names no property: {missing}", "list property names only")
            continue
        out[name] = {"description": str(spec.get("description") or ""), "parameters": params}
    return out


def _case(p: _Problems, i: int, rc: Any, tools: dict[str, dict[str, Any]]) -> Case | None:  # noqa: ANN401
    where = f"cases[{i}]"
    if not isinstance(rc, dict):
        p.add(where, "must be a mapping with id, ask and expect", "see the default suite")
        return None
    cid = rc.get("id")
    if not isinstance(cid, str) or not _ID.match(cid):
        p.add(f"{where}.id", f"must be 1-64 letters, digits, '.', '_' or '-', got {cid!r}", "e.g. capital-france")
        cid = f"case-{i}"
    else:
        where = f"cases[{i}] ({cid})"
    p.unknown(rc, CASE_KEYS, where)
    before = len(p.lines)
    ask = rc.get("ask")
    if not isinstance(ask, str) or not ask.strip():
        p.add(f"{where}.ask", "the question is missing or empty", "write the user's message")
    system = rc.get("system")
    if system is not None and not isinstance(system, str):
        p.add(f"{where}.system", "must be text", "write the system message, or leave it out")
    offered = rc.get("tools") or []
    if not isinstance(offered, list) or not all(isinstance(t, str) for t in offered):
        p.add(f"{where}.tools", "must be a list of tool names", "e.g. [get_weather]")
        offered = []
    for t in offered:
        if t not in tools:
            p.add(f"{where}.tools", f"no tool named {t!r} in the suite's tools", "define it under tools:")
    choice = rc.get("tool_choice")
    if choice is not None and choice not in ("auto", "none", "required") and not (
            isinstance(choice, dict) and choice.get("type") == "function"):
        p.add(f"{where}.tool_choice", f"{choice!r} is not an OpenAI tool_choice",
              "use auto, none, required or {type: function, function: {name: ...}}")
    max_tokens = _int(p, rc.get("max_tokens"), f"{where}.max_tokens")
    expect = _check(p, f"{where}.expect", rc.get("expect"), offered, tools)
    if expect is not None and expect.kind in TOOL_CHECKS and not offered:
        p.add(f"{where}.tools", f"a {expect.kind} check needs tools offered", "list the tools the model may call")
    if len(p.lines) > before or expect is None:
        return None
    category = rc.get("category")
    return Case(id=cid, category=str(category) if category else expect.kind, ask=str(ask), expect=expect,
                system=system, tools=tuple(offered), tool_choice=choice, max_tokens=max_tokens)


def _check(p: _Problems, where: str, raw: Any, offered: list[str],  # noqa: ANN401
           tools: dict[str, dict[str, Any]]) -> Check | None:
    if not isinstance(raw, dict) or not raw:
        p.add(where, "missing: say what a right answer is", f"one of: {', '.join(CHECKS)}")
        return None
    kinds = [k for k in raw if k in CHECKS]
    extra = [k for k in raw if k not in CHECKS and k != "tolerance"]
    if len(kinds) != 1 or extra:
        p.add(where, f"needs exactly one check, got {sorted(map(str, raw))}", f"use one of: {', '.join(CHECKS)}")
        return None
    kind = kinds[0]
    v = raw[kind]
    if "tolerance" in raw and kind != "number":
        p.add(f"{where}.tolerance", "only a number check has a tolerance", "remove it")
        return None
    if kind in ("exact", "regex"):
        if not isinstance(v, str) or not v:
            p.add(f"{where}.{kind}", "must be non-empty text", "quote it in YAML")
            return None
        if kind == "regex":
            try:
                re.compile(v)
            except re.error as exc:
                p.add(f"{where}.regex", f"not a valid regular expression ({exc})", "fix the pattern (Python re)")
                return None
        return Check(kind, v)
    if kind == "contains":
        texts = [v] if isinstance(v, str) else v
        if not isinstance(texts, list) or not texts or not all(isinstance(t, str) and t for t in texts):
            p.add(f"{where}.contains", "must be a text or a list of texts", "e.g. Paris")
            return None
        return Check(kind, texts[0] if isinstance(v, str) else tuple(texts))
    if kind == "number":
        tol = raw.get("tolerance", 0)
        if not isinstance(v, int | float) or isinstance(v, bool):
            p.add(f"{where}.number", f"must be a number, got {v!r}", "e.g. 5")
            return None
        if not isinstance(tol, int | float) or isinstance(tol, bool) or tol < 0:
            p.add(f"{where}.tolerance", f"must be a number >= 0, got {tol!r}", "e.g. 0.01")
            return None
        return Check(kind, float(v), float(tol))
    if kind == "json":
        if not isinstance(v, dict) or not v or not all(isinstance(k, str) and k for k in v):
            p.add(f"{where}.json", "must map field paths to values", "e.g. {capital: Tokyo} or {city.name: Oslo}")
            return None
        return Check(kind, dict(v))
    if kind == "no_call":
        if v is not True:
            p.add(f"{where}.no_call", f"must be true, got {v!r}", "write no_call: true")
            return None
        return Check(kind, True)
    calls = [v] if kind == "call" else v
    if not isinstance(calls, list) or not calls or (kind == "calls" and len(calls) < 2):
        p.add(f"{where}.{kind}", "must be a call {name, arguments}" if kind == "call" else
              "must be a list of two or more calls", "e.g. {name: get_weather, arguments: {city: Paris}}")
        return None
    out = []
    for j, c in enumerate(calls):
        at = f"{where}.{kind}" + (f"[{j}]" if kind == "calls" else "")
        if not isinstance(c, dict) or set(c) - {"name", "arguments"} or not isinstance(c.get("name"), str):
            p.add(at, "must be {name: <tool>, arguments: {...}}", "e.g. {name: get_weather, arguments: {city: Paris}}")
            return None
        if c["name"] not in offered:
            p.add(f"{at}.name", f"{c['name']!r} is not among the case's tools {offered}", "offer it under tools:")
            return None
        args = c.get("arguments") or {}
        props = (tools.get(c["name"]) or {}).get("parameters", {}).get("properties", {})
        unknown = [a for a in args if a not in props] if isinstance(args, dict) else ["?"]
        if unknown:
            p.add(f"{at}.arguments", f"{unknown} are not parameters of {c['name']}", f"use: {', '.join(props)}")
            return None
        out.append(Call(c["name"], dict(args)))
    return Check(kind, out[0] if kind == "call" else tuple(out))
