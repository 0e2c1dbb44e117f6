#!/usr/bin/env python3
"""edge-llm-serve: a small on-board HTTP front for litert_lm_main and genie-t2t-run.

Runs on the board (installed as /usr/bin/edge-llm-serve by the meta-edge-llm recipe or by the
fleet's launch playbook), so it is ONE stdlib-only file: no pip on a QLI image. The controller
imports the same file for the output parsers and the argv builder, so the service, the fleet's
smoke inference and the benchmark read the runtimes' output the same way.

API (OpenAI-compatible subset):
  GET  /health          200 {"status": "ok", ...} when the runtime and model files are in place
  POST /v1/completions  {"prompt": str, "max_tokens": int} -> {"choices": [{"text"}], "usage", "timing"}

Safety rules the seeds taught us:
  * the runtime is started from an argv list (never a shell), the prompt is one argv element or a
    file in a private temp dir, so nothing in a prompt is ever interpreted;
  * one request at a time per NPU (the HTP context is not shareable) with a bounded queue: a full
    queue answers 503 immediately instead of piling up requests;
  * request bodies are size-limited (413), malformed JSON is 400.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

VERSION = "1.0"

DEFAULTS: dict[str, Any] = {
    "bind": "127.0.0.1",
    "port": 8080,
    "max_queue": 4,             # requests allowed to wait while one runs
    "max_body_bytes": 65536,    # whole request body
    "max_prompt_chars": 16000,
    "max_tokens_limit": 4096,
    "timeout_s": 300,
    "chat_template": "plain",
    "system_prompt": None,
    "max_tokens_flag": None,    # e.g. "--max_num_tokens" if the runtime build has one
    "env": {},
}

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
        argv += [str(cfg["max_tokens_flag"]), str(int(max_tokens))]
    return argv, files


def genie_config_with_limit(cfg: dict[str, Any], max_tokens: int) -> str | None:
    """The model's Genie config with ``dialog.max-num-tokens`` set, as JSON text, or None.

    genie-t2t-run has no token-limit flag; the dialog config has ``max-num-tokens``. The copy
    lives in a temp dir, so the files it names (context binaries, tokenizer, backend extensions)
    become absolute paths into the model folder. Only ``basic`` dialogs get it: other dialog
    types (e.g. ``lade``) are known to crash with it, and keep the service-side cut.
    """
    base = cfg["model_dir"]
    try:
        with open(os.path.join(base, cfg.get("genie_config") or "genie_config.json"), encoding="utf-8") as fh:
            data = json.load(fh)
        dialog = data["dialog"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not isinstance(dialog, dict) or dialog.get("type", "basic") != "basic":
        return None

    def absolute(path: Any) -> Any:
        return os.path.join(base, path) if isinstance(path, str) and not os.path.isabs(path) else path

    dialog["max-num-tokens"] = int(max_tokens)
    tokenizer = dialog.get("tokenizer")
    if isinstance(tokenizer, dict) and "path" in tokenizer:
        tokenizer["path"] = absolute(tokenizer["path"])
    engine = dialog.get("engine") if isinstance(dialog.get("engine"), dict) else {}
    binary = (engine.get("model") or {}).get("binary") if isinstance(engine.get("model"), dict) else None
    if isinstance(binary, dict) and isinstance(binary.get("ctx-bins"), list):
        binary["ctx-bins"] = [absolute(b) for b in binary["ctx-bins"]]
    backend = engine.get("backend")
    if isinstance(backend, dict) and "extensions" in backend:
        backend["extensions"] = absolute(backend["extensions"])
    return json.dumps(data, indent=2)


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


def parse_benchmark_info(output: str) -> dict[str, Any]:
    """Parse litert_lm_main's stdout: the answer, then ``BenchmarkInfo:`` with TTFT/prefill/decode.

    Values may carry a ``~`` (``Decode Speed: ~28 tokens/sec.``). Missing figures are None so a
    caller can say which one was absent instead of crashing.
    """
    head, sep, bench = output.partition("BenchmarkInfo:")
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


def parse_run(runtime: str, stdout: str, profile: str | None = None) -> dict[str, Any]:
    """One parser entry point for both runtimes: text + timing figures."""
    if runtime == "litert_lm":
        return parse_benchmark_info(stdout)
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
# Coherence: the seed-002 failure is "right for a token or two, then garbage", with no error
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


# ---------------------------------------------------------------------------------------------
# Running one completion
# ---------------------------------------------------------------------------------------------


class RuntimeFailed(Exception):
    """The runtime exited non-zero or timed out; ``tail`` holds its last output lines."""

    def __init__(self, message: str, tail: str = "") -> None:
        super().__init__(message)
        self.tail = tail


def run_completion(cfg: dict[str, Any], prompt: str, max_tokens: int | None = None) -> dict[str, Any]:
    """Run the runtime once for ``prompt`` and return text, usage and timing."""
    templated = apply_chat_template(cfg.get("chat_template", "plain"), prompt, cfg.get("system_prompt"))
    env = dict(os.environ)
    env.update({k: str(v) for k, v in (cfg.get("env") or {}).items()})
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="edge-llm-") as work:
        limited = bool(cfg.get("max_tokens_flag"))
        genie_config = None
        if max_tokens is not None and cfg["runtime"] == "genie" and not limited:
            text = genie_config_with_limit(cfg, max_tokens)
            if text is not None:
                genie_config = os.path.join(work, "genie_config.json")
                with open(genie_config, "w", encoding="utf-8") as fh:
                    fh.write(text)
                limited = True
        argv, files = build_argv(cfg, templated, work, max_tokens, genie_config=genie_config)
        for path, content in files.items():
            with open(path, "w", encoding="utf-8") as fh:
                fh.write(content)
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, errors="replace", env=env,
                                  cwd=cfg["model_dir"] if os.path.isdir(cfg["model_dir"]) else work,
                                  timeout=float(cfg.get("timeout_s") or DEFAULTS["timeout_s"]), check=False)
        except subprocess.TimeoutExpired as exc:
            raise RuntimeFailed(f"runtime timed out after {exc.timeout:.0f} s") from exc
        except OSError as exc:
            raise RuntimeFailed(f"cannot start {argv[0]}: {exc.strerror}") from exc
        profile = None
        prof_path = os.path.join(work, "profile.json")
        if os.path.exists(prof_path):
            with open(prof_path, encoding="utf-8", errors="replace") as fh:
                profile = fh.read()
    wall = time.monotonic() - started
    tail = "\n".join((proc.stdout + "\n" + proc.stderr).strip().splitlines()[-15:])
    if proc.returncode != 0:
        raise RuntimeFailed(f"runtime exited with status {proc.returncode}", tail)
    parsed = parse_run(cfg["runtime"], proc.stdout, profile)
    text = parsed.get("text") or ""
    if max_tokens is not None and not limited:
        words = text.split(" ")
        if len(words) > max_tokens:   # runtime without a limit flag: cut the text, keep timing honest
            text = " ".join(words[:max_tokens])
    completion_tokens = parsed.get("decode_tokens") or len(text.split())
    prompt_tokens = parsed.get("prefill_tokens") or len(prompt.split())
    return {
        "text": text,
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                  "total_tokens": prompt_tokens + completion_tokens},
        "timing": {k: parsed.get(k) for k in ("ttft_s", "prefill_tok_s", "decode_tok_s", "decode_s", "init_s")}
        | {"wall_s": round(wall, 3)},
        "log_tail": tail,
    }


# ---------------------------------------------------------------------------------------------
# HTTP service
# ---------------------------------------------------------------------------------------------


class Gate:
    """One request on the NPU at a time, at most ``max_queue`` waiting; more is refused (503)."""

    def __init__(self, max_queue: int) -> None:
        self.max_queue = max_queue
        self._npu = threading.Lock()
        self._count = threading.Lock()
        self.inflight = 0          # running + waiting

    @property
    def running(self) -> bool:
        return self._npu.locked()

    @property
    def waiting(self) -> int:
        return max(0, self.inflight - 1)

    def enter(self) -> bool:
        with self._count:
            if self.inflight >= 1 + self.max_queue:
                return False
            self.inflight += 1
        self._npu.acquire()
        return True

    def leave(self) -> None:
        self._npu.release()
        with self._count:
            self.inflight -= 1


def health(cfg: dict[str, Any]) -> tuple[bool, str]:
    """Cheap readiness: runtime executable and model files present (no NPU run)."""
    exe = cfg["executable"]
    if not (os.path.isfile(exe) and os.access(exe, os.X_OK)):
        return False, f"runtime {exe} missing or not executable"
    if not os.path.isdir(cfg["model_dir"]):
        return False, f"model directory {cfg['model_dir']} missing"
    needed = cfg.get("model_file") if cfg["runtime"] == "litert_lm" else (cfg.get("genie_config")
                                                                          or "genie_config.json")
    if needed and not os.path.isfile(os.path.join(cfg["model_dir"], needed)):
        return False, f"{needed} missing in {cfg['model_dir']}"
    return True, ""


def make_handler(cfg: dict[str, Any], gate: Gate, runner=run_completion) -> type[BaseHTTPRequestHandler]:
    """Request handler class bound to one model config (``runner`` is swappable for tests)."""

    class Handler(BaseHTTPRequestHandler):
        server_version = f"edge-llm-serve/{VERSION}"
        protocol_version = "HTTP/1.1"

        def log_message(self, fmt: str, *args: Any) -> None:  # journald gets one line per request
            sys.stderr.write(f"{self.address_string()} {fmt % args}\n")

        def _send(self, status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> None:
            data = (json.dumps(body) + "\n").encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(data)

        def _error(self, status: int, message: str, kind: str, headers: dict[str, str] | None = None) -> None:
            self._send(status, {"error": {"message": message, "type": kind, "code": status}}, headers)

        def do_GET(self) -> None:  # noqa: N802 (http.server naming)
            if self.path.split("?", 1)[0] != "/health":
                self._error(404, f"no such endpoint {self.path!r}; use GET /health or POST /v1/completions",
                            "not_found")
                return
            ok, reason = health(cfg)
            body = {"status": "ok" if ok else "unhealthy", "model": cfg["model"], "runtime": cfg["runtime"],
                    "busy": gate.running, "queued": gate.waiting, "version": VERSION}
            if not ok:
                body["reason"] = reason
            self._send(200 if ok else 503, body)

        def do_POST(self) -> None:  # noqa: N802
            if self.path.split("?", 1)[0] != "/v1/completions":
                self._error(404, f"no such endpoint {self.path!r}; use POST /v1/completions", "not_found")
                return
            length_hdr = self.headers.get("Content-Length")
            if self.headers.get("Transfer-Encoding", "").lower() == "chunked" or length_hdr is None:
                self.close_connection = True
                self._error(411, "Content-Length required", "invalid_request_error")
                return
            try:
                length = int(length_hdr)
                if length < 0:
                    raise ValueError
            except ValueError:
                self.close_connection = True
                self._error(400, "bad Content-Length", "invalid_request_error")
                return
            limit = int(cfg.get("max_body_bytes") or DEFAULTS["max_body_bytes"])
            if length > limit:
                self.close_connection = True   # do not read (or trust) the oversized body
                self._error(413, f"request body {length} bytes exceeds the {limit}-byte limit",
                            "invalid_request_error")
                return
            raw = self.rfile.read(length)
            try:
                req = json.loads(raw.decode("utf-8"))
            except (UnicodeDecodeError, json.JSONDecodeError) as exc:
                self._error(400, f"malformed JSON: {exc}", "invalid_request_error")
                return
            problem = _validate(req, cfg)
            if problem:
                self._error(400, problem, "invalid_request_error")
                return
            if not gate.enter():
                self._error(503, f"busy: the NPU is running a request and {gate.max_queue} are queued; retry later",
                            "overloaded", {"Retry-After": "5"})
                return
            try:
                result = runner(cfg, req["prompt"], req.get("max_tokens"))
            except RuntimeFailed as exc:
                self._error(502, f"{exc}: {exc.tail.splitlines()[-1] if exc.tail else ''}".rstrip(": "),
                            "runtime_error")
                return
            finally:
                gate.leave()
            self._send(200, {
                "id": f"cmpl-{int(time.time() * 1000)}", "object": "text_completion", "created": int(time.time()),
                "model": cfg["model"],
                "choices": [{"index": 0, "text": result["text"], "finish_reason": "stop", "logprobs": None}],
                "usage": result["usage"], "timing": result["timing"],
            })

    return Handler


def _validate(req: Any, cfg: dict[str, Any]) -> str | None:
    if not isinstance(req, dict):
        return "request body must be a JSON object"
    prompt = req.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1:
        prompt = req["prompt"] = prompt[0]
    if not isinstance(prompt, str) or not prompt.strip():
        return "'prompt' must be a non-empty string"
    if "\x00" in prompt:
        return "'prompt' must not contain NUL characters"
    max_chars = int(cfg.get("max_prompt_chars") or DEFAULTS["max_prompt_chars"])
    if len(prompt) > max_chars:
        return f"'prompt' is {len(prompt)} characters; the limit is {max_chars}"
    mt = req.get("max_tokens")
    if mt is not None:
        limit = int(cfg.get("max_tokens_limit") or DEFAULTS["max_tokens_limit"])
        if isinstance(mt, bool) or not isinstance(mt, int) or not 1 <= mt <= limit:
            return f"'max_tokens' must be an integer between 1 and {limit}"
    return None


def load_config(path: str) -> dict[str, Any]:
    """Read /etc/edge-llm/serve/<model>.json and fill defaults; raise ValueError with the problem."""
    with open(path, encoding="utf-8") as fh:
        cfg = json.load(fh)
    if not isinstance(cfg, dict):
        raise ValueError(f"{path}: must be a JSON object")
    merged = dict(DEFAULTS) | cfg
    for key in ("model", "runtime", "model_dir", "executable"):
        if not merged.get(key):
            raise ValueError(f"{path}: '{key}' is required")
    if merged["runtime"] not in ("litert_lm", "genie"):
        raise ValueError(f"{path}: runtime must be litert_lm or genie")
    if merged["runtime"] == "litert_lm" and not merged.get("model_file"):
        raise ValueError(f"{path}: 'model_file' is required for litert_lm")
    if merged["chat_template"] not in TEMPLATES:
        raise ValueError(f"{path}: chat_template must be one of {', '.join(TEMPLATES)}")
    return merged


def serve(cfg: dict[str, Any]) -> ThreadingHTTPServer:
    gate = Gate(int(cfg.get("max_queue", DEFAULTS["max_queue"])))
    server = ThreadingHTTPServer((cfg["bind"], int(cfg["port"])), make_handler(cfg, gate))
    server.daemon_threads = True
    return server


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="edge-llm-serve", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p_serve = sub.add_parser("serve", help="run the HTTP service for one model")
    p_serve.add_argument("--config", required=True)
    p_serve.add_argument("--bind")
    p_serve.add_argument("--port", type=int)
    p_once = sub.add_parser("complete", help="run one completion and print JSON (no HTTP)")
    p_once.add_argument("--config", required=True)
    p_once.add_argument("--prompt", required=True)
    p_once.add_argument("--max-tokens", type=int)
    args = ap.parse_args(argv)
    try:
        cfg = load_config(args.config)
    except (OSError, ValueError) as exc:
        sys.stderr.write(f"edge-llm-serve: {exc}\n")
        return 2
    if args.cmd == "complete":
        try:
            print(json.dumps(run_completion(cfg, args.prompt, args.max_tokens)))
        except RuntimeFailed as exc:
            sys.stderr.write(f"edge-llm-serve: {exc}\n{exc.tail}\n")
            return 1
        return 0
    if args.bind:
        cfg["bind"] = args.bind
    if args.port:
        cfg["port"] = args.port
    try:
        server = serve(cfg)
    except OSError as exc:
        sys.stderr.write(f"edge-llm-serve: cannot listen on {cfg['bind']}:{cfg['port']}: {exc.strerror}\n")
        return 1
    sys.stderr.write(f"edge-llm-serve {VERSION}: {cfg['model']} ({cfg['runtime']}) on {cfg['bind']}:{cfg['port']}\n")
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
