"""edge-llm-serve in-process: HTTP contract, queue limit, argv safety; one source (the layer) for layer and role."""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from provisioner.fleet import service
from provisioner.fleet.onboard import serve

REPO = Path(__file__).resolve().parents[2]
RECIPE = REPO / "layers" / "meta-edge-llm" / "recipes-ai" / "edge-llm-serve"

# A stand-in runtime that prints what it was given: proves the prompt arrives as ONE argv element.
FAKE_LITERT = """#!{python}
import json, sys
args = sys.argv[1:]
prompt = args[args.index("--input_prompt") + 1]
print("ECHO " + json.dumps(prompt))
print("BenchmarkInfo:")
print("Time to first token: 0.06 s")
print("Prefill Turn 1: Processed 12 tokens in 8.0ms duration.")
print("Decode Turn 1: Processed 40 tokens in 1.25s duration.")
print("Decode Speed: 32.00 tokens/sec.")
"""


@pytest.fixture
def config(tmp_path):
    exe = tmp_path / "litert_lm_main"
    exe.write_text(FAKE_LITERT.format(python=sys.executable))
    exe.chmod(0o755)
    mdir = tmp_path / "model"
    mdir.mkdir()
    (mdir / "m.litertlm").write_bytes(b"LITERTLM")
    cfg = dict(serve.DEFAULTS, model="gemma-4-e2b", runtime="litert_lm", model_dir=str(mdir), model_file="m.litertlm",
               executable=str(exe), max_queue=1, max_body_bytes=2048)
    path = tmp_path / "gemma.json"
    path.write_text(json.dumps(cfg))
    return serve.load_config(str(path))


@pytest.fixture
def server(config):
    def start(runner=serve.run_completion):
        srv = serve.ThreadingHTTPServer(("127.0.0.1", 0), serve.make_handler(config, serve.Gate(1), runner))
        srv.daemon_threads = True
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        started.append(srv)
        return srv.server_address[1]
    started: list = []
    yield start
    for s in started:
        s.shutdown()
        s.server_close()


def req(port, method, path, body=None, headers=None):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        r = conn.getresponse()
        return r.status, dict(r.getheaders()), json.loads(r.read() or b"{}")
    finally:
        conn.close()


def test_completion_passes_the_prompt_as_one_argument_and_reports_timing(server):
    port = server()
    evil = 'hi"; rm -rf / ; $(reboot) `id` \\n next'
    status, _, out = req(port, "POST", "/v1/completions", json.dumps({"prompt": evil, "max_tokens": 16}))
    assert status == 200
    assert out["choices"][0]["text"] == "ECHO " + json.dumps(evil)
    assert out["usage"] == {"prompt_tokens": 12, "completion_tokens": 40, "total_tokens": 52}
    assert out["timing"]["decode_tok_s"] == 32.0 and out["timing"]["ttft_s"] == 0.06
    status, _, health = req(port, "GET", "/health")
    assert status == 200 and health["model"] == "gemma-4-e2b"


@pytest.mark.parametrize("body,headers,code", [
    (b"{oops", {}, 400),
    (json.dumps({"prompt": ""}).encode(), {}, 400),
    (json.dumps({"prompt": "hi", "max_tokens": 0}).encode(), {}, 400),
    (json.dumps(["prompt"]).encode(), {}, 400),
    (b"\xff\xfe", {}, 400),
    (json.dumps({"prompt": "x" * 4000}).encode(), {}, 413),
])
def test_bad_requests(server, body, headers, code):
    status, _, out = req(server(), "POST", "/v1/completions", body, headers)
    assert status == code and out["error"]["message"]


def test_missing_length_and_unknown_paths(server):
    port = server()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.putrequest("POST", "/v1/completions")
    conn.endheaders()
    assert conn.getresponse().status == 411
    conn.close()
    assert req(port, "GET", "/v2/whatever")[0] == 404


def test_one_request_on_the_npu_and_a_bounded_queue(server):
    release = threading.Event()

    def slow(cfg, prompt, max_tokens):
        release.wait(10)
        return {"text": "ok", "usage": {}, "timing": {}}

    port = server(slow)
    results: list[int] = []
    threads = [threading.Thread(target=lambda: results.append(
        req(port, "POST", "/v1/completions", json.dumps({"prompt": "p"}))[0])) for _ in range(2)]
    for t in threads:
        t.start()
    time.sleep(0.5)                      # one runs, one waits (max_queue=1)
    status, headers, out = req(port, "POST", "/v1/completions", json.dumps({"prompt": "p"}))
    assert status == 503 and headers.get("Retry-After") and "busy" in out["error"]["message"]
    release.set()
    for t in threads:
        t.join(10)
    assert sorted(results) == [200, 200]


