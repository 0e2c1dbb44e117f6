"""LiteRT-LM through c/engine.h: the engine created once, a conversation or session per job."""

from __future__ import annotations

import ctypes
import json
import os
import re
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from edge_llm_serve.config import DEFAULTS
from edge_llm_serve.engines.base import ContextFull, Engine, Job, RuntimeFailed, cache_dir, timed_out
from edge_llm_serve.engines.cabi import (
    LITERT_INPUT_TEXT,
    LITERT_LM_PROTOTYPES,
    LITERT_LOG_INFO,
    LITERT_LOG_WARNING,
    LITERT_SAMPLER_TOPP,
    LiteRtLmInputData,
    LiteRtLmSamplerParams,
    LiteRtLmStreamCallback,
    bind_library,
    find_library,
)

# What the runtime says when a prompt does not fit (runtime/core/session_basic.cc at cbf463d, seen on stderr
# and in the stream's error): "Input token ids are too long. Exceeding the maximum number of tokens allowed: N >= M".
_TOO_LONG = re.compile(r"Input token ids are too long.*?(\d+)\s*>=\s*(\d+)", re.S)
# c/engine.cc:62-65: the Session API ends a stream that filled the KV cache with this "error".
LITERT_MAX_TOKENS_REACHED = "Max number of tokens reached."


# The runtime's log while the engine is created, read for the backend it validated and its accelerator
# warnings: the pinned C API has no call that names the backend in use (c/engine.h at cbf463d exports
# none; its only backend argument is litert_lm_engine_settings_create's, engine.h:271). absl writes
# "I0000 ..." / "W0000 ..." records, LiteRT "INFO: [...]" / "WARNING: [...]"; a record's further lines
# (the settings dump) have no prefix.
_LOG_RECORD = re.compile(r"^(?:([IWEF])\d{4} |(VERBOSE|DEBUG|INFO|WARNING|ERROR|FATAL): )")
# The service's own stderr lines (log_message: "<address> <method> <path> <status>", "edge-llm-serve: ...").
_OWN_LINE = re.compile(r"^(?:edge-llm-serve|[0-9A-Fa-f:.]+ [A-Z]+ /)")
# runtime/engine/engine_settings.cc (logged at INFO): "The validated engine settings: ... MainExecutorSettings: backend: CPU"
_VALIDATED_BACKEND = re.compile(r"MainExecutorSettings:\s*backend:\s*([A-Za-z_]+)")
# LiteRT's npu_registry.cc (WARNING): "NPU accelerator could not be loaded and registered: <status>."
_ACCELERATOR_NOTE = re.compile(r"accelerator could not be loaded|accelerator.*(?:not|fail)", re.I)


def _with_stderr_captured(fn: Callable[[], Any]) -> tuple[Any, str]:
    """Run ``fn`` with file descriptor 2 (where the runtime logs) going to an anonymous file; return
    (its result, what was written). A file, not a pipe: nothing needs to drain it while ``fn`` runs."""
    sys.stderr.flush()
    saved = os.dup(2)
    sink = os.memfd_create("edge-llm-serve-load")
    try:
        os.dup2(sink, 2)
        try:
            result = fn()
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
        os.lseek(sink, 0, os.SEEK_SET)
        chunks = []
        while chunk := os.read(sink, 65536):
            chunks.append(chunk)
        return result, b"".join(chunks).decode("utf-8", "replace")
    finally:
        os.close(sink)
        os.close(saved)


def runtime_log_report(text: str, backend: str) -> tuple[str | None, list[str], str]:
    """From the runtime's load log: (the backend it validated, its warnings about ``backend``'s accelerator,
    the log without VERBOSE/DEBUG/INFO records, which goes back to stderr as WARNING would have let it).

    Only the configured backend's accelerator counts: the runtime tries to register every accelerator it
    was built with, so on cpu it warns too that the NPU one did not load, which changes nothing there."""
    validated = _VALIDATED_BACKEND.search(text)
    notes: list[str] = []
    kept: list[str] = []
    keep = True
    for line in text.splitlines():
        m = _LOG_RECORD.match(line)
        if m:
            level = m.group(1) or m.group(2)[0]
            keep = level in "WEF"
            note = line.split("] ", 1)[-1].strip()
            if keep and _ACCELERATOR_NOTE.search(line) and backend.upper() in note.upper() and note not in notes:
                notes.append(note)
        if keep or _OWN_LINE.match(line):     # the service's own lines written meanwhile stay in the log
            kept.append(line)
    return (validated.group(1).lower() if validated else None), notes, "".join(f"{ln}\n" for ln in kept)


