SUMMARY = "Raise the locked-memory limit for LLM inference (FastRPC pins ~1.17 GB)"
DESCRIPTION = "QLI's default locked-memory limit is 8 MB, which gives 'Could not allocate persistent \
               weights buffer!'. limits.d covers login sessions; systemd services do not read limits.conf, so the \
               systemd manager default and the inference service get LimitMEMLOCK too."
SECTION = "base"
LICENSE = "MIT"
LIC_FILES_CHKSUM = "file://${COMMON_LICENSE_DIR}/MIT;md5=0835ade698e0bcf8506ecda2f7b4f302"

# "unlimited" or a KiB count (limits.conf unit); systemd gets "infinity" or the same size in KiB.
EDGE_LLM_MEMLOCK ??= "unlimited"

inherit allarch

# Paths: provisioner/layout.py LIMITS_FILE, SYSTEMD_MEMLOCK_DROPIN, SERVE_UNIT (drop-in for all instances).
EDGE_LLM_LIMITS_FILE = "${sysconfdir}/security/limits.d/50-edge-llm-memlock.conf"
EDGE_LLM_SYSTEMD_DROPIN = "${sysconfdir}/systemd/system.conf.d/50-edge-llm-memlock.conf"
EDGE_LLM_SERVE_DROPIN = "${sysconfdir}/systemd/system/edge-llm-serve@.service.d/50-edge-llm-memlock.conf"

python do_install() {
    import os
    value = d.getVar("EDGE_LLM_MEMLOCK")
    if value != "unlimited" and not value.isdigit():
        bb.fatal("EDGE_LLM_MEMLOCK must be 'unlimited' or a KiB count, got %r" % value)
    systemd_value = "infinity" if value == "unlimited" else value + "K"
    dest = d.getVar("D")
    files = {
        d.getVar("EDGE_LLM_LIMITS_FILE"):
            "# meta-edge-llm: FastRPC pins ~1.17 GB for LLM weights (QLI default is 8 MB)\n"
            "# pam_limits never applies '*' to root, so root gets its own lines\n"
            "*    soft    memlock    %s\n*    hard    memlock    %s\n"
            "root soft    memlock    %s\nroot hard    memlock    %s\n" % (value, value, value, value),
        d.getVar("EDGE_LLM_SYSTEMD_DROPIN"):
            "# meta-edge-llm: limits.conf does not reach systemd services\n[Manager]\n"
            "DefaultLimitMEMLOCK=%s\n" % systemd_value,
        d.getVar("EDGE_LLM_SERVE_DROPIN"):
            "# meta-edge-llm: the inference service pins the model's weights through FastRPC\n[Service]\n"
            "LimitMEMLOCK=%s\n" % systemd_value,
    }
    for path, text in files.items():
        os.makedirs(os.path.dirname(dest + path), exist_ok=True)
        with open(dest + path, "w") as f:
            f.write(text)
}

FILES:${PN} += "${EDGE_LLM_LIMITS_FILE} ${EDGE_LLM_SYSTEMD_DROPIN} ${EDGE_LLM_SERVE_DROPIN}"
