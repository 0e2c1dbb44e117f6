SUMMARY = "Board identity on the console banner: soc0 and UFS serials, SSH host public keys"
DESCRIPTION = "A oneshot unit, after sshdgenkeys.service and before getty-pre.target, writes the soc0 serial, \
               the UFS serial and the SSH host public keys generated on the board at first boot to a file in \
               /run that an issue.d symlink points at, so agetty prints them above every login prompt and a \
               factory station records them even where root cannot log in. No key is generated or shipped \
               here: sshd_check_keys (oe-core openssh) creates them on the board."
SECTION = "base"
LICENSE = "MIT"
LIC_FILES_CHKSUM = "file://${COMMON_LICENSE_DIR}/MIT;md5=0835ade698e0bcf8506ecda2f7b4f302"

SRC_URI = "file://edge-llm-identity \
           file://edge-llm-identity.service.in \
          "

# EDGE_LLM_IDENTITY_SCRIPT, EDGE_LLM_IDENTITY_ISSUE, EDGE_LLM_IDENTITY_RUNFILE and the paths the script reads
# (EDGE_LLM_SOC0_SERIAL, EDGE_LLM_UFS_SERIAL_GLOB, EDGE_LLM_SSH_HOST_KEY_GLOB): conf/edge-llm-board.conf

S = "${UNPACKDIR}"

inherit allarch systemd

SYSTEMD_SERVICE:${PN} = "edge-llm-identity.service"
SYSTEMD_AUTO_ENABLE:${PN} = "enable"

do_install() {
    install -d ${D}$(dirname ${EDGE_LLM_IDENTITY_SCRIPT}) ${D}${systemd_system_unitdir} \
        ${D}$(dirname ${EDGE_LLM_IDENTITY_ISSUE})
    # the script's @EDGE_LLM_*@ placeholders, the same ones provisioner/contracts/board.py identity_script_text fills
    sed -e 's#@EDGE_LLM_SOC0_SERIAL@#${EDGE_LLM_SOC0_SERIAL}#g' \
        -e 's#@EDGE_LLM_UFS_SERIAL_GLOB@#${EDGE_LLM_UFS_SERIAL_GLOB}#g' \
        -e 's#@EDGE_LLM_SSH_HOST_KEY_GLOB@#${EDGE_LLM_SSH_HOST_KEY_GLOB}#g' \
        ${S}/edge-llm-identity > ${D}${EDGE_LLM_IDENTITY_SCRIPT}
    chmod 0755 ${D}${EDGE_LLM_IDENTITY_SCRIPT}
    sed -e 's#@SCRIPT@#${EDGE_LLM_IDENTITY_SCRIPT}#g' -e 's#@RUNFILE@#${EDGE_LLM_IDENTITY_RUNFILE}#g' \
        ${S}/edge-llm-identity.service.in > ${D}${systemd_system_unitdir}/edge-llm-identity.service
    chmod 0644 ${D}${systemd_system_unitdir}/edge-llm-identity.service
    ln -sf ${EDGE_LLM_IDENTITY_RUNFILE} ${D}${EDGE_LLM_IDENTITY_ISSUE}
}

FILES:${PN} += "${EDGE_LLM_IDENTITY_SCRIPT} ${EDGE_LLM_IDENTITY_ISSUE}"
