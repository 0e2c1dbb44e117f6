"""edge-llm-serve, unmodified, on Google's real LiteRT-LM runtime (PyPI litert-lm-api 0.12.0, the C ABI
of the pinned cbf463d) with the real tiny models of ../shared/realworld/litertlm/tiny/, backend cpu.

The stand-in library agrees with our bindings by construction; these tests are where the bindings meet
the real ``c/engine.h`` library. Every request goes through the official ``openai`` client.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import threading
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import REALWORLD, need_realworld
from tests.serve.conftest import TOKEN

TINY = REALWORLD / "litertlm" / "tiny"
CONTEXT = 512   # the tiny models' KV cache (tiny.reference.json "kv_cache_len")


def real_library() -> Path:
    """liblitert-lm.so of the installed litert-lm-api wheel (located without importing Google's binding)."""
    spec = importlib.util.find_spec("litert_lm")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("litert-lm-api is not installed (pip install -e '.[test]' installs 0.12.0)")
    lib = Path(next(iter(spec.submodule_search_locations))) / "liblitert-lm.so"
    if not lib.is_file():
        pytest.skip(f"{lib} is missing from the installed litert-lm-api")
    return lib


@pytest.fixture(scope="module")
def reference() -> dict:
    """tiny.reference.json: the greedy continuation of its prompt, token by token."""
    return json.loads(need_realworld("litertlm", "tiny", "tiny.reference.json").read_text())


@pytest.fixture
def real_board(tmp_path, start_board, reference):
    """real_board(**cfg) -> a Board serving tiny.litertlm on the real library (model in a directory of its own)."""
    lib = real_library()

    def start(**extra):
        mdir = tmp_path / f"tiny{len(list(tmp_path.glob('tiny*')))}"
        mdir.mkdir()
        shutil.copy(TINY / "tiny.litertlm", mdir / "tiny.litertlm")
        cfg = {"model": "tiny", "library": str(lib), "model_dir": str(mdir), "model_file": "tiny.litertlm",
               "backend": "cpu", "chat_template": "gemma"} | extra
        return start_board("litert_lm", **cfg)

    return start


def client(board):
    from openai import OpenAI
    return OpenAI(base_url=f"{board.url}/v1", api_key=TOKEN, max_retries=0, timeout=60)


def failed_health(board, *, attempts: int, delay_s: float) -> dict | None:
    """The service's GET /health body once it reports a failed load (polled ``attempts`` times), else the
    last error body seen (None when none came)."""
    health = None
    for _ in range(attempts):
        try:
            urllib.request.urlopen(f"{board.url}/health", timeout=2)
        except urllib.error.HTTPError as exc:
            health = json.loads(exc.read())
            if health.get("status") == "failed":
                break
        except OSError:
            pass
        threading.Event().wait(delay_s)
    return health


def pieces(reference: dict) -> list[str]:
    """The reference tokens as text (SentencePiece's word mark is a space)."""
    return [p.replace("\u2581", " ") for p in reference["decode_pieces"]]


def chat_stream(c, reference: dict, **kw) -> tuple[list[str], str | None]:
    stream = c.chat.completions.create(model="tiny", messages=[{"role": "user", "content": reference["prompt"]}],
                                       max_tokens=len(reference["decode_pieces"]), stream=True, **kw)
    out, finish = [], None
    for ch in stream:
        if ch.choices and ch.choices[0].delta.content:
            out.append(ch.choices[0].delta.content)
        if ch.choices and ch.choices[0].finish_reason:
            finish = ch.choices[0].finish_reason
    return out, finish


def test_models_chat_and_completions_give_the_reference_greedy_output(real_board, reference):
    board = real_board()
    c = client(board)
    assert [m.id for m in c.models.list().data] == ["tiny"]
    streamed, finish = chat_stream(c, reference)
    assert streamed == pieces(reference)          # token by token, as the PyTorch model computed them
    assert finish == "length"                     # max_tokens reached
    whole = c.chat.completions.create(model="tiny", messages=[{"role": "user", "content": reference["prompt"]}],
                                      max_tokens=len(reference["decode_pieces"]))
    assert whole.choices[0].message.content == reference["decode_text"]
    assert whole.choices[0].finish_reason == "length"
    assert whole.usage.completion_tokens == len(reference["decode_pieces"])
    # completions: the raw prompt, no chat template; streamed and whole agree and stop at max_tokens
    text = c.completions.create(model="tiny", prompt="Hello", max_tokens=8)
    assert text.choices[0].finish_reason == "length" and text.usage.completion_tokens == 8
    parts = [ch.choices[0].text for ch in c.completions.create(model="tiny", prompt="Hello", max_tokens=8,
                                                               stream=True) if ch.choices]
    assert "".join(parts) == text.choices[0].text


def test_a_seed_alone_keeps_greedy_decoding(real_board, reference):
    """OpenAI's ``seed`` makes sampling repeatable; it must not turn the default greedy decoding into sampling."""
    c = client(real_board())
    streamed, _ = chat_stream(c, reference, seed=7)
    assert streamed == pieces(reference)


def test_temperature_zero_is_greedy_decoding(real_board, reference):
    """OpenAI's temperature 0 asks for the most likely token each step: the reference greedy continuation,
    from a runtime whose sampler factory implements the top-p sampler only."""
    streamed, finish = chat_stream(client(real_board()), reference, temperature=0)
    assert streamed == pieces(reference) and finish == "length"


def test_the_system_message_reaches_the_model(real_board, reference):
    """Two different system texts, from the request or from the config, give different answers."""
    board = real_board()
    c = client(board)

    def answer(c, system: str | None) -> str:
        msgs = ([{"role": "system", "content": system}] if system else []) + [
            {"role": "user", "content": reference["prompt"]}]
        return c.chat.completions.create(model="tiny", messages=msgs, max_tokens=12).choices[0].message.content

    plain = answer(c, None)
    pirate, formal = answer(c, "You are a pirate."), answer(c, "Answer formally, in one short sentence.")
    assert len({plain, pirate, formal}) == 3
    developer = c.chat.completions.create(model="tiny", max_tokens=12, messages=[
        {"role": "developer", "content": "You are a pirate."}, {"role": "user", "content": reference["prompt"]}])
    assert developer.choices[0].message.content == pirate
    configured = client(real_board(system_prompt="Answer formally, in one short sentence."))
    assert answer(configured, None) == formal


def test_earlier_turns_reach_the_model(real_board, reference):
    c = client(real_board())
    alone = c.chat.completions.create(model="tiny", max_tokens=8,
                                      messages=[{"role": "user", "content": reference["prompt"]}])
    after = c.chat.completions.create(model="tiny", max_tokens=8, messages=[
        {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello there"},
        {"role": "user", "content": reference["prompt"]}])
    assert after.choices[0].message.content != alone.choices[0].message.content
    assert after.usage.prompt_tokens > alone.usage.prompt_tokens


def test_a_prompt_longer_than_the_context_is_a_400_before_any_byte(real_board):
    from openai import BadRequestError
    c = client(real_board())
    long = "Hello " * 600
    with pytest.raises(BadRequestError) as whole:
        c.chat.completions.create(model="tiny", messages=[{"role": "user", "content": long}], max_tokens=4)
    assert str(CONTEXT) in whole.value.message
    with pytest.raises(BadRequestError) as streamed:     # raised by create(): the status line is a 400
        c.chat.completions.create(model="tiny", messages=[{"role": "user", "content": long}], max_tokens=4,
                                  stream=True)
    assert str(CONTEXT) in streamed.value.message
    with pytest.raises(BadRequestError):
        c.completions.create(model="tiny", prompt=long, max_tokens=4, stream=True)


def test_a_generation_that_fills_the_context_ends_with_length(real_board):
    c = client(real_board(max_num_tokens=CONTEXT))
    chat = c.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "Hello"}], max_tokens=600)
    assert chat.choices[0].finish_reason == "length"
    assert chat.usage.total_tokens == CONTEXT
    text = c.completions.create(model="tiny", prompt="Hello", max_tokens=600)
    assert text.choices[0].finish_reason == "length"
    assert text.usage.completion_tokens > 400


