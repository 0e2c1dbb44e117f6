SUMMARY = "On-board HTTP inference service for litert_lm_main and genie-t2t-run"
DESCRIPTION = "A stdlib-only Python HTTP service (GET /health, POST /v1/completions, OpenAI-compatible \
               subset) that runs the model's runtime from an argv list with its chat template, one request \
               at a time per NPU with a bounded queue. Instances are edge-llm-serve@<model>.service, configured \
               by /etc/edge-llm/serve/<model>.json (written by the fleet's launch playbook). files/edge-llm-serve \
               is the one source: the provisioner imports it and its launch playbook copies it to boards."
SECTION = "ai"
LICENSE = "Apache-2.0"
LIC_FILES_CHKSUM = "file://${COMMON_LICENSE_DIR}/Apache-2.0;md5=89aea4e17d99a7cacdbeed46a0096b10"

SRC_URI = "file://edge-llm-serve \
           file://edge-llm-serve@.service \
"

S = "${UNPACKDIR}"

inherit allarch systemd

# System user the service runs as (same variable as edge-llm-user; member of group fastrpc).
EDGE_LLM_INFERENCE_USER ??= "llm"

SYSTEMD_SERVICE:${PN} = "edge-llm-serve@.service"
# Instances (one per model) are enabled by the image or the fleet's launch playbook, not here.
SYSTEMD_AUTO_ENABLE:${PN} = "disable"

do_configure[noexec] = "1"
do_compile[noexec] = "1"

do_install() {
    install -d ${D}${bindir} ${D}${systemd_system_unitdir} ${D}${sysconfdir}/edge-llm/serve
    install -m 0755 ${UNPACKDIR}/edge-llm-serve ${D}${bindir}/edge-llm-serve
    sed -e 's,@EDGE_LLM_INFERENCE_USER@,${EDGE_LLM_INFERENCE_USER},g' \
        ${UNPACKDIR}/edge-llm-serve@.service > ${D}${systemd_system_unitdir}/edge-llm-serve@.service
    chmod 0644 ${D}${systemd_system_unitdir}/edge-llm-serve@.service
}

FILES:${PN} += "${sysconfdir}/edge-llm/serve"
RDEPENDS:${PN} = "python3-core python3-json python3-netserver"
