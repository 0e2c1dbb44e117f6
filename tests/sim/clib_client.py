"""A ctypes client of the runtimes' C APIs, run with the board's python inside a virtual board.

It binds the libraries exactly as the on-board service does: with edge-llm-serve's own
prototype tables and ``bind_library`` (imported from /usr/bin/edge-llm-serve, a zip of the package), so a
stand-in that lacks a function or has another signature fails here as it would in the service. Prints one JSON
object: chunks, wall-clock marks and benchmark figures.
usage: python3 - litert <model.litertlm> <dispatch dir> <prompt> [cancel]
       python3 - chat <model.litertlm> <dispatch dir> <user text> <max_tokens> [system text]
       python3 - genie <genie_config.json> <prompt> [max_tokens]
"""

import ctypes
import json
import os
import sys
import threading
import time

sys.path.insert(0, "/usr/bin/edge-llm-serve")     # the package, as the zip application fleet launch installs
import edge_llm_serve as svc  # noqa: E402


def lib_path(name):
    for d in os.environ.get("LD_LIBRARY_PATH", "").split(":"):
        if d and os.path.isfile(os.path.join(d, name)):
            return os.path.join(d, name)
    raise SystemExit(f"{name} not in LD_LIBRARY_PATH")


def litert(model, dispatch, prompt, cancel=False):
    lib = svc.bind_library(lib_path(svc.LITERT_LM_LIBRARY), svc.LITERT_LM_PROTOTYPES)
    t0 = time.monotonic()
    st = lib.litert_lm_engine_settings_create(model.encode(), b"npu", None, None)
    lib.litert_lm_engine_settings_set_litert_dispatch_lib_dir(st, dispatch.encode())
    engine = lib.litert_lm_engine_create(st)
    lib.litert_lm_engine_settings_delete(st)
    out = {"loaded": bool(engine), "load_s": time.monotonic() - t0}
    if not engine:
        return out
    session = lib.litert_lm_engine_create_session(engine, None)
    chunks, marks, done, final = [], [], threading.Event(), {}

    def on_chunk(_data, chunk, is_final, error):
        if chunk:
            chunks.append(chunk.decode())
            marks.append(time.monotonic())
        if is_final:
            final["error"] = error.decode() if error else None
            done.set()
    cb = svc.LiteRtLmStreamCallback(on_chunk)
    data = prompt.encode()
    buf = ctypes.create_string_buffer(data)
    inp = svc.LiteRtLmInputData(svc.LITERT_INPUT_TEXT, ctypes.cast(buf, ctypes.c_void_p), len(data))
    t1 = time.monotonic()
    rc = lib.litert_lm_session_generate_content_stream(session, ctypes.byref(inp), 1, cb, None)
    out["returned_s"] = time.monotonic() - t1
    if cancel:
        while not chunks and not done.is_set():
            time.sleep(0.001)
        lib.litert_lm_session_cancel_process(session)
    done.wait(60)
    out.update(rc=rc, text="".join(chunks), n=len(chunks), error=final.get("error"),
               first_s=(marks[0] - t1) if marks else None)
    info = lib.litert_lm_session_get_benchmark_info(session)
    if info:
        out.update(ttft=lib.litert_lm_benchmark_info_get_time_to_first_token(info),
                   decode_rate=lib.litert_lm_benchmark_info_get_decode_tokens_per_sec_at(info, 0),
                   decode_tokens=lib.litert_lm_benchmark_info_get_decode_token_count_at(info, 0),
                   init_s=lib.litert_lm_benchmark_info_get_total_init_time_in_second(info))
        lib.litert_lm_benchmark_info_delete(info)
    lib.litert_lm_session_delete(session)
    lib.litert_lm_engine_delete(engine)
    return out


