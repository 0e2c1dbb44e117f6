"""`provisioner inspect` on real .litertlm files built with litert-lm-builder."""

from __future__ import annotations

import random
import struct

import pytest

from provisioner.artifacts.inspect import inspect_path
from provisioner.artifacts.litertlm import read_litertlm
from provisioner.catalog import board
from provisioner.errors import ArtifactError
from provisioner.sim.synthetic_models import make_litertlm

GEMMA_SIZE = 3_294_593_024


def test_reads_qairt_build_from_dispatch_op_context_binary(tmp_path):
    f = make_litertlm(tmp_path / "m_qualcomm_qcs8275.litertlm", qairt="2.44.0.260225")
    ins = inspect_path(f, board("iq-8275-evk"))
    assert ins.kind == "litertlm"
    assert ins.qairt_builds == ["2.44.0.260225"]
    assert ins.npu_only is True
    assert ins.context_size == 4096
    assert ins.declared_size == ins.size == f.stat().st_size
    assert not ins.truncated and ins.problems == []
    sections = ins.details["sections"]
    assert [s["data_type"] for s in sections].count("TFLiteModel") == 2
    npu = [s for s in sections if s["dispatch_ops"]]
    assert npu and npu[0]["model_type"] == "tf_lite_prefill_decode" and npu[0]["backend_constraint"] == "npu"
    assert ins.target_soc == "QCS8275"


def test_other_qairt_build_is_reported_as_found(tmp_path):
    f = make_litertlm(tmp_path / "m.litertlm", qairt="2.45.0.260326")
    assert inspect_path(f).qairt_builds == ["2.45.0.260326"]


def test_cpu_capable_model_is_not_npu_only(tmp_path):
    f = make_litertlm(tmp_path / "m.litertlm", npu_only=False)
    assert inspect_path(f).npu_only is False


def test_sparse_3gb_file_reads_only_kilobytes(tmp_path):
    f = make_litertlm(tmp_path / "gemma.litertlm", pad_to=GEMMA_SIZE)
    info = read_litertlm(f)
    assert info.size == GEMMA_SIZE and not info.truncated
    ops = [op for s in info.sections for op in s.dispatch_ops]
    # the context binary sits at the end of the file, like the real one
    assert min(op.absolute_offset for op in ops) > GEMMA_SIZE - 1024 * 1024
    assert info.qairt_builds == ["2.44.0.260225"]
    assert info.bytes_read < 16 * 1024 * 1024


def test_cli_truncated_file_one_line_exit_1(tmp_path, cli):
    full = make_litertlm(tmp_path / "full.litertlm")
    f = make_litertlm(tmp_path / "cut.litertlm", truncate_to=full.stat().st_size - 5000)
    r = cli("inspect", f)
    assert r.code == 1
    assert len(r.err_lines) == 1 and "truncated" in r.err_lines[0] and "re-download" in r.err_lines[0]


def test_cli_json(tmp_path, cli):
    f = make_litertlm(tmp_path / "m.litertlm")
    r = cli("inspect", f, "--json", "--hash")
    assert r.code == 0
    data = r.json()
    import hashlib

    assert data["qairt_builds"] == ["2.44.0.260225"]
    assert data["sha256"]["m.litertlm"] == hashlib.sha256(f.read_bytes()).hexdigest()


def test_cli_board_mismatch(tmp_path, cli):
    f = make_litertlm(tmp_path / "gemma_qualcomm_qcs8275.litertlm")
    r = cli("inspect", f, "--board", "iq-9075-evk")
    assert r.code == 1 and len(r.err_lines) == 1 and "QCS9075" in r.err


