"""One exit-code rule for every command: 0 ok, 1 checked and unfit, 2 could not do it, 130, 70.

Scripts and CI jobs on a factory line branch on these codes ("re-flash" vs "fix the station"), so
each checking command is run here twice: once on a subject it can read and must reject (1), and once
on input it cannot read at all (2). The README states the rule; a test holds the two equal.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from provisioner import errors
from provisioner.cli import main
from provisioner.sim.synthetic_models import make_litertlm

ROOT = Path(__file__).resolve().parents[1]


def _run(capsys, *argv: str) -> tuple[int, str]:
    capsys.readouterr()
    code = main([str(a) for a in argv])
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return code, err


def _manifest(tmp_path: Path, board: str) -> Path:
    p = tmp_path / f"m-{board}.yaml"
    p.write_text(f"release: r1\nboard: {board}\nqairt: ['2.44.0.260225']\n"
                 "models: [{name: g, kind: litertlm, path: g.litertlm, qairt: '2.44.0.260225'}]\n")
    return p


def test_readme_states_the_rule_errors_py_implements():
    line = next(ln for ln in (ROOT / "README.md").read_text().splitlines() if "Exit codes" in ln)
    rule = line.split("):", 1)[1]
    stated = {int(code): what for code, what in re.findall(r"(\d+) ([a-z][a-z ]*[a-z])", rule)}
    assert stated == {errors.EXIT_OK: "ok", errors.EXIT_UNFIT: "checked and unfit",
                      errors.EXIT_BAD_INPUT: "bad input", errors.EXIT_INTERRUPTED: "interrupted",
                      errors.EXIT_INTERNAL: "internal error"}


def test_check_unfit_manifest_is_1_unreadable_is_2(tmp_path, capsys):
    make_litertlm(tmp_path / "g.litertlm")
    assert _run(capsys, "check", _manifest(tmp_path, "iq-8275-evk"))[0] == 0
    code, err = _run(capsys, "check", _manifest(tmp_path, "rb5"))
    assert code == 1 and "unknown board" in err
    code, err = _run(capsys, "check", tmp_path / "missing.yaml")
    assert code == 2 and "no such file" in err


def test_inspect_unfit_model_is_1_missing_file_is_2(tmp_path, capsys):
    model = make_litertlm(tmp_path / "g.litertlm")
    assert _run(capsys, "inspect", model, "--board", "iq-8275-evk")[0] == 0
    cut = make_litertlm(tmp_path / "cut.litertlm", truncate_to=model.stat().st_size - 100)
    code, err = _run(capsys, "inspect", cut, "--board", "iq-8275-evk")
    assert code == 1 and "cannot run on iq-8275-evk" in err
    assert _run(capsys, "inspect", tmp_path / "none.litertlm")[0] == 2


def test_preflight_unfit_bundle_is_1_missing_bundle_is_2(tmp_path, capsys):
    from tests.station.conftest import _release

    rel = _release(tmp_path, "gemma4-e2b-iq8275.yaml", "gemma-4-e2b")
    assert _run(capsys, "station", "preflight", rel)[0] == 0
    code, err = _run(capsys, "station", "preflight", rel, "--board", "iq-9075-evk")
    assert code == 1 and "release is for iq-8275-evk" in err
    assert _run(capsys, "station", "preflight", tmp_path / "nowhere")[0] == 2


def test_usage_errors_are_2(capsys):
    assert _run(capsys, "no-such-command")[0] == 2
    assert _run(capsys, "check", "--no-such-option")[0] == 2


@pytest.mark.parametrize("exc,code,needle", [
    (KeyboardInterrupt(), errors.EXIT_INTERRUPTED, "interrupted"),
    (RuntimeError("boom"), errors.EXIT_INTERNAL, "internal error: RuntimeError: boom"),
])
def test_interrupt_and_bug_have_their_own_codes(monkeypatch, capsys, exc, code, needle):
    import provisioner.cli.boards as boards

    def explode(*_a, **_k):
        raise exc

    monkeypatch.setattr(boards.command, "callback", explode)
    got, err = _run(capsys, "boards")
    assert got == code and needle in err and err.strip().count("\n") == 0
