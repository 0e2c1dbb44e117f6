"""What every engine shares: the job it runs, the failures it raises, the interface the scheduler calls."""

from __future__ import annotations

import ctypes
import os
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from edge_llm_serve.toolcalls import Prepared

# ---------------------------------------------------------------------------------------------
# Runtime failures
# ---------------------------------------------------------------------------------------------


class RuntimeFailed(Exception):
    """The runtime exited non-zero or timed out; ``tail`` holds its last output lines."""

    def __init__(self, message: str, tail: str = "") -> None:
        super().__init__(message)
        self.tail = tail


class TimedOut(RuntimeFailed):
    """A generation stopped at the config's ``timeout_s``: the scheduler answers with what it generated."""


def timed_out(seconds: float) -> TimedOut:
    """The one error both engines give for a generation stopped at the config's ``timeout_s``."""
    return TimedOut(f"generation did not finish within {seconds:g} s (timeout_s); it was stopped")


# ---------------------------------------------------------------------------------------------
# Engines: the model loaded once through the runtime's C API; tokens streamed from its callback
# ---------------------------------------------------------------------------------------------


@dataclass
class Job:
    """One generation request: what to run, where its pieces go, and whether its client left."""

    kind: str                                  # "chat" or "completion"
    prompt: str                                # raw prompt (completion) or rendered chat (Genie)
    messages: list[dict[str, str]]             # chat turns without system entries
    system: str | None
    max_tokens: int
    temperature: float | None = None
    top_p: float | None = None
    seed: int | None = None
    stop: list[str] = field(default_factory=list)
    # SimpleQueue: put() from the runtime's callback thread once per token is one C call (queue.Queue
    # takes a Python lock and notifies a condition each time, on the token's critical path).
    events: queue.SimpleQueue = field(default_factory=queue.SimpleQueue)
    cancelled: threading.Event = field(default_factory=threading.Event)
    enqueued: float = field(default_factory=time.monotonic)
    finished: bool = False                     # the handler got its done/error event
    gone: Callable[[], bool] | None = None     # True once the client closed its connection
    # None without ``tools``; a Prepared with choice "none" for tools given with tool_choice "none".
    # Prepared.messages keeps the whole conversation (assistant tool_calls, role "tool" results).
    tools: Prepared | None = None
    # None, {"type": "json_object"} or {"type": "json_schema", "name", "schema", "strict"} (validation.py)
    response_format: dict[str, Any] | None = None


class Engine:
    """Base: ``load`` once, then ``generate`` one job at a time; ``cancel(job)`` from another thread.

    ``cancel`` names the job it means: a caller that decided to cancel just as that generation
    ended must not stop the next one (the check and the cancel happen under the engine's own lock).
    """

    #: what the engine can honour, reported per model by /v1/models: ``tools`` (tool calls),
    #: ``json_object`` / ``json_schema`` (structured output), ``grammar``, and ``constrained`` (the
    #: runtime itself constrains decoding, so the service need not retry). Engines override it.
    capabilities: dict[str, bool] = {"tools": False, "json_object": False, "json_schema": False,
                                     "grammar": False, "constrained": False}
    #: why a capability is False where the engine knows more than "this runtime cannot": the 400 that
    #: refuses the field says it (e.g. a LiteRT-LM model whose type has no tool-call parser)
    capability_notes: dict[str, str] = {}

    def __init__(self, cfg: dict[str, Any]) -> None:
        self.cfg = cfg
        self.lib: ctypes.CDLL | None = None
        self.init_s: float | None = None
        # What /health and /metrics say about the backend: the configured one, the one the runtime
        # said it runs on (None when it does not say), and the runtime's warnings about accelerators.
        self.backend: dict[str, Any] = {"configured": str(cfg.get("backend") or "npu"), "runtime": None,
                                        "runtime_said": []}

    def load(self) -> None:
        raise NotImplementedError

    def generate(self, job: Job, emit: Callable[[str], bool]) -> dict[str, Any]:
        """Run ``job``; ``emit(text)`` returns False when generation must stop. Returns figures."""
        raise NotImplementedError

    def cancel(self, job: Job) -> None:
        """Stop ``job``'s generation if, and only if, it is the one running."""
        raise NotImplementedError




def cache_dir(cfg: dict[str, Any]) -> str:
    """Where the runtime may keep its compiled-weights cache: config ``cache_dir``, else systemd's
    CacheDirectory= ($CACHE_DIRECTORY, systemd.exec(5)), else ":nocache" (no cache at all; LiteRT-LM's
    own tests use it, runtime/conversation/conversation_test.cc:245 at cbf463d)."""
    if cfg.get("cache_dir"):
        return str(cfg["cache_dir"])
    env = os.environ.get("CACHE_DIRECTORY", "").split(":")[0]
    return env or ":nocache"


class ContextFull(RuntimeFailed):
    """The prompt alone does not fit the model's context: the client's error (400), not the runtime's."""
