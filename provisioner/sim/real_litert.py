"""Google's real LiteRT-LM runtime behind a virtual IQ-8275 board's stand-in library.

A virtual board has no NPU, but this machine can run the real runtime on its CPU: PyPI
``litert-lm-api`` 0.12.0 ships ``liblitert-lm.so`` with the C ABI of the pinned LiteRT-LM
cbf463d (``c/engine.h``), and ``realworld/litertlm/tiny/`` in the ``shared`` directory beside
the checkout holds a real ``.litertlm`` LLM (random weights) it runs in milliseconds. So the text
a virtual board's service streams is the real runtime's answer to the real request (chat
template, conversation messages, max tokens, stop token: all the runtime's own), while
:mod:`provisioner.sim.npu` keeps modelling only what a CPU cannot show: the NPU's timing and
burst mode, FastRPC, the QAIRT match and the failure signatures.

Host side, :func:`locate` finds the library and the model (or says in one line why not);
:mod:`provisioner.sim.namespace` binds both read-only into the board under ``/run/edge-llm-sim`` and
names them in ``facts.json``. Board side, :class:`RealLiteRt` runs them; it imports only the
standard library (it runs under the board's ``python3 -S`` as the service's user) and binds the
C functions itself from ``c/engine.h`` at cbf463d, never with the service's prototype tables
it stands behind.
"""

from __future__ import annotations

import ctypes
import importlib.metadata
import importlib.util
import json
import os
import sys
import threading
from pathlib import Path
from typing import Any

PIN_WHEEL = ("litert-lm-api", "0.12.0")     # the pin's own version (LiteRT-LM cbf463d version.bzl), same C ABI
LIB_NAME = "liblitert-lm.so"                # python/litert_lm/_ffi.py:104 at cbf463d
TINY_MODEL = "tiny-eos.litertlm"            # may stop by itself (tiny.litertlm never does)
LIB_ENV, MODEL_ENV = "EDGE_LLM_SIM_LITERT_LIB", "EDGE_LLM_SIM_TINY_MODEL"
BOARD_LIB_DIR, BOARD_MODEL_DIR = "real-litert", "real-model"     # under the board's /run/edge-llm-sim
BOARD_TYPED_DIR = "real-model-typed"        # the tiny model re-packed per model type (typed_models)
CONTEXT = 512                               # the tiny models' KV cache (tiny.reference.json kv_cache_len)
LOG_ERROR = 4                               # engine.h:236-240: 0=VERBOSE ... 4=ERROR
INPUT_TEXT = 0                              # engine.h:244 kLiteRtLmInputDataTypeText
GENERATION_TIMEOUT_S = 120.0

_P, _S, _I, _B = ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int, ctypes.c_bool
# engine.h:652 at cbf463d: (callback_data, chunk, is_final, error_msg)
_Callback = ctypes.CFUNCTYPE(None, _P, _S, _B, _S)


class _Input(ctypes.Structure):
    """LiteRtLmInputData, engine.h:252-260 at cbf463d."""

    _fields_ = [("type", ctypes.c_int), ("data", _P), ("size", ctypes.c_size_t)]


