"""LiteRT-LM through c/engine.h: the engine created once, a conversation or session per job."""

from __future__ import annotations

import ctypes
import json
import os
import re
import sys
import threading
import time
import uuid
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
from edge_llm_serve.engines.litert_model_type import PARSES_TOOL_CALLS, NotLitertlm, read_model_type

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
# runtime/engine/engine_settings.cc (logged at INFO):
#   "The validated engine settings: ... MainExecutorSettings: backend: CPU"
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


# The runtime's parser refusing a tool-call block the model wrote (runtime/components/tool_use/
# parser_utils.cc:138-142 at cbf463d): "Failed to parse tool calls from response: <the whole response>code
# block: <the block> with error: <why>", which ends the stream (internal_callback_util.cc:137-139).
_BAD_CALL = "Failed to parse tool calls"
_BAD_CALL_PARTS = re.compile(r"Failed to parse tool calls from response: (.*?)code block: (.*) with error: (.*)\Z",
                             re.S)


def unparsed_call(error: str) -> dict[str, str]:
    """The runtime's parse failure as the service judges it: ``why`` (one line naming the block and the
    parser's reason) and ``output`` (the model's text as the runtime had it)."""
    m = _BAD_CALL_PARTS.search(error)
    if not m:
        return {"why": f"LiteRT-LM's parser could not read the tool call the model wrote ({error[:300]})",
                "output": ""}
    return {"why": f"LiteRT-LM's parser could not read the tool call the model wrote ({m.group(3).strip()[:200]}): "
                   f"{m.group(2)[:200]!r}", "output": m.group(1)}


def _json_or_text(text: Any) -> Any:
    """A JSON value when ``text`` is JSON (as OpenAI clients send arguments and tool results), else ``text``."""
    if not isinstance(text, str):
        return text
    try:
        return json.loads(text)
    except ValueError:
        return text


