"""The model behind the stand-in C libraries (``liblitert-lm.so``, ``libGenie.so``).

The stand-in shared libraries (C sources in ``provisioner/sim/clib/``) export the runtimes' C
functions with their real signatures, but they cannot judge a board on their own: which QAIRT
build ``LD_LIBRARY_PATH`` resolves, whether this process may open ``/dev/fastrpc-cdsp``, its
``RLIMIT_MEMLOCK``, the board's faults. So when an engine or dialog is created, the library
starts this module as a child process (``posix_spawn`` of the board's python, environment,
limits and credentials inherited) and asks it over a pipe. The checks are the ones the
``litert_lm_main`` / ``genie-t2t-run`` stand-ins make (:mod:`provisioner.sim.npu_outcome`), so a
library-based service fails exactly where the runtime would, with the runtime's log lines on
its stderr (the service's journal); the speeds come from the same timing model.

The words are not modelled where this machine can run Google's real runtime: a LiteRT-LM engine
that passed every NPU check also opens :class:`provisioner.sim.real_litert.RealLiteRt` (the real
``liblitert-lm.so`` on the CPU with a real tiny model), and each generation streams that
runtime's chunks, paced by the NPU timing model. Where the wheel or the tiny model is absent the
load says so in one line and the answers are modelled text, as for Genie (no public runtime).

Protocol (one line per record, prompt and config bytes length-prefixed, never on a command line):

* library -> here ``L <nbytes>\\n<payload>``: load (litert: the model path; genie: the config JSON);
  here -> ``OK <init_s> <sleep_s>`` or ``FAIL <last error line>`` (all error lines on stderr).
* library -> here ``Q <mode> <max_tokens> <nbytes>\\n<prompt>`` (mode ``text`` or ``conv``);
  here -> ``R <ttft_s> <prefill_s> <prompt_tokens> <decode_s> <decode_tokens> <n>`` then n lines
  ``<sleep_s>\\t<chunk>``. Model figures are unscaled (what benchmark info reports), sleeps are
  scaled by the board's ``time_scale``.

Standard library only: it runs under the board's ``python3 -S`` as the service's user.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, BinaryIO

from provisioner.sim import board_view as bv
from provisioner.sim import litert_main, model_files, real_litert, tool_replies
from provisioner.sim import npu_outcome as outcome

SLEEP_CAP_S = 30.0


def _scaled(view: bv.BoardView, seconds: float) -> float:
    return min(seconds * view.time_scale, SLEEP_CAP_S) if view.time_scale > 0 else 0.0


class Loaded:
    """A model as one engine/dialog holds it: what it answers, how fast, whether it is garbage."""

    def __init__(self, view: bv.BoardView, model: model_files.ModelView, burst: bool, garbage: bool,
                 limit: int | None, real: real_litert.RealLiteRt | None = None) -> None:
        self.view, self.model, self.burst, self.garbage, self.limit = view, model, burst, garbage, limit
        self.real = real


def open_real(view: bv.BoardView, model_type: str | None = None) -> real_litert.RealLiteRt | None:
    """The real runtime this board's facts name, or None (after one line on stderr saying why). Its tiny
    model is the one re-packed as ``model_type`` (the board's model's llm_model_type) where the facts have
    one, so the runtime's own processor for that type renders the tools and parses the calls."""
    where = view.facts.get("real_litert") or {"absent": "this board's facts name no real runtime"}
    if "absent" in where:
        print(f"edge-llm-sim: modelled answers: {where['absent']}", file=sys.stderr)
        return None
    model = (where.get("typed") or {}).get(model_type or "") or where["model"]
    try:
        real = real_litert.RealLiteRt(where["library"], model)
    except (OSError, real_litert.RealRuntimeError) as exc:
        print(f"edge-llm-sim: modelled answers: the real LiteRT-LM runtime did not start ({exc})", file=sys.stderr)
        return None
    print(f"edge-llm-sim: answers from the real LiteRT-LM runtime ({where['library']}, {model}, cpu)",
          file=sys.stderr)
    return real