def test_four_concurrent_clients_each_get_the_reference(real_board, reference):
    board = real_board()
    results: list[list[str]] = []
    errors: list[BaseException] = []

    def one() -> None:
        try:
            results.append(chat_stream(client(board), reference)[0])
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=one) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors
    assert results == [pieces(reference)] * 4


def test_metrics_count_what_was_served(real_board, reference):
    board = real_board()
    chat_stream(client(board), reference)
    req = urllib.request.Request(f"{board.url}/metrics", headers=board.headers())
    text = urllib.request.urlopen(req, timeout=10).read().decode()
    assert "edge_llm_model_loaded 1" in text
    generated = [ln for ln in text.splitlines() if ln.startswith("edge_llm_generated_tokens_total")]
    assert generated and float(generated[0].split()[-1]) == len(reference["decode_pieces"])


def test_the_model_directory_stays_untouched_and_the_log_quiet(real_board, reference):
    """No .xnnpack_cache beside the model (the runtime's default without a cache dir); no INFO lines, and on
    the cpu backend no errors about a missing NPU dispatch library."""
    board = real_board()
    chat_stream(client(board), reference)
    mdir = Path(json.loads(board.cfg_path.read_text())["model_dir"])
    assert sorted(p.name for p in mdir.iterdir()) == ["tiny.litertlm"]
    info = [ln for ln in board.log.read_text().splitlines() if ln.startswith("I0000")]
    assert not info, info[:3]
    assert "No dispatch library found" not in board.log.read_text()


