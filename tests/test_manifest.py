"""Manifest validation: every problem at once, with its location and a fix."""

from pathlib import Path

import pytest

from provisioner.errors import ManifestError
from provisioner.manifest import load_manifest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def test_examples_are_valid():
    m = load_manifest(EXAMPLES / "gemma4-e2b-iq8275.yaml")
    assert m.board.id == "iq-8275-evk" and m.qairt == ("2.44.0.260225",)
    assert m.image.download_mode == 0 and m.image.memlock == "unlimited"
    # floor derived from the catalog's ~32 tok/s, so a no-burst board (~16) fails
    assert 16 < m.min_decode_tok_s(m.models[0]) < 32
    n = load_manifest(EXAMPLES / "nemotron-nano-iq9075.yaml")
    assert n.models[0].runtime == "genie"


def _write(tmp_path, text):
    p = tmp_path / "m.yaml"
    p.write_text(text)
    return p


def test_reports_all_problems_with_locations(tmp_path):
    p = _write(tmp_path, """
manifest: 1
release: r1
board: iq-8275-evk
qairt: ["2.44.0.260225"]
modles: []
models:
  - name: gemma-4-e2b
    kind: litertlm
    path: g.litertlm
    qairt: "2.45.0.260326"
image:
  download_mode: 3
""")
    with pytest.raises(ManifestError) as exc:
        load_manifest(p)
    where = {pr.location for pr in exc.value.problems}
    assert "modles" in where  # typo rejected
    assert "models[0].qairt" in where  # model QAIRT vs manifest pin
    assert "image.download_mode" in where
    typo = next(pr for pr in exc.value.problems if pr.location == "modles")
    assert "models" in typo.fix


def test_yaml_syntax_error_names_line(tmp_path):
    p = _write(tmp_path, "release: r1\nboard: [iq-8275-evk\n")
    with pytest.raises(ManifestError, match="line 3"):
        load_manifest(p)


@pytest.mark.parametrize("text,needle", [
    ("", "empty"),
    ("release: r1\nboard: rb5\nqairt: ['2.44.0.260225']\nmodels: [{name: a, kind: litertlm, path: a, "
     "qairt: '2.44.0.260225'}]\n", "unknown board"),
    ("release: r1\nboard: iq-8275-evk\nqairt: ['2.44']\nmodels: [{name: a, kind: litertlm, path: a, "
     "qairt: '2.44'}]\n", "full QAIRT build id"),
])
def test_bad_input_one_line(tmp_path, text, needle):
    with pytest.raises(ManifestError, match=needle):
        load_manifest(_write(tmp_path, text))


def test_production_image_refuses_debug_login(tmp_path):
    p = _write(tmp_path, """
release: r1
board: iq-8275-evk
qairt: ["2.44.0.260225"]
models: [{name: g, kind: litertlm, path: g.litertlm, qairt: "2.44.0.260225"}]
image: {variant: production, root_login: debug}
""")
    with pytest.raises(ManifestError, match="production image"):
        load_manifest(p)


def test_missing_file_is_one_line(tmp_path):
    with pytest.raises(ManifestError, match="no such file"):
        load_manifest(tmp_path / "nope.yaml")


# --- through the CLI: `provisioner check` (exit code, stderr, nothing else) ---

GOOD = """release: r1
board: iq-8275-evk
qairt: ["2.44.0.260225"]
models: [{name: g, kind: litertlm, path: g.litertlm, qairt: "2.44.0.260225"}]
"""


def _check(capsys, *args):
    from provisioner.cli import main

    capsys.readouterr()
    code = main(["check", *map(str, args)])
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return code, out, [line for line in err.splitlines() if line.strip()]