class LiteRtLmEngine(Engine):
    """LiteRT-LM through c/engine.h: one engine (weights on the NPU), a session or conversation per job."""

    def __init__(self, cfg: dict[str, Any]) -> None:
        super().__init__(cfg)
        self.engine: int | None = None
        # (job, "session"|"conversation", handle) being generated; read and cleared under _lock
        self._active: tuple[Job, str, int] | None = None
        self.context: int | None = None                  # the model's context in tokens, once the runtime named it
        self._lock = threading.Lock()

    def load(self) -> None:
        path = find_library(self.cfg)
        lib = self.lib = bind_library(path, LITERT_LM_PROTOTYPES)
        lib.litert_lm_set_min_log_level(LITERT_LOG_WARNING)    # engine.h:240 (2 would be INFO)
        model = os.path.join(self.cfg["model_dir"], self.cfg["model_file"])
        started = time.monotonic()
        backend = str(self.cfg.get("backend") or "npu")
        settings = lib.litert_lm_engine_settings_create(model.encode(), backend.encode(), None, None)
        if not settings:
            raise RuntimeFailed(f"litert_lm_engine_settings_create failed for {model}")
        try:
            # engine.h:313. Without a cache dir the runtime writes <model>.xnnpack_cache_* beside the
            # model; the model directory is the fleet's, so the cache goes to the service's own.
            lib.litert_lm_engine_settings_set_cache_dir(settings, cache_dir(self.cfg).encode())
            if backend == "npu" or self.cfg.get("dispatch_lib_dir"):
                # engine.h:316-322: the dispatch library (libLiteRtDispatch_*.so) is the NPU backend's; on
                # cpu/gpu a directory without one made the runtime log an error per model section.
                lib.litert_lm_engine_settings_set_litert_dispatch_lib_dir(
                    settings, str(self.cfg.get("dispatch_lib_dir") or os.path.dirname(path)).encode())
            if self.cfg.get("max_num_tokens"):
                lib.litert_lm_engine_settings_set_max_num_tokens(settings, int(self.cfg["max_num_tokens"]))
            lib.litert_lm_engine_settings_enable_benchmark(settings)
            # INFO while the engine is created: the runtime names the backend it validated only at INFO
            # (engine.h:236-240); those records are read here and not passed on to the log.
            lib.litert_lm_set_min_log_level(LITERT_LOG_INFO)                                     # engine.h:240
            self.engine, said = _with_stderr_captured(lambda: lib.litert_lm_engine_create(settings))  # engine.h:380
            lib.litert_lm_set_min_log_level(LITERT_LOG_WARNING)                                  # engine.h:240
            runtime, notes, kept = runtime_log_report(said, backend)
            self.backend.update(runtime=runtime, runtime_said=notes)
            sys.stderr.write(kept)
            sys.stderr.flush()
        finally:
            lib.litert_lm_engine_settings_delete(settings)
        if not self.engine:
            raise RuntimeFailed(f"litert_lm_engine_create failed for {model}")
        self.init_s = round(time.monotonic() - started, 3)

    def _session_config(self, job: Job) -> int:
        lib = self.lib
        sc = lib.litert_lm_session_config_create()
        if not sc:
            raise RuntimeFailed("litert_lm_session_config_create failed")
        lib.litert_lm_session_config_set_max_output_tokens(sc, int(job.max_tokens))
        # The runtime's default CPU sampler is greedy; a seed alone changes nothing about that (OpenAI's
        # seed only makes sampling repeatable), so only temperature or top_p choose sampling.
        if job.temperature is not None or job.top_p is not None:
            # temperature 0 is greedy decoding, asked of the top-p sampler as top_k=1 (only the most likely
            # token is left to draw from): the CPU sampler factory implements TOP_P only and refuses any
            # other type with "Sampler type: N not implemented yet." (LiteRT-LM cbf463d
            # runtime/components/sampler_factory.cc:579-594), so kGreedy (3) and kTopK (1) fail the session.
            greedy = job.temperature == 0
            params = LiteRtLmSamplerParams(
                type=LITERT_SAMPLER_TOPP, top_k=1 if greedy else 40,
                top_p=1.0 if job.top_p is None or greedy else float(job.top_p),
                temperature=1.0 if job.temperature is None or greedy else float(job.temperature),
                seed=0 if job.seed is None else int(job.seed) & 0x7FFFFFFF)
            lib.litert_lm_session_config_set_sampler_params(sc, ctypes.byref(params))
        return sc

    def generate(self, job: Job, emit: Callable[[str], bool]) -> dict[str, Any]:
        lib = self.lib
        done = threading.Event()
        state: dict[str, Any] = {"error": None, "stop": False, "emitted": False}

        def on_chunk(_data: Any, chunk: bytes | None, is_final: bool, error: bytes | None) -> None:
            if chunk:
                state["emitted"] = True
            if error:
                state["error"] = error.decode("utf-8", "replace")
            elif chunk and not state["stop"] and not emit(_chunk_text(chunk.decode("utf-8", "replace"))):
                state["stop"] = True
            if is_final or error:
                done.set()

        callback = LiteRtLmStreamCallback(on_chunk)       # kept alive until the stream ends
        sc = self._session_config(job)
        handles: list[tuple[str, int]] = []
        try:
            if job.kind == "completion":
                lib.litert_lm_session_config_set_apply_prompt_template(sc, False)
                session = lib.litert_lm_engine_create_session(self.engine, sc)
                if not session:
                    raise RuntimeFailed("litert_lm_engine_create_session failed")
                handles.append(("session", session))
                data = job.prompt.encode("utf-8")
                buf = ctypes.create_string_buffer(data, len(data))
                inp = LiteRtLmInputData(type=LITERT_INPUT_TEXT, data=ctypes.cast(buf, ctypes.c_void_p), size=len(data))
                with self._lock:
                    self._active = (job, "session", session)
                rc = lib.litert_lm_session_generate_content_stream(session, ctypes.byref(inp), 1, callback, None)
            else:
                cc = lib.litert_lm_conversation_config_create()
                if not cc:
                    raise RuntimeFailed("litert_lm_conversation_config_create failed")
                handles.append(("conversation_config", cc))
                lib.litert_lm_conversation_config_set_session_config(cc, sc)
                if job.system:
                    # engine.h:170 / engine.cc:884-894: the runtime wraps the argument in
                    # {"role": "system", "content": <it, parsed as JSON>} itself; a whole message here
                    # became a nested object and the system turn rendered empty. A JSON string is the content.
                    lib.litert_lm_conversation_config_set_system_message(cc, json.dumps(job.system).encode())
                if len(job.messages) > 1:
                    lib.litert_lm_conversation_config_set_messages(cc, json.dumps(job.messages[:-1]).encode())
                conv = lib.litert_lm_conversation_create(self.engine, cc)
                if not conv:
                    raise RuntimeFailed("litert_lm_conversation_create failed")
                handles.append(("conversation", conv))
                with self._lock:
                    self._active = (job, "conversation", conv)
                rc = lib.litert_lm_conversation_send_message_stream(
                    conv, json.dumps(job.messages[-1]).encode(), None, None, callback, None)
            if rc != 0:
                raise RuntimeFailed(f"LiteRT-LM refused to start the stream (status {rc})")
            timeout = float(self.cfg.get("timeout_s") or DEFAULTS["timeout_s"])
            limit = time.monotonic() + timeout
            cancelled = expired = False
            while not done.wait(0.02):
                if (state["stop"] or job.cancelled.is_set()) and not cancelled:
                    self.cancel(job)
                    cancelled = True
                if time.monotonic() > limit and not expired:
                    self.cancel(job)
                    expired = True
                    if not done.wait(5):
                        raise RuntimeFailed(f"{timed_out(timeout)}, but the stream did not end after cancel")
            if expired:
                raise timed_out(timeout)
            # A cancelled stream ends with an error message ("CANCELLED.", LiteRT-LM c/engine.cc
            # CreateCallback); when the scheduler cancelled it (client gone) before this loop looked,
            # that is this job's cancellation, not a runtime error.
            full = state["error"] == LITERT_MAX_TOKENS_REACHED
            if state["error"] and not full and not (cancelled or state["stop"] or job.cancelled.is_set()):
                too_long = _TOO_LONG.search(state["error"])
                if too_long and not state["emitted"]:
                    self.context = int(too_long.group(2))
                    raise ContextFull(f"the prompt is {too_long.group(1)} tokens; this model's context is "
                                      f"{too_long.group(2)} tokens (prompt and answer together)")
                raise RuntimeFailed(f"LiteRT-LM: {state['error']}")
            kind, handle = handles[-1]
            getter = (lib.litert_lm_session_get_benchmark_info if kind == "session"
                      else lib.litert_lm_conversation_get_benchmark_info)
            figures = self._benchmark(getter(handle))
            # The Conversation API ends a stream that filled the KV cache like any other (no error):
            # prompt + answer reaching the context is the sign (max_num_tokens, engine.h:286).
            context = int(self.cfg.get("max_num_tokens") or self.context or 0)
            used = int(figures.get("prefill_tokens") or 0) + int(figures.get("decode_tokens") or 0)
            if full or (context and used >= context and not (cancelled or state["stop"])):
                figures["finish_reason"] = "length"
            return figures
        finally:
            with self._lock:
                self._active = None
            for kind, handle in reversed(handles):
                {"session": lib.litert_lm_session_delete, "conversation": lib.litert_lm_conversation_delete,
                 "conversation_config": lib.litert_lm_conversation_config_delete}[kind](handle)
            lib.litert_lm_session_config_delete(sc)
            del callback

    def _benchmark(self, info: int | None) -> dict[str, Any]:
        if not info:
            return {}
        lib = self.lib
        try:
            out: dict[str, Any] = {"ttft_s": round(lib.litert_lm_benchmark_info_get_time_to_first_token(info), 4)}
            n = lib.litert_lm_benchmark_info_get_num_prefill_turns(info)
            if n > 0:
                out["prefill_tokens"] = lib.litert_lm_benchmark_info_get_prefill_token_count_at(info, n - 1)
                out["prefill_tok_s"] = round(lib.litert_lm_benchmark_info_get_prefill_tokens_per_sec_at(info, n - 1), 2)
            n = lib.litert_lm_benchmark_info_get_num_decode_turns(info)
            if n > 0:
                out["decode_tokens"] = lib.litert_lm_benchmark_info_get_decode_token_count_at(info, n - 1)
                out["decode_tok_s"] = round(lib.litert_lm_benchmark_info_get_decode_tokens_per_sec_at(info, n - 1), 2)
            return out
        finally:
            lib.litert_lm_benchmark_info_delete(info)

    def cancel(self, job: Job) -> None:
        # Under _lock, which generate() holds to set and clear _active, so the handle cancelled is
        # job's own and still alive (its delete comes after _active is cleared).
        with self._lock:
            if self._active is None or self._active[0] is not job:
                return
            _, kind, handle = self._active
            if kind == "session":
                self.lib.litert_lm_session_cancel_process(handle)          # engine.h:409
            else:
                self.lib.litert_lm_conversation_cancel_process(handle)     # engine.h:787


def _chunk_text(chunk: str) -> str:
    """A stream chunk's text: the Conversation API streams JSON messages, the Session API plain text."""
    if chunk.startswith("{"):
        try:
            msg = json.loads(chunk)
        except ValueError:
            return chunk
        content = msg.get("content") if isinstance(msg, dict) else None
        if isinstance(content, str):
            return content
        if isinstance(content, list):
            return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return chunk
