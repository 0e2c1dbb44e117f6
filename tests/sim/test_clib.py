"""The stand-in C libraries on virtual boards, bound with the service's own ctypes prototypes.

What a user of the service would notice: the model loads once (engine/dialog create), a request's
first chunk comes after the runtime's TTFT and not after a model load, the board's faults show
through the library as they do through litert_lm_main / genie-t2t-run, and cancel stops a
generation.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from provisioner import catalog
from provisioner.contracts import board as on_board
from provisioner.sim import host, real_litert
from provisioner.sim.npu_outcome import GARBAGE_TOKEN, answer_for
from tests.conftest import need_realworld
from tests.sim.test_host_support import needs_root

pytestmark = [needs_root, pytest.mark.root]

CLIENT = (Path(__file__).with_name("clib_client.py")).read_text(encoding="utf-8")
QUESTION = "Explain what Qualcomm is in two sentences."
GENIE_Q = "Explain gravity in one short English sentence."


def _run(vb, runtime: str, *args: str, user: str | None = None) -> tuple[dict, str]:
    q = on_board.LITERT_QAIRT if runtime == "litert_lm" else "2.45.0.260326"
    env = on_board.run_env(catalog.board(vb.board_id), runtime, q)
    quoted = " ".join("'" + a.replace("'", "'\\''") + "'" for a in args)
    cmd = (f"cd / && env LD_LIBRARY_PATH={env.ld_library_path} ADSP_LIBRARY_PATH={env.adsp_library_path} "
           f"/run/edge-llm-sim/python3 - {quoted}")
    if user:
        cmd = f"setpriv --reuid {user} --regid {user} --init-groups sh -c \"{cmd}\""
    out = subprocess.run(host.ssh_argv(vb, cmd), input=CLIENT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1]), out.stderr


def _litert(vb, prompt: str = QUESTION, *extra: str, user: str | None = None,
            dispatch: str | None = None, kind: str = "litert") -> tuple[dict, str]:
    """One generation through the library; ``dispatch`` is the dispatch dir set (default: the runtime's lib/)."""
    model = subprocess.run(host.ssh_argv(vb, "ls /opt/edge-llm/models/gemma-4-e2b/current/*.litertlm"),
                           capture_output=True, text=True, timeout=60).stdout.strip()
    where = f"{on_board.litert_dir()}/lib" if dispatch is None else dispatch
    return _run(vb, "litert_lm", kind, model, where, prompt, *extra, user=user)


def _real_or_skip() -> dict:
    """The tiny model's greedy reference (computed in PyTorch), where the boards run the real runtime."""
    found = real_litert.locate()
    if isinstance(found, str):
        if not os.environ.get(real_litert.MODEL_ENV):        # the tiny model is one of the real-world files
            need_realworld("litertlm", "tiny", real_litert.TINY_MODEL)
        pytest.skip(f"virtual boards answer with modelled text here: {found}")
    return json.loads(found[1].with_name("tiny-eos.reference.json").read_text(encoding="utf-8"))


def _genie(vb, *extra: str) -> tuple[dict, str]:
    return _run(vb, "genie", "genie", "/opt/edge-llm/models/nemotron-nano-8b/current/genie_config.json",
                GENIE_Q, *extra)


@pytest.fixture(scope="module")
def gemma(module_boards):
    return module_boards.start()


def test_litert_c_api_streams_the_answer_at_the_runtime_speed(gemma):
    res, err = _litert(gemma)
    assert res["loaded"] and res["rc"] == 0 and res["error"] is None
    assert res["n"] > 10                                                  # streamed chunk by chunk
    if isinstance(real_litert.locate(), str):
        assert res["text"] == answer_for(QUESTION)                        # modelled text without the runtime
    else:
        assert res["text"] != answer_for(QUESTION) and "answers from the real LiteRT-LM runtime" in err
    assert res["returned_s"] < res["first_s"]                             # non-blocking, like the real call
    expected = catalog.board("iq-8275-evk").expected("gemma-4-e2b", "qli")
    assert res["decode_rate"] == pytest.approx(expected.decode_tok_s, rel=0.08)
    assert res["ttft"] == pytest.approx(expected.ttft_s, rel=0.1)
    assert "Set HTP performance mode: 2" in err


def test_litert_chat_is_the_real_runtimes_answer_at_npu_speed(gemma):
    """The words are Google's runtime's (the tiny model's greedy reference, token for token, through the
    chat template and max tokens the service set); only the pace is the NPU's."""
    ref = _real_or_skip()
    n = len(ref["decode_pieces"])
    res, err = _litert(gemma, ref["prompt"], str(n), kind="chat")
    assert res["loaded"] and res["rc"] == 0
    assert res["pieces"] == [p.replace("\u2581", " ") for p in ref["decode_pieces"]]
    assert "Set HTP performance mode: 2" in err
    shorter, _ = _litert(gemma, ref["prompt"], "4", kind="chat")
    assert shorter["pieces"] == res["pieces"][:4]
    told, _ = _litert(gemma, ref["prompt"], str(n), "Answer in French.", kind="chat")
    assert told["pieces"] != res["pieces"]          # the system message reaches the runtime


def test_without_the_real_runtime_a_board_says_so_once_and_models_the_words(boards, monkeypatch, tmp_path):
    monkeypatch.setenv(real_litert.MODEL_ENV, str(tmp_path / "no-such.litertlm"))
    vb = boards.start()
    res, err = _litert(vb)
    assert res["loaded"] and res["text"] == answer_for(QUESTION)
    said = [ln for ln in err.splitlines() if "edge-llm-sim: modelled answers" in ln]
    assert len(said) == 1 and "no-such.litertlm is absent" in said[0]


def test_litert_without_a_dispatch_dir_looks_beside_the_model(gemma):
    """An empty dispatch dir is no dir: LiteRT-LM cbf463d runtime/util/litert_util.cc:62 falls back to the
    model's directory (:71-92 with patch 0001), which holds no dispatch library, whatever LD_LIBRARY_PATH says."""
    res, err = _litert(gemma, dispatch="")
    assert not res["loaded"] and "NPU accelerator could not be loaded and registered" in err


def test_litert_cancel_stops_the_generation(gemma):
    res, _ = _litert(gemma, QUESTION, "cancel")
    assert res["error"].startswith("CANCELLED")
    assert res["n"] < 5


def test_litert_faults_show_through_the_library(boards):
    vb = boards.start(faults=("memlock",))
    res, err = _litert(vb)
    assert not res["loaded"]
    assert "Could not allocate persistent weights buffer!" in err
    ok_board = boards.start(faults=("no-burst",))
    res, err = _litert(ok_board)
    assert res["decode_rate"] == pytest.approx(16.0, rel=0.1)
    assert "Null Qualcomm options" in err


def test_litert_service_user_without_fastrpc_group_cannot_load(boards):
    vb = boards.start(faults=("no-fastrpc-group",))
    res, err = _litert(vb, user="llm")
    assert not res["loaded"] and "/dev/fastrpc-cdsp: Permission denied" in err


@pytest.fixture(scope="module")
def nemotron(module_boards):
    return module_boards.start("iq-9075-evk")


def test_genie_dialog_query_streams_with_sentence_codes(nemotron):
    res, _ = _genie(nemotron)
    assert res["config_status"] == 0 and res["create_status"] == 0 and res["rc"] == 0
    assert res["text"] == answer_for(GENIE_Q)
    assert res["codes"][0] == 1 and res["codes"][-1] == 3 and set(res["codes"][1:-1]) <= {2}
    limited, _ = _genie(nemotron, "4")                       # GenieDialog_setMaxNumTokens
    assert answer_for(GENIE_Q).startswith(limited["text"]) and len(limited["text"]) < len(res["text"])


def test_genie_wrong_soc_model_is_garbage_and_qairt_mismatch_fails_create(boards):
    vb = boards.start("iq-9075-evk", faults=("wrong-soc-model",))
    res, _ = _genie(vb)
    assert res["rc"] == 0 and GARBAGE_TOKEN * 4 in res["text"]
    bad = boards.start("iq-9075-evk", faults=("truncated-model",))
    res, err = _genie(bad)
    assert res["create_status"] == -1 and "bytes present" in err
