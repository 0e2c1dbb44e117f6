"""An OpenAI chat request (messages, tools) as one family's prompt text, for runtimes without templates.

Why text and not a messages list for a template engine: Genie's dialog API takes one prompt string
(``GenieDialog_query``), the board has no Jinja, and the Genie bundles Qualcomm publishes carry no chat
template (ai-hub-apps v0.20.0 ``tutorials/llm_on_genie/configs/genie/*.json`` hold only dialog,
sampler, tokenizer path and engine). So each family's published template is re-stated here, rule by
rule, with its source beside it; the LiteRT-LM side formats tools in the runtime instead
(``litert_lm_conversation_config_set_tools``).

``tojson`` in the Hugging Face templates is ``json.dumps(x, ensure_ascii=False)`` with Python's
default separators (transformers ``chat_template_utils``), which ``_tojson`` reproduces.
"""

from __future__ import annotations

import json
from typing import Any

from .toolcalls_stream import CallSyntax

# Meta, "Llama 3.1 prompt format": https://www.llama.com/docs/model-cards-and-prompt-formats/llama3_1/
# and the chat template of meta-llama/Llama-3.1-8B-Instruct (tokenizer_config.json on Hugging Face).
LLAMA_BUILTINS = ("brave_search", "wolfram_alpha", "code_interpreter")
LLAMA_DEFAULT_DATE = "26 Jul 2024"   # the template's own fallback when no date_string is given
SYNTAX = {
    # Llama 3.1: JSON {"name", "parameters"} as the whole answer; built-ins after <|python_tag|>,
    # ended by <|eom_id|> (Meta's prompt-format page, "Built-in tool calling" / "JSON based").
    "llama3.1": CallSyntax(start="<|python_tag|>", ends=("<|eom_id|>", "<|eot_id|>"), python_tag=True,
                           bare_json=True),
    # Llama-3.1-Nemotron-Nano: <TOOLCALL>[{"name", "arguments"}, ...]</TOOLCALL> (NVIDIA's tool-calling
    # template shipped with the model, llama_nemotron_nano_generic_tool_calling.jinja).
    "nemotron-nano": CallSyntax(start="<TOOLCALL>", ends=("</TOOLCALL>",)),
    # Qwen 2.5: one <tool_call>{"name", "arguments"}</tool_call> per call (Qwen/Qwen2.5-7B-Instruct
    # tokenizer_config.json chat template; Qwen docs, "Function Calling", Hermes-style tool use).
    "qwen2.5": CallSyntax(start="<tool_call>", ends=("</tool_call>",)),
}


class ToolRequestError(ValueError):
    """A request the formats cannot carry; ``field`` names the OpenAI field (the service sends a 400)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


def _tojson(x: Any, indent: int | None = None) -> str:
    return json.dumps(x, ensure_ascii=False, indent=indent)


def text_of(content: Any, where: str) -> str:
    """OpenAI content (a string, null, or a list of text parts) as plain text."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        out = []
        for n, part in enumerate(content):
            if not (isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str)):
                raise ToolRequestError(f"{where}.content[{n}]", "only text parts are supported by this model")
            out.append(part["text"])
        return "".join(out)
    raise ToolRequestError(f"{where}.content", "must be a string, null or a list of text parts")


def call_args(call: dict[str, Any]) -> Any:
    """The arguments of an earlier assistant call as an object (OpenAI sends them as a JSON string);
    text that is not JSON is kept as the string it was, as the templates' ``tojson`` would show it."""
    raw = call["function"].get("arguments", "{}")
    if not isinstance(raw, str):
        return raw
    try:
        return json.loads(raw) if raw.strip() else {}
    except ValueError:
        return raw


def _split_system(messages: list[dict[str, Any]]) -> tuple[str, list[dict[str, Any]]]:
    """The leading system (or developer) message's text and the rest, as the templates slot it."""
    if messages and messages[0].get("role") in ("system", "developer"):
        return text_of(messages[0].get("content"), "messages[0]").strip(), messages[1:]
    return "", messages


def _hdr(role: str) -> str:
    return f"<|start_header_id|>{role}<|end_header_id|>\n\n"


# ---- Llama 3.1 ------------------------------------------------------------------------------------
def _llama_builtin_call(name: str, args: Any) -> str:
    """A built-in call as the model writes it after <|python_tag|> (Meta's prompt-format page)."""
    if name == "code_interpreter":
        return args.get("code", "") if isinstance(args, dict) else str(args)
    items = args.items() if isinstance(args, dict) else []
    return f"{name}.call(" + ", ".join(f'{k}="{v}"' for k, v in items) + ")"


