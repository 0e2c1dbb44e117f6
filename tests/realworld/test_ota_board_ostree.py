"""What the board's ostree can verify, from meta-updater's real ostree bbappend (uptane/meta-updater @ f0e1ccaf).

The base recipe is meta-oe's ``meta-oe/recipes-extended/ostree/ostree_2026.1.bb`` (openembedded/meta-openembedded
@ 9af4488d, the pin of meta-qcom ``ci/base.lock.yml``); it is not in ../shared/realworld, so its target default
``PACKAGECONFIG`` (lines 44-51, with systemd in DISTRO_FEATURES and without ptest) stands in below, and bitbake
applies the real bbappend to it as the cooker does (``__BBAPPEND``, bb/parse/ast.py ``multi_finalize``).
"""

from __future__ import annotations

from pathlib import Path

from provisioner.ota.publish import BOARD_SIGNATURE_NOTE, BOARD_VERIFIES
from tests.image import bbparse

META_OE_DEFAULT = ('PACKAGECONFIG ??= " ${@bb.utils.filter(\'DISTRO_FEATURES\', \'selinux smack\', d)} '
                   '${@bb.utils.contains(\'DISTRO_FEATURES\', \'systemd\', \'systemd libmount\', \'\', d)} '
                   'glib gpgme curl "\n')
# meta-oe ostree_2026.1.bb lines 74-79 and 85: the options that give ostree a signature verifier (gpgme:
# --with-gpgme; ed25519-*: libsodium or --with-openssl; openssl: --with-crypto=openssl, which ostree v2026.1
# configure.ac lines 466-469 turn into with_openssl=yes, and line 493 into HAVE_ED25519)
VERIFIERS = {"gpgme": "gpg", "ed25519-libsodium": "ed25519", "ed25519-openssl": "ed25519", "openssl": "ed25519"}


def _board_packageconfig(realworld: Path, tmp_path: Path) -> set[str]:
    bbparse._stub_hashserv()
    import bb.data
    import bb.parse

    env = bbparse.make_env(tmp_path, (), local_conf='DISTRO_FEATURES = "systemd usrmerge sota"\n')
    recipe = tmp_path / "ostree_2026.1.bb"
    recipe.write_text(META_OE_DEFAULT)
    d = bb.data.createCopy(bbparse.base_data(env))
    d.setVar("__bbclasstype", "recipe")
    bbappend = realworld / "upstream/meta-updater-f0e1cca/recipes-extended/ostree/ostree_2026.1.bbappend"
    d.setVar("__BBAPPEND", str(bbappend))
    d = bb.parse.handle(str(recipe), d)[""]
    return set(d.getVar("PACKAGECONFIG").split())


def test_the_boards_ostree_verifies_no_signature_and_publish_says_so(realworld, tmp_path):
    config = _board_packageconfig(realworld, tmp_path)
    assert {"glib", "curl", "libarchive"} <= config            # the bbappend applied (it adds libarchive)
    can_verify = {VERIFIERS[opt] for opt in config if opt in VERIFIERS}
    assert can_verify == set(BOARD_VERIFIES) == set()
    assert BOARD_SIGNATURE_NOTE.startswith("boards do not check signatures")
