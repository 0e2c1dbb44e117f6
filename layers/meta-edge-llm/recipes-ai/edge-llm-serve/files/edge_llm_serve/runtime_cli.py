"""The runtimes' command-line programs (litert_lm_main, genie-t2t-run): argv, output parsers, coherence.

The service itself calls the C APIs (:mod:`edge_llm_serve.engines`); these are for the controller's smoke
run and benchmark (``fleet verify`` runs the programs as Qualcomm's tutorials run them), kept here so the
service and the controller read the runtimes' output one way.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any

# ---------------------------------------------------------------------------------------------
# Command lines
# ---------------------------------------------------------------------------------------------


def build_argv(cfg: dict[str, Any], prompt_text: str, workdir: str, max_tokens: int | None = None, *,
               genie_config: str | None = None) -> tuple[list[str], dict[str, str]]:
    """argv for one completion and the files to write into ``workdir`` first.

    Returns (argv, files) where files maps a path inside ``workdir`` to its content. The prompt
    is already templated. The profile path is fresh for every run because genie-t2t-run refuses
    to overwrite an existing profile. ``genie_config`` replaces the model's config file (see
    :func:`genie_config_with_limit`).
    """
    runtime = cfg["runtime"]
    model_dir = cfg["model_dir"]
    files: dict[str, str] = {}
    if runtime == "litert_lm":
        argv = [cfg["executable"], "--backend", "npu", "--model_path", f"{model_dir}/{cfg['model_file']}",
                "--input_prompt", prompt_text]
    elif runtime == "genie":
        prompt_file = os.path.join(workdir, "prompt.txt")
        files[prompt_file] = prompt_text
        config = genie_config or f"{model_dir}/{cfg.get('genie_config') or 'genie_config.json'}"
        argv = [cfg["executable"], "-c", config,
                "--prompt_file", prompt_file, "--profile", os.path.join(workdir, "profile.json")]
    else:
        raise ValueError(f"unknown runtime {runtime!r}")
    if max_tokens is not None and cfg.get("max_tokens_flag"):
        if runtime == "litert_lm":
            # litert_lm_main takes only --backend, --model_path, --input_prompt and --input_prompt_file
            # (LiteRT-LM cbf463d runtime/engine/litert_lm_main.cc:52-57); absl stops at any other flag.
            raise ValueError(f"litert_lm_main has no {cfg['max_tokens_flag']} flag (only --backend, "
                             "--model_path, --input_prompt, --input_prompt_file)")
        argv += [str(cfg["max_tokens_flag"]), str(int(max_tokens))]
    return argv, files


# ---------------------------------------------------------------------------------------------
# Output parsers
# ---------------------------------------------------------------------------------------------

_NUM = r"~?\s*([0-9]+(?:\.[0-9]+)?)"
_RE_TTFT = re.compile(r"Time to first token:\s*" + _NUM + r"\s*s\b")
_RE_PREFILL_TURN = re.compile(r"Prefill Turn \d+: Processed\s+(\d+) tokens in\s*" + _NUM + r"\s*(ms|s) duration")
_RE_PREFILL_SPEED = re.compile(r"Prefill Speed:\s*" + _NUM + r"\s*tokens/sec")
_RE_DECODE_TURN = re.compile(r"Decode Turn \d+: Processed\s+(\d+) tokens in\s*" + _NUM + r"\s*(ms|s) duration")
_RE_DECODE_SPEED = re.compile(r"Decode Speed:\s*" + _NUM + r"\s*tokens/sec")
_LOG_LINE = re.compile(r"^(?:[IWEF]\d{4} |\[(?:INFO|WARN|WARNING|ERROR|DEBUG|VERBOSE)\]|INFO:|WARNING:|ERROR:|"
                       r"Set HTP performance mode|HtpPerformanceMode|rpcmem_android)")


def _seconds(value: str, unit: str) -> float:
    return float(value) / 1000.0 if unit == "ms" else float(value)


# litert_lm_main echoes its prompt before the answer (LiteRT-LM cbf463d runtime/engine/litert_lm_main.cc:152).
_PROMPT_ECHO = "input_prompt: "


def _drop_prompt_echo(head: str, prompt: str | None) -> str:
    """``head`` from after litert_lm_main's ``input_prompt: <prompt>`` line: the echo is not the answer.

    The prompt is printed verbatim, so a prompt of several lines echoes as several lines; knowing the
    prompt cuts all of them, without it only the echo's first line can be told from the answer.
    """
    m = re.search("^" + re.escape(_PROMPT_ECHO), head, re.MULTILINE)
    if m is None:
        return head
    rest = head[m.end():]
    if prompt is not None and rest.startswith(prompt + "\n"):
        return rest[len(prompt) + 1:]
    return rest.partition("\n")[2]


def parse_benchmark_info(output: str, prompt: str | None = None) -> dict[str, Any]:
    """Parse litert_lm_main's stdout: the echoed prompt, the answer, then ``BenchmarkInfo:`` with
    TTFT/prefill/decode.

    ``text`` is the answer alone, so the coherence check judges what the model said, not the prompt
    it was given (``prompt``: the one passed as ``--input_prompt``, see :func:`_drop_prompt_echo`).
    Values may carry a ``~`` (``Decode Speed: ~28 tokens/sec.``). Missing figures are None so a
    caller can say which one was absent instead of crashing.
    """
    head, sep, bench = output.partition("BenchmarkInfo:")
    head = _drop_prompt_echo(head, prompt)
    text_lines = [ln for ln in head.splitlines() if not _LOG_LINE.match(ln.strip())]
    out: dict[str, Any] = {"text": "\n".join(text_lines).strip(), "has_benchmark": bool(sep),
                           "ttft_s": None, "prefill_tokens": None, "prefill_tok_s": None,
                           "decode_tokens": None, "decode_s": None, "decode_tok_s": None, "init_s": None}
    if not sep:
        return out
    if m := _RE_TTFT.search(bench):
        out["ttft_s"] = float(m.group(1))
    if m := _RE_PREFILL_TURN.search(bench):
        out["prefill_tokens"] = int(m.group(1))
    if m := _RE_PREFILL_SPEED.search(bench):
        out["prefill_tok_s"] = float(m.group(1))
    turns = _RE_DECODE_TURN.findall(bench)
    if turns:
        out["decode_tokens"] = sum(int(t[0]) for t in turns)
        out["decode_s"] = round(sum(_seconds(t[1], t[2]) for t in turns), 4)
    if m := _RE_DECODE_SPEED.search(bench):
        out["decode_tok_s"] = float(m.group(1))
    elif out["decode_tokens"] and out["decode_s"]:
        out["decode_tok_s"] = round(out["decode_tokens"] / out["decode_s"], 2)
    return out


def parse_genie_output(output: str) -> str | None:
    """Text between ``[BEGIN]:`` and ``[END]`` (None when the run never produced an answer)."""
    start = output.find("[BEGIN]:")
    if start < 0:
        return None
    body = output[start + len("[BEGIN]:"):]
    end = body.find("[END]")
    return (body[:end] if end >= 0 else body).strip()


def _event_value(event: dict[str, Any], key: str) -> float | None:
    item = event.get(key)
    if isinstance(item, dict):
        item = item.get("value")
    try:
        return float(item) if item is not None else None
    except (TypeError, ValueError):
        return None


def parse_genie_profile(profile: dict[str, Any] | str) -> dict[str, Any]:
    """Figures from genie-t2t-run's ``--profile`` JSON (events looked up by type; times in us)."""
    if isinstance(profile, str):
        profile = json.loads(profile)
    out: dict[str, Any] = {"ttft_s": None, "prefill_tokens": None, "prefill_tok_s": None, "decode_tokens": None,
                           "decode_s": None, "decode_tok_s": None, "init_s": None}
    events: list[dict[str, Any]] = []
    for comp in profile.get("components", []) if isinstance(profile, dict) else []:
        events.extend(e for e in comp.get("events", []) if isinstance(e, dict))
    for ev in events:
        if ev.get("type") == "GenieDialog_create":
            init = _event_value(ev, "init-time")
            if init is None:
                init = _event_value(ev, "duration")
            out["init_s"] = round(init / 1e6, 4) if init is not None else None
    queries = [e for e in events if e.get("type") == "GenieDialog_query"]
    if queries:
        q = queries[-1]
        ttft = _event_value(q, "time-to-first-token")
        out["ttft_s"] = round(ttft / 1e6, 4) if ttft is not None else None
        n = _event_value(q, "num-prompt-tokens")
        out["prefill_tokens"] = int(n) if n is not None else None
        out["prefill_tok_s"] = _event_value(q, "prompt-processing-rate")
        n = _event_value(q, "num-generated-tokens")
        out["decode_tokens"] = int(n) if n is not None else None
        gen = _event_value(q, "token-generation-time")
        out["decode_s"] = round(gen / 1e6, 4) if gen is not None else None
        out["decode_tok_s"] = _event_value(q, "token-generation-rate")
    return out


