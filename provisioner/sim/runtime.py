"""Stand-ins for the NPU runtimes (``litert_lm_main``, ``genie-t2t-run``, ``qnn-platform-validator``).

Nothing here executes a model: there is no Hexagon NPU on the machines that run the tests. What
the stand-ins do is reproduce, line for line, what the real programs print on a board and *why*:
every speed figure and every failure is derived from what the calling process really sees inside
its virtual board's mount namespace (see :mod:`provisioner.sim.namespace`):

* the QAIRT build of the host libraries found through ``LD_LIBRARY_PATH`` (stub files carry the
  build id as text, like the real libraries) against the model's build id (read from the model);
* the skel directory in ``ADSP_LIBRARY_PATH`` against the board's Hexagon arch;
* the caller's ``RLIMIT_MEMLOCK`` (FastRPC must pin ~1.17 GB of weights);
* whether the caller may open ``/dev/fastrpc-cdsp`` (mode 0660, group ``fastrpc``) and whether
  ``libcdsprpc.so`` resolves and ``cdsprpcd`` is active;
* the model file's size against its declared size (truncated downloads);
* ``soc_model`` in a Genie bundle's HTP config against the board's;
* faults that are properties of the binary or the silicon (``no-burst``, ``soc-config-14001``,
  ``slow``), read live from the board's ``board.json`` bound read-only into the namespace.

The stand-ins find their board only through fixed paths inside the namespace
(``/run/edge-llm-sim/facts.json`` and ``/run/edge-llm-sim/board/board.json``), never through
host-side globals, so a process that escapes its board would fail instead of lying. This module
imports only the standard library at module level: it runs under the board's ``python3`` as
any user (``llm`` included), without the controller's site-packages.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import random
import re
import resource
import struct
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

SIM_DIR = "/run/edge-llm-sim"              # inside a board's namespace (tmpfs)
FACTS_NAME = "facts.json"                  # written by host.start_host (board_state.facts): catalog facts of this board
BOARD_LINK = "board"                       # read-only bind of boards/<serial>/
SRC_LINK = "src"                           # read-only bind of the directory holding the provisioner package
PYTHON_LINK = "python3"                    # interpreter every board user may execute

PERSISTENT_WEIGHTS_BYTES = 1_172_307_968   # what FastRPC pins for Gemma-4 E2B (its 'err 1002' line)
QLI_DEFAULT_MEMLOCK = 8192 * 1024          # QLI's `ulimit -l` 8192 (KiB)
SIM_STUB_MAGIC = "EDGE-LLM-SIM STUB LIBRARY"
QAIRT_RE = re.compile(rb"v?(2\.\d{1,2}\.\d{1,2}\.\d{6})\d*")
RUNTIMES = ("litert_lm_main", "genie-t2t-run", "qnn-platform-validator")
GARBAGE_TOKEN = "alitiesmall"              # wrong soc_model: right first tokens, then one token repeated


# --------------------------------------------------------------------------- rootfs helpers (D1, deploy)
def runtime_executable(name: str) -> str:
    """Text of the executable a board's rootfs carries for runtime ``name``.

    The bundle generator installs it as ``/opt/litert-lm/<rev>/bin/litert_lm_main`` or
    ``/opt/qairt/<ver>/bin/aarch64-oe-linux-gcc11.2/genie-t2t-run`` (mode 0755). It only works
    inside a virtual board's namespace, where ``/run/edge-llm-sim/python3`` and the sim sources
    exist; anywhere else it says so and exits 127, like a foreign-arch binary would fail.
    """
    if name not in RUNTIMES:
        raise ValueError(f"unknown runtime '{name}' (known: {', '.join(RUNTIMES)})")
    return (
        f"#!{SIM_DIR}/{PYTHON_LINK} -S\n"
        f"# SIMULATED {name} for edge-llm virtual boards (provisioner.sim.runtime) - not the real runtime.\n"
        "import sys\n"
        f"sys.path.insert(0, '{SIM_DIR}/{SRC_LINK}')\n"
        "from provisioner.sim.runtime import main\n"
        f"sys.exit(main({name!r}, sys.argv[1:]))\n"
    )


def stub_library(name: str, qairt: str) -> bytes:
    """Content of a stand-in shared library (``libQnnHtp.so``, skels, ``libGenie.so``...).

    Carries the QAIRT build id as text, as the real libraries do, so the runtimes (and any
    ``strings | grep`` check on the board) can tell which release a library came from.
    """
    return f"{SIM_STUB_MAGIC}\nname={name}\nqairt=v{qairt}\n".encode()


def library_build(path: str | os.PathLike[str]) -> str | None:
    """QAIRT build id carried by a library file (first 64 KiB), or None."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(65536)
    except OSError:
        return None
    m = QAIRT_RE.search(head)
    return m.group(1).decode() if m else None


