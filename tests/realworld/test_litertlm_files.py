"""`provisioner inspect` / `check` on .litertlm files as LiteRT-LM's own tools write them.

The inputs are LiteRT-LM's real test data (``../shared/realworld/litertlm``, from
google-ai-edge/LiteRT-LM ``runtime/testdata`` and ``schema/testdata``): the real
``test_hf_tokenizer.litertlm``, and files built here from the real TFLite model, LLM metadata,
SentencePiece model and binary blob with the official ``litert-lm-builder`` (PyPI). None of
them holds a QNN context binary, so none can run on the boards' NPU service, and each must be
refused with the reason - not "can run on iq-8275-evk".
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from litert_lm_builder import litertlm_builder as lb

from provisioner.artifacts.inspect import inspect_path
from provisioner.catalog import board
from provisioner.cli import main
from provisioner.errors import ArtifactError
from tests.artifacts.conftest import CliResult
from tests.conftest import REALWORLD

REAL = REALWORLD / "litertlm"
MODEL = "dummy_embedding_cpu_model.tflite"


def build(out: Path, *steps: tuple) -> Path:
    """Write ``out`` with the official builder; each step is (method name, *args, {kwargs})."""
    b = lb.LitertLmFileBuilder()
    for name, *args in steps:
        kwargs = args.pop() if args and isinstance(args[-1], dict) else {}
        getattr(b, name)(*[str(REAL / a) if isinstance(a, str) and (REAL / a).is_file() else a for a in args],
                         **kwargs)
    with open(out, "wb") as f:
        b.build(f)
    return out


def llm(model_type: lb.TfLiteModelType = lb.TfLiteModelType.PREFILL_DECODE, backend: str | None = None,
        **kw) -> tuple:
    return ("add_tflite_model", MODEL, model_type, {"backend_constraint": backend, **kw})


TOKENIZER = ("add_sentencepiece_tokenizer", "sentencepiece.model")
METADATA = ("add_llm_metadata", "llm_metadata.pb")

CASES = {
    # name: (builder steps, what the one line must say)
    "cpu-only": ([METADATA, TOKENIZER, llm(backend="cpu")],
                 "model runs on the CPU (section 2 (tf_lite_prefill_decode) has backend_constraint 'cpu'"),
    "gpu-only": ([METADATA, TOKENIZER, llm(backend="gpu")], "model runs on the GPU"),
    "cpu-gpu": ([METADATA, TOKENIZER, llm(backend="cpu,gpu")], "model runs on the CPU/GPU"),
    "unconstrained": ([METADATA, TOKENIZER, llm()], "model runs on the CPU/GPU (section 2 (tf_lite_prefill_decode): "
                                                    "no DISPATCH_OP for the Qualcomm NPU)"),
    "npu-without-context-binary": ([METADATA, TOKENIZER, llm(backend="npu")],
                                   "NPU model without a QNN context binary (section 2 (tf_lite_prefill_decode) "
                                   "has backend_constraint 'npu' but no DISPATCH_OP"),
    "reordered": ([llm(backend="npu"), ("add_generic_binary_data", "data.bin"), TOKENIZER, METADATA],
                  "NPU model without a QNN context binary (section 0 (tf_lite_prefill_decode)"),
    "extra-metadata": ([("add_system_metadata", lb.Metadata(key="Authors", value="ODML", dtype=lb.DType.STRING)),
                        ("add_system_metadata", lb.Metadata(key="layers", value=35, dtype=lb.DType.INT32)),
                        METADATA, TOKENIZER,
                        llm(backend="npu", additional_metadata=[
                            lb.Metadata(key="soc", value="qcs8275", dtype=lb.DType.STRING),
                            lb.Metadata(key="quantized", value=True, dtype=lb.DType.BOOL)])],
                       "NPU model without a QNN context binary"),
    "embedder-only": ([METADATA, TOKENIZER, llm(lb.TfLiteModelType.EMBEDDER, backend="npu")],
                      "NPU model without a QNN context binary (section 2 (tf_lite_embedder)"),
    "no-model": ([METADATA, TOKENIZER, ("add_generic_binary_data", "data.bin")],
                 "has no model section (only GenericBinaryData, LlmMetadataProto, SP_Tokenizer)"),
}


@pytest.fixture
def cli(capsys):
    """``provisioner ARGS`` in-process: exit code, stdout, stderr (like tests/artifacts' runner)."""

    def run(*args: object) -> CliResult:
        capsys.readouterr()
        code = main([str(a) for a in args])
        cap = capsys.readouterr()
        assert "Traceback" not in cap.err + cap.out
        return CliResult(code, cap.out, cap.err)

    return run


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("litertlm-real")
    out = {name: build(d / f"{name}.litertlm", *steps) for name, (steps, _) in CASES.items()}
    out["hf-tokenizer"] = REAL / "test_hf_tokenizer.litertlm"
    return out


def manifest(tmp_path: Path, model: Path) -> Path:
    p = tmp_path / "release.yaml"
    p.write_text(f"""
release: r1
board: iq-8275-evk
qairt: ['2.44.0.260225']
models:
  - name: m
    kind: litertlm
    path: {model}
    qairt: '2.44.0.260225'
""")
    return p


def test_real_hf_tokenizer_file_has_no_model(files, cli, tmp_path):
    f = files["hf-tokenizer"]
    r = cli("inspect", f, "--board", "iq-8275-evk")
    assert r.code == 1 and "can run on" not in r.out
    assert r.err_lines == [f"error: {f}: cannot run on iq-8275-evk: has no model section (only HF_Tokenizer_Zlib) "
                           "-> this is not a model file; use the model's Qualcomm NPU export (AOT-compiled with "
                           "LiteRT's Qualcomm plugin; edge-llm-serve runs litert_lm_main --backend npu)"]
    r = cli("check", manifest(tmp_path, f))
    assert r.code == 1 and "models[0].path: has no model section" in r.err
    assert "no QAIRT build id found" not in r.err  # said once, as the problem, not again as a warning


@pytest.mark.parametrize("name", sorted(CASES))
def test_builder_files_are_refused_with_the_reason(files, cli, tmp_path, name):
    f, needle = files[name], CASES[name][1]
    r = cli("inspect", f, "--board", "iq-8275-evk")
    assert r.code == 1 and "can run on" not in r.out
    assert len(r.err_lines) == 1 and "cannot run on iq-8275-evk: " + needle in r.err, r.err
    data = json.loads(cli("inspect", f, "--board", "iq-8275-evk", "--json").out)
    assert data["can_run"] is False and data["qairt_builds"] == [] and not data["truncated"]
    r = cli("check", manifest(tmp_path, f))
    assert r.code == 1 and needle in r.err


def test_reordered_sections_and_extra_metadata_are_read(files):
    ins = inspect_path(files["reordered"])
    assert [s["data_type"] for s in ins.details["sections"]] == [
        "TFLiteModel", "GenericBinaryData", "SP_Tokenizer", "LlmMetadataProto"]
    assert ins.npu_only is True and ins.declared_size <= ins.size
    extra = inspect_path(files["extra-metadata"], board("iq-8275-evk"))
    assert extra.details["system_metadata"]["Authors"] == "ODML"
    assert extra.details["system_metadata"]["layers"] == 35
    items = extra.details["sections"][2]["items"]
    assert items == {"model_type": "tf_lite_prefill_decode", "backend_constraint": "npu", "soc": "qcs8275",
                     "quantized": True}


@pytest.mark.parametrize("keep", [20, 31, 5])
def test_file_cut_inside_the_preamble_says_truncated(tmp_path, cli, keep):
    f = tmp_path / "cut.litertlm"
    f.write_bytes((REAL / "test_hf_tokenizer.litertlm").read_bytes()[:keep])
    with pytest.raises(ArtifactError, match=f"truncated: {keep} bytes, header needs 32"):
        inspect_path(f)
    r = cli("inspect", f)
    assert r.code == 1 and len(r.err_lines) == 1
    assert f"truncated: {keep} bytes, header needs 32 -> re-download" in r.err and "magic" not in r.err


def test_file_cut_inside_the_header_flatbuffer_says_truncated(tmp_path, cli, files):
    data = (REAL / "test_hf_tokenizer.litertlm").read_bytes()
    header_end = int.from_bytes(data[24:32], "little")
    f = tmp_path / "cut.litertlm"
    f.write_bytes(data[:100])
    r = cli("inspect", f)
    assert r.code == 1 and len(r.err_lines) == 1
    assert f"truncated: 100 bytes, header needs {header_end}" in r.err
    r = cli("check", manifest(tmp_path, f))
    assert r.code == 1 and "truncated: 100 bytes" in r.err


def test_real_file_cut_in_its_section_is_truncated_not_modelless(tmp_path, cli):
    data = (REAL / "test_hf_tokenizer.litertlm").read_bytes()
    f = tmp_path / "cut.litertlm"
    f.write_bytes(data[:200_000])
    r = cli("inspect", f, "--board", "iq-8275-evk")
    assert r.code == 1 and "truncated: 200000 bytes on disk but the sections end at 609288" in r.err
    assert "(+1 more)" not in r.err  # the cut is the one problem
