"""Fixtures shared by the layer tests that run bitbake's real parser."""

from __future__ import annotations

import logging

import pytest

from tests.image.bbparse import BitbakeErrors


@pytest.fixture
def fatal():
    """bitbake's error and fatal log lines of one test (``bb.fatal`` logs, then raises)."""
    h = BitbakeErrors()
    logger = logging.getLogger("BitBake")
    logger.addHandler(h)
    yield h
    logger.removeHandler(h)