# name -> (restype, argtypes), each as declared in c/engine.h at cbf463d (line of the declaration)
_PROTOTYPES: dict[str, tuple[Any, list[Any]]] = {
    "litert_lm_set_min_log_level": (None, [_I]),                                        # :240
    "litert_lm_engine_settings_create": (_P, [_S, _S, _S, _S]),                         # :271
    "litert_lm_engine_settings_delete": (None, [_P]),                                   # :279
    "litert_lm_engine_settings_set_max_num_tokens": (None, [_P, _I]),                   # :286
    "litert_lm_engine_settings_set_cache_dir": (None, [_P, _S]),                        # :313
    "litert_lm_engine_create": (_P, [_P]),                                              # :380
    "litert_lm_engine_delete": (None, [_P]),                                            # :386
    "litert_lm_session_config_create": (_P, []),                                        # :123
    "litert_lm_session_config_set_max_output_tokens": (None, [_P, _I]),                 # :129
    "litert_lm_session_config_set_apply_prompt_template": (None, [_P, _B]),             # :136
    "litert_lm_session_config_delete": (None, [_P]),                                    # :149
    "litert_lm_engine_create_session": (_P, [_P, _P]),                                  # :396
    "litert_lm_session_delete": (None, [_P]),                                           # :403
    "litert_lm_session_generate_content_stream": (_I, [_P, ctypes.POINTER(_Input), ctypes.c_size_t,
                                                       _Callback, _P]),                 # :683
    "litert_lm_conversation_config_create": (_P, []),                                   # :156
    "litert_lm_conversation_config_set_session_config": (None, [_P, _P]),               # :162
    "litert_lm_conversation_config_set_system_message": (None, [_P, _S]),               # :170
    "litert_lm_conversation_config_set_tools": (None, [_P, _S]),                        # :177
    "litert_lm_conversation_config_set_messages": (None, [_P, _S]),                     # :184
    "litert_lm_conversation_config_set_enable_constrained_decoding": (None, [_P, _B]),  # :199
    "litert_lm_conversation_config_delete": (None, [_P]),                               # :214
    "litert_lm_conversation_create": (_P, [_P, _P]),                                    # :697
    "litert_lm_conversation_delete": (None, [_P]),                                      # :704
    "litert_lm_conversation_send_message_stream": (_I, [_P, _S, _S, _P, _Callback, _P]),  # :761
}


def _sim_root() -> Path:
    """The directory holding the ``provisioner`` package (the checkout; ``shared/`` is its sibling)."""
    return Path(__file__).resolve().parents[2]


def locate() -> tuple[Path, Path] | str:
    """(library, model) of the real runtime on this machine, or one line saying why there is none.

    The library is ``$EDGE_LLM_SIM_LITERT_LIB`` or the installed litert-lm-api wheel's, and only
    at 0.12.0: a later wheel has another C ABI (0.18.1's stream callback takes 2 arguments) and
    would crash the process this module binds it in. The model is ``$EDGE_LLM_SIM_TINY_MODEL`` or
    ``shared/realworld/litertlm/tiny/tiny-eos.litertlm`` beside the checkout.
    """
    lib_env = os.environ.get(LIB_ENV)
    if lib_env:
        lib = Path(lib_env)
    else:
        try:
            version = importlib.metadata.version(PIN_WHEEL[0])
        except importlib.metadata.PackageNotFoundError:
            return f"{PIN_WHEEL[0]} is not installed (pip install {PIN_WHEEL[0]}=={PIN_WHEEL[1]})"
        if version != PIN_WHEEL[1]:
            return f"{PIN_WHEEL[0]} {version} is installed; the pinned C ABI is {PIN_WHEEL[1]}'s"
        spec = importlib.util.find_spec("litert_lm")      # located, never imported (Google's binding)
        if spec is None or not spec.submodule_search_locations:
            return f"{PIN_WHEEL[0]} has no litert_lm package directory"
        lib = Path(next(iter(spec.submodule_search_locations))) / LIB_NAME
    model = Path(os.environ.get(MODEL_ENV) or
                 _sim_root().parent / "shared" / "realworld" / "litertlm" / "tiny" / TINY_MODEL)
    for what, path in (("library", lib), ("tiny model", model)):
        if not path.is_file():
            return f"the real LiteRT-LM {what} {path} is absent"
    return lib.resolve(), model.resolve()


def board_facts(found: tuple[Path, Path] | str, sim_dir: str) -> dict[str, Any]:
    """facts.json's ``real_litert`` entry: where the board sees the library and model, or why not, and
    ``typed``: the tiny model re-packed as each model type of :data:`TYPED_TEMPLATES` (model type -> path)."""
    if isinstance(found, str):
        return {"absent": found}
    lib, model = found
    typed = typed_models(model)
    return {"library": f"{sim_dir}/{BOARD_LIB_DIR}/{lib.name}", "model": f"{sim_dir}/{BOARD_MODEL_DIR}/{model.name}",
            "typed": {kind: f"{sim_dir}/{BOARD_TYPED_DIR}/{path.name}" for kind, path in typed.items()}}


