"""The login policy through the layer: edge-llm-login's files, the image's IMAGE_FEATURES on the real QLI
stack, and the production image's check that root cannot log in (bitbake's real parser)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from provisioner.contracts import board as on_board
from provisioner.image.render import render
from provisioner.manifest import load_manifest
from tests.conftest import need_realworld
from tests.image import bbparse
from tests.image.kas_fixtures import write_manifest
from tests.image.test_layer import LAYER, _env, _run


@pytest.mark.parametrize("policy", ["keys-only", "disabled", "debug"])
def test_login_policy(policy, tmp_path, distro_layer):
    local = (f'EDGE_LLM_LOGIN_POLICY = "{policy}"\n'
             'EDGE_LLM_SSH_AUTHORIZED_KEYS = "ssh-ed25519 AAAA1 a@b\\nssh-ed25519 AAAA2 c@d"\n')
    d = bbparse.parse_recipe(LAYER / "recipes-core/edge-llm-login/edge-llm-login.bb",
                             _env(tmp_path, distro_layer, local=local))
    _run(d, "do_install")
    dest = Path(d.getVar("D"))
    keys = dest / "root/.ssh/authorized_keys"
    dropin = dest / "etc/ssh/sshd_config.d/50-edge-llm.conf"
    # the console banner the station reads on boards where root cannot log in
    assert (dest / on_board.ISSUE_SNIPPET.lstrip("/")).read_text() == on_board.ISSUE_TEXT
    if policy == "keys-only":
        assert keys.read_text() == "ssh-ed25519 AAAA1 a@b\nssh-ed25519 AAAA2 c@d\n"
        assert oct(keys.stat().st_mode & 0o777) == "0o600"
        assert "PermitRootLogin prohibit-password" in dropin.read_text()
    elif policy == "disabled":
        assert not keys.exists() and "PermitRootLogin no" in dropin.read_text()
    else:
        assert not dropin.exists()


DEBUG_LOGIN = {"allow-root-login", "allow-empty-password", "empty-root-password", "debug-tweaks"}


def _qli_local_conf(result, only: tuple[str, ...] | None = None) -> str:
    """local.conf as kas writes it: meta-qcom ci/base.yml's snippets, then the render's (same name
    replaces, written sorted by name); ``only`` keeps just those rendered snippets."""
    base_yml = need_realworld("kas", "meta-qcom-ef0004df", "ci", "base.yml")
    base = yaml.safe_load(base_yml.read_text())["local_conf_header"]
    rendered = yaml.safe_load(result.kas_file.read_text())["local_conf_header"]
    merged = {**base, **{k: v for k, v in rendered.items() if only is None or k in only}}
    return "".join(merged[k].rstrip("\n") + "\n" for k in sorted(merged))


@pytest.mark.parametrize("snippets", ["rendered", "layer-only"])
@pytest.mark.parametrize("variant", ["production", "debug"])
def test_image_features_of_the_real_qli_stack_follow_the_login_policy(variant, snippets, tmp_path, distro_layer):
    """qcom-minimal-image puts allow-root-login into IMAGE_FEATURES itself: production drops it anyway.

    ``layer-only``: of the render's snippets only the layer's variables, so meta-qcom's 'extra'
    debug login features arrive untouched (a lost or reordered kas fragment): the layer alone holds.
    """
    image = {"variant": variant} if variant == "debug" else None
    res = render(load_manifest(write_manifest(tmp_path / "m.yaml", release=f"{variant}-7", image=image)),
                 tmp_path / "out")
    only = ("edge-llm", "edge-llm-release") if snippets == "layer-only" else None
    env = bbparse.make_env(tmp_path, (distro_layer, res.out_dir / "layers" / "meta-edge-llm-release"),
                           local_conf=_qli_local_conf(res, only))
    d = bbparse.parse_recipe(LAYER / "recipes-products/images/edge-llm-image.bb", env)
    features = set(d.getVar("IMAGE_FEATURES").split())
    postprocess = d.getVar("ROOTFS_POSTPROCESS_COMMAND").split()
    # the QLI stack was really parsed: features from all three meta-qcom-distro images
    assert {"splash", "tools-debug", "post-install-logging", "ssh-server-openssh", "weston"} <= features
    if variant == "production":
        assert not features & DEBUG_LOGIN, features & DEBUG_LOGIN
        assert "ssh_allow_root_login" not in postprocess and "ssh_allow_empty_password" not in postprocess
        assert "zap_empty_root_password" in postprocess
        assert d.getVar("EXTRA_USERS_PARAMS").rstrip().endswith("usermod -p '*' root;")  # after oelinux123
    else:
        assert {"allow-root-login", "allow-empty-password", "empty-root-password"} <= features
        assert "ssh_allow_root_login" in postprocess and "usermod -p '*'" not in d.getVar("EXTRA_USERS_PARAMS")
    assert d.getVar("IMAGE_PREPROCESS_COMMAND").split() == ["edge_llm_check_login", "edge_llm_check_fastrpc",
                                                                  "edge_llm_check_opt_empty",
                                                                  "edge_llm_check_no_host_keys"]


@pytest.mark.parametrize("variant", ["production", "debug"])
def test_image_login_fixups_and_release_json(variant, tmp_path, distro_layer):
    image = {"variant": variant} if variant == "debug" else None
    res = render(load_manifest(write_manifest(tmp_path / "m.yaml", release=f"{variant}-7", image=image)),
                 tmp_path / "out")
    local = 'EXTRA_IMAGE_FEATURES = "allow-empty-password empty-root-password allow-root-login debug-tweaks"\n'
    d = bbparse.parse_recipe(LAYER / "recipes-products/images/edge-llm-image.bb",
                             _env(tmp_path, distro_layer, res, local=local))
    features = d.getVar("IMAGE_FEATURES").split()
    if variant == "production":
        assert d.getVar("EXTRA_IMAGE_FEATURES").split() == [] and not set(features) & DEBUG_LOGIN
    else:
        assert set(features) >= DEBUG_LOGIN
    assert d.getVar("IMAGE_INSTALL").split()[-2:] == ["packagegroup-edge-llm", "edge-llm-model-gemma-4-e2b"]
    _run(d, "edge_llm_release_json")
    data = json.loads((Path(d.getVar("IMAGE_ROOTFS")) / "etc/edge-llm/release.json").read_text())
    assert data["release"] == f"{variant}-7" and data["machine"] == "iq-8275-evk"


# QLI's default root password oelinux123 (meta-qcom-distro 775dc8c7 qcom-minimal-image.bb)
QLI_ROOT_HASH = "$6$UDMimfYF$akpHo9mLD4z0vQyKzYxYbsdYxnpUD7B7rHskq1E3zXK8ygxzq719wMxI78i0TIIE0NB1jUToeeFzWXVpBBjR8."
# oe-core 06dd66e6 openssh sshd_config: the drop-in folder is included before any setting
SSHD_MAIN = "Include /etc/ssh/sshd_config.d/*.conf\n#PermitRootLogin prohibit-password\n#PermitEmptyPasswords no\n"


def _login_rootfs(rootfs: Path, shadow: str = "*", passwd: str = "x", main: str | None = SSHD_MAIN,
                  dropin: str | None = "PermitRootLogin {root}\nPasswordAuthentication no\n",
                  dropbear: str | None = None, root: str = "prohibit-password") -> None:
    """A finished rootfs's login files (the sshd drop-in as edge-llm-login writes it)."""
    etc = rootfs / "etc"
    (etc / "ssh/sshd_config.d").mkdir(parents=True, exist_ok=True)
    (etc / "shadow").write_text(f"root:{shadow}:19000:0:99999:7:::\nllm:!:19000::::::\n")
    (etc / "passwd").write_text(f"root:{passwd}:0:0:root:/root:/bin/sh\n")
    if main is not None:
        (etc / "ssh/sshd_config").write_text(main)
    if dropin is not None:
        (etc / "ssh/sshd_config.d/50-edge-llm.conf").write_text(dropin.format(root=root))
    if dropbear is not None:
        (rootfs / "usr/sbin").mkdir(parents=True, exist_ok=True)
        (rootfs / "usr/sbin/dropbear").write_text("")
        (etc / "default").mkdir(exist_ok=True)
        (etc / "default/dropbear").write_text(dropbear)


