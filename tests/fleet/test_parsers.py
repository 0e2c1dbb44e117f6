"""Runtime output parsers, the coherence detector and the log-signature diagnoses (no boards needed)."""

from __future__ import annotations

import json

import pytest

from provisioner.contracts.inventory import ModelVars
from provisioner.fleet import verify
from provisioner.fleet.shared import diagnosis
from provisioner.fleet.shared.onboard import serve

# What litert_lm_main printed on a measured Ubuntu run (~28 tok/s, values with "~").
LITERT_UBUNTU = """Qualcomm is a global technology company that designs, develops, and sells wireless
communication solutions and processors.
BenchmarkInfo:
Time to first token: 0.08 s
Prefill Turns (Total 1 turns):
Prefill Turn 1: Processed 17 tokens in 39.4ms duration.
Prefill Speed: ~1240 tokens/sec.
Decode Turns (Total 1 turns):
Decode Turn 1: Processed 46 tokens in ~1.6s duration.
Decode Speed: ~28 tokens/sec.
"""

GENIE_PROFILE = {"header": {"artifact_type": "GENIE_PROFILE"},
                 "components": [{"name": "dialog0", "type": "dialog", "events": [
                     {"type": "GenieDialog_query", "duration": 5726945,
                      "num-prompt-tokens": {"value": 823, "unit": ""},
                      "prompt-processing-rate": {"value": 1547.98, "unit": "toks/sec"},
                      "time-to-first-token": {"value": 531665, "unit": "us"},
                      "num-generated-tokens": {"value": 200, "unit": ""},
                      "token-generation-rate": {"value": 38.52, "unit": "toks/sec"},
                      "token-generation-time": {"value": 5191579, "unit": "us"}},
                     {"type": "GenieDialog_create", "duration": 1124864,
                      "init-time": {"value": 1124713, "unit": "us"}}]}]}


def test_benchmark_info_with_tilde_values_and_answer_text():
    out = serve.parse_benchmark_info(LITERT_UBUNTU)
    assert out["ttft_s"] == 0.08 and out["prefill_tok_s"] == 1240.0 and out["decode_tok_s"] == 28.0
    assert out["decode_tokens"] == 46 and out["decode_s"] == 1.6 and out["prefill_tokens"] == 17
    assert out["text"].startswith("Qualcomm is a global") and "BenchmarkInfo" not in out["text"]


def test_benchmark_info_decode_speed_derived_from_turns_when_missing():
    text = "hi\nBenchmarkInfo:\nTime to first token: 0.06 s\nDecode Turn 1: Processed 799 tokens in 24.6s duration.\n"
    out = serve.parse_benchmark_info(text)
    assert out["decode_tok_s"] == round(799 / 24.6, 2)
    assert serve.parse_benchmark_info("crashed before the benchmark")["has_benchmark"] is False


def test_genie_profile_events_by_type_not_position():
    out = serve.parse_genie_profile(json.dumps(GENIE_PROFILE))
    assert out["ttft_s"] == 0.5317 and out["decode_tok_s"] == 38.52 and out["decode_tokens"] == 200
    assert out["prefill_tokens"] == 823 and out["init_s"] == 1.1247 and out["decode_s"] == 5.1916


def test_genie_output_between_begin_and_end():
    text = 'Using libGenie.so version 1.17.0\n[INFO] "Using create From Binary"\n[BEGIN]: Gravity pulls.\n[END]\n'
    assert serve.parse_genie_output(text) == "Gravity pulls."
    assert serve.parse_genie_output("Failed to create dialog") is None


@pytest.mark.parametrize("text", [
    "Qualcomm is a global technology company that designs, develops, and sells wireless solutions.",
    "2 + 3 equals 5.",
    "量子计算是一种利用量子力学原理进行计算的技术。",
    "A neural processing unit runs the matrix multiplications of a transformer efficiently. " * 2,
])
def test_coherent_text_passes(text):
    assert serve.coherence(text) == (True, "")


@pytest.mark.parametrize("text", [
    "The value of 2 3 is $\\boxed{5}$. oreferalitiesmallalitiesmallalitiesmall",      # wrong soc_model
    "量子计算是一种利用量子力学原理进行... eferalitiesmallalitiesmallalitiesmall",
    "Gravity is the the the the force",
    "",
])
def test_seed_002_garbage_is_detected(text):
    ok, why = serve.coherence(text)
    assert not ok and why


@pytest.mark.parametrize("log,runtime,key", [
    ("[ERROR] QnnDsp <E> Could not allocate persistent weights buffer!", "litert_lm", "memlock"),
    ("[ERROR] QnnDevice_create failed with error 14001\nFailed to set up QNN manager", "litert_lm",
     "soc-config-14001"),
    ("Failed to create device: 14001\nDevice Creation failure", "genie", "fastrpc-missing"),
    ("NOT_FOUND: TF_LITE_PREFILL_DECODE not found in the model.", "litert_lm", "truncated-model"),
    ("INVALID_ARGUMENT: Main backend constraint mismatch.", "litert_lm", "cpu-backend"),
    ("NPU accelerator could not be loaded and registered: InvalidArgument", "litert_lm", "dispatch-dir"),
    ("[ERROR] QnnDsp <E> Stub lib id mismatch: expected (v2.44.0.260225)", "genie", "qairt-mismatch"),
    ("rpcmem_android.c dummy call", "litert_lm", None),
])
def test_log_signatures_map_to_seed_diagnoses(log, runtime, key):
    assert diagnosis.diagnose_log(log, runtime) == key
    if key:
        assert diagnosis.DIAGNOSES[key].remedy


