"""The on-board HTTP service (the package ``edge_llm_serve``), imported from the layer for the controller's use.

Its one source is the meta-edge-llm recipe's ``files/`` directory (``edge_llm_serve/`` and the small entry
point ``edge-llm-serve``), because bitbake sees only the layer and must build the image from there; the
recipe installs the package into python3's site-packages and the entry point as ``/usr/bin/edge-llm-serve``.
The controller imports the same package (its chat templates, argv builder, output parsers and coherence
test), so the service, the fleet's smoke inference and the benchmark read the runtimes' output one way.

Boards without the image's package (or with an older one) get :func:`~provisioner.shipped.serve_program`
from ``fleet launch``: the whole package and its entry point as one Python zip application at
``/usr/bin/edge-llm-serve`` (the interpreter runs a zip's ``__main__.py`` with the archive first on
sys.path: docs.python.org/3/library/zipapp.html, "The Python Zip Application Archive Format"). One file
is replaced in one rename, so a board never runs half of an old package and half of a new one, and its
bytes are a function of the package's file names and contents only, so a launch that changes nothing
writes nothing.
"""

from __future__ import annotations

import sys
from pathlib import Path
from types import ModuleType

from provisioner import shipped
from provisioner.shipped import serve_program

SERVE_FILES = shipped.serve_dir()
SERVE_SCRIPT = SERVE_FILES / "edge-llm-serve"      # the entry point, as /usr/bin/edge-llm-serve on an image
SERVE_PACKAGE = SERVE_FILES / "edge_llm_serve"
program_bytes = serve_program                      # what ``fleet launch`` writes to /usr/bin/edge-llm-serve


def _import_package() -> ModuleType:
    """Import the layer's package once, with the layer's ``files/`` on sys.path (nothing else lives there).

    No ``__pycache__`` is written into the layer (or a read-only install): bitbake and the launch's zip
    read the sources only, and a stale cache there would only confuse a reader.
    """
    if str(SERVE_FILES) not in sys.path:
        sys.path.append(str(SERVE_FILES))
    saved, sys.dont_write_bytecode = sys.dont_write_bytecode, True
    try:
        import edge_llm_serve
    finally:
        sys.dont_write_bytecode = saved
    if Path(edge_llm_serve.__file__).resolve().parent != SERVE_PACKAGE.resolve():
        raise ImportError(f"edge_llm_serve was imported from {edge_llm_serve.__file__}, not from {SERVE_PACKAGE}")
    return edge_llm_serve


serve = _import_package()
