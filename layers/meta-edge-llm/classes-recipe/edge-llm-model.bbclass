# edge-llm-model: package one LLM (a .litertlm file or a Genie bundle directory) under
# ${EDGE_LLM_MODELS_ROOT}/<name>/<version>/ with a `current` symlink and a model.json that records
# its size and sha256, and refuse a model whose QAIRT build or SoC does not match the image.
#
# A model recipe (generated per model by `provisioner render`) sets only EDGE_LLM_MODEL_* variables,
# so changing a model re-runs this recipe and the image, nothing else.
#
# The match rule lives in lib/edgellm/modelcheck.py (shared with `provisioner render`, same message):
# it is checked when the recipe is parsed (declared values: the build fails before anything runs)
# and again in do_edge_llm_verify on the unpacked artifact (what the files really say).

EDGE_LLM_MODEL_NAME ??= "${@d.getVar('PN').replace('edge-llm-model-', '', 1)}"
EDGE_LLM_MODEL_KIND ??= "litertlm"
EDGE_LLM_MODEL_VERSION ??= "unpinned"
EDGE_LLM_MODEL_QAIRT ??= ""
EDGE_LLM_MODEL_SOC_MODEL ??= ""
EDGE_LLM_MODEL_DSP_ARCH ??= ""
EDGE_LLM_MODEL_FILE ??= ""
EDGE_LLM_MODEL_URI ??= ""
EDGE_LLM_MODEL_SHA256 ??= ""
EDGE_LLM_MODEL_SIZE ??= ""
EDGE_LLM_MODEL_LICENSE ??= "CLOSED"

# The files land in EDGE_LLM_MODELS_ROOT/<name>/<version>, or under /usr in an OSTree (sota) image with a
# boot-time link from there and a `current` link made only when missing (edge-llm-opt.bbclass:
# meta-updater empties /opt in the commit; the fleet's later `current` switches must survive a reboot).
inherit edge-llm-opt
EDGE_LLM_MODEL_INSTALL_DIR = "${EDGE_LLM_OPT_STORE}${EDGE_LLM_MODELS_ROOT}/${EDGE_LLM_MODEL_NAME}"
EDGE_LLM_OPT_DIRS = "${@os.path.dirname(d.getVar('EDGE_LLM_MODELS_ROOT'))} ${EDGE_LLM_MODELS_ROOT} \
                     ${EDGE_LLM_MODELS_ROOT}/${EDGE_LLM_MODEL_NAME}"
EDGE_LLM_OPT_LINKS = "${EDGE_LLM_MODELS_ROOT}/${EDGE_LLM_MODEL_NAME}/${EDGE_LLM_MODEL_VERSION}"
EDGE_LLM_OPT_CURRENT = "${EDGE_LLM_MODELS_ROOT}/${EDGE_LLM_MODEL_NAME}/current=${EDGE_LLM_MODEL_VERSION}"

SUMMARY ?= "LLM ${EDGE_LLM_MODEL_NAME} for QAIRT ${EDGE_LLM_MODEL_QAIRT}"
LICENSE ?= "${EDGE_LLM_MODEL_LICENSE}"

# Remote models carry their sha256; local files/bundles (file://) are checksummed by bitbake itself.
SRC_URI = "${EDGE_LLM_MODEL_URI}"
SRC_URI[model.sha256sum] = "${EDGE_LLM_MODEL_SHA256}"

S = "${UNPACKDIR}"

# Context binaries are compiled for one SoC: the package is machine specific.
PACKAGE_ARCH = "${MACHINE_ARCH}"
INHIBIT_DEFAULT_DEPS = "1"
INHIBIT_PACKAGE_STRIP = "1"
INHIBIT_PACKAGE_DEBUG_SPLIT = "1"

python () {
    import edgellm.modelcheck as mc
    model, image = mc.facts_from_vars(d.getVar)
    msg = mc.check_message(model, image)
    if msg:
        bb.fatal(msg)
    if not d.getVar("EDGE_LLM_MODEL_URI"):
        bb.fatal("%s: EDGE_LLM_MODEL_URI is empty -> regenerate the model recipe with `provisioner render`"
                 % d.getVar("PN"))
}

def edge_llm_model_source(d):
    """Path of the unpacked model file or bundle directory (found by name under UNPACKDIR)."""
    import os
    unpackdir = d.getVar("UNPACKDIR")
    name = d.getVar("EDGE_LLM_MODEL_FILE")
    for root, dirs, files in os.walk(unpackdir):
        if name in dirs or name in files:
            return os.path.join(root, name)
    if d.getVar("EDGE_LLM_MODEL_KIND") == "genie":
        # a bundle fetched as an archive: the folder that holds genie_config.json
        for root, dirs, files in os.walk(unpackdir):
            if "genie_config.json" in files:
                return root
    bb.fatal("%s: %s not found under %s after unpack" % (d.getVar("PN"), name, unpackdir))