class RealRuntimeError(Exception):
    """The real runtime refused (its reason is on stderr, where the runtime writes it)."""


class RealLiteRt:
    """One real engine on the CPU with the tiny model; generations run one at a time, to the end."""

    def __init__(self, library: str, model: str) -> None:
        self.model = model
        self.lib = ctypes.CDLL(library)
        for name, (res, args) in _PROTOTYPES.items():
            fn = getattr(self.lib, name)
            fn.restype, fn.argtypes = res, args
        self.lib.litert_lm_set_min_log_level(LOG_ERROR)
        settings = self.lib.litert_lm_engine_settings_create(model.encode(), b"cpu", None, None)
        if not settings:
            raise RealRuntimeError(f"litert_lm_engine_settings_create failed for {model}")
        try:
            # engine.h:313: ":nocache" writes no .xnnpack_cache beside the (read-only) model
            self.lib.litert_lm_engine_settings_set_cache_dir(settings, b":nocache")
            self.lib.litert_lm_engine_settings_set_max_num_tokens(settings, CONTEXT)
            self.engine = self.lib.litert_lm_engine_create(settings)
        finally:
            self.lib.litert_lm_engine_settings_delete(settings)
        if not self.engine:
            raise RealRuntimeError(f"litert_lm_engine_create failed for {model}")
        self._lock = threading.Lock()
        self.constrain = True       # False once the runtime refused a conversation with constrained decoding

    def generate(self, payload: str, mode: str, max_tokens: int) -> list[str]:
        """The chunks the runtime streams, as it streams them.

        ``mode`` ``conv``: ``payload`` is the stand-in's envelope ``{"system", "messages", "tools",
        "constrained", "message"}`` (what the service gave conversation_config_set_system_message /
        _set_messages / _set_tools / _set_enable_constrained_decoding and send_message_stream); the
        chunks are the runtime's JSON messages (with its parsed ``tool_calls`` where the model made any).
        ``text`` / ``raw``: a session prompt with / without the model's prompt template; the chunks are text.
        Raises :class:`RealRuntimeError` with the runtime's error message.
        """
        with self._lock:
            return self._generate(payload, mode, max_tokens)

    def _generate(self, payload: str, mode: str, max_tokens: int) -> list[str]:
        lib = self.lib
        chunks: list[str] = []
        done = threading.Event()
        state: dict[str, str | None] = {"error": None}

        def on_chunk(_data: Any, chunk: bytes | None, is_final: bool, error: bytes | None) -> None:
            if chunk:
                chunks.append(chunk.decode("utf-8", "replace"))
            if error:
                state["error"] = error.decode("utf-8", "replace")
            if is_final or error:
                done.set()

        callback = _Callback(on_chunk)
        sc = lib.litert_lm_session_config_create()
        owned: list[tuple[Any, int]] = []
        try:
            if max_tokens > 0:
                lib.litert_lm_session_config_set_max_output_tokens(sc, max_tokens)
            if mode == "conv":
                env = json.loads(payload)
                cc = lib.litert_lm_conversation_config_create()
                owned.append((lib.litert_lm_conversation_config_delete, cc))
                lib.litert_lm_conversation_config_set_session_config(cc, sc)
                if env.get("system") is not None:
                    lib.litert_lm_conversation_config_set_system_message(cc, json.dumps(env["system"]).encode())
                if env.get("messages"):
                    lib.litert_lm_conversation_config_set_messages(cc, json.dumps(env["messages"]).encode())
                if env.get("tools"):
                    lib.litert_lm_conversation_config_set_tools(cc, json.dumps(env["tools"]).encode())
                if env.get("constrained") and self.constrain:
                    lib.litert_lm_conversation_config_set_enable_constrained_decoding(cc, True)
                conv = lib.litert_lm_conversation_create(self.engine, cc)
                if not conv and env.get("constrained") and self.constrain:
                    # The board's model would be constrained; the tiny one cannot be (its vocabulary is not
                    # Gemma's: "Unsupported vocabulary type for Fst-Constraints library"). Its words stay the
                    # real runtime's, unconstrained, and the board's log says so once.
                    self.constrain = False
                    print("edge-llm-sim: the tiny model cannot be constrained (the real runtime refused); "
                          "its answers go unconstrained", file=sys.stderr)
                    lib.litert_lm_conversation_config_set_enable_constrained_decoding(cc, False)
                    conv = lib.litert_lm_conversation_create(self.engine, cc)
                if not conv:
                    raise RealRuntimeError("litert_lm_conversation_create failed")
                owned.append((lib.litert_lm_conversation_delete, conv))
                rc = lib.litert_lm_conversation_send_message_stream(
                    conv, json.dumps(env["message"]).encode(), None, None, callback, None)
            else:
                lib.litert_lm_session_config_set_apply_prompt_template(sc, mode != "raw")
                session = lib.litert_lm_engine_create_session(self.engine, sc)
                if not session:
                    raise RealRuntimeError("litert_lm_engine_create_session failed")
                owned.append((lib.litert_lm_session_delete, session))
                data = payload.encode("utf-8")
                buf = ctypes.create_string_buffer(data, len(data))
                inp = _Input(INPUT_TEXT, ctypes.cast(buf, _P), len(data))
                rc = lib.litert_lm_session_generate_content_stream(session, ctypes.byref(inp), 1, callback, None)
            if rc != 0:
                raise RealRuntimeError(f"the real runtime refused to start the stream (status {rc})")
            if not done.wait(GENERATION_TIMEOUT_S):
                raise RealRuntimeError(f"the real runtime did not finish in {GENERATION_TIMEOUT_S:.0f} s")
            # "Max number of tokens reached." ends a generation that filled the context: its text stands
            if state["error"] and not state["error"].startswith("Max number of tokens"):
                raise RealRuntimeError(state["error"])
            return chunks
        finally:
            for delete, handle in reversed(owned):      # sessions before the engine (an engine outliving
                delete(handle)                          # one aborts at exit)
            lib.litert_lm_session_config_delete(sc)
            del callback

    def close(self) -> None:
        if self.engine:
            self.lib.litert_lm_engine_delete(self.engine)
            self.engine = None

