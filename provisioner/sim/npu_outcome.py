"""What a run on the simulated NPU yields: the failure checks, the speed and the words.

Nothing executes a model here. Both runtime stand-ins (:mod:`provisioner.sim.litert_main`,
:mod:`provisioner.sim.genie_run`) and the C libraries' model (:mod:`provisioner.sim.npu`) decide
from the board and model views the same way: which log lines a broken stack fails with (QAIRT
build mismatch, missing skel, FastRPC access, memlock), how fast a healthy one decodes (the
catalog's figures, slowed by faults such as ``no-burst`` or ``slow``) and what text comes out
(an answer, or garbage with a wrong ``soc_model``).
Only the standard library is imported at module level: it runs under the board's ``python3`` as any
user.
"""

from __future__ import annotations

import hashlib
import os
import random
import re
import resource
import time
from dataclasses import dataclass

from provisioner.sim.board_view import BoardView, Stack
from provisioner.sim.model_files import ModelView

PERSISTENT_WEIGHTS_BYTES = 1_172_307_968   # what FastRPC pins for Gemma-4 E2B (its 'err 1002' line)
QLI_DEFAULT_MEMLOCK = 8192 * 1024          # QLI's `ulimit -l` 8192 (KiB)
GARBAGE_TOKEN = "alitiesmall"              # wrong soc_model: right first tokens, then one token repeated


# --------------------------------------------------------------------------- text generation
_ANSWERS = {
    "qualcomm": ("Qualcomm is a global technology company that designs, develops, and sells wireless "
                 "communication solutions and processors. They are a leading provider of technology for "
                 "smartphones, tablets, IoT, and other mobile devices, as well as for various other industries."),
    "gravity": "Gravity is the force that pulls objects with mass toward each other.",
    "2+3": "2 + 3 equals 5.",
    "capital of france": "The capital of France is Paris.",
    # the eval suite's exact-answer and JSON questions (provisioner/eval/default.yaml)
    "planet is the largest": "Jupiter.",
    "capital of japan": '{"country": "Japan", "capital": "Tokyo"}',
}
_GENERIC = (
    "Edge devices run language models locally, so answers arrive quickly and private data never leaves "
    "the device.",
    "A neural processing unit executes the matrix multiplications of a transformer far more efficiently "
    "than a general purpose CPU core.",
    "Quantizing weights to four bits shrinks a model to a fraction of its size while keeping most of its "
    "accuracy.",
    "The key to a reliable deployment is to pin every version: the operating system image, the runtime, "
    "and the model it was compiled for.",
    "Decoding produces one token at a time, and each step attends over everything generated so far.",
    "A good test asks a question whose answer you already know, then checks both the words and the speed.",
)


def _user_text(prompt: str) -> str:
    """The user's question without chat-template tokens."""
    text = re.sub(r"<\|[^|>]*\|>|<start_of_turn>|<end_of_turn>|\b(user|model|system|assistant)\b\n", " ", prompt)
    text = re.sub(r"detailed thinking (on|off)", " ", text)
    return " ".join(text.split())


def answer_for(prompt: str) -> str:
    """A coherent, deterministic answer for ``prompt`` (same prompt, same words)."""
    q = _user_text(prompt).lower().replace(" ", "")
    for key, ans in _ANSWERS.items():
        if key.replace(" ", "") in q:
            return ans
    h = int(hashlib.sha256(_user_text(prompt).encode()).hexdigest(), 16)
    return _GENERIC[h % len(_GENERIC)]


def garbage_for(prompt: str, n_tokens: int) -> str:
    """What a model compiled for the wrong SoC prints: a right start, then one token repeated."""
    head = " ".join(answer_for(prompt).split()[:3])
    return head + " " + GARBAGE_TOKEN * max(4, n_tokens - 4)


def count_tokens(text: str) -> int:
    """Rough tokenizer: ~1.3 tokens per word, as for Gemma/Llama English text."""
    return max(1, round(len(re.findall(r"\w+|[^\w\s]", text)) * 1.15))


def first_tokens(text: str, limit: int) -> str:
    """The longest word prefix of ``text`` that :func:`count_tokens` puts at ``limit`` tokens or fewer."""
    words = text.split(" ")
    while len(words) > 1 and count_tokens(" ".join(words)) > limit:
        words.pop()
    return " ".join(words)


# --------------------------------------------------------------------------- speed
@dataclass
class Timing:
    prompt_tokens: int
    decode_tokens: int
    ttft_s: float
    prefill_s: float
    decode_s: float
    init_s: float

    @property
    def prefill_rate(self) -> float:
        return self.prompt_tokens / self.prefill_s if self.prefill_s else 0.0

    @property
    def decode_rate(self) -> float:
        return self.decode_tokens / self.decode_s if self.decode_s else 0.0


