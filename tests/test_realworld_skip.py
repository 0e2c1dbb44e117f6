"""Tests on real upstream files skip, with one line, in a clone without them; CI, which has them, runs them all.

The files live beside the checkout (``../shared/realworld``), never in it. One helper
(:func:`tests.conftest.need_realworld`) is the only way a test reaches them, so the line is the same
everywhere and ``.ci/run`` can turn every such skip into a failure ($EDGE_LLM_REQUIRE_REALWORLD=1).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import REQUIRE_REALWORLD, ROOT, need_realworld


def test_a_missing_real_world_file_skips_with_one_line_naming_the_folder(monkeypatch):
    monkeypatch.delenv(REQUIRE_REALWORLD, raising=False)
    with pytest.raises(pytest.skip.Exception) as out:
        need_realworld("no-such-upstream", "file.yml")
    line = str(out.value)
    assert "\n" not in line and "realworld" in line and "no-such-upstream/file.yml" in line
    assert "beside the checkout" in line and "README.md" in line


def test_ci_turns_the_same_skip_into_a_failure(monkeypatch):
    monkeypatch.setenv(REQUIRE_REALWORLD, "1")
    with pytest.raises(pytest.fail.Exception, match="no-such-upstream"):
        need_realworld("no-such-upstream")


def test_ci_requires_them_for_the_readme_test_command():
    lines = [ln.strip() for ln in (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()]
    test_line = lines.index(".venv/bin/python -m pytest -q")
    assert f"export {REQUIRE_REALWORLD}=1" in lines[:test_line]


def test_every_test_reaches_the_real_files_through_the_one_helper():
    """No test builds its own path to ../shared: it would fail or skip in its own words, unseen by CI."""
    helpers = {ROOT / "tests" / "conftest.py", Path(__file__).resolve()}
    own = [f"{p.relative_to(ROOT)}:{n}" for p in sorted((ROOT / "tests").rglob("*.py")) if p not in helpers
           for n, ln in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
           if re.search(r"""["']shared["']""", ln)]
    assert not own, "use tests.conftest.need_realworld / REALWORLD:\n" + "\n".join(own)


def test_the_helper_finds_the_folder_where_ci_keeps_it():
    assert Path(need_realworld.__globals__["REALWORLD"]) == ROOT.parent / "shared" / "realworld"