# ---------------------------------------------------------------------------------------------------------
# The tiny model as another model type, for tool calls through the runtime's own processors (host side only)
# ---------------------------------------------------------------------------------------------------------

# Written for the tool tests and bench/serve_real.py: the tiny model's Gemma-style turns (make_tiny_litertlm.py's
# JINJA_TEMPLATE) with the tool sections in the format of Qwen3's chat template (google-ai-edge/LiteRT-LM cbf463d,
# runtime/components/testdata/Qwen-Qwen3-0.6B.jinja): tools as JSON lines inside <tools></tools> in a system
# turn, calls as <tool_call>{"name", "arguments"}</tool_call>, results inside <tool_response></tool_response>
# in a user turn. The qwen3 processor parses <tool_call> blocks (qwen3_data_processor_config.h at cbf463d).
TOOL_TEMPLATE = (
    "{{ bos_token }}"
    "{%- if tools -%}{{ '<start_of_turn>system\n' }}"
    "{%- if messages[0]['role'] == 'system' -%}{{ messages[0]['content'] | trim }}{{ '\n\n' }}{%- endif -%}"
    "{{ '# Tools\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>' }}"
    "{%- for tool in tools -%}{{ '\n' }}{{ tool | tojson }}{%- endfor -%}"
    "{{ '\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
    "<tool_call></tool_call> XML tags.<end_of_turn>\n' }}{%- endif -%}"
    "{%- for message in messages -%}{%- if not (tools and loop.first and message['role'] == 'system') -%}"
    "{%- if message['role'] == 'assistant' -%}{%- set role = 'model' -%}"
    "{%- elif message['role'] == 'tool' -%}{%- set role = 'user' -%}"
    "{%- else -%}{%- set role = message['role'] -%}{%- endif -%}"
    "{{ '<start_of_turn>' + role + '\n' }}"
    "{%- if message['content'] is string -%}{{ message['content'] | trim }}"
    "{%- elif message['content'] -%}{%- for item in message['content'] -%}"
    "{%- if item['type'] == 'text' -%}{{ item['text'] | trim }}"
    "{%- elif item['type'] == 'tool_response' -%}"
    "{{ '<tool_response>\n' }}{{ item['response'] | tojson }}{{ '\n</tool_response>' }}"
    "{%- endif -%}{%- endfor -%}{%- endif -%}"
    "{%- if message['tool_calls'] -%}{%- for call in message['tool_calls'] -%}"
    "{{ '<tool_call>\n{\"name\": \"' + call['function']['name'] + '\", \"arguments\": ' }}"
    "{{ call['function']['arguments'] | tojson }}{{ '}\n</tool_call>' }}{%- endfor -%}{%- endif -%}"
    "{{ '<end_of_turn>\n' }}{%- endif -%}{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<start_of_turn>model\n' }}{%- endif -%}"
)


