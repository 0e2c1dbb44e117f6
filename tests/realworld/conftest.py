"""Fixtures for tests on real upstream files (``../shared/realworld``, see its README.md).

Every test here reads them: each skips with the one line of :func:`tests.conftest.need_realworld` where
the folder is absent (and fails there under CI's $EDGE_LLM_REQUIRE_REALWORLD=1).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.artifacts.conftest import CliResult, cli  # noqa: F401  (the same in-process CLI runner)


@pytest.fixture(autouse=True)
def _on_real_files(realworld: Path) -> Path:
    return realworld
