SUMMARY = "Root login policy, fleet SSH keys and release banner of an edge-llm image"
DESCRIPTION = "keys-only: root logs in with the manifest's SSH public keys only; disabled: no root \
               login over SSH; debug: QLI's defaults (empty/default passwords) stay. Every policy gets a \
               getty banner line with the release id, so a station can check a production board's boot \
               on the console without logging in."
SECTION = "base"
LICENSE = "MIT"
LIC_FILES_CHKSUM = "file://${COMMON_LICENSE_DIR}/MIT;md5=0835ade698e0bcf8506ecda2f7b4f302"

# disabled | keys-only | debug (manifest image.root_login)
EDGE_LLM_LOGIN_POLICY ??= "disabled"
# OpenSSH public keys separated by a literal "\n" (manifest image.ssh_authorized_keys).
EDGE_LLM_SSH_AUTHORIZED_KEYS ??= ""

inherit allarch

EDGE_LLM_SSHD_DROPIN = "${sysconfdir}/ssh/sshd_config.d/50-edge-llm.conf"
# EDGE_LLM_ISSUE_FILE (conf/edge-llm-board.conf): agetty expands \S{BUILD_ID} from os-release at every
# prompt, so this file never changes between releases (no rebuild, sstate stays valid).
EDGE_LLM_ROOT_HOME = "${ROOT_HOME}"
# Where root's keys live on an OSTree (sota) image. meta-updater's image_types_ostree.bbclass
# (uptane/meta-updater @ f0e1ccaf, lines 99-100) deletes ${ROOT_HOME} (/root: openembedded-core 06dd66e6
# meta/conf/distro/include/init-manager-systemd.inc line 8) and links it to var/roothome, and
# image_types_ota.bbclass (lines 72-81) copies only var/sota, var/local and home into the deployment's
# /var, so keys under ${ROOT_HOME} never reach the board. The commit keeps /usr: the keys go there (one
# copy per deployment, so an OS update rotates them and a rollback brings the old ones back) and sshd
# reads them through AuthorizedKeysFile (%u: each user's own file, only root has one).
EDGE_LLM_SSH_KEYS_DIR = "${@bb.utils.contains('DISTRO_FEATURES', 'sota', '${datadir}/edge-llm/ssh', '', d)}"

python do_install() {
    import os
    policy = d.getVar("EDGE_LLM_LOGIN_POLICY")
    if policy not in ("disabled", "keys-only", "debug"):
        bb.fatal("EDGE_LLM_LOGIN_POLICY must be disabled, keys-only or debug, got %r" % policy)
    keys = [k.strip() for k in (d.getVar("EDGE_LLM_SSH_AUTHORIZED_KEYS") or "").split("\\n") if k.strip()]
    for k in keys:
        if "PRIVATE KEY" in k:
            bb.fatal("EDGE_LLM_SSH_AUTHORIZED_KEYS holds a private key -> use the .pub file")
    if policy == "keys-only" and not keys:
        bb.fatal("EDGE_LLM_LOGIN_POLICY is keys-only but EDGE_LLM_SSH_AUTHORIZED_KEYS is empty -> add a key")
    dest = d.getVar("D")
    issue = dest + d.getVar("EDGE_LLM_ISSUE_FILE")
    os.makedirs(os.path.dirname(issue), exist_ok=True)
    with open(issue, "w") as f:
        f.write("edge-llm release \\S{BUILD_ID}\n\n")
    keys_dir = d.getVar("EDGE_LLM_SSH_KEYS_DIR")
    install_keys = bool(keys) and policy != "disabled"
    lines = []
    if policy != "debug":
        root = "prohibit-password" if policy == "keys-only" else "no"
        lines += ["# meta-edge-llm login policy: %s" % policy, "PermitRootLogin %s" % root,
                  "PasswordAuthentication no", "PermitEmptyPasswords no", "KbdInteractiveAuthentication no"]
    if install_keys and keys_dir:
        # oe-core 06dd66e6 openssh/sshd_config: line 13 includes sshd_config.d/*.conf before its own
        # "AuthorizedKeysFile .ssh/authorized_keys" (line 43); sshd_config(5): the first value obtained wins
        lines += ["# OSTree image: /root is not in the commit, root's keys are (meta-edge-llm edge-llm-login.bb)",
                  "AuthorizedKeysFile .ssh/authorized_keys %s/%%u/authorized_keys" % keys_dir]
    if lines:
        dropin = dest + d.getVar("EDGE_LLM_SSHD_DROPIN")
        os.makedirs(os.path.dirname(dropin), exist_ok=True)
        with open(dropin, "w") as f:
            f.write("".join(line + "\n" for line in lines))
    if install_keys:
        ssh = dest + (keys_dir + "/root" if keys_dir else d.getVar("EDGE_LLM_ROOT_HOME") + "/.ssh")
        os.makedirs(ssh, mode=0o700, exist_ok=True)
        os.chmod(ssh, 0o700)
        path = os.path.join(ssh, "authorized_keys")
        with open(path, "w") as f:
            f.write("".join(k + "\n" for k in keys))
        os.chmod(path, 0o600)
}

FILES:${PN} += "${EDGE_LLM_SSHD_DROPIN} ${EDGE_LLM_ROOT_HOME}/.ssh ${EDGE_LLM_ISSUE_FILE} ${EDGE_LLM_SSH_KEYS_DIR}"
ALLOW_EMPTY:${PN} = "1"
