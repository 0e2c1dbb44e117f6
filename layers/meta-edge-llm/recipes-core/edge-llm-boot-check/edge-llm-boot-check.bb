SUMMARY = "Boot assessment: no good mark for a deployment without FastRPC or its trees"
DESCRIPTION = "A oneshot unit ordered before boot-complete.target and required by it, so systemd-bless-boot \
               only marks a counted boot entry good once the cDSP is reachable and every QAIRT, runtime and \
               model tree the image links into /opt resolves. Installed on OSTree (sota) images only."
HOMEPAGE = "https://systemd.io/AUTOMATIC_BOOT_ASSESSMENT/"
SECTION = "base"
LICENSE = "MIT"
LIC_FILES_CHKSUM = "file://${COMMON_LICENSE_DIR}/MIT;md5=0835ade698e0bcf8506ecda2f7b4f302"

SRC_URI = "file://edge-llm-boot-check \
           file://edge-llm-boot-check.service.in \
          "

# EDGE_LLM_FASTRPC_DEVICE and EDGE_LLM_FASTRPC_SERVICE: conf/edge-llm-board.conf (the board paths)
# where edge-llm-opt.bbclass writes the tmpfiles.d snippets that link the trees into /opt
EDGE_LLM_TMPFILES_DIR = "${nonarch_libdir}/tmpfiles.d"

S = "${UNPACKDIR}"

inherit allarch systemd

SYSTEMD_SERVICE:${PN} = "edge-llm-boot-check.service"
SYSTEMD_AUTO_ENABLE:${PN} = "enable"

do_install() {
    install -d ${D}${libexecdir} ${D}${systemd_system_unitdir}
    install -m 0755 ${S}/edge-llm-boot-check ${D}${libexecdir}/edge-llm-boot-check
    sed -e 's#@LIBEXEC@#${libexecdir}#g' -e 's#@DEVICE@#${EDGE_LLM_FASTRPC_DEVICE}#g' \
        -e 's#@SERVICE@#${EDGE_LLM_FASTRPC_SERVICE}#g' -e 's#@TMPFILES@#${EDGE_LLM_TMPFILES_DIR}#g' \
        ${S}/edge-llm-boot-check.service.in > ${D}${systemd_system_unitdir}/edge-llm-boot-check.service
    chmod 0644 ${D}${systemd_system_unitdir}/edge-llm-boot-check.service
}

FILES:${PN} += "${libexecdir}/edge-llm-boot-check"