python do_edge_llm_verify() {
    import os
    import edgellm.modelcheck as mc
    src = edge_llm_model_source(d)
    model, image = mc.facts_from_vars(d.getVar)
    if d.getVar("EDGE_LLM_MODEL_KIND") == "genie":
        if not os.path.isdir(src):
            bb.fatal("%s: a Genie bundle must be a directory, got %s" % (d.getVar("PN"), src))
        found = mc.genie_bundle_facts(model.name, src)
        model = mc.ModelFacts(name=model.name, kind="genie", qairt=found.qairt or model.qairt,
                              soc_model=found.soc_model if found.soc_model is not None else model.soc_model,
                              dsp_arch=found.dsp_arch or model.dsp_arch)
    else:
        want = d.getVar("EDGE_LLM_MODEL_SIZE")
        have = os.path.getsize(src)
        if want and int(want) != have:
            bb.fatal("%s: %s is %d bytes, expected %s (truncated download?) -> delete it from DL_DIR and "
                     "fetch again" % (d.getVar("PN"), os.path.basename(src), have, want))
        builds = mc.litertlm_qairt_builds(src)
        if builds and model.qairt not in builds:
            model = mc.ModelFacts(name=model.name, kind=model.kind, qairt=builds[0],
                                  soc_model=model.soc_model, dsp_arch=model.dsp_arch)
        elif not builds:
            bb.warn("%s: no QAIRT build id found in %s; trusting EDGE_LLM_MODEL_QAIRT=%s"
                    % (d.getVar("PN"), os.path.basename(src), model.qairt))
    msg = mc.check_message(model, image)
    if msg:
        bb.fatal(msg)
}
addtask edge_llm_verify after do_unpack before do_install
do_edge_llm_verify[doc] = "Checks the unpacked model against the image's QAIRT build and SoC (lib/edgellm/modelcheck.py)"

do_configure[noexec] = "1"
do_compile[noexec] = "1"

python do_install() {
    import hashlib, json, os, shutil
    src = edge_llm_model_source(d)
    name = d.getVar("EDGE_LLM_MODEL_NAME")
    version = d.getVar("EDGE_LLM_MODEL_VERSION")
    top = d.getVar("D") + d.getVar("EDGE_LLM_MODEL_INSTALL_DIR")
    dest = "%s/%s" % (top, version)
    os.makedirs(dest, exist_ok=True)
    if os.path.isdir(src):
        for entry in sorted(os.listdir(src)):
            s = os.path.join(src, entry)
            if os.path.isdir(s):
                shutil.copytree(s, os.path.join(dest, entry))
            else:
                shutil.copyfile(s, os.path.join(dest, entry))
    else:
        shutil.copyfile(src, os.path.join(dest, os.path.basename(src)))
    files = []
    total = 0
    digest_all = hashlib.sha256()
    for dirpath, dirnames, filenames in os.walk(dest):
        dirnames.sort()
        for fn in sorted(filenames):
            p = os.path.join(dirpath, fn)
            h = hashlib.sha256()
            with open(p, "rb") as f:
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    h.update(chunk)
            size = os.path.getsize(p)
            rel = os.path.relpath(p, dest)
            files.append({"path": rel, "size": size, "sha256": h.hexdigest()})
            digest_all.update(("%s %s\n" % (h.hexdigest(), rel)).encode())
            total += size
    sha = files[0]["sha256"] if len(files) == 1 else digest_all.hexdigest()
    want = d.getVar("EDGE_LLM_MODEL_SHA256")
    if want and d.getVar("EDGE_LLM_MODEL_KIND") != "genie" and want != sha:
        bb.fatal("%s: sha256 %s does not match the manifest's %s" % (d.getVar("PN"), sha, want))
    meta = {"name": name, "kind": d.getVar("EDGE_LLM_MODEL_KIND"), "version": version,
            "qairt": d.getVar("EDGE_LLM_MODEL_QAIRT"), "size": total, "sha256": sha, "files": files}
    with open(os.path.join(dest, "model.json"), "w") as f:
        json.dump(meta, f, indent=2, sort_keys=True)
        f.write("\n")
    os.symlink(version, "%s/current" % top)
}

FILES:${PN} += "${EDGE_LLM_MODEL_INSTALL_DIR}"
# Model weights and HTP context binaries are data, not code for the target CPU.
INSANE_SKIP:${PN} += "arch already-stripped file-rdeps"
