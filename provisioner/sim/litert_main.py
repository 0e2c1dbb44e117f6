"""The ``litert_lm_main`` stand-in: LiteRT-LM's command-line demo as it behaves on a virtual board.

Its absl flags, its search for the Qualcomm dispatch library beside the model, what it prints
while loading and generating, and its failures, judged from the board (:mod:`provisioner.sim.board_view`,
:mod:`provisioner.sim.model_files`, :mod:`provisioner.sim.npu_outcome`). Started through
:func:`provisioner.sim.runtime.main`.
Only the standard library is imported at module level: it runs under the board's ``python3`` as any
user.
"""

from __future__ import annotations

import os
import random
from pathlib import Path
from typing import Any, TextIO

from provisioner.sim.board_view import BoardView, probe_stack
from provisioner.sim.model_files import ModelView, read_litertlm
from provisioner.sim.npu_outcome import (
    PERSISTENT_WEIGHTS_BYTES,
    RuntimeFailure,
    answer_for,
    check_memlock,
    check_stack,
    count_tokens,
    garbage_for,
    pause,
    timing,
)

# --------------------------------------------------------------------------- litert_lm_main
# The only flags litert_lm_main takes at the pin (LiteRT-LM cbf463d runtime/engine/litert_lm_main.cc:52-57);
# absl refuses any other flag before the model is opened.
_LITERT_FLAGS = {"backend": str, "model_path": str, "input_prompt": str, "input_prompt_file": str}
_LITERT_DEFAULT_PROMPT = "What is the tallest building in the world?"   # litert_lm_main.cc:110
DISPATCH_LIB = "libLiteRtDispatch_Qualcomm.so"
_DISPATCH_PREFIX = "libLiteRtDispatch"
_DISPATCH_SEARCH_DEPTH = 8      # a guard against directory symlink loops; LiteRT itself has none


def dispatch_lib_dir(model_path: str, explicit: str | None = None) -> str | None:
    """The directory LiteRT is told to load the dispatch library from, by LiteRT-LM's own rule.

    LiteRT-LM cbf463d runtime/util/litert_util.cc:62-69 honours an explicitly set directory; else,
    in the block patch 0001 builds on Linux too (:71-96), it takes ``parent_path()`` of the model
    path exactly as given (lexical: a symlinked model counts where the link is, not its target),
    and an empty parent sets nothing. litert_lm_main never sets one (litert_lm_main.cc:119-137),
    so for it this is always the model file's directory. Modelled as the real rule, not ours, so a
    layout that would fail on a board fails on a virtual one too.
    """
    if explicit:
        return explicit
    return os.path.dirname(model_path) or None


def find_dispatch_libs(directory: str, _depth: int = 0) -> list[str]:
    """The dispatch libraries LiteRT finds in ``directory``, as LiteRT's own search does.

    google-ai-edge/LiteRT at d865fd82cd7f, the LiteRT that LiteRT-LM cbf463d builds against
    (its WORKSPACE:6, LITERT_REF): litert/core/dynamic_loading.cc:56-93 (FindLiteRtSharedLibsHelper)
    and :108-115 (FindLiteRtDispatchSharedLibs), called only from
    litert/runtime/dispatch/litert_dispatch.cc:100-119 with the dispatch directory option: every
    readable entry of the directory whose stem starts with ``libLiteRtDispatch`` and whose
    extension is ``.so``, symlinks followed, and the same search in each subdirectory. Nothing
    else is searched: not ``LD_LIBRARY_PATH``, not the executable's directory. (With several
    found, the runtime warns and loads the first in directory order, :115-118.)
    """
    found: list[str] = []
    try:
        names = sorted(os.listdir(directory))
    except OSError:
        return found
    for name in names:
        path = os.path.join(directory, name)
        if not os.access(path, os.R_OK):
            continue
        if os.path.isfile(path):
            stem, ext = os.path.splitext(name)
            if stem.startswith(_DISPATCH_PREFIX) and ext == ".so":
                found.append(path)
        elif os.path.isdir(path) and _depth < _DISPATCH_SEARCH_DEPTH:
            found += find_dispatch_libs(path, _depth + 1)
    return found


