"""The rehearsal's sota image is built from a launched board's rootfs: what launch wrote there is that board's
own (its instances' ports), so the image leaves it out and each board's deployment gets its own back."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from provisioner.rehearse_ota import image_tree, keep_board_etc

UNITS = "etc/systemd/system"


def _launched_rootfs(root: Path, port: int) -> Path:
    (root / UNITS / "sockets.target.wants").mkdir(parents=True)
    (root / UNITS / "edge-llm-serve@.service").write_text("[Service]\n")                 # the image's template
    (root / UNITS / "edge-llm-serve@m.socket").write_text(f"[Socket]\nListenStream={port}\n")
    os.symlink("../edge-llm-serve@m.socket", root / UNITS / "sockets.target.wants/edge-llm-serve@m.socket")
    (root / UNITS / "edge-llm-serve@m.service.d").mkdir()
    (root / UNITS / "edge-llm-serve@m.service.d/50-edge-llm-model.conf").write_text("[Service]\n")
    (root / "etc/edge-llm/serve").mkdir(parents=True)
    (root / "etc/edge-llm/serve/m.json").write_text(f'{{"port": {port}}}')
    (root / "etc/os-release").write_text("ID=qcom-distro\n")
    return root


def test_the_image_has_no_board_s_instances_and_each_board_gets_its_own_back(tmp_path):
    one = _launched_rootfs(tmp_path / "board-1", 20001)
    tree = image_tree(one, tmp_path / "image", "r-2", {})
    units = sorted(p.relative_to(tree / UNITS).as_posix() for p in (tree / UNITS).rglob("*"))
    assert units == ["edge-llm-serve@.service", "sockets.target.wants"]
    assert not (tree / "etc/edge-llm/serve/m.json").exists()
    # board 2's deployment, checked out from that image, gets board 2's own socket, link and config
    two = _launched_rootfs(tmp_path / "board-2", 20002)
    dep = tmp_path / "deploy" / "c.0"
    shutil.copytree(tree / "etc", dep / "etc", symlinks=True)
    keep_board_etc(two, dep.parent)
    assert "ListenStream=20002" in (dep / UNITS / "edge-llm-serve@m.socket").read_text()
    assert os.readlink(dep / UNITS / "sockets.target.wants/edge-llm-serve@m.socket") == "../edge-llm-serve@m.socket"
    assert (dep / "etc/edge-llm/serve/m.json").read_text() == '{"port": 20002}'