def load_litert(view: bv.BoardView, model_path: str) -> Loaded:
    """What ``litert_lm_engine_create`` with backend npu does, fault for fault (as litert_lm_main)."""
    path = Path(model_path)
    if not path.is_file():
        raise outcome.RuntimeFailure([f"NOT_FOUND: Failed to open model file {model_path}: No such file or directory"])
    model = model_files.read_litertlm(view, path)
    print(f"I0000 engine.cc] Loading model {model_path} ({model.size} bytes)", file=sys.stderr)
    if model.truncated:
        raise outcome.RuntimeFailure([
            f"E0000 memory_mapped_file.cc] mmap failed: offset beyond end of file {model_path} "
            f"(size {model.size}, section ends at {model.declared_size})",
            "NOT_FOUND: TF_LITE_PREFILL_DECODE not found in the model."])
    # The directory litert_lm_engine_settings_set_litert_dispatch_lib_dir set (the library passes it
    # here), else the model's: litert_main.dispatch_lib_dir, LiteRT-LM cbf463d runtime/util/litert_util.cc:62-96.
    where = litert_main.dispatch_lib_dir(model_path, os.environ.get("EDGE_LLM_SIM_DISPATCH_DIR") or None)
    found = litert_main.find_dispatch_libs(where) if where else []
    if not any(os.path.basename(p) == litert_main.DISPATCH_LIB for p in found):
        raise outcome.RuntimeFailure([
            "E0000 litert_util.cc] NPU accelerator could not be loaded and registered: InvalidArgument",
            "INTERNAL: Failed to initialize the NPU executor"])
    stack = bv.probe_stack(view)
    outcome.check_stack(view, model, stack, "litert")
    burst = "no-burst" not in view.faults
    if burst:
        print("I0000 qnn_manager.cc] Set HTP performance mode: 2", file=sys.stderr)
    else:
        print("W0000 dispatch_api.cc] Failed to parse qnn options ... Null Qualcomm options; using defaults",
              file=sys.stderr)
    if "soc-config-14001" in view.faults:
        raise outcome.RuntimeFailure([
            "[ERROR] QnnDevice_create failed with error 14001",
            "INTERNAL: Failed to create NPU compiled model"])
    outcome.check_memlock(stack, "litert")
    garbage = "wrong-soc-model" in view.faults
    real = None if garbage else open_real(view, model_files.llm_model_type(path))
    return Loaded(view, model, burst, garbage, None, real)


def load_genie(view: bv.BoardView, config_json: str) -> Loaded:
    """What ``GenieDialog_create`` does with a config (as genie-t2t-run after its config parse)."""
    try:
        cfg = json.loads(config_json)
    except ValueError as exc:
        raise outcome.RuntimeFailure([f"[ERROR] \"Failed to parse config: {exc}\""]) from None
    if not isinstance(cfg, dict):
        raise outcome.RuntimeFailure(["[ERROR] \"Invalid config: not a JSON object\""])
    model = _read_genie_json(view, cfg)
    stack = bv.probe_stack(view, "libGenie.so")
    if model.missing:
        raise outcome.RuntimeFailure([f"[ERROR] \"Could not open file {model.missing[0]}\"", "Failed to create dialog"])
    if model.truncated:
        raise outcome.RuntimeFailure([
            f"[ERROR] \"Failed to mmap context binary: {model.size} of {model.declared_size} bytes present\"",
            "Failed to create dialog"])
    htp = bv.find_lib("libQnnHtp.so", bv.path_dirs("LD_LIBRARY_PATH"))
    stack.host_lib, stack.host_build = htp, bv.library_build(htp) if htp else None
    outcome.check_stack(view, model, stack, "genie")
    if model.dsp_arch and model.dsp_arch.lower() != view.arch:
        raise outcome.RuntimeFailure([
            f"[ERROR] QnnDsp <E> Context binary dsp_arch {model.dsp_arch} does not match the device "
            f"(Hexagon {view.arch.upper()})", "Failed to create device: 14001"])
    outcome.check_memlock(stack, "genie")
    print("[INFO] \"Using create From Binary\"", file=sys.stderr)
    burst = (model.perf_profile or "burst") == "burst"
    garbage = model.soc_model is not None and int(model.soc_model) != int(view.board["qnn_soc_model"])
    limit = cfg.get("dialog", {}).get("max-num-tokens")
    return Loaded(view, model, burst, garbage, limit if isinstance(limit, int) and limit > 0 else None)