def genie_version(qairt: str | None) -> str:
    """libGenie.so version for a QAIRT build (2.45 ships Genie 1.17.0, 2.42 ships 1.14.0)."""
    try:
        minor = int(str(qairt).split(".")[1])
    except (IndexError, ValueError):
        return "1.17.0"
    return f"1.{minor - 28}.0"


# --------------------------------------------------------------------------- what the process sees
@dataclass
class BoardView:
    """This board as seen from inside its namespace."""

    facts: dict[str, Any]
    state: dict[str, Any]
    sim_dir: Path

    @classmethod
    def load(cls, sim_dir: str | os.PathLike[str] = SIM_DIR) -> BoardView:
        d = Path(sim_dir)
        facts = json.loads((d / FACTS_NAME).read_text(encoding="utf-8"))
        try:
            state = json.loads((d / BOARD_LINK / "board.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            state = {}
        return cls(facts, state, d)

    @property
    def board(self) -> dict[str, Any]:
        return self.facts["board"]

    @property
    def faults(self) -> set[str]:
        return set(self.state.get("faults") or [])

    @property
    def arch(self) -> str:
        return self.board["hexagon_arch"]

    @property
    def skel_name(self) -> str:
        return f"libQnnHtp{self.arch.upper()}Skel.so"

    def expected(self, model_id: str | None) -> dict[str, Any]:
        """Reference speed for ``model_id`` on this board and OS (catalog performance table)."""
        perf = self.board.get("performance") or []
        os_name = self.facts.get("os", "qli")
        for want_os in (os_name, None):
            for p in perf:
                if p["model"] == model_id and (want_os is None or p["os"] == want_os):
                    return p
        for p in perf:
            if p["os"] == os_name:
                return p
        return perf[0] if perf else {"decode_tok_s": 10.0, "ttft_s": 0.2, "prefill_tok_s": 150.0}

    @property
    def time_scale(self) -> float:
        return float(self.facts.get("time_scale", 0.0))


def _path_dirs(var: str) -> list[str]:
    return [d for d in os.environ.get(var, "").split(":") if d]


def find_lib(name: str, dirs: list[str]) -> str | None:
    for d in dirs:
        p = os.path.join(d, name)
        if os.path.isfile(p):
            return p
    return None


@dataclass
class Stack:
    """The NPU software stack the calling process would load (host libs, skel, FastRPC)."""

    host_lib: str | None
    host_build: str | None
    skel_lib: str | None
    skel_build: str | None
    other_skels: list[str]
    cdsprpc: str | None
    fastrpc_error: str | None
    memlock: int
    cdsprpcd_active: bool


def probe_stack(view: BoardView, host_lib_name: str = "libQnnHtp.so") -> Stack:
    ld = _path_dirs("LD_LIBRARY_PATH")
    adsp = _path_dirs("ADSP_LIBRARY_PATH")
    host = find_lib(host_lib_name, ld)
    skel = find_lib(view.skel_name, adsp)
    others = []
    for d in adsp:
        try:
            others += [f for f in os.listdir(d) if f.startswith("libQnnHtpV") and f.endswith("Skel.so")]
        except OSError:
            continue
    cdsp = find_lib("libcdsprpc.so", ld + ["/usr/lib", "/lib", "/usr/lib64"])
    try:
        from provisioner.sim.limits import effective_memlock
        soft = effective_memlock()
    except Exception:   # noqa: BLE001
        soft = resource.getrlimit(resource.RLIMIT_MEMLOCK)[0]
    return Stack(
        host_lib=host, host_build=library_build(host) if host else None,
        skel_lib=skel, skel_build=library_build(skel) if skel else None, other_skels=sorted(set(others)),
        cdsprpc=cdsp, fastrpc_error=fastrpc_access(), memlock=soft,
        cdsprpcd_active=_unit_active(view, "cdsprpcd.service"),
    )


def fastrpc_access(device: str = "/dev/fastrpc-cdsp") -> str | None:
    """None if this process may open the FastRPC device, else why not (as a short reason)."""
    try:
        fd = os.open(device, os.O_RDWR | os.O_NONBLOCK)
        os.close(fd)
    except FileNotFoundError:
        return f"{device}: No such file or directory"
    except PermissionError:
        return f"{device}: Permission denied"
    except OSError as exc:
        if exc.errno in (errno.ENXIO, errno.ENODEV):
            return None        # the node is there and we may open it; no kernel driver behind it here
        return f"{device}: {exc.strerror}"
    return None


def _unit_active(view: BoardView, unit: str) -> bool:
    """Ask the board's service manager (the systemctl stand-in's state) whether ``unit`` runs."""
    try:
        from provisioner.sim import service_manager
    except Exception:   # noqa: BLE001 - without the manager there is no daemon either
        return False
    try:
        return service_manager.Manager().active_state(unit) == "active"
    except Exception:   # noqa: BLE001
        return False


# --------------------------------------------------------------------------- models
@dataclass
class ModelView:
    path: str
    kind: str
    size: int
    declared_size: int | None
    qairt: str | None
    npu_only: bool
    soc_model: int | None = None
    dsp_arch: str | None = None
    perf_profile: str | None = None
    model_id: str | None = None
    config: dict[str, Any] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)

    @property
    def truncated(self) -> bool:
        return self.declared_size is not None and self.size < self.declared_size


def _model_meta(path: Path) -> dict[str, Any]:
    """model.json beside a deployed model version (layout.MODEL_META), if any."""
    for d in (path if path.is_dir() else path.parent, path.parent.parent):
        f = d / "model.json"
        if f.is_file():
            try:
                return json.loads(f.read_text(encoding="utf-8"))
            except ValueError:
                return {}
    return {}


def _scan_build(path: Path, window: int = 1 << 20) -> str | None:
    """The QAIRT build id in the first/last ``window`` bytes (where context binaries sit)."""
    try:
        size = path.stat().st_size
        with open(path, "rb") as fh:
            head = fh.read(window)
            tail = b""
            if size > window:
                fh.seek(max(window, size - window))
                tail = fh.read(window)
    except OSError:
        return None
    for chunk in (head, tail):
        m = QAIRT_RE.search(chunk)
        if m:
            return m.group(1).decode()
    return None


def _match_model(view: BoardView, name: str, kind: str, meta: dict[str, Any]) -> str | None:
    models = view.facts.get("models", {})
    if meta.get("name") in models:
        return meta["name"]
    for mid, m in models.items():
        if m.get("file") and m["file"] == name:
            return mid
    for mid, m in models.items():
        if m.get("kind") == kind and view.board["id"] in (m.get("boards") or []):
            return mid
    return None


LITERTLM_MAGIC = b"LITERTLM"
LITERTLM_PREAMBLE = 32   # magic, u32 major/minor/patch, 4 bytes padding, u64 header end offset


def _fb_table_field(buf: bytes, table: int, slot: int) -> int | None:
    """Absolute position of field ``slot`` of the flatbuffer table at ``table`` (None: absent)."""
    vtable = table - struct.unpack_from("<i", buf, table)[0]
    vt_size = struct.unpack_from("<H", buf, vtable)[0]
    at = 4 + 2 * slot
    if at + 2 > vt_size:
        return None
    off = struct.unpack_from("<H", buf, vtable + at)[0]
    return table + off if off else None


def _fb_deref(buf: bytes, pos: int) -> int:
    return pos + struct.unpack_from("<I", buf, pos)[0]


def litertlm_extent(path: Path) -> int | None:
    """How long the file must be for the runtime to load it: the header end and every section's end.

    What LiteRT-LM's loader reads (google-ai-edge/LiteRT-LM @767d74f9, schema/core/litertlm_read.cc:
    magic ``LITERTLM``, three u32 versions, 4 bytes padding, u64 header end offset, then the
    ``LiteRTLMMetaData`` flatbuffer of schema/core/litertlm_header_schema.fbs, whose
    ``section_metadata.objects[]`` carry ``begin_offset``/``end_offset``). Each section is mapped
    with runtime/util/memory_mapped_file_posix.cc, which refuses a range past the end of the file
    ("Length and offset too large"), so a file cut anywhere before its last section's end fails to
    load, whatever a model.json beside it says. None: not a LiteRT-LM container (or a header this
    reader does not understand) - then only model.json can tell.
    """
    try:
        with open(path, "rb") as fh:
            pre = fh.read(LITERTLM_PREAMBLE)
            if len(pre) < LITERTLM_PREAMBLE or pre[:8] != LITERTLM_MAGIC:
                return None
            header_end = struct.unpack_from("<Q", pre, 24)[0]
            if header_end < LITERTLM_PREAMBLE or header_end > (64 << 20):
                return None
            buf = fh.read(header_end - LITERTLM_PREAMBLE)
    except OSError:
        return None
    if len(buf) < header_end - LITERTLM_PREAMBLE:
        return header_end                                  # "Failed to read header data."
    try:
        root = _fb_deref(buf, 0)
        sm_field = _fb_table_field(buf, root, 1)           # LiteRTLMMetaData.section_metadata
        if sm_field is None:
            return header_end
        objs_field = _fb_table_field(buf, _fb_deref(buf, sm_field), 0)   # SectionMetadata.objects
        if objs_field is None:
            return header_end
        vec = _fb_deref(buf, objs_field)
        extent = header_end
        for i in range(struct.unpack_from("<I", buf, vec)[0]):
            obj = _fb_deref(buf, vec + 4 + 4 * i)
            end = _fb_table_field(buf, obj, 2)             # SectionObject.end_offset (ulong)
            if end is not None:
                extent = max(extent, struct.unpack_from("<Q", buf, end)[0])
        return extent
    except struct.error:
        return None


def read_litertlm(view: BoardView, path: Path) -> ModelView:
    meta = _model_meta(path)
    size = path.stat().st_size
    # The virtual runtime reads the file its own way (its own header reader, a scan for the QAIRT stamp),
    # never with the product's inspector: what it stands in for is the runtime, not `provisioner inspect`.
    # The container's own section table decides first: a release that published a cut file declares the
    # cut size in model.json, and the real loader still refuses it.
    declared = litertlm_extent(path) or declared_sizes(meta).get(path.name) or meta.get("size")
    qairt = _scan_build(path) or meta.get("qairt")
    mid = _match_model(view, path.name, "litertlm", meta)
    npu_only = bool(view.facts.get("models", {}).get(mid or "", {}).get("npu_only", True))
    return ModelView(str(path), "litertlm", size, declared, qairt, bool(npu_only), model_id=mid)


def read_genie(view: BoardView, config_path: Path) -> ModelView:
    cfg = json.loads(config_path.read_text(encoding="utf-8"))
    base = config_path.parent
    missing = []
    engine = cfg.get("dialog", {}).get("engine", {})
    bins = engine.get("model", {}).get("binary", {}).get("ctx-bins", [])
    total = 0
    for b in bins:
        p = base / b
        if p.is_file():
            total += p.stat().st_size
        else:
            missing.append(b)
    tok = cfg.get("dialog", {}).get("tokenizer", {}).get("path")
    if tok and not (base / tok).is_file():
        missing.append(tok)
    ext = engine.get("backend", {}).get("extensions")
    ext_cfg: dict[str, Any] = {}
    if ext:
        if (base / ext).is_file():
            ext_cfg = json.loads((base / ext).read_text(encoding="utf-8"))
        else:
            missing.append(ext)
    dev = (ext_cfg.get("devices") or [{}])[0]
    cores = dev.get("cores") or [{}]
    qairt = None
    tv = base / "tool-versions.yaml"
    if tv.is_file():
        m = re.search(r"^qairt:\s*['\"]?v?([0-9.]+)", tv.read_text(encoding="utf-8"), re.M)
        if m:
            qairt = _normalize(m.group(1))
    if qairt is None and bins and (base / bins[0]).is_file():
        qairt = _scan_build(base / bins[0])
    meta = _model_meta(base)
    declared = meta.get("size")
    mid = _match_model(view, base.name, "genie", meta)
    mv = ModelView(str(base), "genie", total, None, qairt, True, soc_model=dev.get("soc_model"),
                   dsp_arch=dev.get("dsp_arch"), perf_profile=cores[0].get("perf_profile"), model_id=mid,
                   config=cfg, missing=missing)
    sizes = declared_sizes(meta)
    if sizes and not missing:
        # model.json (written at deploy) declares the size of every file of the bundle
        present = sum((base / f).stat().st_size for f in sizes if (base / f).is_file())
        if present < sum(sizes.values()):
            mv.size, mv.declared_size = present, sum(sizes.values())
    elif isinstance(declared, int) and declared > 0 and not missing and isinstance(meta.get("files"), list):
        present = sum((base / f).stat().st_size for f in meta["files"] if isinstance(f, str) and (base / f).is_file())
        if present < declared:
            mv.size, mv.declared_size = present, declared
    return mv


def declared_sizes(meta: dict[str, Any]) -> dict[str, int]:
    """file name -> size from model.json's ``files: [{name, size, sha256}]`` (empty if not given)."""
    out = {}
    for f in meta.get("files") or []:
        if isinstance(f, dict) and isinstance(f.get("name"), str) and isinstance(f.get("size"), int):
            out[f["name"]] = f["size"]
    return out


def _normalize(raw: str) -> str:
    m = re.match(r"^v?(\d+\.\d+\.\d+)\.(\d{6})\d*$", raw.strip())
    return f"{m.group(1)}.{m.group(2)}" if m else raw.strip()


# --------------------------------------------------------------------------- text generation
_ANSWERS = {
    "qualcomm": ("Qualcomm is a global technology company that designs, develops, and sells wireless "
                 "communication solutions and processors. They are a leading provider of technology for "
                 "smartphones, tablets, IoT, and other mobile devices, as well as for various other industries."),
    "gravity": "Gravity is the force that pulls objects with mass toward each other.",
    "2+3": "2 + 3 equals 5.",
    "capital of france": "The capital of France is Paris.",
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


def _sleep(view: BoardView, seconds: float) -> None:
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
    _sleep(view, t.init_s)
    # LiteRT-LM cbf463d runtime/engine/litert_lm_main.cc:152: the prompt is echoed before it is sent
    out.write(f"input_prompt: {prompt}\n")
    out.flush()
    _sleep(view, t.ttft_s)
    out.write(text)                 # :81, the answer as it streams; :77, a newline when it ends
    out.write("\n")
    out.flush()
    _sleep(view, t.decode_s)
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
    htp = find_lib("libQnnHtp.so", _path_dirs("LD_LIBRARY_PATH"))
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
    coherent = answer_for(prompt)
    limit = (model.config or {}).get("dialog", {}).get("max-num-tokens")
    if isinstance(limit, int) and limit > 0:
        coherent = first_tokens(coherent, limit)     # Genie stops generating at dialog.max-num-tokens
    n = count_tokens(coherent)
    p_tokens = count_tokens(prompt)
    t = timing(view, model, p_tokens, n, burst=burst, rng=rng)
    board_soc = int(view.board["qnn_soc_model"])
    garbage = model.soc_model is not None and int(model.soc_model) != board_soc
    text = garbage_for(prompt, n) if garbage else coherent
    _sleep(view, t.init_s + t.ttft_s)
    out.write(f"[BEGIN]: {text}")
    out.flush()
    _sleep(view, t.decode_s)
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


# --------------------------------------------------------------------------- qnn-platform-validator
def qnn_platform_validator(argv: list[str], out: TextIO, err: TextIO, view: BoardView) -> int:
    if "--backend" not in argv:
        raise RuntimeFailure(["Usage: qnn-platform-validator --backend <gpu|dsp|all> [--coreVersion] "
                              "[--libVersion] [--testBackend]"])
    stack = probe_stack(view)
    hw = stack.fastrpc_error is None and stack.cdsprpc is not None and stack.cdsprpcd_active
    libs = stack.host_lib is not None and stack.skel_lib is not None
    out.write("PF_VALIDATOR: DEBUG: Calling PlatformValidator->setBackend\n")
    out.write(f"Backend Hardware  : {'Supported' if hw else 'Not Supported'}\n")
    out.write(f"Backend Libraries : {'Found' if libs else 'Not Found'}\n")
    if "--coreVersion" in argv:
        out.write(f"Core Version      : Hexagon Architecture {view.arch.upper()}\n")
    if "--libVersion" in argv and stack.host_build:
        out.write(f"Library Version   : {stack.host_build}\n")
    if "--testBackend" in argv:
        ok = hw and libs and (stack.skel_build == stack.host_build)
        out.write(f"Unit Test         : {'Passed' if ok else 'Failed'}\n")
        out.write("Error in saving the results\n")
        return 0 if ok else 1
    return 0 if hw and libs else 1


_MAINS = {"litert_lm_main": litert_lm_main, "genie-t2t-run": genie_t2t_run,
          "qnn-platform-validator": qnn_platform_validator}


def _reboot_in_gate(view: BoardView, sim_dir: str | os.PathLike[str]) -> None:
    """Fault ``ota-reboot-in-gate``: the first runtime run on an updated deployment power-cycles the board
    (a power cut in the middle of update-os's health gate); once per board, marked in its sysroot."""
    ota = view.state.get("ostree") or {}
    booted = (ota.get("booted") or {}).get("checksum")
    marker = Path("/sysroot/.edge-llm-sim-gate-reboot")
    if "ota-reboot-in-gate" not in view.faults or not booted or booted == ota.get("factory") or marker.exists():
        return
    marker.touch()
    subprocess.Popen([str(Path(sim_dir) / "reboot")], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                     stderr=subprocess.DEVNULL, start_new_session=True)
    time.sleep(120)                        # the namespace goes down under this process


def main(name: str, argv: list[str], *, sim_dir: str | os.PathLike[str] = SIM_DIR,
         out: TextIO | None = None, err: TextIO | None = None) -> int:
    """Entry point of the rootfs executables: run stand-in ``name`` with ``argv``; returns the exit code."""
    out = out or sys.stdout
    err = err or sys.stderr
    try:
        view = BoardView.load(sim_dir)
    except (OSError, ValueError):
        print(f"{name}: cannot execute binary file: Exec format error (not on a virtual board)", file=err)
        return 126
    _reboot_in_gate(view, sim_dir)
    try:
        return _MAINS[name](argv, out, err, view)
    except RuntimeFailure as failure:
        out.flush()
        for line in failure.lines:
            print(line, file=err if failure.code else out)
        err.flush()
        return failure.code