@pytest.mark.parametrize("damage,needle", [
    (lambda b: b"NOTLITER" + b[8:], "not a .litertlm file"),
    (lambda b: b[:24] + struct.pack("<Q", 1 << 40) + b[32:], "corrupt header"),
    (lambda b: b[:32] + b"\xff" * 64 + b[96:], "corrupt header"),
    (lambda b: b"", "not a .litertlm file (file is empty"),
    (lambda b: b"<html>" + b[6:20], "not a .litertlm file (starts with b'<html>"),
])
def test_cli_damaged_files_one_line_exit_2(tmp_path, cli, damage, needle):
    good = make_litertlm(tmp_path / "m.litertlm")
    bad = tmp_path / "bad.litertlm"
    bad.write_bytes(damage(good.read_bytes()))
    with pytest.raises(ArtifactError):
        inspect_path(bad)
    r = cli("inspect", bad)
    assert r.code == 2 and len(r.err_lines) == 1 and needle in r.err


def test_cli_missing_path(tmp_path, cli):
    r = cli("inspect", tmp_path / "nope.litertlm")
    assert r.code == 2 and "no such file" in r.err and len(r.err_lines) == 1


def _root_table(data: bytes) -> int:
    """File offset of the header flatbuffer's root table (its first 4 bytes point at the vtable)."""
    return 32 + struct.unpack_from("<I", data, 32)[0]


@pytest.mark.parametrize("soffset", [0x7FFFFFFF, -0x7FFFFFFF, 0])
def test_cli_corrupt_vtable_offset_one_line_exit_2(tmp_path, cli, soffset):
    good = make_litertlm(tmp_path / "m.litertlm").read_bytes()
    bad = bytearray(good)
    struct.pack_into("<i", bad, _root_table(good), soffset)  # vtable before the file / past it / onto itself
    f = tmp_path / "bad.litertlm"
    f.write_bytes(bytes(bad))
    with pytest.raises(ArtifactError, match="corrupt header flatbuffer"):
        read_litertlm(f)
    r = cli("inspect", f, "--json")
    assert r.code == 2 and len(r.err_lines) == 1 and "corrupt header" in r.err and "re-download" in r.err
    assert r.out == ""


def test_corrupt_header_bytes_give_artifact_error_or_a_report_never_a_crash(tmp_path):
    good = make_litertlm(tmp_path / "m.litertlm").read_bytes()
    header_end = struct.unpack_from("<Q", good, 24)[0]
    rng = random.Random(5)
    f = tmp_path / "fuzz.litertlm"
    outcomes = set()
    for _ in range(150):
        bad = bytearray(good)
        for _ in range(rng.choice((1, 2, 4))):
            bad[rng.randrange(32, header_end)] = rng.randrange(256)
        f.write_bytes(bytes(bad))
        try:
            outcomes.add(("ok", inspect_path(f).kind))
        except ArtifactError as exc:
            assert "\n" not in str(exc) and "->" in str(exc)
            outcomes.add(("error", "corrupt" in str(exc) or "section table" in str(exc) or "truncated" in str(exc)))
    assert ("error", False) not in outcomes  # every refusal says what is wrong


def test_llm_metadata_is_read_without_protobuf(tmp_path):
    from litert_lm_builder import litertlm_builder as lb
    from litert_lm_builder.runtime.proto import llm_metadata_pb2

    from provisioner.sim.synthetic_models import tflite_plain

    meta = llm_metadata_pb2.LlmMetadata()
    meta.max_num_tokens = 32768
    meta.start_token.token_ids.ids.append(2)
    meta.llm_model_type.gemma4.SetInParent()
    (tmp_path / "meta.pb").write_bytes(meta.SerializeToString())
    (tmp_path / "chat.jinja").write_text("{% for m in messages %}{{ m.content }}{% endfor %}")
    (tmp_path / "tok.json").write_text("{}")
    (tmp_path / "m.tflite").write_bytes(tflite_plain())
    b = lb.LitertLmFileBuilder()
    b.add_system_metadata(lb.Metadata(key="layers", value=35, dtype=lb.DType.INT32))
    b.add_system_metadata(lb.Metadata(key="scale", value=0.25, dtype=lb.DType.FLOAT32))
    b.add_llm_metadata(str(tmp_path / "meta.pb"), jinja_prompt_template_path=str(tmp_path / "chat.jinja"),
                       min_runtime_version="0.9.0", supports_thinking=True)
    b.add_hf_tokenizer(str(tmp_path / "tok.json"))
    b.add_tflite_model(str(tmp_path / "m.tflite"), lb.TfLiteModelType.PREFILL_DECODE, backend_constraint="cpu")
    f = tmp_path / "gemma4.litertlm"
    with open(f, "wb") as out:
        b.build(out)
    info = read_litertlm(f)
    assert info.llm_metadata == {"max_num_tokens": 32768, "model_type": "gemma4", "supports_thinking": True,
                                 "min_runtime_version": "0.9.0", "has_jinja_template": True}
    assert info.context_size == 32768
    assert info.system_metadata["layers"] == 35 and info.system_metadata["scale"] == 0.25
    assert info.npu_only is False and info.qairt_builds == []