def parse_absl(argv: list[str], spec: dict[str, type]) -> dict[str, Any]:
    """absl-style flags: ``--f=v``, ``--f v``, ``--bool``/``--nobool``; unknown flags are errors."""
    out: dict[str, Any] = {}
    i = 0
    while i < len(argv):
        a = argv[i]
        if not a.startswith("-"):
            raise RuntimeFailure([f"ERROR: unexpected positional argument '{a}'"])
        name = a.lstrip("-")
        value: str | None = None
        if "=" in name:
            name, value = name.split("=", 1)
        typ = spec.get(name)
        if typ is None and name.startswith("no") and spec.get(name[2:]) is bool:
            out[name[2:]] = False
            i += 1
            continue
        if typ is None:
            raise RuntimeFailure([f"ERROR: Unknown command line flag '{name}'"])
        if typ is bool:
            out[name] = value is None or value.lower() in ("1", "true", "yes")
        else:
            if value is None:
                i += 1
                if i >= len(argv):
                    raise RuntimeFailure([f"ERROR: Missing value for flag '--{name}'"])
                value = argv[i]
            try:
                out[name] = typ(value)
            except ValueError as exc:
                raise RuntimeFailure([f"ERROR: Illegal value '{value}' specified for flag '{name}'"]) from exc
        i += 1
    return out


def litert_lm_main(argv: list[str], out: TextIO, err: TextIO, view: BoardView) -> int:
    flags = parse_absl(argv, _LITERT_FLAGS)
    backend = flags.get("backend", "gpu").lower()
    prompt = _litert_prompt(flags, err)
    model_path = flags.get("model_path")
    if not model_path:
        raise RuntimeFailure(["INVALID_ARGUMENT: Model path is empty."])
    path = Path(model_path)
    if not path.is_file():
        raise RuntimeFailure([f"NOT_FOUND: Failed to open model file {model_path}: No such file or directory"])
    model = read_litertlm(view, path)
    print(f"I0000 litert_lm_main.cc] Loading model {model_path} ({model.size} bytes)", file=err)
    if model.truncated:
        raise RuntimeFailure([
            f"E0000 memory_mapped_file.cc] mmap failed: offset beyond end of file {model_path} "
            f"(size {model.size}, section ends at {model.declared_size})",
            "E0000 litertlm_loader.cc] Failed to map section TFLiteModel: INVALID_ARGUMENT: mmap error",
            "NOT_FOUND: TF_LITE_PREFILL_DECODE not found in the model.",
        ])
    if backend != "npu" and model.npu_only:
        raise RuntimeFailure([
            "INVALID_ARGUMENT: Main backend constraint mismatch.",
            f"Model requires one of [npu] but Main backend is {backend.upper()}",
        ])
    if backend != "npu":
        raise RuntimeFailure([f"UNIMPLEMENTED: backend {backend} has no graph in this simulated model"])
    where = dispatch_lib_dir(model_path)
    if not any(os.path.basename(p) == DISPATCH_LIB for p in (find_dispatch_libs(where) if where else [])):
        raise RuntimeFailure([
            "E0000 litert_util.cc] NPU accelerator could not be loaded and registered: InvalidArgument",
            "E0000 dispatch_delegate.cc] DISPATCH_OP failed to prepare",
            "INTERNAL: Failed to initialize the NPU executor",
        ])
    stack = probe_stack(view)
    check_stack(view, model, stack, "litert")
    burst = "no-burst" not in view.faults
    if burst:
        print("I0000 qnn_manager.cc] Set HTP performance mode: 2", file=err)
        print("I0000 qnn_manager.cc] HtpPerformanceMode: 2", file=err)
    else:
        print("W0000 dispatch_api.cc] Failed to parse qnn options ... Null Qualcomm options; using defaults",
              file=err)
        for i in range(24):
            print(f"[INFO] QnnDsp <I> HtpGraph: executing graph qnn_partition_{i % 2} op {i} "
                  "(HtpPerformanceMode::kDefault)", file=err)
    if "soc-config-14001" in view.faults:
        raise RuntimeFailure([
            "[ERROR] QnnDsp <E> Device custom config QNN_HTP_DEVICE_CONFIG_OPTION_SOC rejected",
            "[ERROR] QnnDevice_create failed with error 14001",
            "E0000 qnn_manager.cc] Failed to set up QNN manager",
            "INTERNAL: Failed to create NPU compiled model",
        ])
    check_memlock(stack, "litert")
    print(f"W0000 rpcmem: fastrpc memory map for fd: 41 with length: {PERSISTENT_WEIGHTS_BYTES} failed "
          "with err 1002 (no reserved FastRPC DMA region; falling back)", file=err)
    print("I0000 rpcmem_android.c] dummy call to rpcmem_init (informational)", file=err)
    return _generate_litert(flags, prompt, model, view, out, err, burst)


