"""Where the files this tool ships beside its own package live: the Yocto layer, the kas templates
and the playbooks.

The on-board service's package is here too (:func:`serve_dir`), with what makes it one file for a board
(:func:`serve_program`): the simulator installs that file into virtual boards and ``fleet launch`` pushes it.

In a source checkout (and an editable install) they are ``layers/``, ``kas/`` and ``playbooks/`` beside the
``provisioner`` package. A wheel (``pip install .``, pipx) carries a copy of the three under
``provisioner/_shipped/`` (``setup.py``'s build step puts it there), because a wheel can only hold
files inside its packages. One function per tree, so no module guesses a ``parents[N]``.
"""

from __future__ import annotations

import hashlib
import io
import zipfile
from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent
_CHECKOUT = _PACKAGE.parent
_WHEEL = _PACKAGE / "_shipped"

LAYER_NAME = "meta-edge-llm"
SERVE_PACKAGE = "edge_llm_serve"
SERVE_ENTRY = "edge-llm-serve"
_ZIP_TIME = (1980, 1, 1, 0, 0, 0)                   # the earliest time a zip entry can carry: no build date


def _root(tree: str) -> Path:
    """The directory holding ``tree`` (``layers``, ``kas``, ``playbooks``): the checkout's, else the wheel's."""
    if (_CHECKOUT / tree).is_dir():
        return _CHECKOUT / tree
    return _WHEEL / tree


def layers_dir() -> Path:
    """``layers/`` (meta-edge-llm, the layer bitbake builds from)."""
    return _root("layers")


def layer_dir() -> Path:
    """The meta-edge-llm layer: the one source of everything the image installs."""
    return layers_dir() / LAYER_NAME


def kas_dir() -> Path:
    """``kas/``: the kas file templates render fills in."""
    return _root("kas")


def playbook_dir() -> Path:
    """``playbooks/`` with ansible.cfg, the roles and the edge_llm.fleet collection."""
    return _root("playbooks")


def serve_dir() -> Path:
    """The on-board service's sources in the layer: ``recipes-ai/edge-llm-serve/files`` (package, entry, unit)."""
    return layer_dir() / "recipes-ai" / "edge-llm-serve" / "files"


def serve_package_files() -> list[tuple[str, bytes]]:
    """The package's sources as (path inside the package's parent, bytes), sorted: what the recipe installs."""
    root = serve_dir()
    return sorted((p.relative_to(root).as_posix(), p.read_bytes()) for p in (root / SERVE_PACKAGE).rglob("*.py"))


def serve_package_digest() -> str:
    """sha256 over the sorted file names and contents of the package (each name and content length-prefixed)."""
    h = hashlib.sha256()
    for name, data in serve_package_files():
        raw = name.encode("utf-8")
        h.update(len(raw).to_bytes(4, "big") + raw + len(data).to_bytes(8, "big") + data)
    return h.hexdigest()


def serve_program() -> bytes:
    """``/usr/bin/edge-llm-serve`` as ``fleet launch`` writes it: a zip application of the package.

    A ``#!/usr/bin/env python3`` line, then a stored zip holding the entry point as ``__main__.py`` and the
    package; the archive comment names the package digest, so ``unzip -z`` on a board says which it runs.
    """
    buf = io.BytesIO()
    buf.write(b"#!/usr/bin/env python3\n")
    with zipfile.ZipFile(buf, "a", compression=zipfile.ZIP_STORED) as zf:
        for name, data in [("__main__.py", (serve_dir() / SERVE_ENTRY).read_bytes()), *serve_package_files()]:
            info = zipfile.ZipInfo(name, date_time=_ZIP_TIME)
            info.external_attr = 0o644 << 16
            zf.writestr(info, data)
        zf.comment = f"{SERVE_PACKAGE} sha256:{serve_package_digest()}".encode()
    return buf.getvalue()
