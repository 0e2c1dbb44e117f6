"""Genie through QAIRT's GenieDialog.h: one dialog created at start, a query per job."""

from __future__ import annotations

import ctypes
import os
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


class GenieEngine(Engine):
    """Genie through GenieDialog.h: one dialog created at start; a query per job, reset after it."""

    def __init__(self, cfg: dict[str, Any]) -> None:
        super().__init__(cfg)
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