def chat(model, dispatch, text, max_tokens, system=None):
    """One conversation turn as the service sends a chat: system message and user message as JSON."""
    lib = svc.bind_library(lib_path(svc.LITERT_LM_LIBRARY), svc.LITERT_LM_PROTOTYPES)
    st = lib.litert_lm_engine_settings_create(model.encode(), b"npu", None, None)
    lib.litert_lm_engine_settings_set_litert_dispatch_lib_dir(st, dispatch.encode())
    engine = lib.litert_lm_engine_create(st)
    lib.litert_lm_engine_settings_delete(st)
    if not engine:
        return {"loaded": False}
    sc = lib.litert_lm_session_config_create()
    lib.litert_lm_session_config_set_max_output_tokens(sc, max_tokens)
    cc = lib.litert_lm_conversation_config_create()
    lib.litert_lm_conversation_config_set_session_config(cc, sc)
    if system:
        lib.litert_lm_conversation_config_set_system_message(cc, json.dumps(system).encode())
    conv = lib.litert_lm_conversation_create(engine, cc)
    parts, done = [], threading.Event()

    def on_chunk(_data, chunk, is_final, error):
        if chunk:
            parts.extend(c.get("text", "") for c in json.loads(chunk)["content"])
        if is_final or error:
            done.set()
    cb = svc.LiteRtLmStreamCallback(on_chunk)
    msg = json.dumps({"role": "user", "content": text}).encode()
    rc = lib.litert_lm_conversation_send_message_stream(conv, msg, None, None, cb, None)
    done.wait(60)
    lib.litert_lm_conversation_delete(conv)
    lib.litert_lm_conversation_config_delete(cc)
    lib.litert_lm_session_config_delete(sc)
    lib.litert_lm_engine_delete(engine)
    return {"loaded": True, "rc": rc, "pieces": parts}


def genie(config, prompt, max_tokens=0):
    lib = svc.bind_library(lib_path(svc.GENIE_LIBRARY), svc.GENIE_PROTOTYPES)
    base = os.path.dirname(os.path.abspath(config))
    with open(config, encoding="utf-8") as fh:
        cfg = json.load(fh)
    eng = cfg["dialog"]["engine"]
    eng["model"]["binary"]["ctx-bins"] = [os.path.join(base, b) for b in eng["model"]["binary"]["ctx-bins"]]
    cfg["dialog"]["tokenizer"]["path"] = os.path.join(base, cfg["dialog"]["tokenizer"]["path"])
    if eng.get("backend", {}).get("extensions"):
        eng["backend"]["extensions"] = os.path.join(base, eng["backend"]["extensions"])
    h = ctypes.c_void_p()
    st = lib.GenieDialogConfig_createFromJson(json.dumps(cfg).encode(), ctypes.byref(h))
    dialog = ctypes.c_void_p()
    t0 = time.monotonic()
    st2 = lib.GenieDialog_create(h, ctypes.byref(dialog))
    out = {"config_status": st, "create_status": st2, "load_s": time.monotonic() - t0}
    if st2 != 0:
        return out
    if max_tokens:
        lib.GenieDialog_setMaxNumTokens(dialog, max_tokens)
    chunks, codes = [], []

    def on_token(text, code, _user):
        codes.append(code)
        if text:
            chunks.append(text.decode())
    cb = svc.GenieDialogQueryCallback(on_token)
    t1 = time.monotonic()
    rc = lib.GenieDialog_query(dialog, prompt.encode(), svc.GENIE_DIALOG_SENTENCE_COMPLETE, cb, None)
    out.update(rc=rc, text="".join(chunks), codes=codes, query_s=time.monotonic() - t1)
    lib.GenieDialog_free(dialog)
    lib.GenieDialogConfig_free(h)
    return out


if __name__ == "__main__":
    kind, args = sys.argv[1], sys.argv[2:]
    if kind == "litert":
        res = litert(args[0], args[1], args[2], cancel=len(args) > 3)
    elif kind == "chat":
        res = chat(args[0], args[1], args[2], int(args[3]), *args[4:])
    else:
        res = genie(args[0], args[1], int(args[2]) if len(args) > 2 else 0)
    print(json.dumps(res))
