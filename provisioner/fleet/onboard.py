"""The on-board HTTP service (``edge-llm-serve``), loaded from the layer for the controller's use.

The program runs on the board as ``/usr/bin/edge-llm-serve``; its one source is the meta-edge-llm
recipe's ``files/edge-llm-serve``, because bitbake sees only the layer and must build it from there.
The controller imports the same file (its chat templates, argv builder, output parsers and
coherence test) so the service, the fleet's smoke inference and the benchmark read the runtimes'
output the same way, and the launch playbook copies this very file to boards without the package.
"""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

from provisioner import shipped

SERVE_SCRIPT = shipped.layer_dir() / "recipes-ai" / "edge-llm-serve" / "files" / "edge-llm-serve"
_MODULE_NAME = "provisioner.fleet._edge_llm_serve"


def _load() -> ModuleType:
    """Import SERVE_SCRIPT (a file without ``.py``) once, registered so dataclasses resolve it.

    Compiled in memory: no ``__pycache__`` is written into the layer (or a read-only install).
    """
    if _MODULE_NAME in sys.modules:
        return sys.modules[_MODULE_NAME]
    spec = importlib.util.spec_from_loader(_MODULE_NAME, loader=None, origin=str(SERVE_SCRIPT))
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    module.__file__ = str(SERVE_SCRIPT)
    sys.modules[_MODULE_NAME] = module
    code = compile(SERVE_SCRIPT.read_text(encoding="utf-8"), str(SERVE_SCRIPT), "exec")
    exec(code, module.__dict__)  # noqa: S102 - our own file, shipped in the layer
    return module


serve = _load()
