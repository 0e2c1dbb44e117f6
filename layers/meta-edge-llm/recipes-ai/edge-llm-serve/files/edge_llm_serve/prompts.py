"""Chat templates: the text a runtime that takes prompts verbatim expects around the user's messages."""

from __future__ import annotations

from typing import Any

# ---------------------------------------------------------------------------------------------
# Chat templates (what the runtime expects around the user's text, with REAL newlines)
# ---------------------------------------------------------------------------------------------

TEMPLATES = ("plain", "gemma", "llama3")


def apply_chat_template(template: str, prompt: str, system: str | None = None) -> str:
    """Wrap ``prompt`` in the model's chat template.

    litert_lm_main applies the template stored in the .litertlm metadata itself, so Gemma prompts
    go through unchanged ("gemma" is kept as a name so configs say what the model is); Genie
    takes the text verbatim and needs the Llama 3 header tokens (Nemotron switches reasoning
    with the system text ``detailed thinking on|off``).
    """
    if template in ("plain", "gemma"):
        return prompt
    if template == "llama3":
        sys_part = ""
        if system:
            sys_part = f"<|start_header_id|>system<|end_header_id|>\n\n{system}<|eot_id|>"
        return (f"<|begin_of_text|>{sys_part}<|start_header_id|>user<|end_header_id|>\n\n{prompt}<|eot_id|>"
                "<|start_header_id|>assistant<|end_header_id|>\n\n")
    raise ValueError(f"unknown chat template {template!r} (known: {', '.join(TEMPLATES)})")


# ---------------------------------------------------------------------------------------------
# Chat rendering (messages -> the model's prompt) for runtimes that take text verbatim
# ---------------------------------------------------------------------------------------------


def system_text(cfg: dict[str, Any], requested: str | None) -> str | None:
    """The system text a request runs with.

    Nemotron switches reasoning with the system line ``detailed thinking on|off`` (NVIDIA's
    Llama-3.1-Nemotron-Nano model card); the config's ``system_prompt`` carries the board's
    default, a request's own system message that starts with ``detailed thinking`` replaces it,
    and any other system message is added on the next line.
    """
    default = cfg.get("system_prompt")
    if not requested:
        return default
    if requested.strip().lower().startswith("detailed thinking ") or not default:
        return requested
    return f"{default}\n{requested}"


def render_chat(template: str, messages: list[dict[str, str]], system: str | None) -> str:
    """Messages (no system entries) in the model's chat template, ready for the assistant turn."""
    if template == "llama3":
        out = ["<|begin_of_text|>"]
        if system:
            out.append(f"<|start_header_id|>system<|end_header_id|>\n\n{system}<|eot_id|>")
        for m in messages:
            out.append(f"<|start_header_id|>{m['role']}<|end_header_id|>\n\n{m['content']}<|eot_id|>")
        out.append("<|start_header_id|>assistant<|end_header_id|>\n\n")
        return "".join(out)
    if template == "gemma":   # Gemma's turn markers; Gemma has no system role: it opens the first user turn
        out = []
        for i, m in enumerate(messages):
            role = "model" if m["role"] == "assistant" else "user"
            text = f"{system}\n\n{m['content']}" if system and i == 0 else m["content"]
            out.append(f"<start_of_turn>{role}\n{text}<end_of_turn>\n")
        out.append("<start_of_turn>model\n")
        return "".join(out)
    lines = [f"system: {system}"] if system else []
    lines += [f"{m['role']}: {m['content']}" for m in messages]
    return "\n".join(lines + ["assistant:"])