@pytest.mark.parametrize("policy,files,refused", [
    ("keys-only", {}, None),
    ("keys-only", {"shadow": "!"}, None),
    ("keys-only", {"shadow": "!" + QLI_ROOT_HASH}, None),                       # usermod -L of a hash
    ("disabled", {"root": "no"}, None),
    ("keys-only", {"shadow": QLI_ROOT_HASH}, "/etc/shadow: root has a password hash that can log in"),
    ("keys-only", {"shadow": ""}, "/etc/shadow: root has an empty password"),
    ("keys-only", {"passwd": ""}, "/etc/passwd: root's password field is ''"),
    # oe-core's ssh_allow_root_login edits the main file even when a drop-in says otherwise
    ("disabled", {"root": "no", "main": SSHD_MAIN.replace("#PermitRootLogin prohibit-password", "PermitRootLogin yes")},
     "/etc/ssh/sshd_config:2: PermitRootLogin yes"),
    ("keys-only", {"main": SSHD_MAIN.replace("#PermitEmptyPasswords no", "PermitEmptyPasswords yes")},
     "/etc/ssh/sshd_config:3: PermitEmptyPasswords yes"),
    ("keys-only", {"main": SSHD_MAIN + "Match Address 10.0.0.0/8\n  PermitRootLogin yes\n"},
     "/etc/ssh/sshd_config:5: PermitRootLogin yes"),
    # no Include: the drop-in is never read, OpenSSH's default prohibit-password applies
    ("disabled", {"root": "no", "main": "#PermitRootLogin prohibit-password\n"},
     "PermitRootLogin prohibit-password is in effect, policy disabled needs no"),
    ("disabled", {"root": "no", "dropbear": 'DROPBEAR_EXTRA_ARGS="-w"\n'}, None),
    ("keys-only", {"dropbear": 'DROPBEAR_EXTRA_ARGS="-g"\n'}, None),
    ("disabled", {"root": "no", "dropbear": 'DROPBEAR_EXTRA_ARGS=""\n'}, "DROPBEAR_EXTRA_ARGS lacks -w"),
    ("keys-only", {"dropbear": 'DROPBEAR_EXTRA_ARGS=" -B"\n'}, "has -B (blank passwords allowed)"),
])
def test_production_image_refuses_a_rootfs_where_root_can_log_in(policy, files, refused, tmp_path, distro_layer,
                                                                  fatal):
    import bb

    image = {"root_login": policy} if policy == "disabled" else None
    res = render(load_manifest(write_manifest(tmp_path / "m.yaml", image=image)), tmp_path / "out")
    d = bbparse.parse_recipe(LAYER / "recipes-products/images/edge-llm-image.bb", _env(tmp_path, distro_layer, res))
    assert d.getVar("EDGE_LLM_LOGIN_POLICY") == policy
    _login_rootfs(Path(d.getVar("IMAGE_ROOTFS")), **files)
    if refused is None:
        _run(d, "edge_llm_check_login")
        return
    with pytest.raises(bb.BBHandledException):
        _run(d, "edge_llm_check_login")
    assert any(m.startswith(f"production image (EDGE_LLM_LOGIN_POLICY {policy}) still lets root log in")
               and refused in m for m in fatal.messages), fatal.messages


def test_debug_image_keeps_qli_login(tmp_path, distro_layer):
    res = render(load_manifest(write_manifest(tmp_path / "m.yaml", image={"variant": "debug"})), tmp_path / "out")
    d = bbparse.parse_recipe(LAYER / "recipes-products/images/edge-llm-image.bb", _env(tmp_path, distro_layer, res))
    _login_rootfs(Path(d.getVar("IMAGE_ROOTFS")), shadow=QLI_ROOT_HASH, dropin=None,
                  main=SSHD_MAIN.replace("#PermitRootLogin prohibit-password", "PermitRootLogin yes"))
    _run(d, "edge_llm_check_login")