def render_llama31(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
                   today: str = LLAMA_DEFAULT_DATE) -> str:
    """Meta-Llama-3.1-8B-Instruct's template with ``tools_in_user_message`` at its default (true).

    A declared function named brave_search / wolfram_alpha / code_interpreter is a built-in: it is
    named on the system's "Tools:" line (code_interpreter only switches on "Environment: ipython")
    instead of being described as JSON. Several calls in one assistant turn (which Meta's template
    refuses) are written one after the other, separated by "; ".
    """
    system, rest = _split_system(messages)
    builtins = [t["function"]["name"] for t in tools or () if t["function"]["name"] in LLAMA_BUILTINS]
    custom = [t for t in tools or () if t["function"]["name"] not in LLAMA_BUILTINS]
    out = ["<|begin_of_text|>", _hdr("system")]
    if tools:
        out.append("Environment: ipython\n")
    shown = [b for b in builtins if b != "code_interpreter"]
    if shown:
        out.append("Tools: " + ", ".join(shown) + "\n\n")
    out.append(f"Cutting Knowledge Date: December 2023\nToday Date: {today}\n\n{system}<|eot_id|>")
    if custom:
        if not rest or rest[0].get("role") != "user":
            raise ToolRequestError("messages", "this model's format puts the tools into the first user "
                                               "message, so one must follow the system message")
        first = text_of(rest[0].get("content"), "messages[user]").strip()
        rest = rest[1:]
        out.append(_hdr("user") + "Given the following functions, please respond with a JSON for a function "
                   "call with its proper arguments that best answers the given prompt.\n\n"
                   'Respond in the format {"name": function name, "parameters": dictionary of argument name '
                   'and its value}.Do not use variables.\n\n')
        out += [_tojson(t, indent=4) + "\n\n" for t in custom]
        out.append(first + "<|eot_id|>")
    for n, m in enumerate(rest):
        role = m.get("role")
        if role in ("tool", "ipython"):
            # as Meta's page shows it: the text as sent (the Hugging Face template's "is iterable" test
            # is also true for strings, so it would JSON-quote a string result)
            out.append(_hdr("ipython") + text_of(m.get("content"), f"messages[{n}]") + "<|eot_id|>")
        elif role == "assistant" and m.get("tool_calls"):
            parts = []
            for c in m["tool_calls"]:
                name, args = c["function"]["name"], call_args(c)
                if name in builtins:
                    parts.append("<|python_tag|>" + _llama_builtin_call(name, args))
                else:
                    parts.append(f'{{"name": "{name}", "parameters": {_tojson(args)}}}')
            # <|eom_id|>: the model's end of message when it waits for a tool; the template writes it
            # after every call once built-ins are declared ("ipython mode"), else <|eot_id|>
            out.append(_hdr("assistant") + "; ".join(parts) + ("<|eom_id|>" if builtins else "<|eot_id|>"))
        else:
            r = "system" if role == "developer" else role
            out.append(_hdr(r) + text_of(m.get("content"), f"messages[{n}]").strip() + "<|eot_id|>")
    out.append(_hdr("assistant"))
    return "".join(out)


# ---- Llama-3.1-Nemotron-Nano ----------------------------------------------------------------------
# NVIDIA's model card (huggingface.co/nvidia/Llama-3.1-Nemotron-Nano-8B-v1 and -4B-v1.1): reasoning is
# switched by the system prompt "detailed thinking on" / "detailed thinking off", and "all instructions
# should be contained within the user prompt"; for tools the card points vLLM at the tool-calling
# template shipped in the same repository (llama_nemotron_nano_generic_tool_calling.jinja, parser
# "llama_nemotron_json"). The tool block's wording below is NVIDIA's as its Nemotron templates render
# it (checked against ggml-org/llama.cpp models/templates/NVIDIA-Nemotron-Nano-v2.jinja @ 5801ed35, whose
# Jinja string literals print the placeholders' braces doubled, "[{{"name"..."; NVIDIA's speechlm2
# function-calling template prints them single, as here); the Llama 3
# turns around it and the results as a user turn of <TOOL_RESPONSE>[...]</TOOL_RESPONSE> follow the
# Llama-Nemotron entries of public template registries. Compare with the .jinja of a real bundle.
NEMOTRON_TOOL_INTRO = "You can use the following tools to assist the user if required:\n<AVAILABLE_TOOLS>["
NEMOTRON_TOOL_RULES = (
    "]</AVAILABLE_TOOLS>\n\nIf you decide to call any tool(s), use the following format:\n"
    '<TOOLCALL>[{"name": "tool_name1", "arguments": "tool_args1"}, '
    '{"name": "tool_name2", "arguments": "tool_args2"}]</TOOLCALL>\n\n'
    "The user will execute tool-calls and return responses from tool(s) in this format:\n"
    '<TOOL_RESPONSE>[{"tool_response1"}, {"tool_response2"}]</TOOL_RESPONSE>\n\n'
    "Based on the tool responses, you can call additional tools if needed, correct tool calls if any "
    "errors are found, or just respond to the user.")
