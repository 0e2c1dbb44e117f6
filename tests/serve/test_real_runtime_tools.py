"""Tool calls and structured output on Google's real LiteRT-LM runtime (PyPI litert-lm-api 0.12.0, the C ABI of
the pinned cbf463d), through the runtime's own machinery: tools set on the conversation
(``litert_lm_conversation_config_set_tools``), the whole conversation as the runtime's JSON messages, its
model data processor rendering tools and tool results with the model's template and parsing the calls.

The models are ../shared/realworld/litertlm/tiny/tiny-eos.litertlm (``llm_model_type`` generic, a template
that shows text only) and the same weights and tokenizer re-packed at test time with the official
litert-lm-builder as a ``qwen3`` model (whose processor parses ``<tool_call>`` JSON blocks) with a template
that renders tools, calls and results. Their weights are random, so the assertions are on structure:
what reached the model (its answer changes with the tool result), the shapes, and what the runtime refuses.
"""

from __future__ import annotations

import ctypes
import json
import re
import urllib.request
from pathlib import Path

import pytest

from provisioner.sim import real_litert
from tests.conftest import REALWORLD, need_realworld
from tests.serve.test_real_runtime import TINY, real_library

UPSTREAM_HEADER = REALWORLD / "upstream" / "LiteRT-LM-cbf463d" / "c" / "engine.h"

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
CLOCK = {"type": "function", "function": {
    "name": "get_time", "description": "Local time in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}


def repack(tmp: Path, model_type: str, template: str | None = None) -> Path:
    """tiny-eos.litertlm re-packed by the official litert-lm-builder as another ``llm_model_type``."""
    need_realworld("litertlm", "tiny", "tiny-eos.litertlm")
    (tmp / "models").mkdir(exist_ok=True)
    return real_litert.repack(TINY / "tiny-eos.litertlm", tmp / "models" / f"tiny-{model_type}.litertlm",
                              model_type, template)


@pytest.fixture(scope="module")
def serve_pkg():
    from provisioner.fleet.shared.onboard import serve
    return serve


# The greedy answer of the qwen3 tiny model to the weather question with WEATHER holds "check" and, later,
# "This": with those as its call fences (Qwen3's own options, llm_model_type.proto:115-125) the runtime's parser
# meets a "call" that is no JSON, as a real model's malformed call would be.
BAD_FENCES = {"code_fence_start": "check", "code_fence_end": "This"}


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("tool-models")
    out = {"qwen3": repack(tmp, "qwen3", real_litert.TOOL_TEMPLATE), "gemma3": repack(tmp, "gemma3")}
    bad = tmp / "bad"
    bad.mkdir()
    out["bad_fences"] = real_litert.repack(TINY / "tiny-eos.litertlm", bad / "tiny-qwen3.litertlm", "qwen3",
                                           real_litert.TOOL_TEMPLATE, BAD_FENCES)
    return out


class _Engines:
    """One real engine per model file, loaded once for the module (each load is ~0.1 s of the runtime)."""

    def __init__(self, serve) -> None:
        self.serve, self.loaded = serve, {}

    def __call__(self, model: Path):
        if model not in self.loaded:
            eng = self.serve.LiteRtLmEngine({"runtime": "litert_lm", "library": str(real_library()),
                                             "model_dir": str(model.parent), "model_file": model.name,
                                             "backend": "cpu", "cache_dir": ":nocache"})
            eng.load()
            self.loaded[model] = eng
        return self.loaded[model]

    def close(self) -> None:
        for eng in self.loaded.values():
            eng.lib.litert_lm_engine_delete(eng.engine)


@pytest.fixture(scope="module")
def engines(serve_pkg):
    need_realworld("litertlm", "tiny", "tiny-eos.litertlm")
    e = _Engines(serve_pkg)
    yield e
    e.close()


def run(serve, engine, messages: list[dict], tools: list[dict] | None, choice: str = "auto",
        name: str | None = None, max_tokens: int = 12) -> tuple[str, dict]:
    """One chat job on ``engine`` as the service runs it: (the text emitted, the figures)."""
    from edge_llm_serve.toolcalls import Prepared
    prepared = Prepared(messages, tools or [], choice, name) if tools is not None else None
    system = next((m["content"] for m in messages if m["role"] in ("system", "developer")), None)
    plain = [{"role": m["role"], "content": m.get("content") or ""} for m in messages
             if m["role"] not in ("system", "developer")]
    job = serve.Job(kind="chat", prompt="", messages=plain, system=system, max_tokens=max_tokens, tools=prepared)
    pieces: list[str] = []
    figures = engine.generate(job, lambda piece: pieces.append(piece) or True)
    return "".join(pieces), figures


def second_turn(result: str) -> list[dict]:
    """An agent loop's second request: the user's question, the assistant's call (content null) and its result."""
    return [{"role": "user", "content": "What is the weather in Paris?"},
            {"role": "assistant", "content": None, "tool_calls": [{
                "id": "call_1", "type": "function",
                "function": {"name": "get_weather", "arguments": json.dumps({"city": "Paris"})}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": result}]


def test_tool_results_reach_the_model_through_the_runtime(serve_pkg, engines, models):
    """The runtime renders the assistant's call and the tool's result with the model's template: two different
    results give two different answers, and the answer of a processor that parses calls is its text part."""
    eng = engines(models["qwen3"])
    sunny, figures = run(serve_pkg, eng, second_turn('{"sky": "sunny", "temp_c": 21}'), [WEATHER])
    rainy, _ = run(serve_pkg, eng, second_turn('{"sky": "rain", "temp_c": 9}'), [WEATHER])
    assert sunny and rainy and sunny != rainy
    assert figures["tool_calls"] == []           # random weights write no <tool_call> block
    assert figures["prefill_tokens"] > 100       # the tools' JSON and the call were in the prompt


def test_the_tools_shown_to_the_model_follow_tool_choice(serve_pkg, engines, models):
    """tool_choice "none" shows no tool, a named function only that one: the prompts differ, so do the answers."""
    eng = engines(models["qwen3"])
    ask = [{"role": "user", "content": "What is the weather in Paris?"}]
    answers = {}
    for choice, name in (("auto", None), ("none", None), ("function", "get_time")):
        text, figures = run(serve_pkg, eng, ask, [WEATHER, CLOCK], choice, name)
        answers[choice] = (text, figures["prefill_tokens"])
    assert answers["none"][1] < answers["function"][1] < answers["auto"][1]
    assert len({a[0] for a in answers.values()}) == 3


def test_the_services_last_user_turn_is_the_one_sent(serve_pkg, engines, models):
    """The service may add to the last user turn (its response_format instruction): with tools the engine
    sends the conversation in the runtime's shapes and that turn as the service made it."""
    from edge_llm_serve.toolcalls import Prepared
    eng = engines(models["qwen3"])
    ask = [{"role": "user", "content": "What is the weather in Paris?"}]
    figures = []
    for last in (ask[0]["content"], ask[0]["content"] + "\n\nAnswer with one JSON object and nothing else."):
        job = serve_pkg.Job(kind="chat", prompt="", messages=[{"role": "user", "content": last}], system=None,
                            max_tokens=4, tools=Prepared(ask, [WEATHER], "auto"))
        figures.append(eng.generate(job, lambda piece: True))
    assert figures[1]["prefill_tokens"] > figures[0]["prefill_tokens"] + 5


def test_a_generic_model_takes_tools_and_answers_text(serve_pkg, engines):
    """tiny-eos is a generic model: its processor returns text only and its template shows no tools, so the
    runtime answers as without them; the service learns that no call was parsed."""
    eng = engines(TINY / "tiny-eos.litertlm")
    ask = [{"role": "user", "content": "Hello, how are you?"}]
    plain, _ = run(serve_pkg, eng, ask, None)
    with_tools, figures = run(serve_pkg, eng, ask, [WEATHER])
    assert with_tools == plain and figures["tool_calls"] == []


def test_a_runtime_that_cannot_constrain_the_model_still_answers(serve_pkg, engines, models, capfd):
    """On a Gemma 3 model the runtime's tool-call constraint needs a Gemma vocabulary: with the tiny one it
    refuses the conversation ("Unsupported vocabulary type for Fst-Constraints library"). The engine says so
    once and serves tools without constrained decoding."""
    eng = engines(models["gemma3"])
    assert eng.constrain_tools
    ask = [{"role": "user", "content": "What is the weather in Paris?"}]
    first, figures = run(serve_pkg, eng, ask, [WEATHER])
    second, _ = run(serve_pkg, eng, ask, [WEATHER])
    assert first and first == second and figures["tool_calls"] == []
    assert not eng.constrain_tools
    err = capfd.readouterr().err
    assert err.count("cannot constrain this model's tool calls") == 1


def test_the_runtimes_tool_calls_become_openai_tool_calls(serve_pkg):
    """The runtime's parsed calls (their shape in parser_utils_test.cc at cbf463d: arguments an object, no id)
    become OpenAI's: an id each, arguments as JSON text; and the request's history goes back in its shape."""
    from edge_llm_serve.engines import litert
    streamed = {"role": "assistant", "tool_calls": [
        {"type": "function", "function": {"name": "tool_1", "arguments": {"x": 1}}},
        {"type": "function", "function": {"name": "tool_2", "arguments": {"y": "two"}}}]}
    text, calls = litert._chunk_parts(json.dumps(streamed), conversation=True)
    assert text == ""
    # a Session (completions) chunk is the model's text even when it reads as a JSON message
    assert litert._chunk_parts(json.dumps(streamed), conversation=False) == (json.dumps(streamed), [])
    assert [c["function"] for c in calls] == [{"name": "tool_1", "arguments": '{"x": 1}'},
                                              {"name": "tool_2", "arguments": '{"y": "two"}'}]
    assert all(c["type"] == "function" and re.fullmatch(r"call_[0-9a-f]{24}", c["id"]) for c in calls)
    assert len({c["id"] for c in calls}) == 2
    back = litert.runtime_messages(second_turn("not json"))
    assert back[1] == {"role": "assistant", "content": "", "tool_calls": [
        {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]}
    assert back[2] == {"role": "tool", "content": [
        {"type": "tool_response", "name": "get_weather", "response": "not json"}]}


# ---------------------------------------------------------------------------------------------------------
# The official openai client against edge-llm-serve on the real runtime
# ---------------------------------------------------------------------------------------------------------

@pytest.fixture
def tool_board(start_board, models):
    """edge-llm-serve on the real library, serving the re-packed qwen3 tiny model (or ``model``)."""
    def start(model: Path | None = None, **extra):
        model = model or models["qwen3"]
        return start_board("litert_lm", model="tiny", library=str(real_library()),
                           model_dir=str(model.parent), model_file=model.name, backend="cpu", **extra)
    return start


def openai_client(board):
    from openai import OpenAI

    from tests.serve.conftest import TOKEN
    return OpenAI(base_url=f"{board.url}/v1", api_key=TOKEN, max_retries=0, timeout=60)


def test_the_openai_client_runs_a_two_turn_tool_loop_on_the_real_runtime(tool_board):
    """Turn one offers the tools (the runtime renders them; its parser found no call in the random weights'
    text, so the answer is text, finish_reason stop or length); turn two is what every agent loop sends after
    a call, the assistant's tool_calls with null content and the tool's result: answered from that result,
    streamed and whole alike. /v1/models says what the runtime does."""
    c = openai_client(tool_board())
    caps = c.models.retrieve("tiny").model_extra["capabilities"]
    assert caps == {"tools": True, "json_object": True, "json_schema": True, "grammar": False, "constrained": False}
    ask = [{"role": "user", "content": "What is the weather in Paris?"}]
    first = c.chat.completions.create(model="tiny", messages=ask, tools=[WEATHER, CLOCK], max_tokens=12)
    plain = c.chat.completions.create(model="tiny", messages=ask, max_tokens=12)
    assert first.choices[0].message.tool_calls is None and first.choices[0].finish_reason in ("stop", "length")
    assert first.usage.prompt_tokens > plain.usage.prompt_tokens + 50       # the tools' JSON was in the prompt
    answers = set()
    for result in ('{"sky": "sunny", "temp_c": 21}', '{"sky": "rain", "temp_c": 9}'):
        second = c.chat.completions.create(model="tiny", messages=second_turn(result), tools=[WEATHER], max_tokens=12)
        msg = second.choices[0].message
        assert msg.role == "assistant" and msg.content and msg.tool_calls is None
        streamed = "".join(ch.choices[0].delta.content or "" for ch in c.chat.completions.create(
            model="tiny", messages=second_turn(result), tools=[WEATHER], max_tokens=12, stream=True) if ch.choices)
        assert streamed == msg.content
        answers.add(msg.content)
    assert len(answers) == 2                          # the tool's result reached the model


def test_required_and_json_schema_unmet_are_errors_the_client_sees(tool_board):
    """The pinned C API cannot constrain a JSON schema, nor force a call on this model: the service checks
    the answer, runs it once more, then the client gets the error with the model's output, never a silent
    answer that ignores what it asked for."""
    import openai
    c = openai_client(tool_board())
    ask = [{"role": "user", "content": "What is the weather in Paris?"}]
    with pytest.raises(openai.InternalServerError) as exc:
        c.chat.completions.create(model="tiny", messages=ask, tools=[WEATHER], tool_choice="required", max_tokens=8)
    assert exc.value.body["code"] == "tool_choice_unmet" and "retry" in exc.value.body["message"]
    assert exc.value.body["model_output"]
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"],
              "additionalProperties": False}
    with pytest.raises(openai.InternalServerError) as exc:
        c.chat.completions.create(model="tiny", messages=ask, max_tokens=8, response_format={
            "type": "json_schema", "json_schema": {"name": "place", "schema": schema, "strict": True}})
    assert exc.value.body["code"] == "response_format_unmet" and exc.value.body["model_output"]


def test_a_generic_model_refuses_tools_by_name_and_says_so_in_its_capabilities(tool_board):
    """tiny-eos names llm_model_type generic: its processor parses no call, so /v1/models says tools false and
    a request with tools is a 400 naming ``tools`` and the model's type; tool_choice "none" shows no tool to the
    model and passes, as does response_format (the service checks JSON itself)."""
    import openai
    c = openai_client(tool_board(TINY / "tiny-eos.litertlm"))
    caps = c.models.retrieve("tiny").model_extra["capabilities"]
    assert caps == {"tools": False, "json_object": True, "json_schema": True, "grammar": False, "constrained": False}
    assert c.models.list().data[0].model_extra["capabilities"] == caps
    ask = [{"role": "user", "content": "What is the weather in Paris?"}]
    with pytest.raises(openai.BadRequestError) as exc:
        c.chat.completions.create(model="tiny", messages=ask, tools=[WEATHER], max_tokens=4)
    body = exc.value.body
    assert body["param"] == "tools" and body["code"] == "unsupported_parameter"
    assert "generic_model" in body["message"] and "parses tool calls only for" in body["message"]
    with pytest.raises(openai.BadRequestError) as exc:
        c.chat.completions.create(model="tiny", messages=second_turn("{}"), max_tokens=4)
    assert exc.value.body["param"] == "messages"
    passed = c.chat.completions.create(model="tiny", messages=ask, tools=[WEATHER], tool_choice="none", max_tokens=4)
    assert passed.choices[0].message.tool_calls is None and passed.choices[0].finish_reason in ("stop", "length")


def test_the_model_type_read_on_the_board_is_the_controllers(models):
    """The service reads the type with its own few reads (standard library); the controller's inspector
    (provisioner.artifacts.litertlm) reads the same field independently: both agree on every real file here."""
    from edge_llm_serve.engines.litert_model_type import NotLitertlm, read_model_type

    from provisioner.artifacts.litertlm import read_litertlm
    files = [TINY / "tiny-eos.litertlm", TINY / "tiny.litertlm", models["qwen3"], models["gemma3"],
             REALWORLD / "litertlm" / "test_hf_tokenizer.litertlm"]
    seen = {f.name: read_model_type(str(f)) for f in files}
    assert seen == {f.name: (read_litertlm(f).llm_metadata or {}).get("model_type") for f in files}
    assert seen["tiny-qwen3.litertlm"] == "qwen3" and seen["tiny-eos.litertlm"] == "generic_model"
    with pytest.raises(NotLitertlm):
        read_model_type(str(TINY / "tiny.reference.json"))


def test_a_call_the_runtimes_parser_cannot_read_is_an_invalid_call_not_a_runtime_error(tool_board, models):
    """The runtime ends the stream with "Failed to parse tool calls" when the model's call block is no call
    (here: fences the tiny model happens to write around random text). The service judges that like any unfit
    answer: it runs the request once more, with the model's answer and a correction turn (so the random
    model's retry is another text), then the client gets invalid_tool_call with the model's output, or the
    retry's answer when that one fits; never a runtime error."""
    import openai
    board = tool_board(models["bad_fences"])
    c = openai_client(board)
    assert c.models.retrieve("tiny").model_extra["capabilities"]["tools"] is True
    ask = [{"role": "user", "content": "What is the weather in Paris?"}]
    try:
        out = c.chat.completions.create(model="tiny", messages=ask, tools=[WEATHER], max_tokens=24)
    except openai.InternalServerError as exc:
        body = exc.body
        assert body["code"] == "invalid_tool_call" and "parser could not read" in body["message"]
        assert "(also on the retry)" in body["message"] and BAD_FENCES["code_fence_start"] in body["model_output"]
    else:
        assert out.choices[0].finish_reason in ("stop", "length", "tool_calls")
    req = urllib.request.Request(f"{board.url}/metrics", headers=board.headers())
    with urllib.request.urlopen(req, timeout=10) as r:
        unfit = re.search(r'^edge_llm_runtime_errors_total\{kind="answer_unfit"\} (\d+)', r.read().decode(), re.M)
    assert unfit and int(unfit.group(1)) >= 1           # the first answer was judged unfit, and retried


# ---------------------------------------------------------------------------------------------------------
# The ctypes prototypes against the pinned header
# ---------------------------------------------------------------------------------------------------------

_C_TYPES = {"void": None, "int": ctypes.c_int, "bool": ctypes.c_bool, "double": ctypes.c_double,
            "float": ctypes.c_float, "size_t": ctypes.c_size_t, "const char*": ctypes.c_char_p,
            "char*": ctypes.c_char_p, "int32_t": ctypes.c_int32, "uint32_t": ctypes.c_uint32}


def _declarations(header: str) -> dict[str, tuple[int, str, list[str]]]:
    """Every exported function of c/engine.h: name -> (line of its name, return type, parameter types)."""
    out = {}
    for m in re.finditer(r"LITERT_LM_C_API_EXPORT\s+([^;{]*?)\b(litert_lm_\w+)\s*\(([^)]*)\)\s*;", header):
        ret, name, params = m.group(1).strip(), m.group(2), m.group(3).strip()
        line = header.count("\n", 0, m.start(2)) + 1
        types = [] if params in ("", "void") else [
            re.sub(r"\s+", " ", re.sub(r"\s*\w+$", "", p.strip())).replace(" *", "*") for p in params.split(",")]
        out[name] = (line, ret.replace(" *", "*"), types)
    return out


def _matches(c_type: str, ct) -> bool:
    c_type = c_type.replace("const ", "") if c_type not in ("const char*",) else c_type
    if c_type in _C_TYPES or "const " + c_type in _C_TYPES:
        want = _C_TYPES.get(c_type, _C_TYPES.get("const " + c_type))
        return ct is want or (want is ctypes.c_int and ct is ctypes.c_int32)
    if c_type.endswith("*"):                       # an opaque handle, a struct or a callback pointer
        return ct is ctypes.c_void_p or issubclass(ct, ctypes._Pointer) or hasattr(ct, "_argtypes_")
    if c_type == "LiteRtLmStreamCallback":
        return hasattr(ct, "_argtypes_")
    return False


def test_every_litert_prototype_matches_the_pinned_header():
    """Each function cabi.py binds is declared in c/engine.h at cbf463d, on the line its comment cites, with
    as many parameters of matching types and a matching return type."""
    need_realworld("upstream", "LiteRT-LM-cbf463d", "c", "engine.h")
    from edge_llm_serve.engines.cabi import LITERT_LM_PROTOTYPES

    from provisioner.fleet.shared.onboard import SERVE_PACKAGE
    declared = _declarations(UPSTREAM_HEADER.read_text())
    cited = {}
    for ln in (SERVE_PACKAGE / "engines" / "cabi.py").read_text().splitlines():
        m = re.match(r'\s*"(litert_lm_\w+)":.*#\s*engine\.h:(\d+)', ln)
        if m:
            cited[m.group(1)] = int(m.group(2))
    problems = []
    for name, (restype, argtypes) in LITERT_LM_PROTOTYPES.items():
        if name not in declared:
            problems.append(f"{name}: not in engine.h")
            continue
        line, ret, params = declared[name]
        if not (line - 2 <= cited.get(name, -100) <= line):
            problems.append(f"{name}: cited engine.h:{cited.get(name)}, declared at {line}")
        if len(params) != len(argtypes):
            problems.append(f"{name}: {len(argtypes)} argtypes, engine.h has {len(params)} parameters")
        problems += [f"{name}: parameter {i} is {c} in engine.h, {a} here"
                     for i, (c, a) in enumerate(zip(params, argtypes, strict=False)) if not _matches(c, a)]
        if (restype is None) != (ret == "void") or (restype is not None and not _matches(ret, restype)):
            problems.append(f"{name}: returns {ret} in engine.h, {restype} here")
    assert not problems, problems
    assert {"litert_lm_conversation_config_set_tools",
            "litert_lm_conversation_config_set_enable_constrained_decoding"} <= set(LITERT_LM_PROTOTYPES)
