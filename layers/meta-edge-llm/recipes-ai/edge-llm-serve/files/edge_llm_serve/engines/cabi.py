"""The C API prototypes of both runtimes, with their upstream sources: the one place naming what is called.

Kept in one module (not one per engine) so a reviewer checks every ctypes signature against its header in
one read, and the simulator's stand-in libraries mirror one table.
"""

from __future__ import annotations

import ctypes
import os
from typing import Any

from edge_llm_serve.engines.base import RuntimeFailed

# ---------------------------------------------------------------------------------------------
# C API prototypes: the ONE place that names the runtime functions this service calls.
#
# The simulator's stand-in libraries export exactly these names with these signatures; nothing
# else is called. Each table maps a function name to (restype, argtypes).
#
# LiteRT-LM: c/engine.h at the pinned google-ai-edge/LiteRT-LM cbf463d97fa3 (public in the fork
# zkh2016/LiteRT-LM; PyPI litert-lm-api 0.12.0 ships this C ABI prebuilt), with the
# (callback_data, chunk, is_final, error_msg) stream callback (c/engine.h:652). Built as a shared
# library by python/litert_lm/BUILD; shipped as lib/LITERT_LM_LIBRARY in the LiteRT-LM runtime tree.
# Line numbers below ("engine.h:NN", "engine.cc:NN") are of that commit.
#
# Genie: include/Genie/GenieDialog.h and GenieCommon.h of the QAIRT SDK. libGenie.so lives in the
# QAIRT lib dir that the run environment's LD_LIBRARY_PATH names. Each prototype below was checked
# against the public copies: createFromJson, DialogConfig_free, create, query (and its callback),
# reset and free are declared alike in qdsp6sw/qualcomm-ai-engine-direct-sdk e32f4b482c9d
# include/Genie/GenieDialog.h, quic/wos-ai-plugins a97d5822c2cb plugins/local-rag-app/Genie/
# GenieDialog.h and qualcomm/qidk ad50e8d3912 GenAI-Solutions/AI-Assistant/app/src/main/cpp/genie/
# GenieDialog.h. GenieDialog_signal (GenieDialog_Action_t, ABORT 0x01), GenieDialog_setMaxNumTokens
# (const uint32_t) and the warning statuses (ABORTED 1, CONTEXT_EXCEEDED 4) are in none of those
# older copies: they match the newest public GenieDialog.h found (the QAIRT 2.4x header that also
# includes GenieDlc.h, GenieSampler.h and GenieEngine.h), so a libGenie.so older than that lacks them.
# ---------------------------------------------------------------------------------------------

LITERT_LM_LIBRARY = "liblitert-lm.so"        # file name in <litert dir>/lib (provisioner litert build)
GENIE_LIBRARY = "libGenie.so"                 # file name in the QAIRT lib dir

_P = ctypes.c_void_p          # every LiteRT-LM / Genie handle is an opaque pointer
_S = ctypes.c_char_p
_I = ctypes.c_int
_SZ = ctypes.c_size_t


class LiteRtLmSamplerParams(ctypes.Structure):
    """``LiteRtLmSamplerParams`` of c/engine.h: {type, top_k, top_p, temperature, seed}."""

    _fields_ = [("type", ctypes.c_int), ("top_k", ctypes.c_int32), ("top_p", ctypes.c_float),
                ("temperature", ctypes.c_float), ("seed", ctypes.c_int32)]


class LiteRtLmInputData(ctypes.Structure):
    """``LiteRtLmInputData`` of c/engine.h: {type, data, size}; type 0 = kLiteRtLmInputDataTypeText."""

    _fields_ = [("type", ctypes.c_int), ("data", ctypes.c_void_p), ("size", ctypes.c_size_t)]


LITERT_SAMPLER_TOPK, LITERT_SAMPLER_TOPP, LITERT_SAMPLER_GREEDY = 1, 2, 3   # LiteRtLmSamplerType, engine.h:98
LITERT_INPUT_TEXT = 0                                                        # kLiteRtLmInputDataTypeText, engine.h:244
LITERT_LOG_INFO = 2           # engine.h:236-240
LITERT_LOG_WARNING = 3        # engine.h:236-240: 0=VERBOSE, 1=DEBUG, 2=INFO, 3=WARNING, 4=ERROR, 5=FATAL, 1000=SILENT
LITERT_LM_ABI = "LiteRT-LM 0.12.0 (cbf463d) C ABI"
# Symbols that exist only in a later, incompatible C ABI (PyPI litert-lm-api 0.18.1 exports all the
# functions above too, but its stream callback takes (callback_data, chunk object) and is read with
# litert_lm_stream_chunk_get_text; calling it with the 4-argument callback above crashes the process).
LITERT_LM_OTHER_ABI_SYMBOLS = ("litert_lm_stream_chunk_get_text", "litert_lm_sampler_params_create")
# The later library's own version: litert::lm::LITERT_LM_VERSION, a string_view (pointer, length).
LITERT_LM_VERSION_SYMBOL = "_ZN6litert2lm17LITERT_LM_VERSIONE"