def test_garbled_llm_metadata_is_a_note_not_a_failure(tmp_path):
    f = make_litertlm(tmp_path / "m_qualcomm_qcs8275.litertlm")
    meta = next(s for s in read_litertlm(f).sections if s.data_type == "LlmMetadataProto")
    data = bytearray(f.read_bytes())
    data[meta.begin:meta.end] = b"\x0f" * (meta.end - meta.begin)  # wire type 7: not protobuf
    f.write_bytes(bytes(data))
    ins = inspect_path(f)
    assert ins.context_size is None and ins.qairt_builds == ["2.44.0.260225"]
    assert any("LLM metadata does not parse" in w for w in ins.warnings)


def test_large_op_table_is_read_in_growing_windows(tmp_path):
    f = make_litertlm(tmp_path / "m.litertlm", n_dispatch_ops=1500, pad_to=GEMMA_SIZE)
    info = read_litertlm(f)
    npu = [s for s in info.sections if s.dispatch_ops]
    assert npu[0].begin + 64 * 1024 < min(op.absolute_offset for op in npu[0].dispatch_ops)
    assert len(npu[0].dispatch_ops) == 1500 and npu[0].note is None
    assert info.qairt_builds == ["2.44.0.260225"]
    assert info.bytes_read < 16 * 1024 * 1024


@pytest.mark.parametrize("keep,needs", [(16, "32"), (5, "32"), (31, "32"), (200, "header_end")])
def test_cli_file_cut_in_the_header_says_truncated_exit_1(tmp_path, cli, keep, needs):
    good = make_litertlm(tmp_path / "m.litertlm").read_bytes()
    needs = str(struct.unpack_from("<Q", good, 24)[0]) if needs == "header_end" else needs
    bad = tmp_path / "cut.litertlm"
    bad.write_bytes(good[:keep])
    r = cli("inspect", bad, "--board", "iq-8275-evk")
    assert r.code == 1 and len(r.err_lines) == 1
    assert f"truncated: {keep} bytes, header needs {needs} -> re-download" in r.err and "magic" not in r.err


def test_npu_model_is_fit_with_a_cpu_embedder_beside_it(tmp_path, cli):
    f = make_litertlm(tmp_path / "m_qualcomm_qcs8275.litertlm", npu_only=False)
    r = cli("inspect", f, "--board", "iq-8275-evk")
    assert r.code == 0 and "can run on iq-8275-evk" in r.out


def test_context_binary_without_build_id_cannot_run(tmp_path, cli):
    f = make_litertlm(tmp_path / "m.litertlm")
    data = f.read_bytes()
    assert data.count(b"v2.44.0.260225") == 1
    f.write_bytes(data.replace(b"v2.44.0.260225", b"x" * 14))
    ins = inspect_path(f, board("iq-8275-evk"))
    assert ins.qairt_builds == [] and len(ins.problems) == 1
    assert ins.problems[0].startswith("NPU model without a QNN context binary build id (2 DISPATCH_OP(s)")
    r = cli("inspect", f, "--board", "iq-8275-evk")
    assert r.code == 1 and len(r.err_lines) == 1 and "qnn-context-binary-utility" in r.err
