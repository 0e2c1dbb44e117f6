SUMMARY = "On-board OpenAI-compatible LLM service (LiteRT-LM / Genie C APIs through ctypes)"
DESCRIPTION = "A stdlib-only Python service that loads the model once through the runtime's C API \
               (LiteRT-LM's c/engine.h library or QAIRT's libGenie.so) and serves GET /v1/models, \
               POST /v1/chat/completions and /v1/completions (SSE streaming), GET /health, /livez and \
               /metrics (Prometheus text written by the service itself, so python3-prometheus-client is \
               not needed). A bearer token per board; without it the service does not start. Instances \
               are edge-llm-serve@<model>.service, configured by <model>.json in EDGE_LLM_SERVE_CONFIG_DIR, each \
               on the port its edge-llm-serve@<model>.socket holds (both written by the fleet's launch \
               playbook). files/edge_llm_serve (the package, in python3's site-packages) and \
               files/edge-llm-serve (its entry point, EDGE_LLM_SERVE_BIN) are the one source: the \
               provisioner imports the package and its launch playbook copies it to boards."
SECTION = "ai"
LICENSE = "Apache-2.0"
LIC_FILES_CHKSUM = "file://${COMMON_LICENSE_DIR}/Apache-2.0;md5=89aea4e17d99a7cacdbeed46a0096b10"

SRC_URI = "file://edge-llm-serve \
           file://edge_llm_serve \
           file://edge-llm-serve@.service \
"

S = "${UNPACKDIR}"

inherit allarch systemd
# PYTHON_SITEPACKAGES_DIR = "${libdir}/${PYTHON_DIR}/site-packages" (openembedded-core 850aa92a
# meta/classes-recipe/python3-dir.bbclass line 12): where the target's python3 finds the package.
inherit python3-dir

# System user the service runs as (same variable as edge-llm-user; member of group fastrpc).
EDGE_LLM_INFERENCE_USER ??= "llm"

SYSTEMD_SERVICE:${PN} = "${EDGE_LLM_SERVE_UNIT}"
# Instances (one per model) are enabled by the image or the fleet's launch playbook, not here.
SYSTEMD_AUTO_ENABLE:${PN} = "disable"

do_configure[noexec] = "1"
do_compile[noexec] = "1"

do_install() {
    install -d ${D}$(dirname ${EDGE_LLM_SERVE_BIN}) ${D}${systemd_system_unitdir} ${D}${EDGE_LLM_SERVE_CONFIG_DIR}
    install -m 0755 ${UNPACKDIR}/edge-llm-serve ${D}${EDGE_LLM_SERVE_BIN}
    # the package's sources only (a checkout's __pycache__ stays out of the image)
    install -d ${D}${PYTHON_SITEPACKAGES_DIR}/edge_llm_serve/engines
    install -m 0644 ${UNPACKDIR}/edge_llm_serve/*.py ${D}${PYTHON_SITEPACKAGES_DIR}/edge_llm_serve/
    install -m 0644 ${UNPACKDIR}/edge_llm_serve/engines/*.py ${D}${PYTHON_SITEPACKAGES_DIR}/edge_llm_serve/engines/
    # the unit's @EDGE_LLM_*@ placeholders, the same ones provisioner/contracts/board.py serve_unit_text fills
    sed -e 's,@EDGE_LLM_INFERENCE_USER@,${EDGE_LLM_INFERENCE_USER},g' \
        -e 's,@EDGE_LLM_FASTRPC_SERVICE@,${EDGE_LLM_FASTRPC_SERVICE},g' \
        -e 's,@EDGE_LLM_FASTRPC_GROUP@,${EDGE_LLM_FASTRPC_GROUP},g' \
        -e 's,@EDGE_LLM_SERVE_BIN@,${EDGE_LLM_SERVE_BIN},g' \
        -e 's,@EDGE_LLM_SERVE_CONFIG_DIR@,${EDGE_LLM_SERVE_CONFIG_DIR},g' \
        ${UNPACKDIR}/edge-llm-serve@.service > ${D}${systemd_system_unitdir}/${EDGE_LLM_SERVE_UNIT}
    if grep -q '@[A-Z_]*@' ${D}${systemd_system_unitdir}/${EDGE_LLM_SERVE_UNIT}; then
        bbfatal "${EDGE_LLM_SERVE_UNIT}: a placeholder is left unfilled -> add it to the sed above"
    fi
    chmod 0644 ${D}${systemd_system_unitdir}/${EDGE_LLM_SERVE_UNIT}
}

FILES:${PN} += "${EDGE_LLM_SERVE_CONFIG_DIR} ${PYTHON_SITEPACKAGES_DIR}/edge_llm_serve"
# Modules by package per openembedded-core 06dd66e6 meta/recipes-devtools/python/python3/python3-manifest.json:
# ctypes, socket (io), hmac and http/ (netclient), queue (threading), resource, socketserver (netserver),
# html (html: http.server imports it at module level, and no package above pulls it in).
# tests/image/test_layer_python.py derives the list from the imports of the entry point and the package.
RDEPENDS:${PN} = "python3-core python3-ctypes python3-html python3-io python3-json python3-netclient \
                  python3-netserver python3-resource python3-threading"
