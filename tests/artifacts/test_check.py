"""`provisioner check`: manifest vs the model files on disk, every problem at once."""

from __future__ import annotations

import hashlib
from pathlib import Path

from provisioner.check import check_manifest, run_check
from provisioner.manifest import load_manifest
from provisioner.sim.synthetic_models import make_genie_bundle, make_litertlm

GEMMA = "gemma-4-E2B-it_qualcomm_qcs8275.litertlm"


def gemma_manifest(tmp_path: Path, *, sha: str | None = None, size: int | None = None,
                   qairt: str = "2.44.0.260225") -> Path:
    extra = ""
    if sha:
        extra += f"\n    sha256: '{sha}'"
    if size:
        extra += f"\n    size: {size}"
    p = tmp_path / "gemma.yaml"
    p.write_text(f"""
release: gemma-r1
board: iq-8275-evk
qairt: ['{qairt}']
models:
  - name: gemma-4-e2b
    kind: litertlm
    url: https://example.invalid/{GEMMA}
    qairt: '{qairt}'{extra}
build:
  dl_dir: dl
""")
    return p


def genie_manifest(tmp_path: Path, board: str = "iq-9075-evk") -> Path:
    p = tmp_path / "genie.yaml"
    p.write_text(f"""
release: nemo-r1
board: {board}
qairt: ['2.45.0.260326']
models:
  - name: nemotron
    kind: genie
    path: bundle
    qairt: '2.45.0.260326'
""")
    return p


def test_downloaded_model_matching_manifest_passes(tmp_path, cli):
    f = make_litertlm(tmp_path / "dl" / GEMMA)
    m = gemma_manifest(tmp_path, sha=hashlib.sha256(f.read_bytes()).hexdigest(), size=f.stat().st_size)
    assert check_manifest(load_manifest(m)) == []
    r = cli("check", m)
    assert r.code == 0 and "gemma.yaml: OK" in r.out
    r = cli("check", m, "--json")
    assert r.code == 0
    model = r.json()["models"][0]
    assert model["state"] == "checked" and model["sha256"] == hashlib.sha256(f.read_bytes()).hexdigest()
    assert model["inspection"]["qairt_builds"] == ["2.44.0.260225"]


def test_model_compiled_for_other_qairt(tmp_path, cli):
    make_litertlm(tmp_path / "dl" / GEMMA, qairt="2.45.0.260326")
    m = gemma_manifest(tmp_path)
    problems = check_manifest(load_manifest(m))
    assert [p.location for p in problems] == ["models[0].qairt"]
    assert "2.45.0.260326" in problems[0].message and "2.45.0.260326" in problems[0].fix
    r = cli("check", m)
    assert r.code == 1 and "models[0].qairt" in r.err


def test_all_problems_at_once(tmp_path, cli):
    full = make_litertlm(tmp_path / "full.litertlm").stat().st_size
    # cut the tail of the context binary: the build id near its start is still readable
    make_litertlm(tmp_path / "dl" / GEMMA, qairt="2.45.0.260326", truncate_to=full - 100)
    m = gemma_manifest(tmp_path, sha="cd" * 32, size=3_294_593_024)
    r = cli("check", m, "--json")
    assert r.code == 1
    where = [p["location"] for p in r.json()["problems"]]
    assert {"models[0].qairt", "models[0].url", "models[0].size", "models[0].sha256"} <= set(where)
    truncated = next(p for p in r.json()["problems"] if p["location"] == "models[0].url")
    assert "truncated" in truncated["message"] and truncated["fix"]


def test_no_files_skips_model_reads(tmp_path, cli):
    make_litertlm(tmp_path / "dl" / GEMMA, qairt="2.45.0.260326")
    r = cli("check", gemma_manifest(tmp_path), "--no-files")
    assert r.code == 0 and r.out.startswith("gemma.yaml: OK")
    assert cli("check", gemma_manifest(tmp_path), "--no-files", "--json").json()["models"][0]["state"] == "skipped"


def test_not_downloaded_is_a_warning(tmp_path, cli):
    r = cli("check", gemma_manifest(tmp_path))
    assert r.code == 0 and "not downloaded yet" in r.err and "provisioner fetch" in r.err


def test_genie_bundle_vs_board(tmp_path, cli):
    make_genie_bundle(tmp_path / "bundle")
    assert cli("check", genie_manifest(tmp_path)).code == 0
    res = run_check(load_manifest(genie_manifest(tmp_path)))
    assert res.models[0].inspection.soc_model == 77
    # the same bundle in a manifest for the other board (Gemma's QAIRT pin aside)
    r = cli("check", genie_manifest(tmp_path, board="iq-8275-evk"))
    assert r.code == 1 and "soc_model 82" in r.err and "models[0].path" in r.err


def test_generic_soc_model_bundle(tmp_path, cli):
    make_genie_bundle(tmp_path / "bundle", soc_model=0)
    r = cli("check", genie_manifest(tmp_path))
    assert r.code == 1 and "soc_model 0" in r.err and "garbage" in r.err


def test_missing_local_path(tmp_path, cli):
    r = cli("check", genie_manifest(tmp_path))
    assert r.code == 1 and "models[0].path" in r.err and "no such file" in r.err


def test_corrupt_download_is_a_located_problem(tmp_path, cli):
    (tmp_path / "dl").mkdir()
    (tmp_path / "dl" / GEMMA).write_bytes(b"<html>404 Not Found</html>" + b"\0" * 100)
    r = cli("check", gemma_manifest(tmp_path))
    assert r.code == 1
    line = next(line for line in r.err_lines if line.strip().startswith("models[0].url:"))
    assert "not a .litertlm file" in line and " -> " in line
