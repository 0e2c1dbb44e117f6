"""Runtime stand-ins on virtual boards: the runtimes' outputs and failure signatures, from board state.

Every command runs over real ssh inside the board's namespace with the run environment from
``provisioner.contracts.board`` (what the fleet uses), so what is tested is what a verifier would see.
"""

from __future__ import annotations

import json

import pytest

from provisioner import catalog
from provisioner.sim.npu_outcome import GARBAGE_TOKEN, answer_for
from tests.sim.test_host_support import decode_speed, genie_cmd, litert_cmd, needs_root, ssh

pytestmark = [needs_root, pytest.mark.root]

QUESTION = "Explain what Qualcomm is in two sentences."


@pytest.fixture(scope="module")
def gemma(module_boards):
    return module_boards.start()


def _expected(board_id: str, model: str) -> float:
    return catalog.board(board_id).expected(model, "qli").decode_tok_s


def test_healthy_board_answers_coherently_at_catalog_speed(gemma):
    out = ssh(gemma, litert_cmd(gemma, QUESTION))
    assert out.returncode == 0, out.stderr
    # LiteRT-LM cbf463d runtime/engine/litert_lm_main.cc:152,81,77,164: prompt echo, answer, newline, BenchmarkInfo
    assert out.stdout.startswith(f"input_prompt: {QUESTION}\n{answer_for(QUESTION)}\n\nBenchmarkInfo:\n")
    assert "BenchmarkInfo:" in out.stdout and "Time to first token:" in out.stdout
    assert decode_speed(out.stdout) == pytest.approx(_expected("iq-8275-evk", "gemma-4-e2b"), rel=0.08)
    assert "Set HTP performance mode: 2" in out.stderr


def test_npu_starts_only_with_the_dispatch_library_beside_the_model(gemma):
    """litert_lm_main sets no dispatch directory; LiteRT looks beside --model_path only (LiteRT-LM cbf463d
    runtime/util/litert_util.cc:71-92 with patch 0001). The model in the fleet's model directory, the
    library on LD_LIBRARY_PATH: the NPU is not registered. A run directory linking both: it is."""
    bare = ssh(gemma, litert_cmd(gemma, QUESTION, run_dir=False))
    assert bare.returncode != 0
    assert "NPU accelerator could not be loaded and registered" in bare.stderr
    laid_out = ssh(gemma, litert_cmd(gemma, QUESTION))
    assert laid_out.returncode == 0, laid_out.stderr


def test_cpu_backend_on_npu_only_model(gemma):
    out = ssh(gemma, litert_cmd(gemma, "hi", backend="cpu"))
    assert out.returncode != 0
    assert "Main backend constraint mismatch" in out.stderr and "requires one of [npu]" in out.stderr


def test_runtime_faults_read_live_from_the_board(gemma):
    try:
        gemma.add_fault("no-burst")
        slow = ssh(gemma, litert_cmd(gemma, QUESTION))
        assert slow.returncode == 0
        assert "Null Qualcomm options" in slow.stderr and slow.stderr.count("[INFO]") > 10
        assert decode_speed(slow.stdout) == pytest.approx(16.0, rel=0.1)
        gemma.clear_fault("no-burst")

        gemma.add_fault("slow")
        assert decode_speed(ssh(gemma, litert_cmd(gemma, QUESTION)).stdout) == pytest.approx(16.0, rel=0.1)
        gemma.clear_fault("slow")

        gemma.add_fault("soc-config-14001")
        bad = ssh(gemma, litert_cmd(gemma, QUESTION))
        assert bad.returncode != 0
        assert "Failed to set up QNN manager" in bad.stderr and "14001" in bad.stderr
        gemma.clear_fault("soc-config-14001")

        gemma.add_fault("wrong-soc-model")
        garbage = ssh(gemma, litert_cmd(gemma, QUESTION))
        assert garbage.returncode == 0                      # no error at all, as a wrong soc_model gives on a board
        first = garbage.stdout.splitlines()[1]              # after the prompt's echo
        assert first.startswith(" ".join(answer_for(QUESTION).split()[:3]))
        assert first.count(GARBAGE_TOKEN) >= 4
    finally:
        for f in ("no-burst", "slow", "soc-config-14001", "wrong-soc-model"):
            gemma.clear_fault(f)


@pytest.mark.parametrize("fault, needle, cause", [
    ("memlock", "Could not allocate persistent weights buffer!", "test ! -e /etc/security/limits.d/"
                                                                  "50-edge-llm-memlock.conf"),
    ("qairt-mismatch", "Context binary was built with QAIRT v2.44.0.260225",
     "grep -q 2.47.0.260601 /opt/qairt/2.44.0.260225/lib/aarch64-oe-linux-gcc11.2/libQnnHtp.so"),
    ("truncated-model", "TF_LITE_PREFILL_DECODE not found", "true"),
])
def test_stateful_faults_show_the_seed_symptom_and_the_real_cause(boards, fault, needle, cause):
    vb = boards.start(faults=(fault,))
    out = ssh(vb, litert_cmd(vb, QUESTION))
    assert out.returncode != 0
    assert needle in out.stderr
    assert ssh(vb, cause).returncode == 0          # verification can find why, on the board itself


