"""Request bodies to jobs: every bad input becomes a JSON error naming the field, never a dropped connection."""

from __future__ import annotations

import json
from typing import Any

from edge_llm_serve import schema_check, toolcalls
from edge_llm_serve.config import DEFAULTS
from edge_llm_serve.engines.base import Job
from edge_llm_serve.fields import HONOURED, MESSAGE_REFUSED, REFUSED, refusal
from edge_llm_serve.prompts import render_chat, system_text

# ---------------------------------------------------------------------------------------------
# Request parsing: every bad input is a JSON error, never a dropped connection
# ---------------------------------------------------------------------------------------------

MAX_JSON_DEPTH = 32
MAX_INT_DIGITS = 19


class BadRequest(Exception):
    """A client error with its HTTP status, OpenAI error type and offending parameter."""

    def __init__(self, message: str, status: int = 400, param: str | None = None,
                 kind: str = "invalid_request_error", code: str | None = None) -> None:
        super().__init__(message)
        self.status, self.param, self.kind, self.code = status, param, kind, code


def _depth_ok(text: str, limit: int = MAX_JSON_DEPTH) -> bool:
    """True when ``text`` nests arrays/objects at most ``limit`` deep (json would recurse per level)."""
    depth, in_str, esc = 0, False, False
    for ch in text:
        if in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                in_str = False
        elif ch == '"':
            in_str = True
        elif ch in "[{":
            depth += 1
            if depth > limit:
                return False
        elif ch in "]}":
            depth -= 1
    return True


def _bounded_int(digits: str) -> int:
    if len(digits.lstrip("-")) > MAX_INT_DIGITS:
        raise ValueError(f"integer with {len(digits.lstrip('-'))} digits")
    return int(digits)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _check_strings(value: Any, where: str = "body") -> None:
    """Refuse strings that are not valid Unicode text (a lone surrogate from a \\ud800 escape, NUL)."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise BadRequest(f"'{where}' is not valid Unicode (lone surrogate at {exc.start})", param=where) from exc
        if "\x00" in value:
            raise BadRequest(f"'{where}' contains a NUL character", param=where)
    elif isinstance(value, dict):
        for k, v in value.items():
            _check_strings(k, where)
            _check_strings(v, k if where == "body" else where)
    elif isinstance(value, list):
        for v in value:
            _check_strings(v, where)


def parse_body(raw: bytes) -> dict[str, Any]:
    """The request JSON object, or BadRequest saying what is wrong with it."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadRequest(f"request body is not UTF-8 (byte {exc.start})") from exc
    if not _depth_ok(text):
        raise BadRequest(f"JSON nested deeper than {MAX_JSON_DEPTH} levels")
    try:
        body = json.loads(text, parse_int=_bounded_int, parse_constant=_reject_constant)
    except (ValueError, RecursionError) as exc:
        raise BadRequest(f"malformed JSON: {exc}") from exc
    if not isinstance(body, dict):
        raise BadRequest("request body must be a JSON object")
    _check_strings(body)
    return body


def _number(body: dict[str, Any], key: str, lo: float, hi: float) -> float | None:
    v = body.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not lo <= v <= hi:
        raise BadRequest(f"'{key}' must be a number between {lo} and {hi}", param=key)
    return float(v)


def _content(value: Any, where: str) -> str:
    """A message's content: a string or a list of {"type": "text", "text": ...} parts."""
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(p, dict) and p.get("type") == "text"
                                       and isinstance(p.get("text"), str) for p in value):
        return "".join(p["text"] for p in value)
    raise BadRequest(f"'{where}' must be a string or a list of text parts", param=where)


NO_CAPS: dict[str, bool] = {}


def json_instruction(fmt: dict[str, Any]) -> str:
    """What the prompt asks for when the runtime cannot constrain decoding (Genie): the answer is then
    checked against it (OpenAI asks the same of clients for json_object, "the word JSON must appear in
    the messages", so an instruction in the prompt is how every template-driven model is told)."""
    text = "Answer with one JSON object and nothing else: no prose, no code fence."
    if fmt["type"] == "json_schema":
        text += " The object must conform to this JSON Schema: " + json.dumps(fmt["schema"], ensure_ascii=False)
    return text