# A library that has every function the service binds and, besides, the symbols of LiteRT-LM's later
# C ABI (PyPI litert-lm-api 0.18.1: litert_lm_stream_chunk_get_text, litert::lm::LITERT_LM_VERSION as a
# string_view). The real 0.18.1 wheel cannot be had without the network here; this is its symbol table.
OTHER_ABI_C = """
#include <stddef.h>
struct sv { const char* p; size_t n; };
struct sv litert_version __asm__("_ZN6litert2lm17LITERT_LM_VERSIONE") = {"0.18.1", 6};
const char* litert_lm_stream_chunk_get_text(void* chunk) { return 0; }
"""


def test_a_library_of_another_abi_is_refused_at_start_with_one_line(tmp_path, start_board):
    from provisioner.fleet.shared.onboard import SERVE_PACKAGE
    names = [ln.split('"')[1] for ln in (SERVE_PACKAGE / "engines" / "cabi.py").read_text().splitlines()
             if ln.strip().startswith('"litert_lm_') and "(" in ln]
    src = tmp_path / "other.c"
    src.write_text(OTHER_ABI_C + "".join(f"void* {n}(void) {{ return 0; }}\n" for n in names))
    lib = tmp_path / "liblitert-lm.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(lib), str(src)], check=True)
    board = start_board("litert_lm", wait=False, library=str(lib))
    health = failed_health(board, attempts=100, delay_s=0.1)
    assert health and health["status"] == "failed"
    assert "0.18.1" in health["reason"] and "0.12.0" in health["reason"]
    lines = [ln for ln in board.log.read_text().splitlines() if "not loaded" in ln]
    assert len(lines) == 1 and "0.18.1" in lines[0] and "0.12.0" in lines[0]


def test_a_client_that_leaves_mid_stream_cancels_its_generation(real_board):
    """The runtime stops (conversation cancel, engine.h) instead of decoding to the end for nobody."""
    import http.client
    board = real_board()
    conn = http.client.HTTPConnection("127.0.0.1", board.port, timeout=30)
    conn.request("POST", "/v1/chat/completions", json.dumps({
        "model": "tiny", "stream": True, "max_tokens": 500, "messages": [{"role": "user", "content": "Hello"}]}),
        {"Content-Type": "application/json", **board.headers()})
    resp = conn.getresponse()
    assert resp.status == 200 and resp.fp.readline().startswith(b"data: ")
    resp.close()        # http.client hands the socket to the response: this closes the connection
    conn.close()
    req = urllib.request.Request(f"{board.url}/metrics", headers=board.headers())
    for _ in range(200):
        text = urllib.request.urlopen(req, timeout=10).read().decode()
        if "edge_llm_cancelled_total 1" in text:
            break
        threading.Event().wait(0.05)
    assert "edge_llm_cancelled_total 1" in text
    generated = [ln for ln in text.splitlines() if ln.startswith("edge_llm_generated_tokens_total")]
    assert float(generated[0].split()[-1]) < 500