# void (*LiteRtLmStreamCallback)(void* callback_data, const char* chunk, bool is_final, const char* error_msg)
LiteRtLmStreamCallback = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_bool, ctypes.c_char_p)

LITERT_LM_PROTOTYPES: dict[str, tuple[Any, list[Any]]] = {
    "litert_lm_set_min_log_level": (None, [_I]),                 # engine.h:240
    "litert_lm_engine_settings_create": (_P, [_S, _S, _S, _S]),   # engine.h:271; model_path, backend, vision, audio
    "litert_lm_engine_settings_delete": (None, [_P]),  # engine.h:279
    "litert_lm_engine_settings_set_max_num_tokens": (None, [_P, _I]),  # engine.h:286
    "litert_lm_engine_settings_set_cache_dir": (None, [_P, _S]),  # engine.h:313
    "litert_lm_engine_settings_set_litert_dispatch_lib_dir": (None, [_P, _S]),  # engine.h:321
    "litert_lm_engine_settings_enable_benchmark": (None, [_P]),  # engine.h:347
    "litert_lm_engine_create": (_P, [_P]),  # engine.h:380
    "litert_lm_engine_delete": (None, [_P]),  # engine.h:386
    "litert_lm_session_config_create": (_P, []),  # engine.h:123
    "litert_lm_session_config_set_max_output_tokens": (None, [_P, _I]),  # engine.h:129
    "litert_lm_session_config_set_apply_prompt_template": (None, [_P, ctypes.c_bool]),  # engine.h:136
    "litert_lm_session_config_set_sampler_params": (None, [_P, ctypes.POINTER(LiteRtLmSamplerParams)]),  # engine.h:143
    "litert_lm_session_config_delete": (None, [_P]),  # engine.h:149
    "litert_lm_engine_create_session": (_P, [_P, _P]),  # engine.h:396; engine, session config (NULL = default)
    "litert_lm_session_delete": (None, [_P]),  # engine.h:403
    "litert_lm_session_cancel_process": (None, [_P]),  # engine.h:409
    "litert_lm_session_generate_content_stream": (  # engine.h:683
        _I, [_P, ctypes.POINTER(LiteRtLmInputData), _SZ, LiteRtLmStreamCallback, _P]),
    "litert_lm_session_get_benchmark_info": (_P, [_P]),  # engine.h:565
    "litert_lm_conversation_config_create": (_P, []),  # engine.h:156
    "litert_lm_conversation_config_set_session_config": (None, [_P, _P]),  # engine.h:162
    "litert_lm_conversation_config_set_system_message": (None, [_P, _S]),   # engine.h:170: the content, as JSON
    "litert_lm_conversation_config_set_tools": (None, [_P, _S]),            # engine.h:177; JSON array (tools)
    "litert_lm_conversation_config_set_messages": (None, [_P, _S]),         # engine.h:184; JSON array (history)
    "litert_lm_conversation_config_set_enable_constrained_decoding": (None, [_P, ctypes.c_bool]),  # engine.h:199
    "litert_lm_conversation_config_delete": (None, [_P]),  # engine.h:214
    "litert_lm_conversation_create": (_P, [_P, _P]),              # engine.h:697; engine, conversation config
    "litert_lm_conversation_delete": (None, [_P]),  # engine.h:704
    "litert_lm_conversation_send_message_stream": (  # engine.h:761
        _I, [_P, _S, _S, _P, LiteRtLmStreamCallback, _P]),      # conv, message JSON, extra ctx, opt args
    "litert_lm_conversation_cancel_process": (None, [_P]),  # engine.h:787
    "litert_lm_conversation_get_benchmark_info": (_P, [_P]),  # engine.h:796
    "litert_lm_benchmark_info_delete": (None, [_P]),  # engine.h:572
    "litert_lm_benchmark_info_get_time_to_first_token": (ctypes.c_double, [_P]),  # engine.h:583
    "litert_lm_benchmark_info_get_total_init_time_in_second": (ctypes.c_double, [_P]),  # engine.h:591
    "litert_lm_benchmark_info_get_num_prefill_turns": (_I, [_P]),  # engine.h:599
    "litert_lm_benchmark_info_get_num_decode_turns": (_I, [_P]),  # engine.h:607
    "litert_lm_benchmark_info_get_prefill_token_count_at": (_I, [_P, _I]),  # engine.h:616
    "litert_lm_benchmark_info_get_decode_token_count_at": (_I, [_P, _I]),  # engine.h:625
    "litert_lm_benchmark_info_get_prefill_tokens_per_sec_at": (ctypes.c_double, [_P, _I]),  # engine.h:634
    "litert_lm_benchmark_info_get_decode_tokens_per_sec_at": (ctypes.c_double, [_P, _I]),  # engine.h:643
}

