"""Engines: one per runtime, the model loaded once through the runtime's C API (see :mod:`.cabi`)."""

from __future__ import annotations

from edge_llm_serve.engines.base import Engine
from edge_llm_serve.engines.genie import GenieEngine
from edge_llm_serve.engines.litert import LiteRtLmEngine

ENGINES: dict[str, type[Engine]] = {"litert_lm": LiteRtLmEngine, "genie": GenieEngine}