def test_smoke_check_flags_slow_decode_as_missing_burst():
    m = ModelVars(name="gemma-4-e2b", kind="litertlm", runtime="litert_lm", qairt="2.44.0.260225",
                           min_decode_tok_s=25.6, max_ttft_s=0.5)
    slow = LITERT_UBUNTU.replace("~28 tokens/sec", "16.1 tokens/sec")
    check, fig = verify.smoke_check(m, {"rc": 0, "stdout": slow, "stderr": "W dispatch] Null Qualcomm options"})
    assert not check.ok and check.diagnosis == "no-burst" and fig["decode_tok_s"] == 16.1
    check, _ = verify.smoke_check(m, {"rc": 0, "stdout": LITERT_UBUNTU, "stderr": "HtpPerformanceMode: 2"})
    assert check.ok


def test_pam_memlock_rules_root_needs_its_own_line():
    wildcard_only = "*    soft    memlock    unlimited\n*    hard    memlock    unlimited\n"
    assert verify.pam_memlock("root", [wildcard_only]) == 8192 * 1024          # pam_limits: * never covers root
    assert verify.pam_memlock("llm", [wildcard_only]) == "infinity"
    assert verify.pam_memlock("root", [wildcard_only, "root - memlock unlimited"]) == "infinity"


# litert_lm_main's stdout laid out as the pinned source prints it (LiteRT-LM cbf463d):
# runtime/engine/litert_lm_main.cc:152 echoes "input_prompt: <prompt>" first, :81 streams the answer,
# :77 ends it with a newline, :164 prints a blank line and BenchmarkInfo (runtime/engine/io_types.cc:468).
SMOKE_PROMPT = "Explain in two sentences what an NPU is."
NPU_ANSWER = ("An NPU is a processor built for the matrix arithmetic of neural networks. "
              "It runs a model's layers faster and with less power than a CPU.")
LITERT_BENCHMARK = """BenchmarkInfo:
  Init Phases (4):
    - Init Executor: 1523.71 ms
    - Init LLM metadata: 0.41 ms
    - Init Model assets: 12.07 ms
    - Init Tokenizer: 8.33 ms
--------------------------------------------------
  Time to first token: 0.09 s
--------------------------------------------------
  Prefill Turns (Total 1 turns):
    Prefill Turn 1: Processed 23 tokens in 41.2ms duration.
      Prefill Speed: 558.25 tokens/sec.
--------------------------------------------------
  Decode Turns (Total 1 turns):
    Decode Turn 1: Processed 38 tokens in 1.31s duration.
      Decode Speed: 29.01 tokens/sec.
--------------------------------------------------
  TextToTokenIds Turns (Total 1 turns):
    Turn 1: 1.2ms, 23 tokens
--------------------------------------------------
--------------------------------------------------
"""


def litert_main_stdout(prompt: str, answer: str) -> str:
    """What litert_lm_main at the pin writes to stdout for one prompt and answer."""
    return f"input_prompt: {prompt}\n{answer}\n\n{LITERT_BENCHMARK}\n"


GEMMA = ModelVars(name="gemma-4-e2b", kind="litertlm", runtime="litert_lm", qairt="2.44.0.260225",
                  min_decode_tok_s=25.6, max_ttft_s=0.5)


def test_litert_answer_is_what_the_model_said_without_the_echoed_prompt():
    out = serve.parse_benchmark_info(litert_main_stdout(SMOKE_PROMPT, NPU_ANSWER))
    assert out["text"] == NPU_ANSWER
    assert out["decode_tok_s"] == 29.01 and out["ttft_s"] == 0.09 and out["prefill_tokens"] == 23
    check, fig = verify.smoke_check(GEMMA, {"rc": 0, "stdout": litert_main_stdout(SMOKE_PROMPT, NPU_ANSWER),
                                             "stderr": "Set HTP performance mode: 2"}, prompt=SMOKE_PROMPT)
    assert check.ok and fig["text"] == NPU_ANSWER


def test_a_board_that_answers_nothing_fails_verify_although_the_prompt_reads_well():
    """The echoed prompt is good English: scored as the answer, an empty answer passed the smoke check."""
    run = {"rc": 0, "stdout": litert_main_stdout(SMOKE_PROMPT, ""), "stderr": "Set HTP performance mode: 2"}
    check, fig = verify.smoke_check(GEMMA, run)
    assert not check.ok and check.diagnosis == "garbage" and "empty answer" in check.detail
    assert fig["text"] == ""


def test_a_collapsed_answer_is_not_rescued_by_the_prompts_vocabulary():
    collapsed = " ".join(["the NPU runs the model and the NPU runs"] * 4)      # 36 words, 5 distinct
    assert not serve.coherence(collapsed)[0]
    run = {"rc": 0, "stdout": litert_main_stdout(SMOKE_PROMPT, collapsed), "stderr": "Set HTP performance mode: 2"}
    check, _ = verify.smoke_check(GEMMA, run)
    assert not check.ok and "vocabulary collapsed" in check.detail


def test_a_prompt_of_several_lines_is_cut_whole_when_known_and_by_its_first_line_when_not():
    prompt = "You are terse.\nExplain in two sentences what an NPU is."
    stdout = litert_main_stdout(prompt, NPU_ANSWER)
    assert serve.parse_run("litert_lm", stdout, prompt=prompt)["text"] == NPU_ANSWER
    # without the prompt the parser can only know where the echo's first line ends
    assert serve.parse_run("litert_lm", litert_main_stdout(SMOKE_PROMPT, NPU_ANSWER))["text"] == NPU_ANSWER