def repack(src: Path, out: Path, model_type: str, template: str | None = None,
           options: dict[str, Any] | None = None) -> Path:
    """``src`` (a tiny .litertlm) re-packed by the official litert-lm-builder with another ``llm_model_type``
    (``qwen3``, ``gemma3``, ...; the field names of runtime/proto/llm_model_type.proto at cbf463d) and,
    given one, another chat template: the same tokenizer and weights, another model data processor in the
    runtime (model_data_processor_factory.cc:344-360 at cbf463d). ``options`` sets fields of the type's own
    message (e.g. qwen3's ``code_fence_start``, llm_model_type.proto:115-125), which the factory hands to the
    processor (model_data_processor_factory.cc:303-320). Needs PyPI litert-lm-builder."""
    import shutil
    import tempfile

    from google.protobuf import text_format
    from litert_lm_builder import litertlm_builder as builder
    from litert_lm_builder.runtime.proto import llm_metadata_pb2
    with tempfile.TemporaryDirectory(prefix="repack-", dir=out.parent) as work:
        toml = builder.unpack(str(src), work)
        meta_path = Path(work) / "LlmMetadataProto.pbtext"
        meta = text_format.Parse(meta_path.read_text(), llm_metadata_pb2.LlmMetadata())
        member = getattr(meta.llm_model_type, model_type)
        member.SetInParent()
        for key, value in (options or {}).items():
            setattr(member, key, value)
        if template is not None:
            meta.jinja_prompt_template = template
        meta_path.write_text(text_format.MessageToString(meta))
        builder.pack(toml, str(out))
        shutil.rmtree(work, ignore_errors=True)
    return out


