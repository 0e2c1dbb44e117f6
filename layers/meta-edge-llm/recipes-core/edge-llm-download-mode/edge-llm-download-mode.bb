SUMMARY = "Apply the image's qcom_scm download_mode at boot"
DESCRIPTION = "download_mode=1 parks a crashed SoC in EDL ramdump (USB 05c6:900e) until someone power \
               cycles it; production images use 0 so the board reboots. The kernel command line carries the same \
               value (kas local_conf_header 'cmdline'); this service re-applies it at runtime in case the boot \
               loader or a later kernel change overrides the command line."
SECTION = "base"
LICENSE = "MIT"
LIC_FILES_CHKSUM = "file://${COMMON_LICENSE_DIR}/MIT;md5=0835ade698e0bcf8506ecda2f7b4f302"

SRC_URI = "file://edge-llm-download-mode.service.in"

# 0 (production) or 1 (debug). Set by `provisioner render` from the manifest's image.download_mode.
EDGE_LLM_DOWNLOAD_MODE ??= "0"
# EDGE_LLM_DOWNLOAD_MODE_PARAM: conf/edge-llm-board.conf (the board paths)

S = "${UNPACKDIR}"

inherit allarch systemd

SYSTEMD_SERVICE:${PN} = "edge-llm-download-mode.service"
SYSTEMD_AUTO_ENABLE:${PN} = "enable"

do_install() {
    case "${EDGE_LLM_DOWNLOAD_MODE}" in
        0|1) ;;
        *) bbfatal "EDGE_LLM_DOWNLOAD_MODE must be 0 or 1, got '${EDGE_LLM_DOWNLOAD_MODE}'" ;;
    esac
    install -d ${D}${systemd_system_unitdir}
    sed -e 's#@MODE@#${EDGE_LLM_DOWNLOAD_MODE}#g' -e 's#@PARAM@#${EDGE_LLM_DOWNLOAD_MODE_PARAM}#g' \
        ${S}/edge-llm-download-mode.service.in > ${D}${systemd_system_unitdir}/edge-llm-download-mode.service
    chmod 0644 ${D}${systemd_system_unitdir}/edge-llm-download-mode.service
}
