"""One generation on the NPU at a time: a bounded queue in front of the engine, cancelled jobs never start."""

from __future__ import annotations

import collections
import sys
import threading
import time

from edge_llm_serve.engines.base import ContextFull, Engine, Job, RuntimeFailed, TimedOut
from edge_llm_serve.metrics import Metrics

# ---------------------------------------------------------------------------------------------
# Scheduler: one generation on the NPU at a time, a bounded queue, cancelled jobs never start
# ---------------------------------------------------------------------------------------------


class Scheduler:
    """Owns the engine: loads it once in its worker thread, then runs queued jobs in order."""

    def __init__(self, engine: Engine, max_queue: int, metrics: Metrics) -> None:
        self.engine = engine
        self.max_queue = max_queue
        self.metrics = metrics
        self._cv = threading.Condition()
        self._queue: collections.deque[Job] = collections.deque()
        self.current: Job | None = None
        self.state = "loading"            # loading -> ready | failed
        self.reason = ""
        self.avg_s = 1.0                  # running mean request time, for Retry-After

    @property
    def ready(self) -> bool:
        return self.state == "ready"

    @property
    def depth(self) -> int:
        with self._cv:
            return len(self._queue)

    def start(self) -> threading.Thread:
        t = threading.Thread(target=self._run, name="npu-worker", daemon=True)
        t.start()
        return t

    def submit(self, job: Job) -> bool:
        with self._cv:
            if len(self._queue) >= self.max_queue + (0 if self.current is not None else 1):
                return False
            self._queue.append(job)
            self._cv.notify()
            return True

    def cancel(self, job: Job) -> None:
        """Cancel ``job`` (its client left): drop it from the queue, or stop it if it runs.

        The engine checks that ``job`` is the one running and cancels it under one lock: checking here
        and cancelling "whatever runs" later cancelled the next client's generation when ``job`` had
        ended in between (issue 22 defect 5).
        """
        job.cancelled.set()
        with self._cv:
            if job in self._queue:
                self._queue.remove(job)
                return
        self.engine.cancel(job)

    def _run(self) -> None:
        try:
            self.engine.load()
            self.state = "ready"
        except RuntimeFailed as exc:
            self.state, self.reason = "failed", str(exc)
            self.metrics.error("load")
            sys.stderr.write(f"edge-llm-serve: model not loaded: {exc}\n")
            return
        while True:
            with self._cv:
                while not self._queue:
                    self._cv.wait()
                job = self._queue.popleft()
                if job.cancelled.is_set() or (job.gone is not None and job.gone()):
                    job.cancelled.set()     # its client left while it waited: never start it
                    continue
                self.current = job
            try:
                self._one(job)
            finally:
                with self._cv:
                    self.current = None

    def _one(self, job: Job) -> None:
        started = time.monotonic()
        stamps: list[float] = []
        text: list[str] = []
        held = {"n": 0}
        longest_stop = max((len(s) for s in job.stop), default=0)
        finish = {"reason": "stop"}

        def emit(piece: str) -> bool:
            """Count a token, cut at a stop sequence or max_tokens, pass the rest to the client."""
            if job.cancelled.is_set():
                return False
            stamps.append(time.monotonic())
            text.append(piece)
            if not job.stop:        # the common case, once per token on the runtime's thread: no text to scan
                if piece:
                    job.events.put(("text", piece))
                if len(stamps) >= job.max_tokens:
                    finish["reason"] = "length"
                    return False
                return True
            whole = "".join(text)
            for s in job.stop:
                at = whole.find(s)
                if at >= 0:
                    job.events.put(("text", whole[held["n"]:at]))
                    held["n"] = len(whole)
                    return False
            safe = len(whole) - max(0, longest_stop - 1)
            if safe > held["n"]:
                job.events.put(("text", whole[held["n"]:safe]))
                held["n"] = safe
            if len(stamps) >= job.max_tokens:
                finish["reason"] = "length"
                return False
            return True

        try:
            figures = self.engine.generate(job, emit)
        except TimedOut as exc:
            self.metrics.error("timeout")
            if not stamps:
                # Not one token in timeout_s: a stuck runtime, which an empty answer would hide.
                job.events.put(("error", str(exc)))
                return
            # A truncated answer: the text so far with finish_reason "length", the OpenAI API
            # reference's value for output cut by a token limit (platform.openai.com/docs/api-reference/
            # chat/object); the client keeps the text and knows it is incomplete. The rest of this
            # method flushes text held back for stop sequences and sends "done".
            sys.stderr.write(f"edge-llm-serve: {exc}; answered with the {len(stamps)} tokens generated\n")
            figures = {"finish_reason": "length"}
        except ContextFull as exc:
            job.events.put(("error", str(exc), "context_length_exceeded"))
            return
        except RuntimeFailed as exc:
            self.metrics.error("generate")
            job.events.put(("error", str(exc)))
            return
        except Exception as exc:  # noqa: BLE001 - a binding bug must answer the client, not kill the worker
            self.metrics.error("internal")
            job.events.put(("error", f"internal error: {type(exc).__name__}: {exc}"))
            return
        whole = "".join(text)
        if job.stop and held["n"] < len(whole) and not any(s in whole for s in job.stop):
            job.events.put(("text", whole[held["n"]:]))
        if job.cancelled.is_set():
            with self.metrics._lock:
                self.metrics.cancelled += 1
        wall = time.monotonic() - started
        self.avg_s = 0.8 * self.avg_s + 0.2 * wall
        n = int(figures.get("decode_tokens") or len(stamps))
        ttft = round(stamps[0] - started, 4) if stamps else None
        decode_s = (stamps[-1] - stamps[0]) if len(stamps) > 1 else None
        decode_rate = figures.get("decode_tok_s") or (round((len(stamps) - 1) / decode_s, 2) if decode_s else None)
        prompt_tokens = int(figures.get("prefill_tokens") or max(1, len(job.prompt.encode("utf-8")) // 4))
        if ttft is not None:
            self.metrics.observe("ttft", ttft)
        if decode_rate:
            self.metrics.observe("decode", float(decode_rate))
        self.metrics.tokens(prompt_tokens, n)
        job.events.put(("done", {
            "finish_reason": figures.get("finish_reason") or finish["reason"],
            "tool_calls": figures.get("tool_calls"),     # an engine whose runtime parses calls itself
            "unparsed_tool_calls": figures.get("unparsed_tool_calls"),    # {"why", "output"}: its parser failed
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": n, "total_tokens": prompt_tokens + n},
            "timing": {"queue_s": round(started - job.enqueued, 4), "ttft_s": ttft,
                       "runtime_ttft_s": figures.get("ttft_s"), "decode_tok_s": decode_rate,
                       "prefill_tok_s": figures.get("prefill_tok_s"), "init_s": self.engine.init_s,
                       "wall_s": round(wall, 4)}}))
