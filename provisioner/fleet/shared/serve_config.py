"""The config edge-llm-serve reads for one model, and the smoke inference built from it.

One builder for three users: the serve units ``fleet deploy`` installs
(:mod:`provisioner.fleet.launch`), verify's smoke inference (:mod:`provisioner.fleet.verify`) and the
benchmark, so all three run the runtime with the same executable, environment and chat template.
"""

from __future__ import annotations

import posixpath
import stat
from pathlib import Path
from typing import Any

from provisioner import catalog
from provisioner.contracts import board as on_board
from provisioner.contracts.inventory import ModelVars
from provisioner.errors import FleetError
from provisioner.fleet.shared.onboard import serve

SMOKE_TIMEOUT_S = 300
LOOPBACK = ("127.0.0.1", "::1", "localhost")
# The controller's copy of each board's token: <inventory dir>/.edge-llm-tokens/<host>, 0600 in a 0700
# dir (the launch role's edge_llm_serve_token_dir default says the same; ansible.builtin.password writes it).
TOKEN_DIR_NAME = ".edge-llm-tokens"
# Connection limits the fleet writes into every config (edge-llm-serve's own defaults, made explicit
# so a board's config says what it enforces): open sockets, requests answered at once, seconds a
# request head and each body read may take, open sockets per client address, seconds a whole body may take.
# The values are the service's own DEFAULTS, so the two can never disagree.
LIMITS = {k: serve.DEFAULTS[k] for k in ("max_connections", "max_client_connections", "max_handlers",
                                         "idle_timeout_s", "read_timeout_s", "body_timeout_s")}


#: the shortest token edge-llm-serve accepts (its read_token: one word of at least 16 characters)
TOKEN_MIN_LENGTH = 16


def token_file_problem(path: str | Path) -> str | None:
    """Why the controller's token file of a board must not be pushed (None when it may, or does not exist yet).

    The token is the board's only credential: a file or folder other users can write lets them choose it, a
    file they can read hands it out (the rule OpenSSH applies to private keys, sshd(8) "StrictModes"). A token
    the service would refuse (edge-llm-serve read_token: one word of >= 16 characters) would make the healthy
    service crash-loop on the board, so it is refused here, with the file named, before anything is pushed.
    """
    path = Path(path)
    try:
        st = path.lstat()
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"token file {path}: cannot read it ({exc.strerror})"
    if not stat.S_ISREG(st.st_mode):
        return f"token file {path} is not a regular file; remove it and launch again to generate one"
    folder = path.parent.stat()
    if folder.st_mode & 0o022:
        return (f"token folder {path.parent} is writable by other users (mode {folder.st_mode & 0o777:o}); "
                f"chmod 700 {path.parent}")
    if st.st_mode & 0o077:
        return f"token file {path} is open to other users (mode {st.st_mode & 0o777:o}); chmod 600 {path}"
    try:
        token = path.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return f"token file {path} is not ASCII text; remove it and launch again to generate one"
    if len(token) < TOKEN_MIN_LENGTH or not token.isprintable() or any(c.isspace() for c in token):
        return (f"token file {path} does not hold a token edge-llm-serve accepts (one word of at least "
                f"{TOKEN_MIN_LENGTH} characters); remove it and launch again to generate one")
    return None


def controller_token(inventory: Path, host: str) -> str | None:
    """The bearer token ``fleet launch`` generated for ``host`` (None before the first launch)."""
    path = Path(inventory).parent / TOKEN_DIR_NAME / host
    try:
        return path.read_text(encoding="utf-8").strip() or None
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise FleetError(f"cannot read {host}'s API token {path}: {getattr(exc, 'strerror', None) or exc}",
                         "it must be a file only this user can read (fleet launch writes it with mode 0600)") from None