def test_a_cut_litertlm_fails_to_load_even_when_model_json_declares_the_cut_size(boards):
    """A release that published a cut file: the index, so model.json, carries the cut size and sha256.

    The real loader maps every section the container's header lists and refuses one past the end of
    the file, so the runtime fails to load it whatever model.json says.
    """
    from provisioner.sim.synthetic_models import make_litertlm

    vb = boards.start()
    vdir = next(p for p in (vb.rootfs_dir / "opt/edge-llm/models/gemma-4-e2b").iterdir()
                if p.is_dir() and not p.is_symlink())
    model = next(vdir.glob("*.litertlm"))
    make_litertlm(model, n_dispatch_ops=9, truncate_to=20000)
    size = model.stat().st_size
    (vdir / "model.json").write_text(json.dumps({"name": "gemma-4-e2b", "kind": "litertlm", "size": size,
                                                 "files": [{"name": model.name, "size": size}]}))
    out = ssh(vb, litert_cmd(vb, QUESTION))
    assert out.returncode != 0, out.stdout
    assert "TF_LITE_PREFILL_DECODE not found" in out.stderr and f"(size {size}, section ends at" in out.stderr


def test_fastrpc_group_membership_decides_for_the_service_user(boards):
    vb = boards.start(faults=("no-fastrpc-group",))
    out = ssh(vb, litert_cmd(vb, QUESTION, user="llm"))
    assert out.returncode != 0
    assert "/dev/fastrpc-cdsp: Permission denied" in out.stderr
    assert ssh(vb, "usermod -aG fastrpc llm").returncode == 0
    ok = ssh(vb, litert_cmd(vb, QUESTION, user="llm"))
    assert ok.returncode == 0, ok.stderr


@pytest.fixture(scope="module")
def nemotron(module_boards):
    return module_boards.start("iq-9075-evk")


def test_genie_healthy_run_and_profile(nemotron):
    out = ssh(nemotron, genie_cmd(nemotron, "--profile /tmp/.genie-prof-$$.json; cat /tmp/.genie-prof-$$.json; "
                                            "rm -f /tmp/.genie-prof-$$.json"))
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("Using libGenie.so version 1.17.0\n")
    assert '[INFO] "Using create From Binary"' in out.stdout
    assert f"[BEGIN]: {answer_for('Explain gravity in one short English sentence.')}[END]" in out.stdout
    prof = json.loads(out.stdout[out.stdout.index("[END]") + 6:])
    events = {e["type"]: e for e in prof["components"][0]["events"]}
    rate = events["GenieDialog_query"]["token-generation-rate"]["value"]
    assert rate == pytest.approx(_expected("iq-9075-evk", "nemotron-nano-8b"), rel=0.08)
    assert events["GenieDialog_query"]["time-to-first-token"]["unit"] == "us"


def test_genie_stops_at_the_dialog_max_num_tokens(nemotron):
    """A config copy with dialog.max-num-tokens (what edge-llm-serve writes for max_tokens) is obeyed."""
    d = "/opt/edge-llm/models/nemotron-nano-8b/current"
    make_copy = (f"python3 -c \"import json; c = json.load(open('{d}/genie_config.json')); "
                 f"c['dialog']['max-num-tokens'] = 4; json.dump(c, open('{d}/limited.json', 'w'))\"")
    cmd = genie_cmd(nemotron, "--profile /tmp/.genie-lim-$$.json; cat /tmp/.genie-lim-$$.json; "
                              f"rm -f /tmp/.genie-lim-$$.json {d}/limited.json")
    out = ssh(nemotron, make_copy + " && " + cmd.replace("-c genie_config.json", "-c limited.json"))
    assert out.returncode == 0, out.stderr
    text = out.stdout[out.stdout.index("[BEGIN]: ") + 9:out.stdout.index("[END]")]
    full = answer_for("Explain gravity in one short English sentence.")
    assert full.startswith(text) and len(text) < len(full)
    prof = json.loads(out.stdout[out.stdout.index("[END]") + 6:])
    query = next(e for e in prof["components"][0]["events"] if e["type"] == "GenieDialog_query")
    assert query["num-generated-tokens"]["value"] <= 4


def test_genie_refuses_to_overwrite_a_profile(nemotron):
    out = ssh(nemotron, "touch /tmp/.exists.json; " + genie_cmd(nemotron, "--profile /tmp/.exists.json")
              + "; echo rc=$?; rm -f /tmp/.exists.json")
    assert "rc=1" in out.stdout and "already exists" in out.stderr


def test_genie_without_fastrpc_access_is_14001(boards):
    vb = boards.start("iq-9075-evk", faults=("no-fastrpc-group",))
    out = ssh(vb, f"setpriv --reuid llm --regid llm --init-groups sh -c \"{genie_cmd(vb)}\"")
    assert out.returncode != 0
    assert "Failed to create device: 14001" in out.stderr and "Device Creation failure" in out.stderr


def test_genie_wrong_soc_model_bundle_gives_garbage(boards):
    vb = boards.start("iq-9075-evk", faults=("wrong-soc-model",))
    out = ssh(vb, genie_cmd(vb))
    assert out.returncode == 0
    assert GARBAGE_TOKEN * 4 in out.stdout
    cfg = ssh(vb, "cat /opt/edge-llm/models/nemotron-nano-8b/current/htp_backend_ext_config.json").stdout
    assert json.loads(cfg)["devices"][0]["soc_model"] == 0


def test_genie_truncated_part_fails_to_load(boards):
    vb = boards.start("iq-9075-evk", faults=("truncated-model",))
    out = ssh(vb, genie_cmd(vb))
    assert out.returncode != 0
    assert "Failed to create dialog" in out.stderr and "bytes present" in out.stderr