def parse_run(runtime: str, stdout: str, profile: str | None = None, prompt: str | None = None) -> dict[str, Any]:
    """One parser entry point for both runtimes: the answer text + timing figures (``prompt``: what the
    runtime was asked, which litert_lm_main echoes before its answer)."""
    if runtime == "litert_lm":
        return parse_benchmark_info(stdout, prompt)
    text = parse_genie_output(stdout)
    out: dict[str, Any] = {"text": text or "", "has_benchmark": bool(profile)}
    figures: dict[str, Any] = {}
    if profile:
        try:
            figures = parse_genie_profile(profile)
        except (ValueError, TypeError):
            out["has_benchmark"] = False
    for key in ("ttft_s", "prefill_tokens", "prefill_tok_s", "decode_tokens", "decode_s", "decode_tok_s",
                "init_s"):
        out[key] = figures.get(key)
    return out


# ---------------------------------------------------------------------------------------------
# Coherence: a context binary built for another soc_model is "right for a token or two, then garbage", with no error
# ---------------------------------------------------------------------------------------------

_WORD = re.compile(r"[^\W\d_]+", re.UNICODE)
_REPEAT = re.compile(r"(\S{3,24}?)\1{2,}")


def coherence(text: str) -> tuple[bool, str]:
    """(True, "") when ``text`` reads like language, else (False, why).

    Garbage from a context binary compiled for the wrong soc_model looks like
    ``The value of 2 3 is 5. oreferalitiesmallalitiesmall...``: the same fragment repeated with no
    spaces, words far longer than any real word, a vocabulary that collapses. Each of those is a
    separate, explainable signal; CJK text (no spaces) is judged only on repetition.
    """
    stripped = text.strip()
    if not stripped:
        return False, "empty answer"
    m = _REPEAT.search(stripped)
    if m and len(m.group(0)) >= 12:
        return False, f"repeated fragment {m.group(1)!r} x{len(m.group(0)) // len(m.group(1))}"
    latin = re.findall(r"[A-Za-z]{25,}", stripped)
    long_words = [w for w in latin if not w.lower().startswith(("http", "www"))]
    if long_words:
        return False, f"non-word run {long_words[0][:30]!r}"
    words = [w.lower() for w in _WORD.findall(stripped)]
    run = 1
    for prev, cur in zip(words, words[1:], strict=False):
        run = run + 1 if cur == prev else 1
        if run >= 4:
            return False, f"word {cur!r} repeated {run}x in a row"
    if len(words) >= 30 and len(set(words)) / len(words) < 0.3:
        return False, f"vocabulary collapsed ({len(set(words))} distinct of {len(words)} words)"
    return True, ""