THINKING_SWITCH = ("detailed thinking on", "detailed thinking off")


def render_nemotron_nano(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
                         thinking: bool | None = None) -> str:
    """Llama 3 turns; the system turn is the reasoning switch (plus the tool block).

    ``thinking`` sets the switch; None keeps a switch the client sent as its system message, else
    "off". Any other system text moves to the head of the first user turn, as the card asks.
    """
    system, rest = _split_system(messages)
    switch = THINKING_SWITCH[0] if thinking else THINKING_SWITCH[1]
    if thinking is None and system in THINKING_SWITCH:
        switch, system = system, ""
    sys_text = switch
    if tools:
        sys_text += "\n\n" + NEMOTRON_TOOL_INTRO + ", ".join(_tojson(t["function"]) for t in tools) \
            + NEMOTRON_TOOL_RULES
    out = ["<|begin_of_text|>", _hdr("system") + sys_text + "<|eot_id|>"]
    pending: list[str] = []
    moved = False
    for n, m in enumerate(rest):
        role = m.get("role")
        if role == "tool":
            pending.append(text_of(m.get("content"), f"messages[{n}]"))
            continue
        if pending:
            out.append(_hdr("user") + "<TOOL_RESPONSE>[" + ", ".join(pending) + "]</TOOL_RESPONSE><|eot_id|>")
            pending = []
        text = text_of(m.get("content"), f"messages[{n}]")
        if role == "assistant":
            # earlier reasoning is not sent back: the template keeps what follows </think>
            text = text.split("</think>")[-1].lstrip()
            calls = [f'{{"name": "{c["function"]["name"]}", "arguments": {_tojson(call_args(c))}}}'
                     for c in m.get("tool_calls") or ()]
            if calls:   # the v2 template above: a blank line between any text and the calls
                text = text.strip() + ("\n\n" if text.strip() else "") + "<TOOLCALL>[" + ", ".join(calls) \
                    + "]</TOOLCALL>"
            out.append(_hdr("assistant") + text.strip() + "<|eot_id|>")
            continue
        if role == "user" and system and not moved:
            text, moved = system + "\n\n" + text, True
        out.append(_hdr("system" if role == "developer" else role) + text.strip() + "<|eot_id|>")
    if pending:
        out.append(_hdr("user") + "<TOOL_RESPONSE>[" + ", ".join(pending) + "]</TOOL_RESPONSE><|eot_id|>")
    out.append(_hdr("assistant"))
    return "".join(out)


# ---- Qwen 2.5 -------------------------------------------------------------------------------------
# Qwen/Qwen2.5-7B-Instruct tokenizer_config.json "chat_template" (the same in every Qwen2.5 Instruct
# size); Qwen's docs, "Function Calling" (qwen.readthedocs.io/en/latest/framework/function_call.html).
QWEN_DEFAULT_SYSTEM = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."
QWEN_TOOLS_HEAD = ("\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
                   "You are provided with function signatures within <tools></tools> XML tags:\n<tools>")
QWEN_TOOLS_TAIL = ("\n</tools>\n\nFor each function call, return a json object with function name and "
                   "arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n"
                   '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>')


def render_qwen25(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> str:
    """ChatML turns; tools in the system turn; results as user turns of <tool_response> blocks."""
    _, rest = _split_system(messages)
    given = messages and messages[0].get("role") in ("system", "developer")
    sys_text = text_of(messages[0].get("content"), "messages[0]") if given else QWEN_DEFAULT_SYSTEM
    if tools:
        sys_text += QWEN_TOOLS_HEAD + "".join("\n" + _tojson(t) for t in tools) + QWEN_TOOLS_TAIL
    out = [f"<|im_start|>system\n{sys_text}<|im_end|>\n"]
    for n, m in enumerate(rest):
        role = m.get("role")
        text = text_of(m.get("content"), f"messages[{n}]")
        if role == "tool":
            if n == 0 or rest[n - 1].get("role") != "tool":
                out.append("<|im_start|>user")
            out.append(f"\n<tool_response>\n{text}\n</tool_response>")
            if n == len(rest) - 1 or rest[n + 1].get("role") != "tool":
                out.append("<|im_end|>\n")
        elif role == "assistant" and m.get("tool_calls"):
            out.append("<|im_start|>assistant" + ("\n" + text if text else ""))
            for c in m["tool_calls"]:
                out.append(f'\n<tool_call>\n{{"name": "{c["function"]["name"]}", "arguments": '
                           f'{_tojson(call_args(c))}}}\n</tool_call>')
            out.append("<|im_end|>\n")
        else:
            out.append(f"<|im_start|>{'system' if role == 'developer' else role}\n{text}<|im_end|>\n")
    out.append("<|im_start|>assistant\n")
    return "".join(out)
