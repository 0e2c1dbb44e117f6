"""The ``genie-t2t-run`` stand-in: QAIRT's Genie text-to-text runner as it behaves on a virtual board.

Its command line, what it prints for a Genie bundle (``genie_config.json``), its profile file and its
failures (14001 with a forced SoC config, garbage with a wrong ``soc_model``), judged from the board
(:mod:`provisioner.sim.board_view`, :mod:`provisioner.sim.model_files`, :mod:`provisioner.sim.npu_outcome`).
Started through :func:`provisioner.sim.runtime.main`.
Only the standard library is imported at module level: it runs under the board's ``python3`` as any
user.
"""

from __future__ import annotations

import json
import os
import random
import time
from pathlib import Path
from typing import Any, TextIO

from provisioner.sim.board_view import BoardView, find_lib, genie_version, library_build, path_dirs, probe_stack
from provisioner.sim.model_files import read_genie
from provisioner.sim.npu_outcome import (
    RuntimeFailure,
    Timing,
    check_memlock,
    check_stack,
    count_tokens,
    first_tokens,
    garbage_for,
    pause,
    timing,
)
from provisioner.sim.tool_replies import modelled_answer

# --------------------------------------------------------------------------- genie-t2t-run
GENIE_USAGE = ("Usage: genie-t2t-run -c <config.json> (-p <prompt> | --prompt_file <file>) "
               "[--profile <file>] [--log error|warn|info|verbose]")


def parse_genie(argv: list[str]) -> dict[str, Any]:
    opts: dict[str, Any] = {}
    names = {"-c": "config", "--config": "config", "-p": "prompt", "--prompt": "prompt",
             "--prompt_file": "prompt_file", "--profile": "profile", "--log": "log"}
    i = 0
    while i < len(argv):
        a = argv[i]
        if a in ("-h", "--help"):
            raise RuntimeFailure([GENIE_USAGE], code=0)
        key, val = (a.split("=", 1) + [None])[:2] if a.startswith("--") and "=" in a else (a, None)
        if key not in names:
            raise RuntimeFailure([f"Unknown option: {a}", GENIE_USAGE])
        if val is None:
            i += 1
            if i >= len(argv):
                raise RuntimeFailure([f"Missing value for {a}", GENIE_USAGE])
            val = argv[i]
        opts[names[key]] = val
        i += 1
    if "config" not in opts:
        raise RuntimeFailure(["ERROR: a config file (-c) is required", GENIE_USAGE])
    if ("prompt" in opts) == ("prompt_file" in opts):
        raise RuntimeFailure(["ERROR: give exactly one of -p/--prompt and --prompt_file", GENIE_USAGE])
    if opts.get("log") and opts["log"] not in ("error", "warn", "info", "verbose"):
        raise RuntimeFailure([f"ERROR: unknown log level '{opts['log']}'", GENIE_USAGE])
    return opts


