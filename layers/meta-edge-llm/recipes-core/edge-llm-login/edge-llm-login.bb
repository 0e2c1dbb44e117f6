SUMMARY = "Root login policy of an edge-llm image and the fleet's SSH public keys"
DESCRIPTION = "keys-only: root logs in with the manifest's SSH public keys only; disabled: no root \
               login over SSH; debug: QLI's defaults (empty/default passwords) stay."
SECTION = "base"
LICENSE = "MIT"
LIC_FILES_CHKSUM = "file://${COMMON_LICENSE_DIR}/MIT;md5=0835ade698e0bcf8506ecda2f7b4f302"

# disabled | keys-only | debug (manifest image.root_login)
EDGE_LLM_LOGIN_POLICY ??= "disabled"
# OpenSSH public keys separated by a literal "\n" (manifest image.ssh_authorized_keys).
EDGE_LLM_SSH_AUTHORIZED_KEYS ??= ""

inherit allarch

EDGE_LLM_SSHD_DROPIN = "${sysconfdir}/ssh/sshd_config.d/50-edge-llm.conf"
EDGE_LLM_ROOT_HOME = "${ROOT_HOME}"

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
    if policy != "debug":
        dropin = dest + d.getVar("EDGE_LLM_SSHD_DROPIN")
        os.makedirs(os.path.dirname(dropin), exist_ok=True)
        root = "prohibit-password" if policy == "keys-only" else "no"
        with open(dropin, "w") as f:
            f.write("# meta-edge-llm login policy: %s\nPermitRootLogin %s\nPasswordAuthentication no\n"
                    "PermitEmptyPasswords no\nKbdInteractiveAuthentication no\n" % (policy, root))
    if keys and policy != "disabled":
        ssh = dest + d.getVar("EDGE_LLM_ROOT_HOME") + "/.ssh"
        os.makedirs(ssh, mode=0o700, exist_ok=True)
        os.chmod(ssh, 0o700)
        path = os.path.join(ssh, "authorized_keys")
        with open(path, "w") as f:
            f.write("".join(k + "\n" for k in keys))
        os.chmod(path, 0o600)
}

FILES:${PN} += "${EDGE_LLM_SSHD_DROPIN} ${EDGE_LLM_ROOT_HOME}/.ssh"
ALLOW_EMPTY:${PN} = "1"