def response_format(body: dict[str, Any], caps: dict[str, bool]) -> dict[str, Any] | None:
    """``response_format`` normalised: None (text), {"type": "json_object"} or
    {"type": "json_schema", "name", "schema", "strict"}; BadRequest naming ``response_format`` otherwise."""
    rf = body.get("response_format")
    kinds = ("text", "json_object", "json_schema")
    if rf is None:
        return None
    if not isinstance(rf, dict) or rf.get("type") not in kinds:
        raise BadRequest('\'response_format\' must be {"type": "text"}, {"type": "json_object"} or '
                         '{"type": "json_schema", "json_schema": {"name": ..., "schema": {...}}}',
                         param="response_format")
    kind = rf["type"]
    if kind == "text":
        return None
    if not caps.get(kind):
        raise BadRequest(f"'response_format' {kind} is refused: this model's runtime cannot produce or check it "
                         "here", param="response_format", code="unsupported_parameter")
    if kind == "json_object":
        return {"type": "json_object"}
    spec = rf.get("json_schema")
    if not isinstance(spec, dict):
        raise BadRequest("'response_format' json_schema needs a json_schema object with name and schema",
                         param="response_format")
    extra = sorted(set(spec) - {"name", "schema", "strict", "description"})
    if extra:
        raise BadRequest(f"'response_format' json_schema.{extra[0]} is not a field OpenAI defines",
                         param="response_format")
    name = spec.get("name")
    if not isinstance(name, str) or not 1 <= len(name) <= 64 or not all(c.isalnum() or c in "_-" for c in name):
        raise BadRequest("'response_format' json_schema.name must be 1-64 letters, digits, '_' or '-'",
                         param="response_format")
    schema = spec.get("schema", {})
    found = schema_check.unsupported(schema)
    if found:
        raise BadRequest(f"'response_format' json_schema.{found[0]} is refused: {found[1]}; the service checks "
                         "every answer against the schema and will not leave a keyword unchecked",
                         param="response_format", code="unsupported_schema")
    strict = spec.get("strict")
    if strict is not None and not isinstance(strict, bool):
        raise BadRequest("'response_format' json_schema.strict must be true or false", param="response_format")
    found = schema_check.not_strict(schema) if strict else None
    if found:
        raise BadRequest(f"'response_format' json_schema.{found[0]} is refused: {found[1]}",
                         param="response_format", code="invalid_schema")
    return {"type": "json_schema", "name": name, "schema": schema, "strict": bool(strict)}


def _tool_turns(raw: list[Any]) -> bool:
    return any(isinstance(m, dict) and (m.get("role") == "tool" or m.get("tool_calls") is not None) for m in raw)


def _prepare_tools(body: dict[str, Any], caps: dict[str, bool], notes: dict[str, str]) -> toolcalls.Prepared:
    """The tool request checked by toolcalls.prepare (a 400 naming the field it names)."""
    try:
        prepared = toolcalls.prepare(body)
    except toolcalls.ToolRequestError as exc:
        raise BadRequest(f"'{exc.field}' {str(exc)[len(exc.field) + 2:]}", param=exc.field) from exc
    uses = (prepared.tools and prepared.choice != "none") or _tool_turns(prepared.messages)
    if uses and not caps.get("tools"):
        field = "tools" if prepared.tools else "messages"
        why = notes.get("tools") or "this model has no tool-call format here (a Genie model needs tool_format in " \
            "its serve config)"
        raise BadRequest(f"'{field}' is refused: {why}", param=field, code="unsupported_parameter")
    return prepared


def _tool_prompt(cfg: dict[str, Any], prepared: toolcalls.Prepared, instruction: str | None) -> str:
    """The family's prompt (config ``tool_format``) for a conversation with tools or tool turns."""
    messages = list(prepared.messages)
    if instruction:
        last = messages[-1]
        if last.get("role") == "user":
            messages[-1] = {**last, "content": toolcalls.text_of(last.get("content"), "messages[-1]")
                            + "\n\n" + instruction}
        else:
            messages.insert(0 if messages[0].get("role") not in ("system", "developer") else 1,
                            {"role": "system", "content": instruction})
    family = str(cfg.get("tool_format"))
    default = (cfg.get("system_prompt") or "").strip()
    switch = default.lower().startswith("detailed thinking ")
    if default and not switch and messages[0].get("role") not in ("system", "developer"):
        messages.insert(0, {"role": "system", "content": default})
    thinking = None if str(toolcalls.text_of(messages[0].get("content"), "messages[0]")).strip() in \
        ("detailed thinking on", "detailed thinking off") else default.lower() == "detailed thinking on"
    try:
        return toolcalls.render(family, toolcalls.Prepared(messages, prepared.tools, prepared.choice, prepared.name),
                                thinking=thinking)
    except toolcalls.ToolRequestError as exc:
        raise BadRequest(f"'{exc.field}' {str(exc)[len(exc.field) + 2:]}", param=exc.field) from exc


