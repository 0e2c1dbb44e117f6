"""The on-board HTTP service (``edge-llm-serve``), loaded from the layer for the controller's use.

The program runs on the board as ``/usr/bin/edge-llm-serve``; its one source is the meta-edge-llm
recipe's ``files/edge-llm-serve``, because bitbake sees only the layer and must build it from there.
The controller imports the same file (its chat templates, argv builder, output parsers and
coherence test) so the service, the fleet's smoke inference and the benchmark read the runtimes'
output the same way, and the launch playbook copies this very file to boards without the package.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
from types import ModuleType

from provisioner import shipped

SERVE_SCRIPT = shipped.layer_dir() / "recipes-ai" / "edge-llm-serve" / "files" / "edge-llm-serve"
_MODULE_NAME = "provisioner.fleet._edge_llm_serve"


def _load() -> ModuleType:
    """Import SERVE_SCRIPT (a file without ``.py``) once, registered so dataclasses resolve it."""
    if _MODULE_NAME in sys.modules:
        return sys.modules[_MODULE_NAME]
    loader = importlib.machinery.SourceFileLoader(_MODULE_NAME, str(SERVE_SCRIPT))
    spec = importlib.util.spec_from_loader(_MODULE_NAME, loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[_MODULE_NAME] = module
    loader.exec_module(module)
    return module


serve = _load()