def _read_genie_json(view: bv.BoardView, cfg: dict[str, Any]) -> model_files.ModelView:
    """:func:`model_files.read_genie` on a config given as JSON rather than as a file.

    The bundle directory is the one the context binaries name (absolute paths), else the current
    directory. A private temporary directory holds the JSON and a link to every file of that
    directory, so relative paths, ``model.json`` and ``tool-versions.yaml`` resolve as beside a
    config file.
    """
    bins = cfg.get("dialog", {}).get("engine", {}).get("model", {}).get("binary", {}).get("ctx-bins") or []
    first = str(bins[0]) if bins else ""
    base = Path(first).parent if os.path.isabs(first) else Path(os.getcwd())
    with tempfile.TemporaryDirectory(prefix="edge-llm-sim-genie-") as tmp:
        with contextlib.suppress(OSError):
            for entry in base.iterdir():
                os.symlink(entry, Path(tmp) / entry.name)
        cfg_path = Path(tmp) / ".dialog-config.json"
        cfg_path.write_text(json.dumps(cfg), encoding="utf-8")
        model = model_files.read_genie(view, cfg_path)
    model.path = str(base)
    return model


def _message_text(prompt: str) -> str:
    """A conversation message (JSON, or the library's envelope holding it) reduced to its text; plain
    prompts unchanged."""
    try:
        msg = json.loads(prompt)
    except ValueError:
        return prompt
    if isinstance(msg, dict) and "message" in msg:
        msg = msg["message"]
    content = msg.get("content") if isinstance(msg, dict) else None
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(str(c.get("text", "")) for c in content if isinstance(c, dict))
    return prompt


def _real_chunks(loaded: Loaded, prompt: str, max_tokens: int, mode: str) -> list[str] | None:
    """The real runtime's chunks for this generation, or None (no real runtime, or it refused: its reason
    is on stderr, e.g. a prompt longer than the tiny model's 512 tokens that the board's model would take)."""
    if loaded.real is None:
        return None
    try:
        return loaded.real.generate(prompt, mode, max_tokens)
    except (real_litert.RealRuntimeError, ValueError, KeyError) as exc:
        print(f"edge-llm-sim: modelled answer: the real runtime refused this one ({exc})", file=sys.stderr)
        return None


def answer(loaded: Loaded, prompt: str, max_tokens: int, mode: str) -> tuple[outcome.Timing, list[tuple[float, str]]]:
    """The timing and the chunks (with the sleep before each) of one generation."""
    text_in = _message_text(prompt) if mode == "conv" else prompt
    began = time.monotonic()
    real = _real_chunks(loaded, prompt, max_tokens, mode)
    if real is not None:
        # one chunk per token as the runtime streams them; the NPU model says when each arrives. The
        # CPU generated them all already: that time counts against the first token's modelled TTFT.
        t = outcome.timing(loaded.view, loaded.model, outcome.count_tokens(text_in) + 8, len(real), burst=loaded.burst,
                      rng=random.Random())
        per_token = _scaled(loaded.view, t.decode_s / max(len(real), 1))
        first = max(0.0, _scaled(loaded.view, t.ttft_s) - (time.monotonic() - began))
        # the pipe is line-based: a text chunk's newline becomes a space (JSON chunks have none raw)
        return t, [(first if i == 0 else per_token,
                    chunk.replace("\n", " ").replace("\t", " ")) for i, chunk in enumerate(real)]
    coherent = modelled_text(text_in)
    limit = min([x for x in (loaded.limit, max_tokens if max_tokens > 0 else None) if x] or [0]) or None
    if limit:
        coherent = outcome.first_tokens(coherent, limit)
    n = outcome.count_tokens(coherent)
    t = outcome.timing(loaded.view, loaded.model, outcome.count_tokens(text_in) + 8, n, burst=loaded.burst,
                  rng=random.Random())
    text = outcome.garbage_for(text_in, n) if loaded.garbage else coherent
    words = re.findall(r"\s*\S+", text)
    per_token = t.decode_s / max(n, 1)
    chunks: list[tuple[float, str]] = []
    for i, w in enumerate(words):
        cost = _scaled(loaded.view, per_token * max(1, outcome.count_tokens(w)))
        if i == 0:
            cost = _scaled(loaded.view, t.ttft_s)
        if mode == "conv":
            w = json.dumps({"role": "assistant", "content": [{"type": "text", "text": w}]})
        chunks.append((cost, w.replace("\n", " ").replace("\t", " ")))
    return t, chunks


def modelled_text(prompt: str) -> str:
    """The modelled model's whole answer: a call in the family's syntax for a tool prompt a declared tool
    answers, JSON when the prompt asks for it, else the coherent text answer."""
    return tool_replies.modelled_answer(prompt)


def _read_payload(inp: BinaryIO, n: int) -> str:
    data = inp.read(n)
    return data.decode("utf-8", errors="replace")


