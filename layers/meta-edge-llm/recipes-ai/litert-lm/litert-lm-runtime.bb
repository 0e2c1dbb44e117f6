SUMMARY = "LiteRT-LM NPU runtime ${LITERT_LM_REV} for QAIRT ${LITERT_LM_QAIRT}"
DESCRIPTION = "Prebuilt aarch64 litert_lm_main, libLiteRt.so, libLiteRtDispatch_Qualcomm.so, \
               libGemmaModelConstraintProvider.so and the C API library liblitert-lm.so (LiteRT-LM's \
               //python/litert_lm:litert-lm, which edge-llm-serve binds to keep the model loaded), built by `provisioner litert build` from LiteRT-LM ${LITERT_LM_REV} \
               with the three Linux/QLI patches in files/ (dispatch dir, HTP burst, SoC guard). Installed under \
               ${LITERT_LM_ROOT}/${LITERT_LM_REV}."
HOMEPAGE = "https://github.com/google-ai-edge/LiteRT-LM"
SECTION = "libs"
LICENSE = "Apache-2.0"
LIC_FILES_CHKSUM = "file://${COMMON_LICENSE_DIR}/Apache-2.0;md5=89aea4e17d99a7cacdbeed46a0096b10"

# The pins come from `provisioner render` (the edge-llm local.conf entry writes LITERT_LM_REV,
# LITERT_LM_QAIRT and LITERT_LM_TARBALL from the provisioner's one list of pins). These weak
# defaults only serve a layer used without render; a test holds them equal to the provisioner's.
LITERT_LM_REV ??= "cbf463d97fa3"
# The runtime is compiled against exactly this QAIRT build (LiteRT's third_party/qairt pin).
LITERT_LM_QAIRT ??= "2.44.0.260225"
LITERT_LM_ROOT ??= "${EDGE_LLM_LITERT_ROOT}"
# The files land in LITERT_LM_ROOT/<rev>, or under /usr in an OSTree (sota) image with a boot-time
# link from LITERT_LM_ROOT/<rev> (edge-llm-opt.bbclass: meta-updater empties /opt in the commit).
inherit edge-llm-opt
LITERT_LM_INSTALL_DIR = "${EDGE_LLM_OPT_STORE}${LITERT_LM_ROOT}/${LITERT_LM_REV}"
EDGE_LLM_OPT_DIRS = "${LITERT_LM_ROOT}"
EDGE_LLM_OPT_LINKS = "${LITERT_LM_ROOT}/${LITERT_LM_REV}"
LITERT_LM_TARBALL ??= "litert-lm-runtime-${LITERT_LM_REV}-qairt${LITERT_LM_QAIRT}-aarch64.tar.gz"
# The tarball is normally already in DL_DIR (`provisioner litert build` puts it there); set this
# to your artifact server to fetch it from there instead. The host part is a placeholder on purpose.
LITERT_LM_RUNTIME_BASE_URI ??= "https://artifacts.edge-llm.invalid/litert-lm"
# sha256 of the tarball, written by `provisioner litert build` / the release step. Never guessed.
LITERT_LM_RUNTIME_SHA256 ??= ""

PV = "0.0+git${LITERT_LM_REV}"

# The patches the tarball is built with (`provisioner litert build` applies these same files); they
# are shipped next to the runtime so a board says exactly what it runs, and a patch change rebuilds it.
LITERT_LM_PATCHES = "\
    0001-litert_util-use-the-dispatch-library-dir-on-Linux.patch \
    0002-npu-executor-request-HTP-burst-mode-on-Linux.patch \
    0003-htp_backend-let-QNN-detect-the-SoC-on-aarch64.patch \
"

SRC_URI = "${LITERT_LM_RUNTIME_BASE_URI}/${LITERT_LM_TARBALL};name=runtime;subdir=litert-lm-runtime \
           ${@' '.join('file://%s;apply=no;subdir=patches' % p for p in d.getVar('LITERT_LM_PATCHES').split())} \
"
SRC_URI[runtime.sha256sum] = "${LITERT_LM_RUNTIME_SHA256}"

S = "${UNPACKDIR}/litert-lm-runtime"

COMPATIBLE_HOST = "aarch64.*-linux"

python litert_lm_require_checksum() {
    if not d.getVar("LITERT_LM_RUNTIME_SHA256"):
        bb.fatal("litert-lm-runtime: LITERT_LM_RUNTIME_SHA256 not set -> run `provisioner litert build` "
                 "(it writes %s to DL_DIR and prints its sha256) and set LITERT_LM_RUNTIME_SHA256"
                 % d.getVar("LITERT_LM_TARBALL"))
}
litert_lm_require_checksum[doc] = "Stops do_fetch with the fix when the tarball sha256 is unknown"
do_fetch[prefuncs] += "litert_lm_require_checksum"

do_configure[noexec] = "1"
do_compile[noexec] = "1"

do_install() {
    top=${S}
    if [ ! -e "$top/bin/litert_lm_main" ]; then
        top=$(dirname "$(dirname "$(find ${S} -path '*/bin/litert_lm_main' | head -n 1)")")
    fi
    for f in bin/litert_lm_main lib/libLiteRtDispatch_Qualcomm.so lib/libLiteRt.so lib/libGemmaModelConstraintProvider.so \
             lib/liblitert-lm.so; do
        if [ ! -f "$top/$f" ]; then
            bbfatal "${LITERT_LM_TARBALL} has no $f (rebuild it with provisioner litert build)"
        fi
    done
    install -d ${D}${LITERT_LM_INSTALL_DIR}/bin ${D}${LITERT_LM_INSTALL_DIR}/lib
    install -m 0755 $top/bin/litert_lm_main ${D}${LITERT_LM_INSTALL_DIR}/bin/
    install -m 0644 $top/lib/*.so ${D}${LITERT_LM_INSTALL_DIR}/lib/
    install -d ${D}${LITERT_LM_INSTALL_DIR}/patches
    for p in ${LITERT_LM_PATCHES}; do
        install -m 0644 ${UNPACKDIR}/patches/$p ${D}${LITERT_LM_INSTALL_DIR}/patches/
    done
}

INHIBIT_PACKAGE_STRIP = "1"
INHIBIT_PACKAGE_DEBUG_SPLIT = "1"
EXCLUDE_FROM_SHLIBS = "1"
SOLIBS = ".so"
FILES_SOLIBSDEV = ""
FILES:${PN} += "${LITERT_LM_INSTALL_DIR}"
# The QNN libraries it loads come from this exact QAIRT build, never /usr/lib's qairt-sdk.
RDEPENDS:${PN} = "qairt-runtime-${LITERT_LM_QAIRT}"
# libdir: side-by-side install under /opt; dev-so: unversioned .so from the Bazel build;
# file-rdeps: QNN libraries are resolved at run time via LD_LIBRARY_PATH into /opt/qairt.
INSANE_SKIP:${PN} += "already-stripped libdir dev-so ldflags file-rdeps"
