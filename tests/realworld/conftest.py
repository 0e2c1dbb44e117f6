"""Fixtures for tests on real upstream files (``../shared/realworld``, see its README.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.artifacts.conftest import CliResult, cli  # noqa: F401  (the same in-process CLI runner)

REALWORLD = Path(__file__).resolve().parents[2] / ".." / "shared" / "realworld"


@pytest.fixture(scope="session")
def realworld() -> Path:
    """The real files nobody on this project wrote; CI has them at the same place."""
    if not REALWORLD.is_dir():
        pytest.fail(f"{REALWORLD.resolve()} is missing: the real-world tests need ../shared/realworld")
    return REALWORLD.resolve()
