"""Virtual EVKs for station tests: a synthetic qcomflash release (built once per session), a
sim root per test with the qdl stand-in and boards in EDL in the fake sysfs."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from provisioner.image.release import write_release
from provisioner.manifest import load_manifest
from provisioner.sim.board import VirtualBoard
from provisioner.sim.bundle import make_bundle
from provisioner.sim.qdl import install_wrappers
from provisioner.sim.synthetic_models import make_litertlm
from provisioner.station.config import StationConfig

ROOT = Path(__file__).resolve().parents[2]


def _release(tmp: Path, example: str, model: str, image: dict | None = None) -> Path:
    if image:
        data = yaml.safe_load((ROOT / "examples" / example).read_text())
        data["image"] = image
        data["release"] += "-" + image["variant"]
        (tmp / example).write_text(yaml.safe_dump(data))
        manifest = load_manifest(tmp / example)
    else:
        manifest = load_manifest(ROOT / "examples" / example)
    mf = make_litertlm(tmp / f"{model}.litertlm")
    bundle = make_bundle(manifest, tmp / "bundle", model_files={model: mf})
    return write_release(manifest, bundle, tmp / "out", simulated=True)


@pytest.fixture(scope="session")
def release_8275(tmp_path_factory) -> Path:
    """A release folder (release.json + flash/<bundle>) for the IQ-8275 EVK."""
    return _release(tmp_path_factory.mktemp("rel8275"), "gemma4-e2b-iq8275.yaml", "gemma-4-e2b")


@pytest.fixture(scope="session")
def release_8275_debug(tmp_path_factory) -> Path:
    """The same board and model as a debug image: root may log in on the console."""
    return _release(tmp_path_factory.mktemp("rel8275dbg"), "gemma4-e2b-iq8275.yaml", "gemma-4-e2b",
                    image={"variant": "debug", "root_login": "debug", "memlock": "unlimited"})


@pytest.fixture
def bundle_copy(release_8275, tmp_path) -> Path:
    """A writable copy of the bare bundle folder (to break it in tests)."""
    src = next((release_8275 / "flash").iterdir())
    dst = tmp_path / src.name
    shutil.copytree(src, dst)
    return dst


class Station:
    """A sim root with N boards plus the matching station config."""

    def __init__(self, tmp: Path) -> None:
        self.root = tmp / "sim"
        self.wrappers = install_wrappers(self.root)
        self.config = StationConfig(sysfs_root=self.root / "sysfs", qdl=str(self.wrappers["qdl"]),
                                    database=tmp / "station.db", log_dir=tmp / "logs")

    def add(self, n: int, *, board: str = "iq-8275-evk", state: str = "edl", faults: tuple[str, ...] = (),
            start: int = 0) -> list[VirtualBoard]:
        out = []
        for i in range(start, start + n):
            vb = VirtualBoard.create(self.root, board, f"0AA94E{i:02X}", f"1-4.{i + 1}", faults=faults)
            if state != "off":
                vb.set_state(state)
            out.append(vb)
        return out


@pytest.fixture
def station(tmp_path) -> Station:
    return Station(tmp_path)


def qdl_pids(sim_root: Path) -> list[int]:
    """Live qdl stand-ins of this sim root (its PROVISIONER_SIM_ROOT is in their environment)."""
    needle = f"PROVISIONER_SIM_ROOT={sim_root}".encode()
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            if b"provisioner.sim.qdl" in (d / "cmdline").read_bytes() and needle in (d / "environ").read_bytes():
                out.append(int(d.name))
        except OSError:
            continue
    return out
