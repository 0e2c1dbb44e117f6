"""Build hook: a wheel carries ``layers/``, ``kas/`` and ``playbooks/`` as ``provisioner/_shipped/``.

A wheel can only hold files inside its packages, and the tool needs the Yocto layer and kas templates
(render, the on-board service) and the playbooks (fleet) when installed with ``pip install .`` or pipx, where no
checkout sits beside the package. :mod:`provisioner.shipped` looks there when no checkout exists.
Everything else is in pyproject.toml.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
SHIPPED = ("layers", "kas", "playbooks")
SKIP = shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache")


class BuildWithShipped(build_py):
    """build_py, plus a copy of the layer and playbook trees into the built package."""

    def run(self) -> None:
        super().run()
        if self.editable_mode:      # an editable install reads the checkout itself
            return
        for tree in SHIPPED:
            dest = Path(self.build_lib) / "provisioner" / "_shipped" / tree
            shutil.rmtree(dest, ignore_errors=True)
            shutil.copytree(HERE / tree, dest, ignore=SKIP, symlinks=True)


setup(cmdclass={"build_py": BuildWithShipped})