# Written for virtual boards whose model names llm_model_type gemma4 (the catalog's Gemma-4 .litertlm). A
# conversation without tools renders exactly as with the tiny model's own template (make_tiny_litertlm.py's
# JINJA_TEMPLATE: its <start_of_turn> turns are single tokens of its vocabulary), so a board's chat answers stay
# the tiny model's reference ones. With tools, the tool sections are in the Gemma 4 processor's syntax (LiteRT-LM
# cbf463d runtime/conversation/model_data_processor/gemma4_data_processor_config.h: calls between the fences
# <|tool_call> and <tool_call|> as call:<name>{arguments}, as in gemma4_data_processor_test.cc:253; results
# after function_response_start <|tool_response>); tools as one "declaration:<name>" line each, followed by the
# function's JSON. The Gemma 4 processor hands the template the messages and tools as they came
# (use_template_for_fc_format: gemma4_data_processor.cc MessageToTemplateInput and FormatTools).
GEMMA4_TEMPLATE = (
    "{{ bos_token }}"
    "{%- if tools -%}{{ '<start_of_turn>system\n' }}"
    "{%- if messages[0]['role'] == 'system' -%}{{ messages[0]['content'] | trim }}{{ '\n' }}{%- endif -%}"
    "{%- for tool in tools -%}{{ 'declaration:' + tool['function']['name'] }}{{ tool['function'] | tojson }}"
    "{{ '\n' }}{%- endfor -%}{{ '<end_of_turn>\n' }}{%- endif -%}"
    "{%- for message in messages -%}{%- if not (tools and loop.first and message['role'] == 'system') -%}"
    "{%- if message['role'] == 'assistant' -%}{%- set role = 'model' -%}"
    "{%- else -%}{%- set role = message['role'] -%}{%- endif -%}"
    "{{ '<start_of_turn>' + role + '\n' }}"
    "{%- if message['content'] is string -%}{{ message['content'] | trim }}"
    "{%- elif message['content'] -%}{%- for item in message['content'] -%}"
    "{%- if item['type'] == 'text' -%}{{ item['text'] | trim }}"
    "{%- elif item['type'] == 'tool_response' -%}{{ '<|tool_response>' + item['name'] }}{{ item['response'] | tojson }}"
    "{%- endif -%}{%- endfor -%}{%- endif -%}"
    "{%- if message['tool_calls'] -%}{%- for call in message['tool_calls'] -%}"
    "{{ '<|tool_call>call:' + call['function']['name'] }}{{ call['function']['arguments'] | tojson }}"
    "{{ '<tool_call|>' }}{%- endfor -%}{%- endif -%}"
    "{{ '<end_of_turn>\n' }}{%- endif -%}{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<start_of_turn>model\n' }}{%- endif -%}"
)
#: the model types a virtual board's model may name -> the template the tiny model carries as that type
TYPED_TEMPLATES = {"gemma4": GEMMA4_TEMPLATE}


def typed_dir(model: Path) -> Path:
    """Where the re-packed copies of ``model`` live on this machine: one directory per (model bytes,
    templates) in the temporary directory, shared by every virtual board and test run."""
    import hashlib
    digest = hashlib.sha256(model.read_bytes())
    for kind, template in sorted(TYPED_TEMPLATES.items()):
        digest.update(f"{kind}\0{template}\0".encode())
    import tempfile
    return Path(tempfile.gettempdir()) / f"edge-llm-sim-tiny-{digest.hexdigest()[:16]}"


def typed_models(model: Path) -> dict[str, Path]:
    """``model`` re-packed as each type of :data:`TYPED_TEMPLATES` (model type -> file), made once per machine,
    so a board's stand-in runs the real runtime's processor for the type its own model names. Empty, after one
    line on stderr, where litert-lm-builder is not installed: boards then answer with the generic tiny model."""
    out_dir = typed_dir(model)
    wanted = {kind: out_dir / f"tiny-{kind}.litertlm" for kind in TYPED_TEMPLATES}
    if all(p.is_file() for p in wanted.values()):
        return wanted
    try:
        import litert_lm_builder  # noqa: F401 - only to say why not, before making anything
    except ImportError:
        print("edge-llm-sim: litert-lm-builder is not installed: virtual boards answer with the generic tiny "
              "model whatever their model's type", file=sys.stderr)
        return {}
    out_dir.mkdir(mode=0o755, exist_ok=True)
    for kind, path in wanted.items():
        if not path.is_file():
            part = path.with_name(f"{path.name}.{os.getpid()}.part")
            repack(model, part, kind, TYPED_TEMPLATES[kind])
            os.chmod(part, 0o644)
            os.replace(part, path)              # whole or absent: boards built in parallel may race here
    return wanted