def serve_config(board: catalog.Board, model: ModelVars, *, index: int = 0, bind: str = "127.0.0.1",
                 model_dir: str | None = None, port_base: int = on_board.SERVE_BASE_PORT,
                 token_file: str | None = on_board.TOKEN_FILE) -> dict[str, Any]:
    """The JSON config edge-llm-serve reads for ``model`` (executable, model dir, env, port, token file).

    ``token_file`` None means no bearer token; then only a loopback bind is allowed (the service
    would refuse to start on a LAN address without one, so the config is refused here first).
    """
    if token_file is None and bind not in LOOPBACK:
        raise ValueError(f"bind {bind} is not loopback and there is no token file: a LAN bind needs a bearer token")
    env = on_board.run_env(board, model.runtime, model.qairt)
    if model.runtime == "litert_lm":
        exe = f"{on_board.litert_dir()}/bin/litert_lm_main"
    else:
        exe = f"{on_board.qairt_bin_dir(model.qairt)}/genie-t2t-run"
    cfg: dict[str, Any] = {
        "model": model.name,
        "runtime": model.runtime,
        "model_dir": model_dir or on_board.model_current(model.name),
        "executable": exe,
        "chat_template": model.chat_template if model.chat_template in serve.TEMPLATES else "plain",
        "bind": bind,
        "port": model.port or int(port_base) + index,
        "env": env.as_env(),
        **LIMITS,
    }
    if token_file:
        cfg["token_file"] = token_file
    if model.runtime == "litert_lm":
        cfg["model_file"] = model.file or f"{model.name}.litertlm"
        # The model's context (catalog): the service gives it to the runtime (c/engine.h:286 at cbf463d,
        # litert_lm_engine_settings_set_max_num_tokens), refuses a longer prompt with a 400 before any byte
        # and ends a generation that fills it with finish_reason "length".
        known = catalog.models().get(model.name)
        if known is not None and known.context:
            cfg["max_num_tokens"] = known.context
    else:
        cfg["genie_config"] = "genie_config.json"
        # Genie takes prompt text: the service renders tools in the family's format and parses its calls
        known = catalog.models().get(model.name)
        tool_format = model.tool_format or (known.tool_format if known else None)
        if tool_format:
            cfg["tool_format"] = tool_format
    if model.system_prompt:
        cfg["system_prompt"] = model.system_prompt
    elif model.chat_template == "llama3" and "nemotron" in model.name:
        cfg["system_prompt"] = "detailed thinking off"
    return cfg


WORK = "{work}"          # stands for the smoke run's fresh temp dir on the board (the probe fills it in)
# The NPU dispatch library litert_lm_main must find (on_board.LITERT_FILES, in the runtime's lib/).
DISPATCH_LIB = "lib/libLiteRtDispatch_Qualcomm.so"


def litert_run_links(cfg: dict[str, Any], run_dir: str = WORK) -> tuple[dict[str, Any], dict[str, str]]:
    """The run directory litert_lm_main needs to start the NPU: (config pointing into it, links to make).

    litert_lm_main sets no dispatch library directory and has no flag for one (LiteRT-LM cbf463d
    runtime/engine/litert_lm_main.cc:52-57, :119-137); runtime/util/litert_util.cc:71-92 (built on
    Linux by patch 0001) then hands LiteRT ``parent_path()`` of ``--model_path`` as given, and LiteRT
    looks for libLiteRtDispatch*.so there only. The model stays in the fleet's model directory and
    the library in the runtime's lib/, so the run gets its own directory with a symlink to each,
    side by side, and ``--model_path`` names the model's link. The runtime writes beside the model
    it was given too (an ``.xnnpack_cache``), so that lands in the run directory, which the probe
    removes, not in the fleet's model directory.
    """
    name = posixpath.basename(cfg["model_file"])
    links = {f"{run_dir}/{name}": f"{cfg['model_dir']}/{cfg['model_file']}",
             f"{run_dir}/{posixpath.basename(DISPATCH_LIB)}": f"{on_board.litert_dir()}/{DISPATCH_LIB}"}
    return {**cfg, "model_dir": run_dir, "model_file": name}, links


def smoke_run(board: catalog.Board, model: ModelVars, prompt: str, max_tokens: int | None,
              model_dir: str | None = None) -> dict[str, Any]:
    """argv/env/files/links for one smoke inference, with ``{work}`` standing for a fresh temp dir on the board.

    ``links`` maps a symlink to make in ``{work}`` to its target (see :func:`litert_run_links`).
    """
    cfg = serve_config(board, model, model_dir=model_dir)
    links: dict[str, str] = {}
    run_cfg = cfg
    if model.runtime == "litert_lm":
        run_cfg, links = litert_run_links(cfg)
    templated = serve.apply_chat_template(cfg["chat_template"], prompt, cfg.get("system_prompt"))
    argv, files = serve.build_argv(run_cfg, templated, WORK, None)
    return {"argv": argv, "env": cfg["env"], "files": files, "links": links, "cwd": cfg["model_dir"],
            "timeout": SMOKE_TIMEOUT_S, "collect": [f"{WORK}/profile.json"] if model.runtime == "genie" else [],
            "runtime": model.runtime, "max_tokens": max_tokens}
