"""Genie through QAIRT's GenieDialog.h: one dialog created at start, a query per job."""

from __future__ import annotations

import ctypes
import json
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from edge_llm_serve.config import DEFAULTS
from edge_llm_serve.engines.base import Engine, Job, RuntimeFailed, timed_out
from edge_llm_serve.engines.cabi import (
    GENIE_DIALOG_ACTION_ABORT,
    GENIE_DIALOG_SENTENCE_ABORT,
    GENIE_DIALOG_SENTENCE_COMPLETE,
    GENIE_PROTOTYPES,
    GENIE_STATUS_SUCCESS,
    GENIE_STATUS_WARNING_CONTEXT_EXCEEDED,
    GenieDialogQueryCallback,
    bind_library,
    find_library,
)

#: a marker only one family's chat template writes around a tool call -> that family (the templates:
#: NVIDIA's llama_nemotron_nano_generic_tool_calling.jinja, Qwen/Qwen2.5-7B-Instruct and
#: meta-llama/Llama-3.1-8B-Instruct tokenizer_config.json "chat_template"; cited in toolcalls_render)
TEMPLATE_MARKERS = (("<TOOLCALL>", "nemotron-nano"), ("<tool_call>", "qwen2.5"), ("<|python_tag|>", "llama3.1"))


def bundle_tool_format(model_dir: str) -> str | None:
    """The tool format the bundle's own chat template names, or None.

    A Hugging Face export keeps the template in ``tokenizer_config.json`` ("chat_template"). The board
    has no Jinja to run it, so the template is not executed: its call marker says which family's
    format (re-stated in toolcalls_render with its source) the model was trained on. The bundles
    Qualcomm publishes (ai-hub-apps v0.20.0 tutorials/llm_on_genie/configs) name only a
    ``tokenizer.json``: then the serve config's ``tool_format`` decides.
    """
    try:
        with open(os.path.join(model_dir, "tokenizer_config.json"), encoding="utf-8") as fh:
            template = json.load(fh).get("chat_template")
    except (OSError, ValueError, AttributeError):
        return None
    if isinstance(template, list):     # several named templates: [{"name": ..., "template": ...}]
        template = " ".join(str(t.get("template", "")) for t in template if isinstance(t, dict))
    if not isinstance(template, str):
        return None
    return next((family for marker, family in TEMPLATE_MARKERS if marker in template), None)


class GenieEngine(Engine):
    """Genie through GenieDialog.h: one dialog created at start; a query per job, reset after it.

    Genie takes prompt text and has no constrained decoding: tools work through the family's prompt
    format (config ``tool_format``, or the bundle's template) with the service parsing the answer,
    and JSON output through an instruction in the prompt, validation and one retry.
    """

    def __init__(self, cfg: dict[str, Any]) -> None:
        super().__init__(cfg)
        found = bundle_tool_format(str(cfg.get("model_dir") or ""))
        if found and cfg.get("tool_format") != found:
            if cfg.get("tool_format"):
                print(f"edge-llm-serve: the bundle's chat template writes {found} tool calls; the config said "
                      f"{cfg['tool_format']}: using the bundle's", file=sys.stderr)
            cfg["tool_format"] = found
        self.capabilities = {"tools": bool(cfg.get("tool_format")), "json_object": True, "json_schema": True,
                             "grammar": False, "constrained": False}
        self.dialog = ctypes.c_void_p()
        self._running: Job | None = None     # the job whose query runs; set and cleared under _lock
        self._lock = threading.Lock()

    def load(self) -> None:
        lib = self.lib = bind_library(find_library(self.cfg), GENIE_PROTOTYPES)
        path = os.path.join(self.cfg["model_dir"], self.cfg.get("genie_config") or "genie_config.json")
        try:
            with open(path, encoding="utf-8") as fh:
                text = fh.read()
        except OSError as exc:
            raise RuntimeFailed(f"cannot read {path}: {exc.strerror}") from exc
        started = time.monotonic()
        config = ctypes.c_void_p()
        # The config names context binaries and the tokenizer relative to the bundle (as genie-t2t-run
        # is run from there); the service runs with the model dir as its working directory.
        status = lib.GenieDialogConfig_createFromJson(text.encode("utf-8"), ctypes.byref(config))
        if status != GENIE_STATUS_SUCCESS:
            raise RuntimeFailed(f"GenieDialogConfig_createFromJson({path}) returned {status}")
        try:
            status = lib.GenieDialog_create(config, ctypes.byref(self.dialog))
        finally:
            lib.GenieDialogConfig_free(config)
        if status != GENIE_STATUS_SUCCESS or not self.dialog:
            raise RuntimeFailed(f"GenieDialog_create returned {status}")
        self.init_s = round(time.monotonic() - started, 3)

    def generate(self, job: Job, emit: Callable[[str], bool]) -> dict[str, Any]:
        lib = self.lib
        stopped = {"by_us": False}

        def on_text(text: bytes | None, code: int, _data: Any) -> None:
            if code == GENIE_DIALOG_SENTENCE_ABORT or stopped["by_us"]:
                return
            if text and not emit(text.decode("utf-8", "replace")):
                stopped["by_us"] = True
                lib.GenieDialog_signal(self.dialog, GENIE_DIALOG_ACTION_ABORT)

        callback = GenieDialogQueryCallback(on_text)
        lib.GenieDialog_setMaxNumTokens(self.dialog, int(job.max_tokens))   # < 0 (not supported): the cut below
        # GenieDialog_query blocks until the generation ends, and a query that never yields a token
        # never reaches the max_tokens cut: a timer aborts it at timeout_s (GenieDialog_signal with
        # GENIE_DIALOG_ACTION_ABORT, GenieDialog.h), so one stuck query cannot hold the NPU worker.
        timeout = float(self.cfg.get("timeout_s") or DEFAULTS["timeout_s"])
        fired = threading.Event()

        def expire() -> None:
            fired.set()
            self.cancel(job)

        watchdog = threading.Timer(timeout, expire)
        watchdog.daemon = True
        with self._lock:
            self._running = job
        try:
            if job.cancelled.is_set():
                return {}
            watchdog.start()
            status = lib.GenieDialog_query(self.dialog, job.prompt.encode("utf-8"), GENIE_DIALOG_SENTENCE_COMPLETE,
                                           callback, None)
        finally:
            watchdog.cancel()
            with self._lock:
                self._running = None
            lib.GenieDialog_reset(self.dialog)   # each request carries its whole conversation
            del callback
        if fired.is_set() and status != GENIE_STATUS_SUCCESS:
            raise timed_out(timeout)
        if status < 0:
            raise RuntimeFailed(f"GenieDialog_query returned {status}")
        return {"finish_reason": "length"} if status == GENIE_STATUS_WARNING_CONTEXT_EXCEEDED else {}

    def cancel(self, job: Job) -> None:
        # The one dialog serves every job in turn: abort only while job's own query runs.
        with self._lock:
            if self._running is job:
                self.lib.GenieDialog_signal(self.dialog, GENIE_DIALOG_ACTION_ABORT)