def make_job(cfg: dict[str, Any], kind: str, body: dict[str, Any], caps: dict[str, bool] | None = None,
             notes: dict[str, str] | None = None) -> Job:
    """Validate an OpenAI request body and turn it into a Job (BadRequest on any bad field).

    ``caps`` is the engine's ``capabilities``: tools and response_format are refused by name where
    the engine cannot honour them, saying why from ``notes`` (the engine's ``capability_notes``) when given."""
    caps = caps if caps is not None else NO_CAPS
    model = body.get("model")
    if model is not None and model != cfg["model"]:
        raise BadRequest(f"model {model!r} is not served here (this is {cfg['model']!r})", status=404,
                         param="model", code="model_not_found")
    refused = refusal(kind, body, cfg.get("runtime"))
    if refused:
        field, why = refused
        known = field in REFUSED or field in HONOURED[kind]
        raise BadRequest(why, param=field, code="unsupported_parameter" if known else "unknown_parameter")
    opts = body.get("stream_options")
    if opts is not None and not (isinstance(opts, dict) and set(opts) <= {"include_usage", "include_obfuscation"}
                                 and all(isinstance(v, bool) for v in opts.values())
                                 and opts.get("include_obfuscation") is not True):
        raise BadRequest("'stream_options' may hold include_usage (true or false) only: the stream is not "
                         "obfuscated", param="stream_options")
    n = body.get("n")
    if n is not None and (type(n) is not int or n != 1):      # true and 1.0 equal 1 in Python: not an integer 1
        raise BadRequest("'n' must be 1 (one NPU, one answer)", param="n")
    limit = int(cfg.get("max_tokens_limit") or DEFAULTS["max_tokens_limit"])
    key = "max_completion_tokens" if body.get("max_completion_tokens") is not None else "max_tokens"
    mt = body.get(key)
    if mt is None:
        mt = min(limit, int(cfg.get("default_max_tokens") or DEFAULTS["default_max_tokens"]))
    elif isinstance(mt, bool) or not isinstance(mt, int) or not 1 <= mt <= limit:
        raise BadRequest(f"'{key}' must be an integer between 1 and {limit}", param=key)
    stop = body.get("stop")
    if stop is None:
        stop = []
    elif isinstance(stop, str):
        stop = [stop]
    if not (isinstance(stop, list) and len(stop) <= 4 and all(isinstance(s, str) and s for s in stop)):
        raise BadRequest("'stop' must be a string or up to 4 non-empty strings", param="stop")
    seed = body.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise BadRequest("'seed' must be an integer", param="seed")
    if not isinstance(body.get("stream", False), bool):
        raise BadRequest("'stream' must be true or false", param="stream")
    max_chars = int(cfg.get("max_prompt_chars") or DEFAULTS["max_prompt_chars"])
    template = cfg.get("chat_template", "plain")
    if kind == "completion":
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1:
            prompt = prompt[0]
        if not isinstance(prompt, str) or not prompt.strip():
            raise BadRequest("'prompt' must be a non-empty string", param="prompt")
        messages: list[dict[str, str]] = []
        system = None
        fmt, prepared = None, None
    else:
        raw = body.get("messages")
        if not isinstance(raw, list) or not raw:
            raise BadRequest("'messages' must be a non-empty list", param="messages")
        parallel = body.get("parallel_tool_calls")
        if parallel is not None and not isinstance(parallel, bool):
            raise BadRequest("'parallel_tool_calls' must be true or false", param="parallel_tool_calls")
        fmt = response_format(body, caps)
        instruction = json_instruction(fmt) if fmt and not caps.get("constrained") else None
        tooled = body.get("tools") is not None or body.get("tool_choice") is not None or _tool_turns(raw)
        prepared = _prepare_tools(body, caps, notes or {}) if tooled else None
        sys_parts, messages = [], []
        for i, m in enumerate(raw):
            roles = ("system", "developer", "user", "assistant") + (("tool",) if tooled else ())
            if not isinstance(m, dict) or m.get("role") not in roles:
                raise BadRequest(f"messages[{i}] needs a role of {', '.join(roles[:-1])} or {roles[-1]}",
                                 param="messages")
            # OpenAI's message types: tool_calls on an assistant message, tool_call_id on a tool message
            # (openai 3.57.0, types/chat/chat_completion_{assistant,tool}_message_param.py); elsewhere refused
            allowed = {"role", "content"} | ({"tool_calls"} if tooled and m["role"] == "assistant" else set()) \
                | ({"tool_call_id"} if m["role"] == "tool" else set())
            for key in sorted(k for k, v in m.items() if k not in allowed and v is not None):
                why = MESSAGE_REFUSED.get(key, "not a field of an OpenAI message this service knows")
                raise BadRequest(f"messages[{i}].{key} is refused: {why}", param=f"messages[{i}].{key}",
                                 code="unsupported_parameter" if key in MESSAGE_REFUSED else "unknown_parameter")
            text = "" if tooled and m.get("content") is None else _content(m.get("content"), f"messages[{i}].content")
            if m["role"] in ("system", "developer"):
                sys_parts.append(text)
            else:
                messages.append({"role": m["role"], "content": text})
        if not messages or messages[-1]["role"] not in (("user", "tool") if tooled else ("user",)):
            raise BadRequest("the last message must come from the user" + (" or a tool" if tooled else ""),
                             param="messages")
        system = system_text(cfg, "\n".join(sys_parts) or None)
        if prepared is not None and cfg.get("tool_format"):
            prompt = _tool_prompt(cfg, prepared, instruction)
        else:
            if instruction and messages[-1]["role"] == "user":
                messages[-1] = {"role": "user", "content": messages[-1]["content"] + "\n\n" + instruction}
            elif instruction:
                system = f"{system}\n{instruction}" if system else instruction
            prompt = render_chat(template, messages, system)
    if len(prompt) > max_chars:
        raise BadRequest(f"the prompt is {len(prompt)} characters; the limit is {max_chars}", param="prompt")
    return Job(kind=kind, prompt=prompt, messages=messages, system=system, max_tokens=int(mt),
               temperature=_number(body, "temperature", 0, 2), top_p=_number(body, "top_p", 0, 1),
               seed=seed, stop=stop, tools=prepared, response_format=fmt)