def genie_t2t_run(argv: list[str], out: TextIO, err: TextIO, view: BoardView) -> int:
    opts = parse_genie(argv)
    cfg_path = Path(opts["config"])
    if not cfg_path.is_file():
        raise RuntimeFailure([f"Failed to open config file: {opts['config']}"])
    if opts.get("profile") and os.path.exists(opts["profile"]):
        raise RuntimeFailure([f"Profile file {opts['profile']} already exists. Please provide a new file name."])
    if "prompt_file" in opts:
        try:
            prompt = Path(opts["prompt_file"]).read_text(encoding="utf-8")
        except OSError:
            raise RuntimeFailure([f"Failed to open prompt file: {opts['prompt_file']}"]) from None
    else:
        prompt = opts["prompt"]
    try:
        model = read_genie(view, cfg_path)
    except ValueError as exc:
        raise RuntimeFailure([f"Failed to parse config {cfg_path}: {exc}", "Failed to create dialog"]) from None
    stack = probe_stack(view, "libGenie.so")
    genie_lib_build = stack.host_build
    htp = find_lib("libQnnHtp.so", path_dirs("LD_LIBRARY_PATH"))
    if stack.host_lib is None:
        raise RuntimeFailure(["genie-t2t-run: error while loading shared libraries: libGenie.so: "
                              "cannot open shared object file: No such file or directory"], code=127)
    out.write(f"Using libGenie.so version {genie_version(genie_lib_build)}\n")
    out.flush()
    verbose = opts.get("log") in ("info", "verbose")
    if model.missing:
        raise RuntimeFailure([f"[ERROR] \"Could not open file {cfg_path.parent / model.missing[0]}\"",
                              "Failed to create dialog"])
    if model.truncated:
        raise RuntimeFailure([
            f"[ERROR] \"Failed to mmap context binary: {model.size} of {model.declared_size} bytes present\"",
            "[ERROR] \"Could not create context from binary\"",
            "Failed to create dialog"])
    stack.host_lib, stack.host_build = htp, library_build(htp) if htp else None
    check_stack(view, model, stack, "genie")
    if model.dsp_arch and model.dsp_arch.lower() != view.arch:
        raise RuntimeFailure([
            f"[ERROR] QnnDsp <E> Context binary dsp_arch {model.dsp_arch} does not match the device "
            f"(Hexagon {view.arch.upper()})",
            "Failed to create device: 14001", "Device Creation failure"])
    check_memlock(stack, "genie")
    rng = random.Random()
    out.write("[INFO] \"Using create From Binary\"\n")
    out.write("[INFO] \"Allocated total size = 306545152 across 10 buffers\"\n")
    if verbose:
        out.write(f"[INFO] \"HTP device soc_model {model.soc_model}, dsp_arch {model.dsp_arch}, "
                  f"perf_profile {model.perf_profile}\"\n")
    burst = (model.perf_profile or "burst") == "burst"
    coherent = modelled_answer(prompt)
    limit = (model.config or {}).get("dialog", {}).get("max-num-tokens")
    if isinstance(limit, int) and limit > 0:
        coherent = first_tokens(coherent, limit)     # Genie stops generating at dialog.max-num-tokens
    n = count_tokens(coherent)
    p_tokens = count_tokens(prompt)
    t = timing(view, model, p_tokens, n, burst=burst, rng=rng)
    board_soc = int(view.board["qnn_soc_model"])
    garbage = model.soc_model is not None and int(model.soc_model) != board_soc
    text = garbage_for(prompt, n) if garbage else coherent
    pause(view, t.init_s + t.ttft_s)
    out.write(f"[BEGIN]: {text}")
    out.flush()
    pause(view, t.decode_s)
    out.write("[END]\n")
    out.flush()
    if opts.get("profile"):
        _write_profile(Path(opts["profile"]), t)
    return 0


def _write_profile(path: Path, t: Timing) -> None:
    us = 1_000_000
    query = t.ttft_s + t.decode_s
    data = {
        "header": {"artifact_type": "GENIE_PROFILE", "header_version": {"major": 0, "minor": 1, "patch": 0},
                   "version": {"major": 1, "minor": 17, "patch": 0}},
        "metadata": {"timestamp": int(time.time() * us)},
        "components": [{"name": "dialog0", "type": "dialog", "events": [
            {"type": "GenieDialog_create", "duration": int(t.init_s * us) + 151,
             "init-time": {"value": int(t.init_s * us), "unit": "us"}},
            {"type": "GenieDialog_query", "duration": int(query * us),
             "num-prompt-tokens": {"value": t.prompt_tokens, "unit": ""},
             "prompt-processing-rate": {"value": round(t.prompt_tokens / t.ttft_s, 2), "unit": "toks/sec"},
             "time-to-first-token": {"value": int(t.ttft_s * us), "unit": "us"},
             "num-generated-tokens": {"value": t.decode_tokens, "unit": ""},
             "token-generation-rate": {"value": round(t.decode_rate, 2), "unit": "toks/sec"},
             "token-generation-time": {"value": int(t.decode_s * us), "unit": "us"}},
        ]}],
    }
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        json.dump(data, fh, indent=2)
        fh.write("\n")
