"""The LiteRT-LM smoke run (fleet verify, benchmark, the update-os gate) laid out so the NPU can start.

litert_lm_main at the pin sets no dispatch library directory and has no flag for one; with the layer's
patch 0001, LiteRT-LM then hands LiteRT the directory of ``--model_path``, and LiteRT looks for
libLiteRtDispatch*.so only there. These tests read that rule from the pinned files
(``../shared/realworld/upstream/LiteRT-LM-cbf463d/``, google-ai-edge/LiteRT-LM @ cbf463d97fa3) and run the
smoke spec through the board-side runner, so a layout a real board would refuse fails here.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from provisioner import catalog
from provisioner.contracts import board as on_board
from provisioner.contracts.inventory import ModelVars
from provisioner.fleet.shared.onboard import serve
from provisioner.fleet.shared.serve_config import smoke_run
from tests.conftest import need_realworld

REPO = Path(__file__).resolve().parents[2]
PATCH_1 = (REPO / "layers/meta-edge-llm/recipes-ai/litert-lm/files"
           / "0001-litert_util-use-the-dispatch-library-dir-on-Linux.patch")
COLLECTIONS = REPO / "playbooks/collections"
GEMMA = ModelVars(name="gemma-4-e2b", kind="litertlm", runtime="litert_lm", qairt="2.44.0.260225",
                  chat_template="gemma", file="gemma-4-E2B-it.litertlm")

# Stands in for litert_lm_main on this machine: prints the dispatch libraries the pinned rule finds for
# the --model_path it is given, and writes beside the model what the real runtime writes there.
FAKE_MAIN = f"""
import os, sys
sys.path.insert(0, {str(REPO)!r})
from provisioner.sim import litert_main as rt
argv = sys.argv[1:]
model = argv[argv.index("--model_path") + 1]
assert os.path.isfile(model), model
where = rt.dispatch_lib_dir(model)
open(model + ".xnnpack_cache", "w").write("cache")
print("\\n".join(os.path.basename(p) for p in (rt.find_dispatch_libs(where) if where else [])))
"""


@pytest.fixture(scope="module")
def upstream() -> Path:
    """The pinned tree's real files (skipped where ../shared/realworld is not there)."""
    return need_realworld("upstream", "LiteRT-LM-cbf463d")


def _run_one():
    if str(COLLECTIONS) not in sys.path:
        sys.path.insert(0, str(COLLECTIONS))
    from ansible_collections.edge_llm.fleet.plugins.module_utils.probe import run_one
    return run_one


def _rooted(value, root: Path):
    """``value`` with every board path moved under ``root`` (lists and dicts, keys included)."""
    if isinstance(value, str):
        return value.replace("/opt/", f"{root}/opt/")
    if isinstance(value, list):
        return [_rooted(v, root) for v in value]
    if isinstance(value, dict):
        return {_rooted(k, root): _rooted(v, root) for k, v in value.items()}
    return value


def test_smoke_run_gives_the_npu_its_dispatch_library(tmp_path):
    """On a board laid out as the fleet installs it, the smoke run's --model_path has the dispatch library
    beside it, and what the runtime writes beside the model stays out of the fleet's model directory."""
    board = catalog.board("iq-8275-evk")
    spec = _rooted(smoke_run(board, GEMMA, "Explain gravity.", None), tmp_path)
    current = Path(_rooted(on_board.model_current(GEMMA.name), tmp_path))
    current.mkdir(parents=True)
    (current / GEMMA.file).write_bytes(b"model")
    lib = Path(_rooted(f"{on_board.litert_dir()}/lib/libLiteRtDispatch_Qualcomm.so", tmp_path))
    lib.parent.mkdir(parents=True)
    lib.write_bytes(b"dispatch")
    spec["argv"] = [sys.executable, "-c", FAKE_MAIN, *spec["argv"][1:]]

    result = _run_one()(spec)

    assert result["rc"] == 0, result
    assert result["stdout"].split() == ["libLiteRtDispatch_Qualcomm.so"]
    assert sorted(p.name for p in current.iterdir()) == [GEMMA.file]


def test_smoke_argv_uses_only_flags_litert_lm_main_has_at_the_pin(upstream):
    source = (upstream / "runtime/engine/litert_lm_main.cc").read_text(encoding="utf-8")
    flags = set(re.findall(r"ABSL_FLAG\(\s*[\w:]+\s*,\s*(\w+)\s*,", source))
    assert flags == {"backend", "model_path", "input_prompt", "input_prompt_file"}
    argv = smoke_run(catalog.board("iq-8275-evk"), GEMMA, "Explain gravity.", 64)["argv"]
    used = {a[2:].split("=", 1)[0] for a in argv[1:] if a.startswith("--")}
    assert used and used <= flags


def test_a_max_tokens_flag_litert_lm_main_does_not_have_is_refused():
    cfg = {"runtime": "litert_lm", "model_dir": "/m", "model_file": "x.litertlm", "executable": "/bin/litert_lm_main",
           "max_tokens_flag": "--max_num_tokens"}
    with pytest.raises(ValueError, match="litert_lm_main has no --max_num_tokens flag"):
        serve.build_argv(cfg, "hi", "/tmp/w", 64)


def test_the_pinned_sources_take_the_dispatch_dir_from_the_model_path(upstream):
    """The premise the simulator's stand-in models (provisioner.sim.litert_main.dispatch_lib_dir), held to the real
    files: litert_lm_main never sets a dispatch directory, and litert_util.cc's fallback - the block patch 0001
    builds on Linux - is parent_path() of the model path."""
    main = (upstream / "runtime/engine/litert_lm_main.cc").read_text(encoding="utf-8")
    assert "dispatch" not in main.lower()
    util = (upstream / "runtime/util/litert_util.cc").read_text(encoding="utf-8").splitlines()
    guard = util.index("#if defined(__ANDROID__) || defined(__EMSCRIPTEN__)")
    end = util.index("#endif  // defined(__ANDROID__) || defined(__EMSCRIPTEN__)")
    fallback = "\n".join(util[guard:end])
    assert "GetModelAssets().GetPath()" in fallback and "path.parent_path().string()" in fallback
    assert "kDispatchLibraryDir" in fallback
    assert f"-{util[guard]}" in PATCH_1.read_text(encoding="utf-8")


def test_the_stand_in_finds_the_dispatch_library_only_beside_the_model(tmp_path):
    from provisioner.sim import litert_main as rt
    models, lib = tmp_path / "models", tmp_path / "lib"
    models.mkdir()
    lib.mkdir()
    (models / "m.litertlm").write_bytes(b"m")
    (lib / rt.DISPATCH_LIB).write_bytes(b"d")
    assert rt.find_dispatch_libs(rt.dispatch_lib_dir(str(models / "m.litertlm")) or "") == []
    assert rt.dispatch_lib_dir("m.litertlm") is None            # an empty parent sets nothing
    run = tmp_path / "run"
    run.mkdir()
    (run / "m.litertlm").symlink_to(models / "m.litertlm")
    (run / rt.DISPATCH_LIB).symlink_to(lib / rt.DISPATCH_LIB)
    assert rt.find_dispatch_libs(rt.dispatch_lib_dir(str(run / "m.litertlm")) or "") == [str(run / rt.DISPATCH_LIB)]
    assert rt.dispatch_lib_dir(str(models / "m.litertlm"), explicit=str(lib)) == str(lib)