# Genie_Status_t (int32_t) values of GenieCommon.h that the service tells apart.
GENIE_STATUS_SUCCESS = 0
GENIE_STATUS_WARNING_ABORTED = 1                 # warnings are > 0, errors < 0
GENIE_STATUS_WARNING_CONTEXT_EXCEEDED = 4
GENIE_DIALOG_ACTION_ABORT = 0x01                 # GenieDialog_Action_t
GENIE_DIALOG_SENTENCE_COMPLETE = 0               # GenieDialog_SentenceCode_t
GENIE_DIALOG_SENTENCE_BEGIN = 1
GENIE_DIALOG_SENTENCE_CONTINUE = 2
GENIE_DIALOG_SENTENCE_END = 3
GENIE_DIALOG_SENTENCE_ABORT = 4

# void (*GenieDialog_QueryCallback_t)(const char* response, const GenieDialog_SentenceCode_t, const void* userData)
GenieDialogQueryCallback = ctypes.CFUNCTYPE(None, ctypes.c_char_p, ctypes.c_int, ctypes.c_void_p)

_ST = ctypes.c_int32   # Genie_Status_t
GENIE_PROTOTYPES: dict[str, tuple[Any, list[Any]]] = {
    "GenieDialogConfig_createFromJson": (_ST, [_S, ctypes.POINTER(_P)]),
    "GenieDialogConfig_free": (_ST, [_P]),
    "GenieDialog_create": (_ST, [_P, ctypes.POINTER(_P)]),
    "GenieDialog_query": (_ST, [_P, _S, ctypes.c_int, GenieDialogQueryCallback, _P]),
    "GenieDialog_signal": (_ST, [_P, ctypes.c_int]),              # GENIE_DIALOG_ACTION_ABORT
    "GenieDialog_setMaxNumTokens": (_ST, [_P, ctypes.c_uint32]),
    "GenieDialog_reset": (_ST, [_P]),
    "GenieDialog_free": (_ST, [_P]),
}


class _StringView(ctypes.Structure):
    """absl/std ``string_view`` as laid out in memory: {data, size}."""

    _fields_ = [("data", ctypes.c_void_p), ("size", ctypes.c_size_t)]


def check_litert_abi(lib: ctypes.CDLL, path: str) -> None:
    """Refuse a LiteRT-LM library of another C ABI before any function of it is called.

    Every function this service binds exists in later libraries too (0.18.1 exports all of them),
    but there the stream callback has another signature, so the first chat request would crash the
    process (and systemd would restart it and reload the model for every request). The later ABI
    is told apart by symbols only it has; its version is read from a data symbol, not a call.
    """
    found = [name for name in LITERT_LM_OTHER_ABI_SYMBOLS if hasattr(lib, name)]
    if not found:
        return
    version = "unknown version"
    try:
        view = _StringView.in_dll(lib, LITERT_LM_VERSION_SYMBOL)
        if view.data and 0 < view.size < 64:
            version = ctypes.string_at(view.data, view.size).decode("ascii", "replace")
    except ValueError:
        pass
    raise RuntimeFailed(f"{path} is LiteRT-LM {version}, another C ABI (it has {found[0]}); "
                        f"this service binds the {LITERT_LM_ABI}")


def bind_library(path: str, prototypes: dict[str, tuple[Any, list[Any]]]) -> ctypes.CDLL:
    """dlopen ``path`` and set restype/argtypes of every function in ``prototypes``.

    A missing symbol is a RuntimeFailed naming it (a library from another runtime revision),
    so the service says why it is not ready instead of crashing at the first request.
    """
    try:
        lib = ctypes.CDLL(path)
    except OSError as exc:
        raise RuntimeFailed(f"cannot load {path}: {exc}") from exc
    if prototypes is LITERT_LM_PROTOTYPES:
        check_litert_abi(lib, path)
    for name, (restype, argtypes) in prototypes.items():
        try:
            fn = getattr(lib, name)
        except AttributeError as exc:
            raise RuntimeFailed(f"{path} has no {name} (not the C API this service binds)") from exc
        fn.restype = restype
        fn.argtypes = argtypes
    return lib




def find_library(cfg: dict[str, Any]) -> str:
    """The C-API library: config ``library``, else its file name in LD_LIBRARY_PATH or <exe>/../lib."""
    if cfg.get("library"):
        return str(cfg["library"])
    name = LITERT_LM_LIBRARY if cfg["runtime"] == "litert_lm" else GENIE_LIBRARY
    env = cfg.get("env") or {}
    dirs = [d for d in str(env.get("LD_LIBRARY_PATH") or os.environ.get("LD_LIBRARY_PATH", "")).split(":") if d]
    dirs.append(os.path.join(os.path.dirname(os.path.dirname(cfg["executable"])), "lib"))
    for d in dirs:
        if os.path.isfile(os.path.join(d, name)):
            return os.path.join(d, name)
    raise RuntimeFailed(f"{name} not found in {':'.join(dirs)}")
