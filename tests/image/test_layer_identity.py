"""The layer's board identity on the console: edge-llm-identity's install, its script run against a
board-like /sys and /etc/ssh (read back by the station's own parser), and the image check that no
SSH host key is shipped."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from provisioner.contracts import board as on_board
from provisioner.image.render import render
from provisioner.manifest import load_manifest
from provisioner.station import identity
from tests.image import bbparse
from tests.image.kas_fixtures import write_manifest
from tests.image.test_layer import _run
from tests.image.test_layer_ota import PLAIN, _env

LAYER = bbparse.LAYER
RECIPE = LAYER / "recipes-core/edge-llm-identity"


def test_identity_recipe_installs_script_unit_and_issue_link(tmp_path):
    d = bbparse.parse_recipe(RECIPE / "edge-llm-identity.bb", _env(tmp_path, PLAIN))
    unpack = Path(d.getVar("UNPACKDIR"))
    unpack.mkdir(parents=True, exist_ok=True)
    for f in (RECIPE / "files").iterdir():
        shutil.copy(f, unpack / f.name)
    _run(d, "do_install")
    dest = Path(d.getVar("D"))
    script = dest / on_board.IDENTITY_SCRIPT.lstrip("/")
    assert os.access(script, os.X_OK)
    # the recipe filled the script's paths from the layer's variables, as the contract (and the virtual image) does
    assert script.read_text() == on_board.identity_script_text()
    assert on_board.SOC0_SERIAL in script.read_text() and "@EDGE_LLM" not in script.read_text()
    link = dest / on_board.IDENTITY_ISSUE.lstrip("/")
    assert link.is_symlink() and os.readlink(link) == on_board.IDENTITY_RUN_FILE
    unit = (dest / "usr/lib/systemd/system/edge-llm-identity.service").read_text()
    assert "After=sshdgenkeys.service" in unit and "Before=getty-pre.target" in unit
    assert f"ExecStart={on_board.IDENTITY_SCRIPT} {on_board.IDENTITY_RUN_FILE}" in unit
    packaged = d.getVar("FILES:edge-llm-identity").split()
    for f in (p for p in dest.rglob("*") if p.is_file() or p.is_symlink()):
        rel = f"/{f.relative_to(dest)}"
        assert any(rel.startswith(p) for p in packaged + ["/usr/lib/systemd/system"]), rel


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"), reason="needs root (mount namespace)")
def test_identity_script_output_is_what_the_station_reads(tmp_path):
    """The real script, in a mount namespace that shows it a board's soc0, UFS device and host keys."""
    soc0, ufs, ssh = tmp_path / "soc0", tmp_path / "ufs", tmp_path / "ssh"
    soc0.mkdir()
    (soc0 / "serial_number").write_text("178867965\n")
    (ufs / "1d84000.ufs/string_descriptors").mkdir(parents=True)
    (ufs / "1d84000.ufs/string_descriptors/serial_number").write_text("3E4F-AB12\n")
    ssh.mkdir()
    subprocess.run(["ssh-keygen", "-q", "-t", "ecdsa", "-N", "", "-f", str(ssh / "ssh_host_ecdsa_key")], check=True)
    out = tmp_path / "run" / "identity.issue"
    script = tmp_path / "edge-llm-identity"                  # as installed: its paths filled in
    script.write_text(on_board.identity_script_text())
    inner = (f"mount -t tmpfs none /sys/devices && mkdir /sys/devices/soc0 && "
             f"mount --bind {soc0} /sys/devices/soc0 && mount --bind {ufs} /sys/bus/platform/devices && "
             f"mount --bind {ssh} /etc/ssh && sh {script} {out}")
    res = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", inner], capture_output=True,
                         text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    got = identity.parse_banner(out.read_text())
    printed = subprocess.run(["ssh-keygen", "-lf", str(ssh / "ssh_host_ecdsa_key.pub")], capture_output=True,
                             text=True, check=True).stdout.split()[1]
    assert got == {"serial": "0AA94EFD", "ufs_serial": "3E4F-AB12",
                   "host_keys": [{"type": "ecdsa-sha2-nistp256", "fingerprint": printed,
                                  "key": (ssh / "ssh_host_ecdsa_key.pub").read_text().split()[1]}]}
    assert "PRIVATE" not in out.read_text()


def test_image_with_baked_host_keys_fails(tmp_path, fatal):
    import bb

    res = render(load_manifest(write_manifest(tmp_path / "m.yaml")), tmp_path / "out")
    d = bbparse.parse_recipe(LAYER / "recipes-products/images/edge-llm-image.bb", _env(tmp_path, PLAIN, res))
    rootfs = Path(d.getVar("IMAGE_ROOTFS"))
    (rootfs / "etc/ssh").mkdir(parents=True)
    (rootfs / "etc/ssh/sshd_config").write_text("HostKey /etc/ssh/ssh_host_ecdsa_key\n")
    _run(d, "edge_llm_check_no_host_keys")          # keys are made at first boot: none in the image
    (rootfs / "etc/ssh/ssh_host_ecdsa_key").write_text("-----BEGIN OPENSSH PRIVATE KEY-----\n")
    with pytest.raises(bb.BBHandledException):
        _run(d, "edge_llm_check_no_host_keys")
    assert any("the image ships SSH host keys (/etc/ssh/ssh_host_ecdsa_key)" in m for m in fatal.messages)
