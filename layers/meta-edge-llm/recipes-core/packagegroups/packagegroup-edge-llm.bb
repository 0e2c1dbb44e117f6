SUMMARY = "Everything an edge-llm image runs models with, except the models themselves"
DESCRIPTION = "The QAIRT builds the manifest pins (host libraries + this machine's Hexagon skel, Genie \
               when wanted), the LiteRT-LM runtime when wanted, and the board policy: memlock, download_mode, \
               FastRPC access for the inference user, login policy. Models are added by the image, so a model \
               change never touches this package group."
LICENSE = "MIT"

# Hexagon skel package and the QAIRT build list depend on the machine.
PACKAGE_ARCH = "${MACHINE_ARCH}"

inherit packagegroup

# QAIRT builds to install (manifest `qairt`), space separated.
EDGE_LLM_QAIRT_VERSIONS ??= ""
# litert_lm and/or genie (manifest `runtimes`).
EDGE_LLM_RUNTIMES ??= ""
# Hexagon arch of the machine's cDSP (v75 on iq-8275-evk, v73 on iq-9075-evk), from the board catalog.
EDGE_LLM_HEXAGON_ARCH ??= ""

def edge_llm_runtime_packages(d):
    """QAIRT and runtime packages for the manifest's choices (one place: keeps the image recipe small)."""
    qairt = (d.getVar("EDGE_LLM_QAIRT_VERSIONS") or "").split()
    runtimes = (d.getVar("EDGE_LLM_RUNTIMES") or "").split()
    arch = d.getVar("EDGE_LLM_HEXAGON_ARCH") or ""
    if qairt and not arch:
        bb.fatal("EDGE_LLM_HEXAGON_ARCH is not set -> render the kas configuration with `provisioner render`")
    pkgs = []
    for v in qairt:
        pkgs += ["qairt-runtime-%s" % v, "qairt-runtime-%s-hexagon-%s" % (v, arch)]
        if "genie" in runtimes:
            pkgs.append("qairt-runtime-%s-genie" % v)
    if "litert_lm" in runtimes:
        pkgs.append("litert-lm-runtime")
    return " ".join(pkgs)

# On an OSTree (sota) image: the boot-local health check systemd-bless-boot waits for.
EDGE_LLM_BOOT_CHECK = "${@bb.utils.contains('DISTRO_FEATURES', 'sota', 'edge-llm-boot-check', '', d)}"

# The Python our Ansible modules run with on the board (the fleet's deploy/verify/serve/ostree/api
# modules, their module_utils, and ansible-core's module_utils/basic.py with what it imports, e.g.
# shlex), by package per openembedded-core 06dd66e6 meta/recipes-devtools/python/python3/
# python3-manifest.json. tests/image/test_layer_python.py derives the list from the imports.
EDGE_LLM_ANSIBLE_PYTHON = "python3-compression python3-core python3-crypt python3-ctypes python3-datetime \
                           python3-io python3-json python3-logging python3-mmap python3-netclient \
                           python3-numbers python3-resource python3-shell python3-statistics"

RDEPENDS:${PN} = "\
    ${@edge_llm_runtime_packages(d)} \
    ${EDGE_LLM_ANSIBLE_PYTHON} \
    ${EDGE_LLM_BOOT_CHECK} \
    edge-llm-download-mode \
    edge-llm-identity \
    edge-llm-login \
    edge-llm-memlock \
    edge-llm-serve \
    edge-llm-user \
    fastrpc \
"
