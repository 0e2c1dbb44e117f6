"""Shared helpers for the sim-core tests (board model, qdl stand-in, console, bundle, CLI)."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import yaml

from provisioner.manifest import load_manifest
from provisioner.sim.bundle import make_bundle
from provisioner.sim.synthetic_models import make_litertlm

ROOT = Path(__file__).resolve().parents[2]


def build_bundle(tmp: Path, *, release: str = "test-rel-1", download_mode: int = 0, memlock: str = "unlimited") -> Path:
    """A synthetic IQ-8275 bundle from a small manifest written here (model is a real .litertlm)."""
    model = make_litertlm(tmp / "gemma.litertlm")
    data = {"manifest": 1, "release": release, "board": "iq-8275-evk", "qli": "qli-2.0",
            "qairt": ["2.44.0.260225"], "runtimes": ["litert_lm"],
            "models": [{"name": "gemma-4-e2b", "kind": "litertlm", "path": str(model), "qairt": "2.44.0.260225"}],
            "image": {"variant": "debug", "memlock": memlock, "download_mode": download_mode,
                      "root_login": "debug"}}
    mpath = tmp / "manifest.yaml"
    mpath.write_text(yaml.safe_dump(data), encoding="utf-8")
    return make_bundle(load_manifest(mpath), tmp / "out", model_files={"gemma-4-e2b": model})


def qdl_cmd(qdl: Path, bundle: Path, *extra: str, luns=range(6)) -> list[str]:
    return [str(qdl), "--storage", "ufs", *extra, str(bundle / "prog_firehose_ddr.elf"),
            *[str(bundle / f"rawprogram{n}.xml") for n in luns], *[str(bundle / f"patch{n}.xml") for n in luns]]


def run(argv: list[str], timeout: float = 60, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, **kw)


def read_until(ser, *needles: bytes, timeout: float = 20.0) -> bytes:
    """Read from a pyserial port until one of ``needles`` shows up (AssertionError with what came otherwise)."""
    buf = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        chunk = ser.read(ser.in_waiting or 1)
        buf += chunk
        if any(n in buf for n in needles):
            return buf
    raise AssertionError(f"{needles!r} not seen within {timeout}s; got {buf[-400:]!r}")


def sim_pids(root: Path) -> list[int]:
    """Processes whose command line names ``root`` (what `sim down` must have ended)."""
    out = []
    needle = str(root).encode()
    skip, pid = set(), os.getpid()
    while pid > 1:                       # never count this test process or its parents
        skip.add(pid)
        pid = int(Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[1])
    for d in Path("/proc").iterdir():
        if d.name.isdigit() and int(d.name) not in skip:
            try:
                cmd = (d / "cmdline").read_bytes()
                stat = (d / "stat").read_text()
            except OSError:
                continue
            if needle in cmd and stat.split(")")[-1].split()[0] != "Z":
                out.append(int(d.name))
    return out


def mounts_under(root: Path) -> list[str]:
    prefix = str(root)
    return [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()
            if line.split()[4].startswith(prefix)]
