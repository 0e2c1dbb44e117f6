"""`provisioner inspect` on real .litertlm files built with litert-lm-builder."""

from __future__ import annotations

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
    (lambda b: b[:16], "not a .litertlm file"),
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
