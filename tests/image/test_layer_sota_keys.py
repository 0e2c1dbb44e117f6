"""Root's SSH keys on an OSTree (sota) image: in the commit, read by sshd, or the build fails.

meta-updater's image_types_ostree.bbclass (uptane/meta-updater @ f0e1ccaf, lines 99-100) deletes /root and
links it to var/roothome; image_types_ota.bbclass (lines 72-81) copies only var/sota, var/local and home
into the deployment's /var. Keys under /root never reach a sota board, and a keys-only board then locks
everyone out, Ansible included.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from provisioner.image.render import render
from provisioner.manifest import load_manifest
from provisioner.sim.ostree_image import ostree_rootfs
from tests.image import bbparse
from tests.image.kas_fixtures import write_manifest
from tests.image.test_layer import _run
from tests.image.test_layer_login import _login_rootfs
from tests.image.test_layer_ota import PLAIN, SOTA, _env

LAYER = bbparse.LAYER
KEYS = "ssh-ed25519 AAAA1 a@b\nssh-ed25519 AAAA2 c@d\n"
KEYS_FILE = "usr/share/edge-llm/ssh/root/authorized_keys"
# openembedded-core 06dd66e6 meta/recipes-connectivity/openssh/openssh/sshd_config, lines 13 and 43
OE_SSHD_CONFIG = "Include /etc/ssh/sshd_config.d/*.conf\nAuthorizedKeysFile\t.ssh/authorized_keys\n"


def _login_install(tmp_path: Path, local: str) -> Path:
    d = bbparse.parse_recipe(LAYER / "recipes-core/edge-llm-login/edge-llm-login.bb", _env(tmp_path, local + (
        'EDGE_LLM_LOGIN_POLICY = "keys-only"\n'
        'EDGE_LLM_SSH_AUTHORIZED_KEYS = "ssh-ed25519 AAAA1 a@b\\nssh-ed25519 AAAA2 c@d"\n')))
    _run(d, "do_install")
    dest = Path(d.getVar("D"))
    packaged = d.getVar("FILES:edge-llm-login").split()
    for f in (p for p in dest.rglob("*") if p.is_file()):
        assert any(f"/{f.relative_to(dest)}".startswith(p) for p in packaged), f
    return dest


def _sshd_keys_files(tmp_path: Path, etc: Path) -> str:
    """What the real sshd reads root's keys from, given the deployment's /etc/ssh (``sshd -T``)."""
    if not shutil.which("sshd") or not shutil.which("ssh-keygen"):
        pytest.skip("needs openssh-server (sshd -T)")
    key = tmp_path / "hostkey"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    main = tmp_path / "sshd_config"
    main.write_text(OE_SSHD_CONFIG.replace("/etc/ssh/sshd_config.d", str(etc / "ssh/sshd_config.d")))
    out = subprocess.run(["sshd", "-T", "-f", str(main), "-h", str(key), "-C", "user=root,host=h,addr=127.0.0.1"],
                         capture_output=True, text=True, check=True).stdout
    return next(line.split(None, 1)[1] for line in out.splitlines() if line.startswith("authorizedkeysfile "))


def test_sota_keys_are_in_the_commit_and_sshd_reads_them_there(tmp_path):
    dest = _login_install(tmp_path / "sota", SOTA)
    # what the board boots: meta-updater's IMAGE_CMD:ostree layout of the installed files
    commit = tmp_path / "commit"
    ostree_rootfs(dest, commit, "iq-8275-evk")
    assert (commit / "root").is_symlink() and not (commit / "var/roothome").exists()
    assert (commit / KEYS_FILE).read_text() == KEYS
    keys_files = _sshd_keys_files(tmp_path, commit / "usr/etc")      # etc moved to usr/etc, merged into /etc
    assert keys_files.split() == [".ssh/authorized_keys", "/usr/share/edge-llm/ssh/%u/authorized_keys"]


def test_plain_image_keeps_keys_in_root_home(tmp_path):
    dest = _login_install(tmp_path, PLAIN)
    assert (dest / "root/.ssh/authorized_keys").read_text() == KEYS
    assert not (dest / "usr").exists()
    assert "AuthorizedKeysFile" not in (dest / "etc/ssh/sshd_config.d/50-edge-llm.conf").read_text()


AKF = "AuthorizedKeysFile .ssh/authorized_keys /usr/share/edge-llm/ssh/%u/authorized_keys\n"


@pytest.mark.parametrize("local,rootfs,refused", [
    (SOTA, {"dropin": "PermitRootLogin {root}\n" + AKF, "keys": KEYS_FILE}, None),
    (PLAIN, {"keys": "root/.ssh/authorized_keys"}, None),
    # keys where the layer used to put them: gone once /root is a link into /var
    (SOTA, {"keys": "root/.ssh/authorized_keys"}, "AuthorizedKeysFile gives root /root/.ssh/authorized_keys"),
    # the drop-in names the commit's file, but nothing installed it
    (SOTA, {"dropin": "PermitRootLogin {root}\n" + AKF}, "/usr/share/edge-llm/ssh/%u/authorized_keys"
                                                          .replace("%u", "root")),
    # a key file under /usr/local is in /var on the board (image_types_ostree.bbclass line 126)
    (SOTA, {"dropin": "PermitRootLogin {root}\nAuthorizedKeysFile /usr/local/keys\n", "keys": "usr/local/keys"},
     "/usr/local/keys"),
    (SOTA, {"main": None, "dropin": None, "dropbear": 'DROPBEAR_EXTRA_ARGS="-g"\n',
            "keys": "root/.ssh/authorized_keys"}, "dropbear reads root's keys only from /root/.ssh/authorized_keys"),
])
def test_sota_image_fails_when_root_would_boot_without_keys(local, rootfs, refused, tmp_path, fatal):
    import bb

    res = render(load_manifest(write_manifest(tmp_path / "m.yaml")), tmp_path / "out")
    d = bbparse.parse_recipe(LAYER / "recipes-products/images/edge-llm-image.bb", _env(tmp_path, local, res))
    assert d.getVar("EDGE_LLM_LOGIN_POLICY") == "keys-only"
    root = Path(d.getVar("IMAGE_ROOTFS"))
    files = dict(rootfs)
    keys = files.pop("keys", None)
    _login_rootfs(root, **files)
    if keys:
        (root / keys).parent.mkdir(parents=True, exist_ok=True)
        (root / keys).write_text(KEYS)
    if refused is None:
        _run(d, "edge_llm_check_login")
        return
    with pytest.raises(bb.BBHandledException):
        _run(d, "edge_llm_check_login")
    assert any(m.startswith("sota image (EDGE_LLM_LOGIN_POLICY keys-only) would boot with no key root can log in")
               and refused in m for m in fatal.messages), fatal.messages
