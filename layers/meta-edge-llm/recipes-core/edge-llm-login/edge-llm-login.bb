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
# provisioner/layout.py ISSUE_SNIPPET; agetty expands \S{BUILD_ID} from os-release at every prompt,
# so this file never changes between releases (no rebuild, sstate stays valid).
EDGE_LLM_ISSUE_FILE = "${sysconfdir}/issue.d/50-edge-llm.issue"
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
    issue = dest + d.getVar("EDGE_LLM_ISSUE_FILE")
    os.makedirs(os.path.dirname(issue), exist_ok=True)
    with open(issue, "w") as f:
        f.write("edge-llm release \\S{BUILD_ID}\n\n")
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

FILES:${PN} += "${EDGE_LLM_SSHD_DROPIN} ${EDGE_LLM_ROOT_HOME}/.ssh ${EDGE_LLM_ISSUE_FILE}"
ALLOW_EMPTY:${PN} = "1"
