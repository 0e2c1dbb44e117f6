"""The service's defaults, its version and its bearer token: what every other module reads, importing none of them."""

from __future__ import annotations

import os
import time
from typing import Any

VERSION = "1.0"

DEFAULTS: dict[str, Any] = {
    "bind": "127.0.0.1",
    "port": 8080,
    "max_queue": 4,             # requests allowed to wait while one runs (more: 429)
    "max_body_bytes": 65536,    # whole request body
    "max_prompt_chars": 16000,
    "max_tokens_limit": 4096,
    "default_max_tokens": 256,
    "timeout_s": 300,           # longest single generation
    "chat_template": "plain",
    "system_prompt": None,
    "max_tokens_flag": None,    # smoke run only: e.g. "--max_num_tokens" if the runtime build has one
    "env": {},
    "backend": "npu",
    "token_file": "/etc/edge-llm/serve/api-token",
    "max_connections": 2048,    # open sockets, idle ones included (each costs a descriptor, no thread)
    "max_client_connections": 256,  # open sockets from one client address (IPv6: one /64)
    "max_handlers": 64,         # requests being answered at once (plus HEALTH_SLOTS for /health, /livez)
    "idle_timeout_s": 10,       # a request head must arrive within this
    "read_timeout_s": 10,       # each read of a request body, each write of a reply
    "body_timeout_s": 30,       # the whole request body must arrive within this
    "backlog": 512,             # listen(2) backlog: a burst waits in the kernel, not in a reset
}

# ---------------------------------------------------------------------------------------------
# The bearer token and the config's errors
# ---------------------------------------------------------------------------------------------

STARTED = int(time.time())


class ConfigError(Exception):
    """The config or token file is unusable: one line on stderr, exit 2."""




def read_token(cfg: dict[str, Any]) -> str:
    """The board's bearer token; ConfigError when there is none or it is unusable.

    There is no tokenless mode, loopback included: any local user can reach a loopback port, and
    a service that came up open when its token file was missing still passed verify and benchmark.
    The token file must be private to the service user (mode 0600 or 0400, like ssh keys): a
    token other local users can read protects nothing.
    """
    path = cfg.get("token_file")
    if not path:
        raise ConfigError("no token_file in the config: the service needs a bearer token to start")
    try:
        st = os.stat(path)
    except FileNotFoundError as exc:
        raise ConfigError(f"token file {path} does not exist: the service needs a bearer token to start "
                          "(fleet launch writes it)") from exc
    except OSError as exc:
        raise ConfigError(f"cannot read token file {path}: {exc.strerror}") from exc
    if st.st_mode & 0o077:
        raise ConfigError(f"token file {path} is readable by others (mode {st.st_mode & 0o777:o}); chmod 600 it")
    try:
        with open(path, encoding="utf-8") as fh:
            token = fh.read().strip()
    except OSError as exc:
        raise ConfigError(f"cannot read token file {path}: {exc.strerror}") from exc
    if len(token) < 16 or any(c.isspace() for c in token):
        raise ConfigError(f"token file {path}: the token must be one word of at least 16 characters")
    return token
