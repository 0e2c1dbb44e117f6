"""OTA test helpers: synthetic releases whose ostreecommit.tar.xz the simulator built with the real ostree."""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

from provisioner import context
from provisioner.cli import main
from provisioner.sim.ostree_image import build_commit

MACHINE = "iq-8275-evk"
IMAGE = "qcom-multimedia-image"

needs_ostree = pytest.mark.skipif(shutil.which("ostree") is None, reason="needs the ostree CLI")


@dataclass
class Cli:
    code: int
    out: str
    err: str


@pytest.fixture
def cli(capsys):
    """Run ``provisioner ARGS`` in-process; exit code, stdout, stderr (never a traceback)."""

    def run(*args: object) -> Cli:
        capsys.readouterr()
        code = main([str(a) for a in args])
        cap = capsys.readouterr()
        assert "Traceback" not in cap.err + cap.out
        return Cli(code, cap.out, cap.err)

    return run


def rootfs(tree: Path, *, runtime: bytes, model: bytes) -> Path:
    """A small image rootfs: os-release in /etc, a runtime library and a model file under /usr."""
    (tree / "etc").mkdir(parents=True, exist_ok=True)
    (tree / "etc/os-release").write_text('ID=qcom\nBUILD_ID="x"\n')
    for rel, data in (("usr/lib/edge-llm/libruntime.so", runtime), ("usr/share/edge-llm/model.bin", model)):
        (tree / rel).parent.mkdir(parents=True, exist_ok=True)
        (tree / rel).write_bytes(data)
    return tree


def make_release(base: Path, release: str, tree: Path, work: Path) -> Path:
    """A release folder as `build` leaves it for OTA: release.json with 'ota' and ostree/ holding the tarball."""
    from provisioner.ota.commit import collect

    deploy = base / f"deploy-{release}"
    tarball, _, _ = build_commit(tree, work, deploy, image=IMAGE, machine=MACHINE)
    rel = base / release
    rel.mkdir(parents=True)
    ota = collect(tarball, rel, MACHINE, env=context.current().env)
    (rel / "release.json").write_text(json.dumps({"format": 1, "release": release, "board": MACHINE, "ota": ota}))
    return rel


@pytest.fixture
def random_bytes():
    return os.urandom