def _leave_after_first_chunk(board) -> None:
    """A streaming client that reads the first event and hangs up (an abandoned chat)."""
    import http.client
    conn = http.client.HTTPConnection("127.0.0.1", board.port, timeout=30)
    try:
        conn.request("POST", "/v1/chat/completions", json.dumps({
            "model": "tiny", "stream": True, "max_tokens": 200, "messages": [{"role": "user", "content": "Hello"}]}),
            {"Content-Type": "application/json", **board.headers()})
        resp = conn.getresponse()
        if resp.status == 200:
            resp.fp.readline()
        resp.close()
    finally:
        conn.close()


def test_disconnect_churn_never_cancels_another_clients_generation(real_board):
    """Clients that hang up mid-stream cancel their own generation and no one else's (issue 22 defect 5).

    The scheduler once checked which job ran, let go of its lock, then cancelled whatever ran by then:
    a hang-up that came as one generation ended cancelled the next client's, which then got a 500
    ("CANCELLED: Session is cancelled during prefill"). Three churners hang up while three ordinary
    clients make 600 requests each; the old scheduler failed 3 of 5 runs (the race needs the
    OS to preempt a handler at one point; test_a_late_cancel_never_reaches_the_next_generation forces it).
    """
    board = real_board(max_queue=16)
    rounds, failures, answered = 600, [], []
    stop = threading.Event()

    def ordinary() -> None:
        c = client(board)
        for _ in range(rounds):
            try:
                r = c.chat.completions.create(model="tiny", max_tokens=16,
                                              messages=[{"role": "user", "content": "Hello"}])
                answered.append(r.choices[0].finish_reason)
            except Exception as exc:  # noqa: BLE001 - every failure is reported below
                failures.append(repr(exc))

    def churn() -> None:
        while not stop.is_set():
            _leave_after_first_chunk(board)

    churners = [threading.Thread(target=churn) for _ in range(3)]
    clients = [threading.Thread(target=ordinary) for _ in range(3)]
    for t in churners + clients:
        t.start()
    for t in clients:
        t.join(900)
    stop.set()
    for t in churners:
        t.join(60)
    assert not failures, failures[:3]
    assert answered == ["length"] * (3 * rounds)
    req = urllib.request.Request(f"{board.url}/metrics", headers=board.headers())
    text = urllib.request.urlopen(req, timeout=10).read().decode()
    cancelled = [ln for ln in text.splitlines() if ln.startswith("edge_llm_cancelled_total")]
    assert float(cancelled[0].split()[-1]) > 0        # the churners' own generations were cancelled


def test_a_generation_cut_at_timeout_s_returns_what_it_generated(real_board):
    """A generation stopped at the config's timeout_s is a truncated answer, not a 500 that drops it.

    finish_reason is "length": the OpenAI reference's value for an answer cut by a token limit, which is
    what a client must be told (the text is incomplete, not finished and not an error). The tiny model's
    first token comes within about 2 ms, but on an idle CPU it fills its 512-token context in about 0.06 s
    (8,000+ tokens/s), so the timeout is far below that: the engine checks it every 20 ms, and the answer
    is cut at that first check. /metrics shows that both answers were cut by the timeout.
    """
    board = real_board(timeout_s=0.001, max_num_tokens=CONTEXT)
    c = client(board)
    msgs = [{"role": "user", "content": "Hello"}]
    whole = c.chat.completions.create(model="tiny", messages=msgs, max_tokens=4000)
    assert whole.choices[0].finish_reason == "length"
    assert whole.choices[0].message.content and whole.usage.completion_tokens > 0
    streamed, finish = [], None
    for ch in c.chat.completions.create(model="tiny", messages=msgs, max_tokens=4000, stream=True):
        if ch.choices and ch.choices[0].delta.content:
            streamed.append(ch.choices[0].delta.content)
        if ch.choices and ch.choices[0].finish_reason:
            finish = ch.choices[0].finish_reason
    assert finish == "length" and streamed
    req = urllib.request.Request(f"{board.url}/metrics", headers=board.headers())
    text = urllib.request.urlopen(req, timeout=10).read().decode()
    assert 'edge_llm_runtime_errors_total{kind="timeout"} 2' in text


