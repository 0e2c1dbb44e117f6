"""Where the files this tool ships that are not Python live: the Yocto layer, the kas templates
and the playbooks.

In a source checkout (and an editable install) they are ``layers/``, ``kas/`` and ``playbooks/`` beside the
``provisioner`` package. A wheel (``pip install .``, pipx) carries a copy of the three under
``provisioner/_shipped/`` (``setup.py``'s build step puts it there), because a wheel can only hold
files inside its packages. One function per tree, so no module guesses a ``parents[N]``.
"""

from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent
_CHECKOUT = _PACKAGE.parent
_WHEEL = _PACKAGE / "_shipped"

LAYER_NAME = "meta-edge-llm"


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
