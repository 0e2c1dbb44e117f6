"""Every request field of OpenAI's chat and completions APIs, and what this service does with it.

A field is honoured (:data:`HONOURED`, checked and used by :mod:`.validation`), accepted only at the
value that means "off" (:data:`NEUTRAL`: a client library's default changes nothing here), or refused
with a 400 naming it and why (:data:`REFUSED`). A field OpenAI does not define is refused too: a
vendor extension a client sends (``top_k``, ``repetition_penalty``) would otherwise be ignored without a
word. The field lists are OpenAI's request types as the official ``openai`` Python package declares them
(``openai/types/chat/completion_create_params.py`` and ``openai/types/completion_create_params.py``);
tests/serve walks those types and sends each field through the service.
"""

from __future__ import annotations

from typing import Any

#: fields the service reads, per endpoint kind (validation.make_job and the stream's stream_options)
HONOURED: dict[str, frozenset[str]] = {
    "chat": frozenset({"model", "messages", "max_tokens", "max_completion_tokens", "temperature", "top_p", "stop",
                       "seed", "stream", "stream_options", "n", "tools", "tool_choice", "parallel_tool_calls",
                       "response_format"}),
    "completion": frozenset({"model", "prompt", "max_tokens", "temperature", "top_p", "stop", "seed", "stream",
                             "stream_options", "n"}),
}

_NOT_YET = "not supported yet"
#: field -> why it is refused (any value but null, or but its neutral one in NEUTRAL)
REFUSED: dict[str, str] = {
    "functions": "'functions' is OpenAI's deprecated form of 'tools': send tools instead",
    "function_call": "'function_call' is OpenAI's deprecated form of 'tool_choice': send tool_choice instead",
    "logprobs": f"{_NOT_YET}: the runtimes' C APIs used here return text, not token probabilities",
    "top_logprobs": f"{_NOT_YET}: the runtimes' C APIs used here return text, not token probabilities",
    "logit_bias": f"{_NOT_YET}: the runtimes' samplers take no per-token bias",
    "frequency_penalty": f"{_NOT_YET}: the runtimes' samplers have no frequency penalty",
    "presence_penalty": f"{_NOT_YET}: the runtimes' samplers have no presence penalty",
    "audio": "this service generates text only",
    "modalities": "this service generates text only (modalities may only be [\"text\"])",
    "prediction": "predicted outputs are not supported: every token is generated",
    "reasoning_effort": "the model's reasoning is not adjustable per request here (a model that has a switch "
                        "takes it in its system prompt)",
    "verbosity": "the answer's length is set by max_tokens / max_completion_tokens only",
    "web_search_options": "the board has no web search",
    "store": "nothing is stored on the board (store may only be false)",
    "metadata": "nothing is stored on the board, so there is nothing to tag",
    "service_tier": "one NPU, one tier: there is no tier to choose",
    "moderation": "the board runs no moderation model",
    "prompt_cache_key": "the service keeps no prompt cache between requests",
    "prompt_cache_retention": "the service keeps no prompt cache between requests",
    "prompt_cache_options": "the service keeps no prompt cache between requests",
    "user": "end-user identifiers are not recorded on the board",
    "safety_identifier": "end-user identifiers are not recorded on the board",
    "best_of": "one answer per request (best_of may only be 1)",
    "echo": "the prompt is not echoed (echo may only be false)",
    "suffix": "insertion (a suffix after the completion) is not supported",
}

#: the value of a refused field that changes nothing (what client libraries send by default)
NEUTRAL: dict[str, tuple[Any, ...]] = {
    "frequency_penalty": (0, 0.0), "presence_penalty": (0, 0.0), "logprobs": (False,), "top_logprobs": (0,),
    "logit_bias": ({},), "store": (False,), "best_of": (1,),
    "echo": (False,), "modalities": (["text"],), "metadata": ({},),
}


#: a message's fields beside role and content -> why they are refused (any value but null)
MESSAGE_REFUSED: dict[str, str] = {
    "tool_call_id": "belongs to a message of role \"tool\" only",
    "tool_calls": "belongs to a message of role \"assistant\" only",
    "function_call": "OpenAI's deprecated form of tool_calls: send tool_calls instead",
    "name": "participant names are not passed to the model",
    "refusal": "an assistant's refusal is not passed to the model",
    "audio": "this service generates text only",
}


#: runtime -> honoured fields it cannot honour -> why (the engine would run as if they were absent)
RUNTIME_REFUSED: dict[str, dict[str, str]] = {
    "genie": {key: "this Genie model samples as its genie_config.json says: the GenieDialog calls this service "
                   "binds (engines/cabi.py) set no sampler per request"
              for key in ("temperature", "top_p", "seed")},
}


def refusal(kind: str, body: dict[str, Any], runtime: str | None = None) -> tuple[str, str] | None:
    """(field, message) for the first field of ``body`` this service will not honour, or None.

    A null value is an absent field (OpenAI's types allow null for every optional one)."""
    for key in sorted(body):
        value = body[key]
        if value is not None and key in RUNTIME_REFUSED.get(runtime or "", {}):
            return key, f"'{key}' is refused: {RUNTIME_REFUSED[runtime or ''][key]}"
        if key in HONOURED[kind] or value is None:
            continue
        if key in REFUSED:
            if any(value == n and type(value) is type(n) for n in NEUTRAL.get(key, ())):
                continue
            return key, f"'{key}' is refused: {REFUSED[key]}"
        return key, f"'{key}' is not a field of OpenAI's {_API[kind]} API this service knows, so it is refused " \
                    "rather than ignored"
    return None


_API = {"chat": "chat completions", "completion": "completions"}