def timing(view: BoardView, model: ModelView, prompt_tokens: int, decode_tokens: int, *,
           burst: bool = True, rng: random.Random | None = None) -> Timing:
    """Speeds from the catalog's measured figures, the board's faults and the KV-cache length.

    Decode slows as the KV cache grows (each step attends over everything before it); on QLI the
    measured slowdown is small (~32.5 tok/s held over 800 tokens), so a mild 1/(1+k*len) model with
    k from the context size keeps short and long answers within the measured ranges.
    """
    rng = rng or random.Random()
    exp = view.expected(model.model_id)
    base = float(exp["decode_tok_s"])
    if not burst:
        base = base / 2.0          # DCVS never voted up: ~16 tok/s instead of ~32 (no burst request)
    if "slow" in view.faults:
        base = base / 2.0
    base *= 1.0 + rng.uniform(-0.02, 0.02)
    ctx = 4096.0
    k = 0.06
    total = 0.0
    for i in range(decode_tokens):
        pos = prompt_tokens + i
        total += (1.0 + k * pos / ctx) / base
    prefill_rate = float(exp.get("prefill_tok_s") or 1000.0) * (1.0 + rng.uniform(-0.03, 0.03))
    # prefill figures were measured with ~49 (LiteRT) / 29 (Genie) token prompts: fixed overhead dominates
    prefill_s = max(prompt_tokens, 1) / prefill_rate
    ttft = float(exp.get("ttft_s") or 0.1) * (1.0 + rng.uniform(-0.05, 0.05))
    if not burst:
        ttft *= 1.6
        prefill_s *= 1.6
    init_s = float(exp.get("init_s") or 2.0) * (1.0 + rng.uniform(-0.05, 0.05))
    return Timing(prompt_tokens, decode_tokens, ttft, prefill_s, total, init_s)


def pause(view: BoardView, seconds: float) -> None:
    """Sleep the board's ``time_scale`` share of what the real runtime would take (capped at 30 s)."""
    if view.time_scale > 0:
        time.sleep(min(seconds * view.time_scale, 30.0))


# --------------------------------------------------------------------------- shared failure checks
class RuntimeFailure(Exception):
    """The runtime would stop here; ``lines`` are what it prints (stderr)."""

    def __init__(self, lines: list[str], code: int = 1) -> None:
        super().__init__(lines[-1] if lines else "failure")
        self.lines = lines
        self.code = code


def check_stack(view: BoardView, model: ModelView, stack: Stack, runtime: str) -> None:
    """Raise RuntimeFailure with the real signature for the first broken layer of the NPU stack."""
    arch = view.arch.upper()
    if stack.host_lib is None:
        raise RuntimeFailure([
            "[ERROR] QnnBackend: Unable to load backend library libQnnHtp.so: cannot open shared object file: "
            "No such file or directory",
            "Failed to set up QNN manager" if runtime == "litert" else "Failed to create device: 14001",
        ])
    if stack.skel_lib is None:
        found = ", ".join(stack.other_skels) or "none"
        raise RuntimeFailure([
            f"[ERROR] QnnDsp <E> Failed to load skel library {view.skel_name} from ADSP_LIBRARY_PATH="
            f"{os.environ.get('ADSP_LIBRARY_PATH', '')} (found: {found}); DSP is Hexagon {arch}",
            "[ERROR] QnnDsp <E> Stub lib id mismatch: expected skel for " + arch + ", detected "
            + (found if found != "none" else "no skel"),
            "Failed to create device: 14001" if runtime == "genie" else "Failed to set up QNN manager",
        ])
    if stack.skel_build and stack.host_build and stack.skel_build != stack.host_build:
        raise RuntimeFailure([
            f"[ERROR] QnnDsp <E> Stub lib id mismatch: expected (v{stack.host_build}), detected (v{stack.skel_build})",
            f"[ERROR] QnnDsp <E> Failed to retrieve skel build id: stub {stack.host_lib} vs skel {stack.skel_lib}",
            "Failed to create device: 14001" if runtime == "genie" else "Failed to set up QNN manager",
        ])
    if stack.cdsprpc is None or stack.fastrpc_error or not stack.cdsprpcd_active:
        why = stack.fastrpc_error or ("libcdsprpc.so: cannot open shared object file" if stack.cdsprpc is None
                                      else "cdsprpcd is not running")
        if runtime == "genie":
            raise RuntimeFailure([
                f"[ERROR] QnnDsp <E> DspTransport.openSession qnn_open failed, 0x80000406 ({why})",
                "[ERROR] QnnDsp <E> Failed to create transport for device, error: 14001",
                "Failed to create device: 14001",
                "Device Creation failure",
            ])
        raise RuntimeFailure([
            f"[ERROR] QnnDsp <E> DspTransport.openSession qnn_open failed, 0x80000406 ({why})",
            "[ERROR] QnnDsp <E> IDspTransport: Unable to load lib 0x80000406",
            "[ERROR] QnnDsp <E> Failed to create transport for device, error: 4000",
            "NPU accelerator could not be loaded and registered: Internal",
        ])
    if model.qairt and stack.host_build and model.qairt != stack.host_build:
        raise RuntimeFailure([
            f"[ERROR] QnnDsp <E> Context binary was built with QAIRT v{model.qairt} but the runtime libraries "
            f"are v{stack.host_build} ({stack.host_lib})",
            "[ERROR] QnnDsp <E> Failed to deserialize binary info from context binary: 5001",
            "[ERROR] QnnContext_createFromBinary failed with error 5001",
            "Failed to create context from binary" if runtime == "litert" else "Failed to create dialog",
        ])


def check_memlock(stack: Stack, runtime: str) -> None:
    if stack.memlock != resource.RLIM_INFINITY and stack.memlock < PERSISTENT_WEIGHTS_BYTES:
        raise RuntimeFailure([
            f"[ERROR] fastrpc memory map for fd: 41 with length: {PERSISTENT_WEIGHTS_BYTES} failed: "
            f"locked memory limit {stack.memlock // 1024} KiB",
            "[ERROR] QnnDsp <E> Could not allocate persistent weights buffer!",
            "[ERROR] QnnDsp <E> Failed to allocate weights for graph",
            "Failed to create context from binary" if runtime == "litert" else "Failed to create dialog",
        ])