def _plain(content: Any) -> str:
    """An OpenAI message ``content`` (null, a string or a list of parts) as its text."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "".join(p.get("text", "") for p in content if isinstance(p, dict))


def runtime_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """OpenAI chat messages (without system/developer turns) as the Conversation API's JSON messages.

    The shapes are the runtime's own: an assistant turn carries ``tool_calls`` as
    ``{"type": "function", "function": {"name", "arguments": <object>}}`` (what the runtime's parser
    returns, runtime/components/tool_use/parser_utils.cc:129-132 at cbf463d, and what the model data
    processors format back, e.g. gemma3_data_processor.cc MessageToTemplateInput); a tool result is
    ``{"role": "tool", "content": [{"type": "tool_response", "name", "response"}]}`` as Google's binding
    sends it (python/litert_lm/conversation.py:107-114, litert-lm-api 0.12.0). A null ``content`` becomes
    "" so templates that test ``content is string`` render the turn.
    """
    names: dict[str, str] = {}
    out: list[dict[str, Any]] = []
    for m in messages:
        role = m.get("role")
        if role == "assistant" and m.get("tool_calls"):
            calls = []
            for c in m["tool_calls"]:
                f = c.get("function") or {}
                names[str(c.get("id"))] = f.get("name", "")
                args = _json_or_text(f.get("arguments") or "{}")
                calls.append({"type": "function", "function": {"name": f.get("name", ""), "arguments": args}})
            out.append({"role": "assistant", "content": _plain(m.get("content")), "tool_calls": calls})
        elif role == "tool":
            out.append({"role": "tool", "content": [{
                "type": "tool_response", "name": names.get(str(m.get("tool_call_id")), ""),
                "response": _json_or_text(_plain(m.get("content")))}]})
        else:
            out.append({"role": role, "content": _plain(m.get("content"))})
    return out


def openai_tool_calls(message: dict[str, Any]) -> list[dict[str, Any]]:
    """The runtime's parsed ``tool_calls`` of one streamed message in OpenAI's shape: an id for each, and
    ``arguments`` as JSON text (the runtime gives an object, parser_utils.cc:129-132 at cbf463d)."""
    calls = []
    for c in message.get("tool_calls") or []:
        f = c.get("function") if isinstance(c, dict) else None
        if not isinstance(f, dict) or not isinstance(f.get("name"), str):
            continue
        args = f.get("arguments", {})
        text = args if isinstance(args, str) else json.dumps(args)
        calls.append({"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function",
                      "function": {"name": f["name"], "arguments": text}})
    return calls


class LiteRtLmEngine(Engine):
    """LiteRT-LM through c/engine.h: one engine (weights on the NPU), a session or conversation per job.

    Tools go through the runtime's own machinery: the conversation is created with them
    (``litert_lm_conversation_config_set_tools``), the model's data processor renders them with the
    model's template and parses the calls of Gemma 3/3n, Gemma 4, FunctionGemma, Qwen 3 and Qwen 2.5
    models (model_data_processor_factory.cc:344-360 at cbf463d); a ``generic`` model's processor
    returns text only (generic_data_processor.cc ToMessageImpl), so ``tools`` is a capability of the
    model, from the ``llm_model_type`` its file names (:mod:`.litert_model_type`). Constrained decoding
    is asked for with
    tools: through the pinned C API it can only constrain tool calls, only for the Gemma-family
    processors (their CreateConstraint; conversation.cc:280-292) with a Gemma SentencePiece vocabulary,
    in the mode the model's metadata names (text and/or a call, or a call only). The C API has no way
    to pass a JSON-schema, regex or Lark constraint (LiteRtLmConversationOptionalArgs carries only a
    visual token budget, engine.h:221-234; no ConstraintProviderConfig setter), so ``response_format``
    and ``tool_choice`` required/named are checked by the service, which retries: ``constrained`` is False.
    """

    def __init__(self, cfg: dict[str, Any]) -> None:
        super().__init__(cfg)
        # Tools only where the model's processor parses calls: the model file names its type (read here, a
        # few KiB; litert_model_type says where each byte is defined). An unreadable file is load()'s to report.
        unread = None
        try:
            self.model_type = read_model_type(os.path.join(str(cfg.get("model_dir") or ""),
                                                           str(cfg.get("model_file") or "")))
        except (OSError, NotLitertlm) as exc:
            self.model_type, unread = None, getattr(exc, "strerror", None) or str(exc)
        tools = self.model_type in PARSES_TOOL_CALLS
        self.capabilities = {"tools": tools, "json_object": True, "json_schema": True, "grammar": False,
                             "constrained": False}
        if not tools:
            named = (f"names llm_model_type {self.model_type}" if self.model_type else
                     f"could not be read for its llm_model_type ({unread})" if unread else
                     "names no llm_model_type (the runtime then infers one from its tokenizer)")
            self.capability_notes = {"tools": (
                f"this model has no tool-call format here: its file {named}, and LiteRT-LM parses tool calls "
                "only for Gemma 3/3n, Gemma 4, "
                "FunctionGemma, Qwen 3 and Qwen 2.5 models: the calls it wrote would stay in its text")}
        self.engine: int | None = None
        # (job, "session"|"conversation", handle) being generated; read and cleared under _lock
        self._active: tuple[Job, str, int] | None = None
        self.context: int | None = None                  # the model's context in tokens, once the runtime named it
        # False once the runtime refused a conversation with constrained decoding (a model whose processor
        # or vocabulary the constraint library does not support): tools then go without it.
        self.constrain_tools = bool(cfg.get("constrained_decoding", True))
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
        calls: list[dict[str, Any]] = []         # the runtime's parsed tool calls, in OpenAI's shape

        def on_chunk(_data: Any, chunk: bytes | None, is_final: bool, error: bytes | None) -> None:
            if chunk:
                state["emitted"] = True
            if error:
                state["error"] = error.decode("utf-8", "replace")
            elif chunk and not state["stop"]:
                text, found = _chunk_parts(chunk.decode("utf-8", "replace"), job.kind != "completion")
                calls.extend(found)
                if (text or not found) and not emit(text):
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
                messages = job.messages if job.tools is None else runtime_messages(
                    [m for m in job.tools.messages if m.get("role") not in ("system", "developer")])
                if job.tools is not None and messages[-1]["role"] == "user" and job.messages[-1]["role"] == "user":
                    # the service's last user turn (with, e.g., its response_format instruction appended)
                    messages[-1] = {"role": "user", "content": job.messages[-1]["content"]}
                if len(messages) > 1:
                    lib.litert_lm_conversation_config_set_messages(cc, json.dumps(messages[:-1]).encode())
                conv = self._conversation(cc, job)
                handles.append(("conversation", conv))
                with self._lock:
                    self._active = (job, "conversation", conv)
                rc = lib.litert_lm_conversation_send_message_stream(      # engine.h:761
                    conv, json.dumps(messages[-1]).encode(), None, None, callback, None)
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
            # a call block the runtime could not parse is an answer that does not fit the request: the
            # service judges it (one retry, then the client's error), not a failure of the runtime
            bad_call = bool(state["error"] and _BAD_CALL in state["error"] and job.tools is not None
                            and job.kind != "completion")
            if state["error"] and not (full or bad_call) and not (cancelled or state["stop"] or job.cancelled.is_set()):
                too_long = _TOO_LONG.search(state["error"])
                if too_long and not state["emitted"]:
                    self.context = int(too_long.group(2))
                    raise ContextFull(f"the prompt is {too_long.group(1)} tokens; this model's context is "
                                      f"{too_long.group(2)} tokens (prompt and answer together)")
                if _BAD_CALL in state["error"]:
                    raise RuntimeFailed("the model wrote a tool call that LiteRT-LM's parser could not read: "
                                        f"{state['error'][:300]}")     # without tools: not the service's to judge
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
            if job.tools is not None and job.kind != "completion":
                figures["tool_calls"] = calls        # parsed by the runtime (none from a generic model)
            if bad_call:
                figures["unparsed_tool_calls"] = unparsed_call(state["error"])
            return figures
        finally:
            with self._lock:
                self._active = None
            for kind, handle in reversed(handles):
                {"session": lib.litert_lm_session_delete, "conversation": lib.litert_lm_conversation_delete,
                 "conversation_config": lib.litert_lm_conversation_config_delete}[kind](handle)
            lib.litert_lm_session_config_delete(sc)
            del callback

    def _conversation(self, cc: int, job: Job) -> int:
        """The job's conversation, created with its tools when it has any (shown to the model unless
        tool_choice is "none"; only the named one when one is forced), with constrained decoding asked
        for beside them. A runtime that cannot constrain this model's calls refuses the whole
        conversation (e.g. "Unsupported vocabulary type for Fst-Constraints library"): it is created
        again without, and later jobs do not ask."""
        lib = self.lib
        shown = job.tools.shown_tools if job.tools is not None else None
        if shown:
            # engine.h:177 / engine.cc:914-923: a JSON array, OpenAI's {"type": "function", "function": {...}}
            # as Google's binding builds it (python/litert_lm/tools.py:115-122, litert-lm-api 0.12.0).
            lib.litert_lm_conversation_config_set_tools(cc, json.dumps(shown).encode())
        constrained = bool(shown) and self.constrain_tools
        if constrained:
            lib.litert_lm_conversation_config_set_enable_constrained_decoding(cc, True)     # engine.h:199
        conv = lib.litert_lm_conversation_create(self.engine, cc)                           # engine.h:697
        if not conv and constrained:
            self.constrain_tools = False
            sys.stderr.write("edge-llm-serve: LiteRT-LM cannot constrain this model's tool calls "
                             "(its conversation was refused with constrained decoding); tools go without it\n")
            sys.stderr.flush()
            lib.litert_lm_conversation_config_set_enable_constrained_decoding(cc, False)    # engine.h:199
            conv = lib.litert_lm_conversation_create(self.engine, cc)
        if not conv:
            raise RuntimeFailed("litert_lm_conversation_create failed")
        return conv

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


def _chunk_parts(chunk: str, conversation: bool) -> tuple[str, list[dict[str, Any]]]:
    """A stream chunk's text and tool calls. Which API streamed it decides, not the chunk's look: the
    Conversation API streams JSON messages (engine.cc CreateConversationCallback; a tool call arrives
    whole, in a message of its own, once its closing fence came: runtime/conversation/
    internal_callback_util.cc), the Session API plain text, which may itself be JSON the model wrote
    (``{}`` from a completions prompt is the model's text, not a message)."""
    if not conversation:
        return chunk, []
    try:
        msg = json.loads(chunk)
    except ValueError:
        return chunk, []
    if not isinstance(msg, dict):
        return chunk, []
    content = msg.get("content")
    text = content if isinstance(content, str) else (
        "".join(p.get("text", "") for p in content if isinstance(p, dict)) if isinstance(content, list) else "")
    return text, openai_tool_calls(msg)
