"""Shared test helpers."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from provisioner import tools

ROOT = Path(__file__).resolve().parent.parent
#: real upstream files (kas fragments, ptool bundles, LiteRT-LM test data, tiny real models), kept beside
#: the checkout and never copied into it; its README.md names each file's repository and commit
REALWORLD = ROOT.parent / "shared" / "realworld"
#: set (by .ci/run) where the folder must be there: a missing one fails the test instead of skipping it
REQUIRE_REALWORLD = "EDGE_LLM_REQUIRE_REALWORLD"


def need_realworld(*parts: str) -> Path:
    """``../shared/realworld/<parts>``, or a one-line skip naming the missing folder and how to get it.

    Every test on real upstream files gets it here, so a clone of the repository alone runs the rest of the
    suite; CI sets $EDGE_LLM_REQUIRE_REALWORLD=1, where the same line fails the test: CI runs them all.
    """
    path = REALWORLD.joinpath(*parts)
    if path.exists():
        return path.resolve()
    what = f" ({'/'.join(parts)})" if parts else ""
    line = (f"{REALWORLD.resolve()} is missing{what}: put the real-world files (public upstream, listed in its "
            f"README.md) beside the checkout as ../shared/realworld, as CI does")
    if os.environ.get(REQUIRE_REALWORLD) == "1":
        pytest.fail(line, pytrace=False)
    pytest.skip(line)


def pytest_configure(config: pytest.Config) -> None:
    """Put our dependencies' scripts directory first on PATH, by the tool's own rule (:func:`tools.scripts_dirs`).

    ``.venv/bin/python -m pytest`` in a new shell leaves ``.venv/bin`` off PATH, yet tests run ``kas``,
    ``ansible-playbook``, ``ansible-lint`` and ``oelint-adv`` (installed there by pip) by name, also in the
    children they start. Done once here, so a missing one fails its test instead of skipping it.
    """
    dirs = [str(d) for d in tools.scripts_dirs()]
    rest = [p for p in os.environ.get("PATH", "").split(os.pathsep) if p and p not in dirs]
    os.environ["PATH"] = os.pathsep.join(dirs + rest)


@pytest.fixture
def repo_root() -> Path:
    return ROOT


@pytest.fixture(scope="session")
def realworld() -> Path:
    """The real files nobody on this project wrote (skipped with one line where absent)."""
    return need_realworld()
