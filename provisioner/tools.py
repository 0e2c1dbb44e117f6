"""Executables of the tool's own Python dependencies (ansible-core, kas), found without a venv on PATH.

``pip install`` puts ``ansible-playbook``, ``ansible-inventory``, ``ansible-galaxy``, ``kas`` and
``kas-container`` in the scripts directory of the interpreter that runs us (a venv's ``bin/``,
pipx's venv). Calling ``/path/to/venv/bin/provisioner`` without activating the venv leaves that
directory off PATH, so each is looked up beside ``sys.executable`` first, then on PATH. A missing
one is a one-line error naming the pip package, never an apt package or a traceback.
"""

from __future__ import annotations

import os
import shutil
import sys
import sysconfig
from pathlib import Path

from provisioner.errors import UserError

# executable -> the pip distribution (a dependency in pyproject.toml) that installs it
PACKAGE_OF: dict[str, str] = {
    "ansible-playbook": "ansible-core",
    "ansible-inventory": "ansible-core",
    "ansible-galaxy": "ansible-core",
    "kas": "kas",
    "kas-container": "kas",
}


def scripts_dirs() -> list[Path]:
    """Where pip put our dependencies' scripts: beside the interpreter (not resolved: a venv's
    ``bin/python`` is a link to the system one), then the install scheme's scripts path."""
    dirs = [Path(sys.executable).parent, Path(sysconfig.get_path("scripts"))]
    return list(dict.fromkeys(dirs))


def find(program: str, path: str | None = None) -> str | None:
    """Absolute path of ``program``: our scripts directory first, then ``path`` (default PATH)."""
    for d in scripts_dirs():
        candidate = d / program
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return shutil.which(program, path=path)


def install_hint(program: str) -> str:
    """The one-line fix for a missing ``program``: pip into the interpreter that runs us."""
    return f"{sys.executable} -m pip install {PACKAGE_OF.get(program, program)}"


def require(program: str, path: str | None = None, error: type[UserError] = UserError) -> str:
    """Like :func:`find`, or ``error`` whose fix is ``pip install <the package that ships it>``."""
    found = find(program, path)
    if found:
        return found
    raise error(f"{program} not found (not beside {sys.executable} nor on PATH)", install_hint(program))
