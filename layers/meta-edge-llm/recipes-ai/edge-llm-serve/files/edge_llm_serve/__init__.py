"""edge-llm-serve: the on-board OpenAI-compatible LLM service, the model loaded once through its C API.

Runs on the board as /usr/bin/edge-llm-serve, a small entry point of this package (the meta-edge-llm
recipe installs both; fleet launch pushes the package to a board without it, but never to an OSTree-booted
board, whose /usr is the image's and read-only: there the service comes with fleet update-os).
The runtime is bound with ctypes: LiteRT-LM's c/engine.h library or QAIRT's libGenie.so
(:mod:`.engines.cabi`, the one list of functions called). The controller imports this package too, for
the argv builder and output parsers of the smoke run (:mod:`.runtime_cli`: `fleet verify` still runs
litert_lm_main / genie-t2t-run exactly as Qualcomm's tutorials run them).

API (OpenAI's, as llama-server/Ollama/vLLM serve it):
  GET  /health               200 when the model is loaded (readiness), 503 while loading or failed
  GET  /livez                200 while the process answers (liveness)
  GET  /v1/models            the one model this instance serves
  GET  /v1/models/{id}       that model, or 404 model_not_found for any other id
  POST /v1/chat/completions  messages in the model's chat template; stream=true is SSE ending "data: [DONE]"
  POST /v1/completions       raw prompt, also streaming
  GET  /metrics              Prometheus text format
  max_tokens|max_completion_tokens, temperature, top_p, stop, seed; usage; errors as OpenAI error objects.

Config (/etc/edge-llm/serve/<model>.json, written by the fleet): model, runtime (litert_lm|genie),
model_dir, executable, model_file (litert_lm) | genie_config (genie), chat_template, system_prompt,
env (run environment; the service re-executes itself with it), bind, port, and optionally
library (C-API .so; default LITERT_LM_LIBRARY or GENIE_LIBRARY found in env LD_LIBRARY_PATH or
<executable>/../lib), dispatch_lib_dir, backend, token_file, max_queue, max_connections,
max_client_connections, max_handlers, idle_timeout_s, read_timeout_s, body_timeout_s, backlog,
limits (see DEFAULTS).

Where things are: config (defaults, token file), startup (config file, run environment, main), server
(selector front), wire (socket helpers, route labels, systemd's socket), auth (the bearer token check),
routes (one handler per route), validation and fields (request bodies, which field each runtime honours),
scheduler, metrics, prompts (chat templates), engines (base, cabi, litert with litert_model_type, genie),
runtime_cli (the runtimes' programs, for the controller), toolcalls (with toolcalls_render and
toolcalls_stream: tool calls in each Genie model family's prompt format), answer_check and schema_check
(an answer judged against tool_choice, the declared tools and response_format).

Standard library only, on purpose: a QLI image has no pip, and this package needs nothing on the board
but python3 and the modules its recipe's RDEPENDS name. A server framework from meta-python (aiohttp,
say) would add that layer and its dependency tree to every image, and its connection handling would
have to be checked again against each security finding this code keeps:

- a bearer token per board in token_file (default /etc/edge-llm/serve/api-token, owned by the service
  user, mode 0600; never logged, compared in constant time) guards everything but /health and /livez;
  without one the service does not start, on any address;
- systemd holds the port (socket activation), so no other local user can bind it during a restart and
  collect the clients' tokens;
- idle sockets wait in a selector (no thread) and are closed after idle_timeout_s; a connection cap
  (and a smaller one per client address, one /64 for IPv6) answers 503;
- a request body must arrive within body_timeout_s (else 408), is bounded in size, JSON nesting depth
  and integer digits, and must be valid Unicode without NUL;
- /health and /livez have handler slots of their own, so slow requests cannot make the readiness
  probe fail; a full queue answers 429 with Retry-After;
- a client that goes away cancels its generation, and a queued request whose client left never starts;
- metrics are labelled by route, never by the client's path; the log has no query strings and no raw
  control bytes; prompts never reach a command line.

The names below are the package's API for the controller and the tests (one import, as when this was
one file); the service itself imports from the modules.
"""

from __future__ import annotations