@pytest.mark.parametrize("text,location,needle", [
    (None, None, "no such file"),
    ("", None, "manifest is empty"),
    ("release: r1\nboard: [iq-8275-evk\n", None, "line 3"),
    (GOOD.replace("iq-8275-evk", "rb5"), "board", "unknown board"),
    (GOOD.replace('["2.44.0.260225"]', '["2.44"]'), "qairt[0]", "not a full QAIRT build id"),
    (GOOD.replace('qairt: "2.44.0.260225"}', 'qairt: "2.45.0.260326"}'), "models[0].qairt", "manifest pins"),
])
def test_cli_bad_manifest(tmp_path, capsys, text, location, needle):
    p = tmp_path / "m.yaml"
    if text is not None:
        p.write_text(text)
    code, out, err = _check(capsys, p, "--no-files")
    # unreadable: nothing could be checked (2); read and found unfit, each problem located (1)
    assert code == (2 if location is None else 1) and out == ""
    assert err[0].startswith("error: ")
    if location is None:
        assert len(err) == 1 and needle in err[0]
    else:
        line = next(line for line in err if line.strip().startswith(f"{location}:"))
        assert needle in line and " -> " in line  # what is wrong -> what to do, on one line


def test_cli_good_manifest_prints_plan_summary(tmp_path, capsys):
    p = tmp_path / "m.yaml"
    p.write_text(GOOD)
    code, out, err = _check(capsys, p, "--no-files")
    assert code == 0 and "m.yaml: OK" in out and "iq-8275-evk" in out and "2.44.0.260225" in out


def _alias_bomb() -> str:
    """The classic "billion laughs": nine levels of ten aliases each (10^9 strings if expanded)."""
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for prev, name in zip("abcdefgh", "bcdefghi", strict=True):
        lines.append(f"{name}: &{name} [" + ",".join([f"*{prev}"] * 9) + "]")
    return "\n".join(lines) + "\n"


def test_yaml_alias_bomb_is_refused_at_its_first_anchor(tmp_path):
    p = _write(tmp_path, _alias_bomb())
    assert p.stat().st_size < 2500
    with pytest.raises(ManifestError) as exc:
        load_manifest(p)
    msg = str(exc.value)
    assert "\n" not in msg and "line 1, column 4" in msg and "anchor &a" in msg


def test_yaml_alias_refused_with_location(tmp_path):
    p = _write(tmp_path, "release: r1\nboard: iq-8275-evk\nqli: *board\n")
    with pytest.raises(ManifestError, match=r"line 3, column 6: YAML alias \*board is not accepted"):
        load_manifest(p)


_BASE = """
release: r1
board: iq-8275-evk
qairt: ["2.44.0.260225"]
models: [{name: g, kind: litertlm, path: g.litertlm, qairt: "2.44.0.260225"}]
"""


def test_inference_user_root_is_refused(tmp_path):
    p = _write(tmp_path, _BASE + "image: {variant: debug, inference_user: root}\n")
    with pytest.raises(ManifestError) as exc:
        load_manifest(p)
    assert [pr.location for pr in exc.value.problems] == ["image.inference_user"]
    assert "system account" in str(exc.value)


def test_ssh_key_with_raw_newline_is_refused(tmp_path):
    # a YAML double-quoted "\n" is a real newline: it would end the local.conf value mid-key
    p = _write(tmp_path, _BASE + 'image: {root_login: keys-only, ssh_authorized_keys: '
                                 '["ssh-ed25519 AAAAC3Nz ops@a\\nEVIL = \\"1\\""]}\n')
    with pytest.raises(ManifestError) as exc:
        load_manifest(p)
    assert [pr.location for pr in exc.value.problems] == ["image.ssh_authorized_keys[0]"]
    assert "line break" in str(exc.value)


def test_yaml_key_given_twice_is_refused_with_its_line(tmp_path):
    # PyYAML keeps the last value silently: the first inference_user would be ignored
    p = _write(tmp_path, _BASE + "image:\n  inference_user: root\n  variant: debug\n  inference_user: llm\n")
    with pytest.raises(ManifestError, match=r"line 9, column 3: key 'inference_user' is given twice"):
        load_manifest(p)
