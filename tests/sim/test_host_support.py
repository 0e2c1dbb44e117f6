"""Helpers for the virtual-board host/runtime tests: boards with a rootfs tree, without flashing.

Building the rootfs directly with the synthetic bundle's tree builder (the same files the flashed
``rootfs.img`` would hold) keeps these tests independent of qdl, ext4 and the console supervisor.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from provisioner.manifest import load_manifest
from provisioner.sim import bundle, control, host
from provisioner.sim.board import VirtualBoard

needs_root = pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("unshare") or not Path("/usr/sbin/sshd").exists(),
    reason="needs root, unshare and sshd (mount namespaces)")

_SERIAL = [0x0AA94E10]


def make_board(root: Path, board_id: str = "iq-8275-evk", faults: tuple[str, ...] = (), *,
               serve_script: str | None = None) -> VirtualBoard:
    """A booted virtual board whose rootfs is the synthetic image's tree (not started)."""
    _SERIAL[0] += 1
    serial = f"{_SERIAL[0]:08X}"
    slot = f"1-{(_SERIAL[0] % 100) + 1}.{(_SERIAL[0] % 7) + 1}"
    vb = VirtualBoard.create(root, board_id, serial, slot, faults=faults)
    manifest = load_manifest(control.builtin_manifest(root, board_id))
    files = {m.name: m.path for m in manifest.models}
    bundle.build_rootfs_tree(manifest, vb.rootfs_dir, files)
    if serve_script is not None:
        p = vb.rootfs_dir / "usr/bin/edge-llm-serve"
        p.write_text(serve_script)
        p.chmod(0o755)
    vb.set_state("booted", build_id=manifest.release, download_mode=0)
    return vb


def ssh(vb: VirtualBoard, command: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """Run ``command`` on the board over real ssh (stdout/stderr as text)."""
    return subprocess.run(host.ssh_argv(vb, command), capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)


def litert_cmd(vb: VirtualBoard, prompt: str = "Explain what Qualcomm is in two sentences.",
               backend: str = "npu", user: str | None = None, run_dir: bool = True) -> str:
    """The litert_lm_main command line of a measured board run, run with the board's QAIRT/LiteRT-LM run environment.

    With ``run_dir`` the model is given through a fresh directory holding a link to it beside a link to
    the dispatch library, as the fleet's smoke run lays it out (provisioner.fleet.shared.serve_config.litert_run_links);
    without, ``--model_path`` names the model in the fleet's model directory.
    """
    from provisioner import catalog
    from provisioner.contracts import board as on_board
    dispatch = next(f for f in on_board.LITERT_FILES if "/libLiteRtDispatch" in f)
    env = on_board.run_env(catalog.board(vb.board_id), "litert_lm", on_board.LITERT_QAIRT)
    model = "$(ls /opt/edge-llm/models/gemma-4-e2b/current/*.litertlm)"
    setup = ""
    if run_dir:
        setup = (f"d=$(mktemp -d) && ln -s {model} $d/ && ln -s {on_board.litert_dir()}/{dispatch} $d/ && ")
        model = f"$d/$(basename {model})"
    run = (f"{setup}LD_LIBRARY_PATH={env.ld_library_path} ADSP_LIBRARY_PATH={env.adsp_library_path} "
           f"{on_board.litert_dir()}/bin/litert_lm_main --backend {backend} --model_path {model} "
           f"--input_prompt '{prompt}'")
    if user:
        run = run.replace("$", "\\$")     # expanded by the user's shell, not by root's
        return f"cd / && setpriv --reuid {user} --regid {user} --init-groups sh -c \"{run}\""
    return run


def genie_cmd(vb: VirtualBoard, extra: str = "") -> str:
    from provisioner import catalog
    from provisioner.contracts import board as on_board
    q = "2.45.0.260326"
    env = on_board.run_env(catalog.board(vb.board_id), "genie", q)
    return (f"cd /opt/edge-llm/models/nemotron-nano-8b/current && LD_LIBRARY_PATH={env.ld_library_path} "
            f"ADSP_LIBRARY_PATH={env.adsp_library_path} {on_board.qairt_bin_dir(q)}/genie-t2t-run "
            f"-c genie_config.json -p 'Explain gravity in one short English sentence.' {extra}")


def decode_speed(text: str) -> float:
    for line in text.splitlines():
        if line.startswith("Decode Speed:"):
            return float(line.split(":")[1].split()[0].lstrip("~"))
    raise AssertionError(f"no Decode Speed line in:\n{text}")
