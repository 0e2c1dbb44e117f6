"""Fixtures shared by the layer tests that run bitbake's real parser."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from tests.image import bbparse
from tests.image.bbparse import BitbakeErrors


@pytest.fixture
def fatal():
    """bitbake's error and fatal log lines of one test (``bb.fatal`` logs, then raises)."""
    h = BitbakeErrors()
    logger = logging.getLogger("BitBake")
    logger.addHandler(h)
    yield h
    logger.removeHandler(h)


@pytest.fixture(scope="module")
def distro_layer() -> Path:
    """meta-qcom-distro's image stack as the real recipes set IMAGE_FEATURES and the root password."""
    return bbparse.QCOM_DISTRO_FIXTURE