def serve(kind: str, inp: BinaryIO | None = None, out: Any = None) -> int:
    """Answer one library instance's requests until its pipe closes."""
    inp = inp or sys.stdin.buffer
    out = out or sys.stdout
    try:
        view = bv.BoardView.load()
    except (OSError, ValueError):
        print(f"{kind}: not on a virtual board (no {bv.SIM_DIR})", file=sys.stderr)
        out.write("FAIL not on a virtual board\n")
        out.flush()
        return 1
    loaded: Loaded | None = None
    while True:
        line = inp.readline()
        if not line:
            return 0
        parts = line.decode("ascii", errors="replace").split()
        if not parts:
            continue
        if parts[0] == "L":
            payload = _read_payload(inp, int(parts[1]))
            try:
                loaded = load_litert(view, payload) if kind == "litert" else load_genie(view, payload)
            except outcome.RuntimeFailure as failure:
                for ln in failure.lines:
                    print(ln, file=sys.stderr)
                sys.stderr.flush()
                out.write(f"FAIL {failure.lines[-1] if failure.lines else 'failure'}\n")
                out.flush()
                continue
            exp = outcome.timing(view, loaded.model, 1, 0, burst=loaded.burst)
            out.write(f"OK {exp.init_s:.4f} {_scaled(view, exp.init_s):.4f}\n")
            out.flush()
        elif parts[0] == "Q" and loaded is not None:
            prompt = _read_payload(inp, int(parts[3]))
            t, chunks = answer(loaded, prompt, int(parts[2]), parts[1])
            out.write(f"R {t.ttft_s:.4f} {t.prefill_s:.4f} {t.prompt_tokens} {t.decode_s:.4f} "
                      f"{t.decode_tokens} {len(chunks)}\n")
            for cost, chunk in chunks:
                out.write(f"{cost:.5f}\t{chunk}\n")
            out.flush()
        else:
            out.write("FAIL protocol\n")
            out.flush()


def _boardless_timings() -> dict[str, float]:
    """EDGE_LLM_SIM_BOARDLESS's timings in seconds (clib/oracle.h: load_ms, ttft_ms, decode_ms)."""
    out = {"load_ms": 0.0, "ttft_ms": 5.0, "decode_ms": 2.0}
    for kv in os.environ.get("EDGE_LLM_SIM_BOARDLESS", "").split(","):
        key, _, value = kv.partition("=")
        if key in out:
            out[key] = float(value)
    return {k[:-3] + "_s": v / 1000.0 for k, v in out.items()}


def serve_boardless(kind: str, inp: BinaryIO | None = None, out: Any = None) -> int:
    """The board-less stand-in's model with ``answers=1`` (clib/oracle.h): the protocol of :func:`serve`,
    no board: the modelled words (:func:`modelled_text`) at EDGE_LLM_SIM_BOARDLESS's timings."""
    inp = inp or sys.stdin.buffer
    out = out or sys.stdout
    t = _boardless_timings()
    while True:
        line = inp.readline()
        if not line:
            return 0
        parts = line.decode("ascii", errors="replace").split()
        if parts and parts[0] == "L":
            _read_payload(inp, int(parts[1]))
            out.write(f"OK {t['load_s']:.4f} {t['load_s']:.4f}\n")
        elif parts and parts[0] == "Q":
            prompt = _read_payload(inp, int(parts[3]))
            mode, max_tokens = parts[1], int(parts[2])
            text = modelled_text(_message_text(prompt) if mode == "conv" else prompt)
            if max_tokens > 0:
                text = outcome.first_tokens(text, max_tokens)
            words = re.findall(r"\s*\S+", text)
            chunks = [json.dumps({"role": "assistant", "content": [{"type": "text", "text": w}]}) if mode == "conv"
                      else w for w in words]
            decode = t["decode_s"] * max(len(words) - 1, 0)
            out.write(f"R {t['ttft_s']:.4f} {t['ttft_s']:.4f} {len(prompt) // 4 + 1} {decode:.4f} {len(words)} "
                      f"{len(chunks)}\n")
            for n, chunk in enumerate(chunks):
                out.write(f"{t['ttft_s'] if n == 0 else t['decode_s']:.5f}\t"
                          f"{chunk.replace(chr(10), ' ').replace(chr(9), ' ')}\n")
        elif parts:
            out.write("FAIL protocol\n")
        out.flush()


if __name__ == "__main__":
    sys.exit(serve(sys.argv[1] if len(sys.argv) > 1 else "litert"))