from edge_llm_serve.config import DEFAULTS, STARTED, VERSION, ConfigError, read_token
from edge_llm_serve.engines import ENGINES
from edge_llm_serve.engines.base import ContextFull, Engine, Job, RuntimeFailed, TimedOut, cache_dir, timed_out
from edge_llm_serve.engines.cabi import (
    GENIE_DIALOG_ACTION_ABORT,
    GENIE_DIALOG_SENTENCE_ABORT,
    GENIE_DIALOG_SENTENCE_BEGIN,
    GENIE_DIALOG_SENTENCE_COMPLETE,
    GENIE_DIALOG_SENTENCE_CONTINUE,
    GENIE_DIALOG_SENTENCE_END,
    GENIE_LIBRARY,
    GENIE_PROTOTYPES,
    GENIE_STATUS_SUCCESS,
    GENIE_STATUS_WARNING_ABORTED,
    GENIE_STATUS_WARNING_CONTEXT_EXCEEDED,
    LITERT_INPUT_TEXT,
    LITERT_LM_ABI,
    LITERT_LM_LIBRARY,
    LITERT_LM_OTHER_ABI_SYMBOLS,
    LITERT_LM_PROTOTYPES,
    LITERT_LM_VERSION_SYMBOL,
    LITERT_LOG_INFO,
    LITERT_LOG_WARNING,
    GenieDialogQueryCallback,
    LiteRtLmInputData,
    LiteRtLmSamplerParams,
    LiteRtLmStreamCallback,
    bind_library,
    check_litert_abi,
    find_library,
)
from edge_llm_serve.engines.genie import GenieEngine
from edge_llm_serve.engines.litert import LITERT_MAX_TOKENS_REACHED, LiteRtLmEngine, runtime_log_report
from edge_llm_serve.fields import HONOURED, MESSAGE_REFUSED, NEUTRAL, REFUSED, RUNTIME_REFUSED, refusal
from edge_llm_serve.metrics import DECODE_BUCKETS, TTFT_BUCKETS, Metrics, backend_info
from edge_llm_serve.prompts import TEMPLATES, apply_chat_template, render_chat, system_text
from edge_llm_serve.routes import PEER_CHECK_S, make_handler
from edge_llm_serve.runtime_cli import (
    build_argv,
    coherence,
    parse_benchmark_info,
    parse_genie_output,
    parse_genie_profile,
    parse_run,
)
from edge_llm_serve.scheduler import Scheduler
from edge_llm_serve.server import Service
from edge_llm_serve.startup import load_config, main, serve
from edge_llm_serve.validation import MAX_INT_DIGITS, MAX_JSON_DEPTH, BadRequest, make_job, parse_body
from edge_llm_serve.wire import (
    HEALTH_ROUTES,
    HEALTH_SLOTS,
    MAX_HEAD_BYTES,
    MODEL_ROUTE,
    OTHER,
    ROUTES,
    SD_LISTEN_FDS_START,
    STATUS_CODES,
    activation_socket,
    client_gone,
    client_key,
    close_after_reply,
    head_route,
    printable,
    route,
    status_code,
)

__all__ = [
    "HONOURED",
    "MESSAGE_REFUSED",
    "NEUTRAL",
    "REFUSED",
    "RUNTIME_REFUSED",
    "refusal",
    "HONOURED",
    "MESSAGE_REFUSED",
    "NEUTRAL",
    "REFUSED",
    "refusal",
    "MODEL_ROUTE",
    "STATUS_CODES",
    "status_code",
    "annotations",
    "DEFAULTS",
    "STARTED",
    "VERSION",
    "ConfigError",
    "read_token",
    "ENGINES",
    "ContextFull",
    "Engine",
    "Job",
    "RuntimeFailed",
    "TimedOut",
    "cache_dir",
    "timed_out",
    "GENIE_DIALOG_ACTION_ABORT",
    "GENIE_DIALOG_SENTENCE_ABORT",
    "GENIE_DIALOG_SENTENCE_BEGIN",
    "GENIE_DIALOG_SENTENCE_COMPLETE",
    "GENIE_DIALOG_SENTENCE_CONTINUE",
    "GENIE_DIALOG_SENTENCE_END",
    "GENIE_LIBRARY",
    "GENIE_PROTOTYPES",
    "GENIE_STATUS_SUCCESS",
    "GENIE_STATUS_WARNING_ABORTED",
    "GENIE_STATUS_WARNING_CONTEXT_EXCEEDED",
    "LITERT_INPUT_TEXT",
    "LITERT_LM_ABI",
    "LITERT_LM_LIBRARY",
    "LITERT_LM_OTHER_ABI_SYMBOLS",
    "LITERT_LM_PROTOTYPES",
    "LITERT_LM_VERSION_SYMBOL",
    "LITERT_LOG_INFO",
    "LITERT_LOG_WARNING",
    "GenieDialogQueryCallback",
    "LiteRtLmInputData",
    "LiteRtLmSamplerParams",
    "LiteRtLmStreamCallback",
    "bind_library",
    "check_litert_abi",
    "find_library",
    "GenieEngine",
    "LITERT_MAX_TOKENS_REACHED",
    "LiteRtLmEngine",
    "runtime_log_report",
    "DECODE_BUCKETS",
    "TTFT_BUCKETS",
    "Metrics",
    "backend_info",
    "TEMPLATES",
    "apply_chat_template",
    "render_chat",
    "system_text",
    "PEER_CHECK_S",
    "make_handler",
    "build_argv",
    "coherence",
    "parse_benchmark_info",
    "parse_genie_output",
    "parse_genie_profile",
    "parse_run",
    "Scheduler",
    "Service",
    "load_config",
    "main",
    "serve",
    "MAX_INT_DIGITS",
    "MAX_JSON_DEPTH",
    "BadRequest",
    "make_job",
    "parse_body",
    "HEALTH_ROUTES",
    "HEALTH_SLOTS",
    "MAX_HEAD_BYTES",
    "OTHER",
    "ROUTES",
    "SD_LISTEN_FDS_START",
    "activation_socket",
    "client_gone",
    "client_key",
    "close_after_reply",
    "head_route",
    "printable",
    "route",
]
