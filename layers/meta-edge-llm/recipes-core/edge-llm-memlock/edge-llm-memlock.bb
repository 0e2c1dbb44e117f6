SUMMARY = "Raise the locked-memory limit for LLM inference (FastRPC pins ~1.17 GB)"
DESCRIPTION = "QLI's default locked-memory limit is 8 MB, which gives 'Could not allocate persistent \
               weights buffer!'. limits.d covers login sessions; systemd services do not read limits.conf, so the \
               systemd manager default and the inference service get LimitMEMLOCK too."
SECTION = "base"
LICENSE = "MIT"
LIC_FILES_CHKSUM = "file://${COMMON_LICENSE_DIR}/MIT;md5=0835ade698e0bcf8506ecda2f7b4f302"

# The limits and the three files' paths come from conf/edge-llm-board.conf, which `provisioner render`
# fills from the manifest's image.memlock by one rule (provisioner/contracts/memlock.py): sessions get
# EDGE_LLM_MEMLOCK ("unlimited" or KiB, limits.conf), services EDGE_LLM_SERVICE_MEMLOCK ("infinity" or
# the same KiB with K, systemd). The files: EDGE_LLM_LIMITS_FILE, EDGE_LLM_SYSTEMD_DROPIN (the manager's
# default for every service) and EDGE_LLM_SERVE_DROPIN (every instance of the inference service; the
# serve unit and the fleet's per-model drop-in set no limit of their own). The rule, and so the grammar of
# the two values, is memlock.limits(); the check in do_install only refuses a variable set by hand to what
# the rule never gives (tests/image/test_memlock.py runs this recipe on the rule's values and on such ones).

inherit allarch

python do_install() {
    import os, re
    value = d.getVar("EDGE_LLM_MEMLOCK")
    if value != "unlimited" and not value.isdigit():
        bb.fatal("EDGE_LLM_MEMLOCK must be 'unlimited' or a KiB count, got %r" % value)
    systemd_value = d.getVar("EDGE_LLM_SERVICE_MEMLOCK")
    if systemd_value != "infinity" and not re.fullmatch(r"[0-9]+K", systemd_value or ""):
        bb.fatal("EDGE_LLM_SERVICE_MEMLOCK must be 'infinity' or a KiB count with K, got %r" % systemd_value)
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
