"""The request handlers, one per route: health, then (after the bearer-token check of :mod:`.auth`) models,
metrics and completions."""

from __future__ import annotations

import dataclasses
import io
import json
import os
import queue
import re
import socket
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler
from typing import TYPE_CHECKING, Any

from edge_llm_serve import auth
from edge_llm_serve.answer_check import Judge, Unfit, needed
from edge_llm_serve.config import DEFAULTS, STARTED, VERSION
from edge_llm_serve.engines.base import Job
from edge_llm_serve.metrics import backend_info
from edge_llm_serve.validation import BadRequest, make_job, parse_body
from edge_llm_serve.wire import MODEL_ROUTE, OTHER, _Prefixed, _SendAll, client_gone, printable, route, status_code

if TYPE_CHECKING:      # the server imports this module to build its handler class
    from edge_llm_serve.server import Service

PEER_CHECK_S = 0.002        # how often a streaming handler looks whether its client is still there


def make_handler(svc: Service) -> type[BaseHTTPRequestHandler]:
    """The request handler class bound to one Service."""
    cfg = svc.cfg

    class Handler(BaseHTTPRequestHandler):
        server_version = f"edge-llm-serve/{VERSION}"
        protocol_version = "HTTP/1.1"

        def __init__(self, conn: socket.socket, addr: Any, server: Any, head: bytes) -> None:
            self._head = head
            self._endpoint = OTHER
            self._status = 0
            self._peer_at = 0.0         # when _next last looked whether the client is still there
            super().__init__(conn, addr, server)

        def setup(self) -> None:
            self.connection = self.request
            self.rfile = io.BufferedReader(_Prefixed(self._head, self.request))
            self.wfile = _SendAll(self.request)

        def finish(self) -> None:
            try:
                self.wfile.close()
            except OSError:
                pass
            if self._status:
                svc.metrics.request(self._endpoint, self._status)

        def log_request(self, code: Any = "-", size: Any = "-") -> None:
            """One line per reply: method, path and status; never bodies, tokens or the query string
            (OpenAI-style clients may put the key there: ``?api_key=``)."""
            method = getattr(self, "command", None) or "-"
            path = str(getattr(self, "path", "") or "-").split("?", 1)[0]
            self.log_message("%s %s %s", method, path, int(code) if isinstance(code, int) else code)

        def log_message(self, fmt: str, *args: Any) -> None:
            sys.stderr.write(f"{self.address_string()} {printable(fmt % args)}\n")

        def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
            """http.server's own parse errors (bad request line, oversized header), as JSON."""
            self.close_connection = True
            self._error(code, message or "bad request", "invalid_request_error")

        # -- responses ---------------------------------------------------------------------
        def _send(self, status: int, body: dict[str, Any] | str, headers: dict[str, str] | None = None,
                  ctype: str = "application/json") -> None:
            data = (json.dumps(body) + "\n").encode() if isinstance(body, dict) else body.encode()
            self._status = status
            self.close_connection = True
            self.wfile.hold()
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.send_header("Connection", "close")
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            try:
                self.wfile.write(data)
                self.wfile.release()
            except OSError:
                pass

        def _error(self, status: int, message: str, kind: str, param: str | None = None, code: Any = None,
                   headers: dict[str, str] | None = None) -> None:
            self._send(status, {"error": {"message": message, "type": kind, "param": param,
                                          "code": str(code) if code is not None else status_code(status)}}, headers)

        def _not_ready(self) -> None:
            sched = svc.scheduler
            if sched.state == "loading":
                self._error(503, "model is loading; retry shortly", "server_error", code="model_loading",
                            headers={"Retry-After": "2"})
            else:
                self._error(503, f"model not loaded: {sched.reason}", "server_error", code="model_not_loaded")

        def _authorized(self) -> bool:
            """The bearer-token check of :mod:`.auth`; answers the 401 itself when it fails."""
            why = auth.refusal(self.headers.get("Authorization"), svc.token)
            if why is None:
                return True
            self._error(auth.REFUSED_STATUS, why, auth.REFUSED_KIND, code=auth.REFUSED_CODE,
                        headers=dict(auth.REFUSED_HEADERS))
            return False

        # -- GET ---------------------------------------------------------------------------
        def do_GET(self) -> None:  # noqa: N802 (http.server naming)
            path = self.path.split("?", 1)[0]
            self._endpoint = route(path)
            sched = svc.scheduler
            if path in ("/health", "/livez"):
                body = {"status": "ok" if sched.ready else sched.state, "live": True, "ready": sched.ready,
                        "model": cfg["model"], "runtime": cfg["runtime"], "busy": sched.current is not None,
                        "queued": sched.depth, "init_s": sched.engine.init_s, "version": VERSION,
                        # configured; runtime: what the runtime said it runs on (the pinned C API cannot
                        # be asked); runtime_said: its warnings about accelerators (e.g. an NPU not registered)
                        "backend": sched.engine.backend}
                if sched.reason:
                    body["reason"] = sched.reason
                self._send(200 if sched.ready or path == "/livez" else 503, body)
                return
            if not self._authorized():
                return
            caps = sched.engine.capabilities
            model = {"id": cfg["model"], "object": "model", "created": STARTED, "owned_by": "edge-llm",
                     "capabilities": {k: bool(caps.get(k)) for k in ("tools", "json_object", "json_schema", "grammar",
                                                                     "constrained")}}
            if path == "/v1/models":
                self._send(200, {"object": "list", "data": [model]})
            elif self._endpoint == MODEL_ROUTE:
                asked = urllib.parse.unquote(path[len("/v1/models/"):])
                if asked == cfg["model"]:
                    self._send(200, model)
                else:
                    self._error(404, f"model {printable(asked)!r} is not served here (this is {cfg['model']!r})",
                                "invalid_request_error", param="model", code="model_not_found")
            elif path == "/metrics":
                self._send(200, svc.metrics.render({
                    "edge_llm_queue_depth": ("Requests waiting for the NPU.", sched.depth),
                    "edge_llm_busy": ("1 while a generation runs.", 1 if sched.current is not None else 0),
                    "edge_llm_model_loaded": ("1 once the model is loaded.", 1 if sched.ready else 0),
                    "edge_llm_open_connections": ("Open client connections.", svc.connections),
                    **backend_info(sched.engine.backend)}),
                    ctype="text/plain; version=0.0.4; charset=utf-8")
            else:
                self._error(404, f"no such endpoint {path!r}", "invalid_request_error", code="not_found")

        # -- POST --------------------------------------------------------------------------
        def do_POST(self) -> None:  # noqa: N802
            path = self.path.split("?", 1)[0]
            self._endpoint = route(path)
            kinds = {"/v1/chat/completions": "chat", "/v1/completions": "completion"}
            if path not in kinds:
                self._error(404, f"no such endpoint {path!r}", "invalid_request_error", code="not_found")
                return
            if not self._authorized():
                return
            sched = svc.scheduler
            try:
                body = parse_body(self._body())
                job = make_job(cfg, kinds[path], body, sched.engine.capabilities, sched.engine.capability_notes)
            except BadRequest as exc:
                self._error(exc.status, str(exc), exc.kind, exc.param, exc.code)
                return
            if not sched.ready:
                self._not_ready()
                return
            job.gone = lambda: client_gone(self.connection)
            if not sched.submit(job):
                retry = max(1, int(sched.avg_s * (sched.depth + 1) + 0.999))
                self._error(429, f"the NPU is busy and {sched.max_queue} requests are queued; retry later",
                            "rate_limit_exceeded", code="queue_full", headers={"Retry-After": str(retry)})
                return
            try:
                if needed(job):
                    self._checked(job, body)
                elif body.get("stream"):
                    self._stream(job, kinds[path], body)
                else:
                    self._whole(job, kinds[path])
            finally:
                if not job.finished:      # the client went away or the write failed: free the NPU
                    sched.cancel(job)

        def _body(self) -> bytes:
            """The request body, read within body_timeout_s in all (each read within read_timeout_s).

            A per-read timeout alone let a body that trickles in a byte at a time hold its handler
            slot for as long as the client liked.
            """
            if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                raise BadRequest("chunked bodies are not accepted; send Content-Length", status=411)
            value = self.headers.get("Content-Length")
            if value is None:
                raise BadRequest("Content-Length required", status=411)
            # RFC 9110 section 8.6: Content-Length = 1*DIGIT, ASCII digits only. str.isdigit() and int()
            # also take '²' or '1_0', and int('²') raised past the handler: the client got no reply.
            if not re.fullmatch(r"[0-9]{1,12}", value.strip(" \t")):
                raise BadRequest(f"bad Content-Length {printable(value[:40])!r}: it must be a decimal number")
            length = int(value)
            limit = int(cfg.get("max_body_bytes") or DEFAULTS["max_body_bytes"])
            if length > limit:
                raise BadRequest(f"request body {length} bytes exceeds the {limit}-byte limit", status=413)
            deadline = time.monotonic() + svc.body_timeout
            parts: list[bytes] = []
            got = 0
            try:
                while got < length:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise TimeoutError
                    self.connection.settimeout(min(left, svc.read_timeout))
                    part = self.rfile.read1(length - got)
                    if not part:
                        raise BadRequest("request body shorter than Content-Length")
                    parts.append(part)
                    got += len(part)
            except TimeoutError as exc:
                raise BadRequest(f"request body not received within {svc.body_timeout:g} s "
                                 f"(or a pause over {svc.read_timeout:g} s)", status=408) from exc
            finally:
                self.connection.settimeout(svc.read_timeout)
            return b"".join(parts)

        def _next(self, job: Job, watch: bool) -> tuple[Any, ...] | None:
            """The job's next event; None (and the job cancelled) when the client went away.

            The peer is looked at (a select and a peek) at least every PEER_CHECK_S while events flow
            and on every wait, not only when a write fails: a write to a just-closed socket still
            succeeds, so waiting for a failed write kept an abandoned generation on the NPU for two
            more tokens while the next client queued. Not before every token: at thousands of tokens
            a second those two system calls were a good part of the per-token cost.
            """
            while True:
                try:
                    ev = job.events.get(timeout=0.05)
                except queue.Empty:
                    ev = None
                now = time.monotonic()
                if watch and (ev is None or now - self._peer_at >= PEER_CHECK_S):
                    self._peer_at = now
                    if client_gone(self.connection):
                        svc.scheduler.cancel(job)
                        return None
                if ev is not None:
                    return ev

        def _whole(self, job: Job, kind: str) -> None:
            parts: list[str] = []
            while True:
                ev = self._next(job, watch=True)
                if ev is None:
                    return
                if ev[0] == "text":
                    parts.append(ev[1])
                elif ev[0] == "error":
                    job.finished = True
                    self._failed(ev)
                    return
                else:
                    job.finished = True
                    done = ev[1]
                    break
            text = "".join(parts)
            created = int(time.time())
            if kind == "chat":
                choice = {"index": 0, "message": {"role": "assistant", "content": text},
                          "finish_reason": done["finish_reason"], "logprobs": None}
                obj, prefix = "chat.completion", "chatcmpl"
            else:
                choice = {"index": 0, "text": text, "finish_reason": done["finish_reason"], "logprobs": None}
                obj, prefix = "text_completion", "cmpl"
            self._send(200, {"id": f"{prefix}-{os.urandom(12).hex()}", "object": obj, "created": created,
                             "model": cfg["model"], "choices": [choice], "usage": done["usage"],
                             "timing": done["timing"]})

        def _checked(self, job: Job, body: dict[str, Any]) -> None:
            """A chat answer that is read before the client takes it (tool calls, response_format): judged
            by answer_check.Judge; one that does not fit runs once more (unless the runtime constrained
            it), then the client gets the error with the model's output, never a silent answer."""
            stream = bool(body.get("stream"))
            retries = 0 if svc.scheduler.engine.capabilities.get("constrained") else 1
            retried = False
            ident, created = f"chatcmpl-{os.urandom(12).hex()}", int(time.time())
            opts = body.get("stream_options")
            include_usage = isinstance(opts, dict) and opts.get("include_usage") is True
            started = {"head": False}

            def piece(delta: dict[str, Any] | None, finish: str | None = None) -> str:
                choice = {"index": 0, "delta": delta or {}, "finish_reason": finish, "logprobs": None}
                return "data: " + json.dumps({"id": ident, "object": "chat.completion.chunk", "created": created,
                                              "model": cfg["model"], "choices": [choice]}) + "\n\n"

            def send(parts: list[str]) -> bool:
                if not started["head"]:
                    started["head"] = True
                    self._status = 200
                    self.close_connection = True
                    self.wfile.hold()
                    self.send_response(200)
                    self.send_header("Content-Type", "text/event-stream")
                    self.send_header("Cache-Control", "no-cache")
                    self.send_header("Connection", "close")
                    self.end_headers()
                    parts = [piece({"role": "assistant", "content": ""})] + parts
                try:
                    self.wfile.write("".join(parts).encode())
                    self.wfile.release()
                    return True
                except OSError:
                    svc.scheduler.cancel(job)
                    return False

            while True:
                judge = Judge(job, cfg.get("tool_format"), body.get("parallel_tool_calls") is not False)
                judge.hold = judge.hold or not stream     # a whole answer leaves at its end: a retry can replace it
                try:
                    while True:
                        ev = self._next(job, watch=True)
                        if ev is None:
                            return
                        if ev[0] == "text":
                            deltas = judge.feed(ev[1])
                            if stream and deltas and not send([piece(d) for d in deltas]):
                                return
                            continue
                        job.finished = True
                        if ev[0] == "error":
                            if started["head"]:
                                send(["data: " + json.dumps({"error": {"message": ev[1], "type": "server_error",
                                      "param": None, "code": "runtime_error"}}) + "\n\ndata: [DONE]\n\n"])
                            else:
                                self._failed(ev)
                            return
                        done = ev[1]
                        break
                finally:
                    if not job.finished:
                        svc.scheduler.cancel(job)
                try:
                    deltas, reason, message = judge.finish(done)
                except Unfit as exc:
                    svc.metrics.error("answer_unfit")
                    if retries and not judge.sent:
                        retries, retried = retries - 1, True
                        job = self._again(job, body, exc)
                        if job is None:
                            return
                        continue
                    err = {"message": f"{exc}{' (also on the retry)' if retried else ''}",
                           "type": "server_error", "param": None, "code": exc.code, "model_output": exc.output[:2000]}
                    if started["head"]:
                        send(["data: " + json.dumps({"error": err}) + "\n\ndata: [DONE]\n\n"])
                    else:
                        # x-should-retry: false, or the openai client runs the request again by itself on a 5xx
                        # (openai-python _base_client.py, _should_retry, "x-should-retry")
                        self._send(500, {"error": err}, {"x-should-retry": "false"})
                    return
                except Exception as exc:  # noqa: BLE001 (any fault in judging: an answer, not a dropped connection)
                    # Without this the handler thread dies with a traceback in the journal and the client
                    # sees its connection closed with no HTTP answer at all.
                    sys.stderr.write(f"checking the answer failed: {printable(repr(exc))[:300]}\n")
                    svc.metrics.error("answer_check_failed")
                    err = {"message": "the service could not check the model's answer", "type": "server_error",
                           "param": None, "code": "answer_check_failed"}
                    if started["head"]:
                        send(["data: " + json.dumps({"error": err}) + "\n\ndata: [DONE]\n\n"])
                    else:
                        self._send(500, {"error": err}, {"x-should-retry": "false"})
                    return
                if not stream:
                    self._send(200, {"id": ident, "object": "chat.completion", "created": created,
                                     "model": cfg["model"], "choices": [{"index": 0, "message": message,
                                                                         "finish_reason": reason, "logprobs": None}],
                                     "usage": done["usage"], "timing": done["timing"]})
                    return
                out = [piece(d) for d in deltas] + [piece(None, reason)]
                if include_usage:
                    out.append("data: " + json.dumps({"id": ident, "object": "chat.completion.chunk",
                                                      "created": created, "model": cfg["model"], "choices": [],
                                                      "usage": done["usage"], "timing": done["timing"]}) + "\n\n")
                send(out + ["data: [DONE]\n\n"])
                return

        def _again(self, job: Job, body: dict[str, Any], why: Unfit) -> Job | None:
            """The bounded retry (once, see _checked): the request again with a correction turn, queued; None
            when the queue is full (answered 429).

            Why not the same job again: on Genie the sampler is the model's genie_config.json and on a
            greedy or seeded LiteRT-LM run the same prompt gives the same answer, so an unchanged retry
            only doubles the NPU time. The retry therefore adds the model's unfit answer as an assistant
            turn and a user turn saying what was wrong (the service's own words, not the model's), and,
            when the client sent no seed, a fresh seed, so a sampling runtime draws anew. A client's seed
            is kept: it asked for repeatable sampling."""
            turns = [{"role": "assistant", "content": why.output[:2000] or "(no answer)"},
                     {"role": "user", "content": f"That answer could not be used: {why}. Answer my request "
                                                 "again, fixing exactly that."}]
            try:
                fixed = make_job(cfg, "chat", {**body, "messages": list(body["messages"]) + turns},
                                 svc.scheduler.engine.capabilities, svc.scheduler.engine.capability_notes)
            except BadRequest:      # e.g. the longer prompt no longer fits: the plain retry, fresh seed only
                fixed = job
            seed = job.seed if body.get("seed") is not None else int.from_bytes(os.urandom(4), "big") & 0x7FFFFFFF
            again = dataclasses.replace(fixed, seed=seed, events=queue.SimpleQueue(), cancelled=threading.Event(),
                                        enqueued=time.monotonic(), finished=False, gone=job.gone)
            if not svc.scheduler.submit(again):
                self._error(429, "the answer did not fit the request and the NPU queue is full for its retry",
                            "rate_limit_exceeded", code="queue_full", headers={"Retry-After": "2"})
                return None
            return again

        def _failed(self, ev: tuple[Any, ...]) -> None:
            """Answer an error event: the client's (400, e.g. a prompt longer than the context) or the
            runtime's (500)."""
            if len(ev) > 2 and ev[2] == "context_length_exceeded":
                self._error(400, ev[1], "invalid_request_error", code=ev[2])
            else:
                self._error(500, ev[1], "server_error", code="runtime_error")

        def _stream(self, job: Job, kind: str, body: dict[str, Any]) -> None:
            # Nothing is sent before the runtime's first event: a request it refuses before the
            # first token (a prompt longer than the context) is then a plain HTTP error, not a 200
            # followed by an error event.
            first = self._next(job, watch=True)
            if first is None:
                return
            if first[0] == "error":
                job.finished = True
                self._failed(first)
                return
            self._status = 200
            self.close_connection = True
            self.wfile.hold()                   # the head goes out with the first tokens
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Connection", "close")
            self.end_headers()
            ident = f"{'chatcmpl' if kind == 'chat' else 'cmpl'}-{os.urandom(12).hex()}"
            created = int(time.time())
            obj = "chat.completion.chunk" if kind == "chat" else "text_completion"
            opts = body.get("stream_options")
            include_usage = isinstance(opts, dict) and opts.get("include_usage") is True

            def chunk(text: str | None, finish: str | None, first: bool = False) -> dict[str, Any]:
                if kind == "chat":
                    delta: dict[str, Any] = {"role": "assistant"} if first else {}
                    if text is not None:
                        delta["content"] = text
                    choice: dict[str, Any] = {"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}
                else:
                    choice = {"index": 0, "text": text or "", "finish_reason": finish, "logprobs": None}
                return {"id": ident, "object": obj, "created": created, "model": cfg["model"], "choices": [choice]}

            # A text event's SSE bytes are chunk(text, None) as json.dumps writes it, with only the text
            # encoded per token: the rest of the object is the same for every token of the stream.
            head, tail = json.dumps(chunk("\x00", None)).split(json.dumps("\x00"))
            head, tail = "data: " + head, tail + "\n\n"

            def event(ev: dict[str, Any] | str) -> str:
                return f"data: {ev if isinstance(ev, str) else json.dumps(ev)}\n\n"

            def write(data: str) -> bool:
                try:
                    self.wfile.write(data.encode())
                    self.wfile.release()
                    return True
                except OSError:
                    svc.scheduler.cancel(job)
                    return False

            out: list[str] = [event(chunk("", None, first=True))] if kind == "chat" else []
            ev: tuple[Any, ...] | None = first
            while True:
                if ev is None:
                    ev = self._next(job, watch=True)     # waits; looks at the peer now and then
                    if ev is None:
                        return
                # Every event already queued goes out in this one write: when the client or the network
                # is slower than the runtime, tokens cost one send() per batch, not one each.
                batch = [ev]
                while batch[-1][0] == "text":
                    try:
                        batch.append(job.events.get_nowait())
                    except queue.Empty:
                        break
                ev = None
                end: tuple[Any, ...] | None = None
                for item in batch:
                    if item[0] == "text":
                        if item[1]:
                            out.append(head + json.dumps(item[1]) + tail)
                    else:
                        end = item
                if end is None:
                    if out and not write("".join(out)):
                        return
                    out = []
                    continue
                job.finished = True
                if end[0] == "error":
                    out.append(event({"error": {"message": end[1], "type": "server_error", "param": None,
                                                "code": "runtime_error"}}))
                    write("".join(out) + event("[DONE]"))
                    return
                done = end[1]
                out.append(event(chunk(None, done["finish_reason"]) if kind == "chat"
                                 else chunk("", done["finish_reason"])))
                if include_usage:
                    out.append(event({"id": ident, "object": obj, "created": created, "model": cfg["model"],
                                      "choices": [], "usage": done["usage"], "timing": done["timing"]}))
                write("".join(out) + event("[DONE]"))
                return

    return Handler