def _litert_prompt(flags: dict[str, Any], err: TextIO) -> str:
    """The prompt as litert_lm_main.cc:88-111 takes it: the flag, else the file's text, else its default."""
    text, file = flags.get("input_prompt") or "", flags.get("input_prompt_file") or ""
    if text and file:
        raise RuntimeFailure(["F0000 litert_lm_main.cc:92] Only one of --input_prompt and --input_prompt_file "
                              "can be specified."], code=134)
    if text:
        return text
    if file:
        try:
            return Path(file).read_text(encoding="utf-8")
        except OSError:
            print(f"Error: Could not open file {file}", file=err)
            return ""
    return _LITERT_DEFAULT_PROMPT


def _generate_litert(flags: dict[str, Any], prompt: str, model: ModelView, view: BoardView, out: TextIO,
                     err: TextIO, burst: bool) -> int:
    # Modelled words, unlike the service's library (provisioner.sim.real_litert): this answer is what
    # `fleet verify` judges for coherence, and the tiny real model's random weights give word salad
    # that a real Gemma on the NPU would not (the check would fail every virtual board for the wrong reason).
    rng = random.Random()
    coherent = answer_for(prompt)
    n = count_tokens(coherent)
    prompt_tokens = count_tokens(prompt) + 8
    t = timing(view, model, prompt_tokens, n, burst=burst, rng=rng)
    text = garbage_for(prompt, n) if "wrong-soc-model" in view.faults else coherent
    pause(view, t.init_s)
    # LiteRT-LM cbf463d runtime/engine/litert_lm_main.cc:152: the prompt is echoed before it is sent
    out.write(f"input_prompt: {prompt}\n")
    out.flush()
    pause(view, t.ttft_s)
    out.write(text)                 # :81, the answer as it streams; :77, a newline when it ends
    out.write("\n")
    out.flush()
    pause(view, t.decode_s)
    out.write("\n")                 # :164, std::endl before the BenchmarkInfo
    out.write("BenchmarkInfo:\n")
    out.write(f"Time to first token: {t.ttft_s:.2f} s\n")
    out.write("Prefill Turns (Total 1 turns):\n")
    out.write(f"Prefill Turn 1: Processed {t.prompt_tokens} tokens in {t.prefill_s * 1000:.1f}ms duration.\n")
    out.write(f"Prefill Speed: ~{t.prefill_rate:.0f} tokens/sec.\n")
    out.write("Decode Turns (Total 1 turns):\n")
    dec = f"{t.decode_s:.1f}s" if t.decode_s >= 1 else f"{t.decode_s * 1000:.1f}ms"
    out.write(f"Decode Turn 1: Processed {t.decode_tokens} tokens in {dec} duration.\n")
    out.write(f"Decode Speed: {t.decode_rate:.2f} tokens/sec.\n")
    out.flush()
    return 0