def test_runtime_failure_is_502_and_health_says_why(server, config):
    os.unlink(os.path.join(config["model_dir"], "m.litertlm"))
    port = server()
    status, _, out = req(port, "GET", "/health")
    assert status == 503 and "m.litertlm missing" in out["reason"]


def test_genie_argv_uses_a_prompt_file_and_a_fresh_profile(tmp_path):
    cfg = {"runtime": "genie", "model_dir": "/opt/m", "executable": "/opt/q/genie-t2t-run"}
    text = serve.apply_chat_template("llama3", "Explain gravity.", "detailed thinking off")
    assert text.startswith("<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\ndetailed thinking off")
    argv, files = serve.build_argv(cfg, text, str(tmp_path))
    assert argv[:3] == ["/opt/q/genie-t2t-run", "-c", "/opt/m/genie_config.json"]
    assert files[argv[argv.index("--prompt_file") + 1]] == text
    assert not Path(argv[argv.index("--profile") + 1]).exists()


# A stand-in genie-t2t-run that answers with what its -c config asks for: the token limit and
# whether every file the config names can be opened from where it runs.
FAKE_GENIE = """#!{python}
import json, os, sys
args = sys.argv[1:]
cfg = json.load(open(args[args.index("-c") + 1]))
d = cfg["dialog"]
files = d["engine"]["model"]["binary"]["ctx-bins"] + [d["tokenizer"]["path"]]
print("[BEGIN]: limit=%s files_ok=%s one two three four five six seven eight nine ten[END]"
      % (d.get("max-num-tokens"), all(os.path.isfile(f) for f in files)))
"""


@pytest.mark.parametrize("dialog_type,limit_in_config", [("basic", True), ("lade", False)])
def test_genie_max_tokens_goes_into_the_dialog_config(tmp_path, dialog_type, limit_in_config):
    exe = tmp_path / "genie-t2t-run"
    exe.write_text(FAKE_GENIE.format(python=sys.executable))
    exe.chmod(0o755)
    mdir = tmp_path / "bundle"
    mdir.mkdir()
    for name in ("model.bin", "tokenizer.json"):
        (mdir / name).write_bytes(b"x")
    (mdir / "genie_config.json").write_text(json.dumps({"dialog": {
        "version": 1, "type": dialog_type, "tokenizer": {"version": 1, "path": "tokenizer.json"},
        "engine": {"model": {"binary": {"ctx-bins": ["model.bin"]}}}}}))
    cfg = dict(serve.DEFAULTS, model="nano", runtime="genie", model_dir=str(mdir), executable=str(exe))
    out = serve.run_completion(cfg, "Explain gravity.", max_tokens=5)
    if limit_in_config:   # the runtime stops itself; the text is not cut afterwards
        assert out["text"].startswith("limit=5 files_ok=True") and out["text"].endswith("ten")
    else:                 # a lade dialog crashes with max-num-tokens: service-side cut instead
        assert out["text"] == "limit=None files_ok=True one two three"
    assert json.loads((mdir / "genie_config.json").read_text())["dialog"].get("max-num-tokens") is None


def test_bad_config_is_one_line_exit_2(tmp_path):
    p = tmp_path / "c.json"
    p.write_text(json.dumps({"model": "m", "runtime": "tflite", "model_dir": "/x", "executable": "/y"}))
    proc = subprocess.run([sys.executable, str(RECIPE / "files" / "edge-llm-serve"), "serve", "--config",
                           str(p)], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2 and "runtime must be" in proc.stderr and "Traceback" not in proc.stderr


def test_one_source_for_the_program_the_layer_and_the_fleet_install():
    # the controller's module, the launch playbook's file and the recipe's file are one file
    assert Path(serve.__file__).resolve() == (RECIPE / "files" / "edge-llm-serve").resolve()
    assert service.SERVE_SCRIPT.resolve() == (RECIPE / "files" / "edge-llm-serve").resolve()
    assert not (REPO / "provisioner" / "board").exists()
    unit = (RECIPE / "files" / "edge-llm-serve@.service").read_text().replace(service.USER_PLACEHOLDER, "llm")
    assert unit == service.unit_text("llm")
    assert "LimitMEMLOCK=infinity" in unit and "SupplementaryGroups=fastrpc" in unit
    recipe = (RECIPE / "edge-llm-serve_1.0.bb").read_text()
    assert service.USER_PLACEHOLDER.strip("@") in recipe and "inherit allarch systemd" in recipe
