"""Start-up: the config file, the run environment, the socket and the scheduler; the command line."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

import edge_llm_serve
from edge_llm_serve.config import DEFAULTS, VERSION, ConfigError, read_token
from edge_llm_serve.engines import ENGINES
from edge_llm_serve.engines.base import Engine
from edge_llm_serve.metrics import Metrics
from edge_llm_serve.prompts import TEMPLATES
from edge_llm_serve.scheduler import Scheduler
from edge_llm_serve.server import Service
from edge_llm_serve.toolcalls import FAMILIES
from edge_llm_serve.wire import activation_socket


def serve(cfg: dict[str, Any], engine: Engine | None = None) -> Service:
    """Take systemd's socket (or bind one), start loading the model in the worker thread, return the Service."""
    token = read_token(cfg)
    sock = activation_socket(cfg)
    metrics = Metrics()
    scheduler = Scheduler(engine or ENGINES[cfg["runtime"]](cfg), int(cfg.get("max_queue", 4)), metrics)
    svc = Service(cfg, scheduler, metrics, token, sock)
    scheduler.start()
    return svc


def _raise_fd_limit() -> None:
    """Idle sockets cost a descriptor each: take the hard limit so ~1000 of them fit."""
    try:
        import resource
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft < hard:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ImportError, ValueError, OSError):
        pass


def _reexec_with_env(cfg: dict[str, Any], argv: list[str]) -> None:
    """Start again with the config's run environment: the dynamic loader reads LD_LIBRARY_PATH
    only at process start, and the runtime library's own dependencies are found through it."""
    env = {k: str(v) for k, v in (cfg.get("env") or {}).items()}
    if not env or os.environ.get("EDGE_LLM_SERVE_ENV_APPLIED") == "1":
        return
    if all(os.environ.get(k) == v for k, v in env.items()):
        return
    merged = dict(os.environ) | env | {"EDGE_LLM_SERVE_ENV_APPLIED": "1"}
    # the program that started this process (/usr/bin/edge-llm-serve, or the layer's files/edge-llm-serve)
    os.execve(sys.executable, [sys.executable, os.path.abspath(sys.argv[0]), *argv], merged)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    ap = argparse.ArgumentParser(prog="edge-llm-serve", description=str(edge_llm_serve.__doc__).splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p_serve = sub.add_parser("serve", help="load the model once and serve the OpenAI-compatible API")
    p_serve.add_argument("--config", required=True)
    p_serve.add_argument("--bind")
    p_serve.add_argument("--port", type=int)
    args = ap.parse_args(argv)
    try:
        cfg = load_config(args.config)
    except (OSError, ValueError) as exc:
        sys.stderr.write(f"edge-llm-serve: {exc}\n")
        return 2
    if args.bind:
        cfg["bind"] = args.bind
    if args.port:
        cfg["port"] = args.port
    _reexec_with_env(cfg, argv)
    _raise_fd_limit()
    if os.path.isdir(cfg["model_dir"]):
        os.chdir(cfg["model_dir"])     # Genie configs name their files relative to the bundle
    try:
        svc = serve(cfg)
    except ConfigError as exc:
        sys.stderr.write(f"edge-llm-serve: {exc}\n")
        return 2
    except OSError as exc:
        sys.stderr.write(f"edge-llm-serve: cannot listen on {cfg['bind']}:{cfg['port']}: {exc.strerror}\n")
        return 1
    sys.stderr.write(f"edge-llm-serve {VERSION}: {cfg['model']} ({cfg['runtime']}) on {cfg['bind']}:{cfg['port']}, "
                     "bearer token required; loading the model\n")
    try:
        svc.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        svc.server_close()
    return 0




def load_config(path: str) -> dict[str, Any]:
    """Read /etc/edge-llm/serve/<model>.json and fill defaults; ConfigError (a ValueError) names the problem."""
    with open(path, encoding="utf-8") as fh:
        cfg = json.load(fh)
    if not isinstance(cfg, dict):
        raise ValueError(f"{path}: must be a JSON object")
    merged = dict(DEFAULTS) | cfg
    for key in ("model", "runtime", "model_dir", "executable"):
        if not merged.get(key):
            raise ValueError(f"{path}: '{key}' is required")
    if merged["runtime"] not in ENGINES:
        raise ValueError(f"{path}: runtime must be litert_lm or genie")
    if merged["runtime"] == "litert_lm" and not merged.get("model_file"):
        raise ValueError(f"{path}: 'model_file' is required for litert_lm")
    if merged["chat_template"] not in TEMPLATES:
        raise ValueError(f"{path}: chat_template must be one of {', '.join(TEMPLATES)}")
    if merged.get("tool_format") is not None and merged["tool_format"] not in FAMILIES:
        raise ValueError(f"{path}: tool_format must be one of {', '.join(FAMILIES)}")
    return merged
