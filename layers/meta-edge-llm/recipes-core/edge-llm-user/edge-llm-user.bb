SUMMARY = "The inference user, in group fastrpc, and cdsprpcd enabled"
DESCRIPTION = "Non-root processes reach the cDSP's FastRPC device only through group fastrpc (fastrpc's \
               udev rule, mode 0660). Without it Genie fails with 'Failed to create device: 14001'."
SECTION = "base"
LICENSE = "MIT"
LIC_FILES_CHKSUM = "file://${COMMON_LICENSE_DIR}/MIT;md5=0835ade698e0bcf8506ecda2f7b4f302"

SRC_URI = "file://50-edge-llm.preset"

# EDGE_LLM_FASTRPC_GROUP: conf/edge-llm-board.conf; the user comes from the manifest's image.inference_user.
EDGE_LLM_INFERENCE_USER ??= "llm"

S = "${UNPACKDIR}"

inherit allarch useradd

USERADD_PACKAGES = "${PN}"
# fastrpc creates the group through sysusers at boot; create it at rootfs time too so useradd -G
# works (groupadd is skipped when the group already exists).
GROUPADD_PARAM:${PN} = "--system ${EDGE_LLM_FASTRPC_GROUP}"
USERADD_PARAM:${PN} = "--system --create-home --home-dir /home/${EDGE_LLM_INFERENCE_USER} \
                       --shell /bin/sh --groups ${EDGE_LLM_FASTRPC_GROUP} --user-group ${EDGE_LLM_INFERENCE_USER}"

do_install() {
    install -d ${D}${systemd_unitdir}/system-preset
    install -m 0644 ${S}/50-edge-llm.preset ${D}${systemd_unitdir}/system-preset/50-edge-llm.preset
}

FILES:${PN} += "${systemd_unitdir}/system-preset/50-edge-llm.preset"
RDEPENDS:${PN} = "fastrpc"