def test_health_and_metrics_name_the_backend_the_runtime_reports(real_board, start_board):
    """The runtime's own word on its backend is on /health and /metrics (the pinned C API has no call
    that names it, so the service reads the runtime's load log). Asked for the NPU on a machine with
    none, the runtime warns that the NPU accelerator did not load; /health says so beside the failure."""
    board = real_board()
    health = json.loads(urllib.request.urlopen(f"{board.url}/health", timeout=10).read())
    assert health["backend"] == {"configured": "cpu", "runtime": "cpu", "runtime_said": []}
    req = urllib.request.Request(f"{board.url}/metrics", headers=board.headers())
    text = urllib.request.urlopen(req, timeout=10).read().decode()
    assert 'edge_llm_backend_info{configured="cpu",runtime="cpu",accelerator_warnings="0"} 1' in text
    assert not [ln for ln in board.log.read_text().splitlines() if ln.startswith("I0000")]

    npu = real_board(backend="npu", wait=False)
    health = failed_health(npu, attempts=200, delay_s=0.05)
    assert health and health["status"] == "failed" and health["backend"]["configured"] == "npu"
    assert health["backend"]["runtime"] == "npu"
    assert any("NPU accelerator could not be loaded" in said for said in health["backend"]["runtime_said"])


class _StallingCancel:
    """The real engine, except that a cancel call waits for ``before()`` first: the handler thread
    preempted between deciding to cancel and cancelling, as the OS did under churn."""

    def __init__(self, engine, before) -> None:
        self.engine, self.before = engine, before

    def __getattr__(self, name):
        return getattr(self.engine, name)

    def cancel(self, *job) -> None:
        self.before()
        self.engine.cancel(*job)


@pytest.mark.usefixtures("reference")     # skips, with its one line, where ../shared/realworld is absent
def test_a_late_cancel_never_reaches_the_next_generation(tmp_path):
    """Deterministic form of the churn test, in process on the real runtime: a client's cancel that is
    decided while its generation runs but lands after the next one started leaves the next one alone."""
    from provisioner.fleet.shared.onboard import serve
    shutil.copy(TINY / "tiny.litertlm", tmp_path / "tiny.litertlm")
    engine = serve.LiteRtLmEngine({"runtime": "litert_lm", "library": str(real_library()), "model_dir": str(tmp_path),
                                   "model_file": "tiny.litertlm", "backend": "cpu", "cache_dir": ":nocache"})
    second_started = threading.Event()
    sched = serve.Scheduler(_StallingCancel(engine, lambda: second_started.wait(30)), 4, serve.Metrics())
    sched.start()
    for _ in range(400):
        if sched.ready:
            break
        threading.Event().wait(0.05)
    assert sched.ready, sched.reason

    def job() -> object:
        return serve.Job(kind="chat", prompt="", messages=[{"role": "user", "content": "Hello"}], system=None,
                         max_tokens=300)

    first, second = job(), job()
    assert sched.submit(first) and sched.submit(second)
    assert first.events.get(timeout=30)[0] == "text"      # the first client's generation runs
    leaving = threading.Thread(target=sched.cancel, args=(first,))
    leaving.start()                                       # its client leaves; the cancel stalls
    assert second.events.get(timeout=30)[0] == "text"     # the first ended, the second runs
    second_started.set()                                  # now the stalled cancel lands
    leaving.join(30)
    events = []
    while not events or events[-1][0] == "text":
        events.append(second.events.get(timeout=60))
    assert events[-1][0] == "done", events[-1]
    assert events[-1][1]["finish_reason"] == "length" and events[-1][1]["usage"]["completion_tokens"] == 300
    engine.lib.litert_lm_engine_delete(engine.engine)
