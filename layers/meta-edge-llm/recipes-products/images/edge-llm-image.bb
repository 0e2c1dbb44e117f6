# An edge-llm release image: QLI 2.0's qcom-multimedia-image plus the QAIRT builds, runtimes and
# models of one release manifest, with the board policy (memlock, download_mode, FastRPC, login).
require recipes-products/images/qcom-multimedia-image.bb

SUMMARY = "Qualcomm Linux multimedia image with on-device LLMs (edge-llm provisioner)"
LICENSE = "MIT"

# core-image and extrausers already come with qcom-multimedia-image; named here because the
# login policy class edits IMAGE_FEATURES and EXTRA_USERS_PARAMS (qcom-minimal-image sets the root
# password through extrausers). edge-llm-login-policy: production images drop QLI's root login
# features and fail the build if the rootfs still lets root log in with a password.
inherit core-image extrausers edge-llm-login-policy

# Model packages (edge-llm-model-<name>), set by `provisioner render`. Only this image reads it.
EDGE_LLM_MODEL_PACKAGES ??= ""
# Extra packages from the manifest's image.extra_packages.
EDGE_LLM_EXTRA_PACKAGES ??= ""
# The content of the board's release document EDGE_LLM_RELEASE_FILE (one-line JSON written by `provisioner render`).
EDGE_LLM_RELEASE_JSON ??= "{}"

IMAGE_INSTALL += "packagegroup-edge-llm ${EDGE_LLM_MODEL_PACKAGES} ${EDGE_LLM_EXTRA_PACKAGES}"

python edge_llm_release_json() {
    import json, os
    data = json.loads(d.getVar("EDGE_LLM_RELEASE_JSON"))
    path = d.getVar("IMAGE_ROOTFS") + d.getVar("EDGE_LLM_RELEASE_FILE")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(data, f, indent=2, sort_keys=True)
        f.write("\n")
}

python edge_llm_check_fastrpc() {
    import glob, os
    root = d.getVar("IMAGE_ROOTFS")
    service = d.getVar("EDGE_LLM_FASTRPC_SERVICE")
    if not os.path.exists(root + d.getVar("systemd_system_unitdir") + "/" + service):
        bb.fatal("cdsprpcd.service is not in the image -> fastrpc must be installed (packagegroup-edge-llm "
                 "depends on it); without it the NPU is unreachable (QnnDevice_create 14001)")
    if not glob.glob(root + d.getVar("sysconfdir") + "/systemd/system/*.wants/" + service):
        bb.fatal("cdsprpcd.service is installed but not enabled -> check the systemd preset "
                 "50-edge-llm.preset (edge-llm-user) and SYSTEMD_AUTO_ENABLE of fastrpc")
}

# An OSTree (sota) image loses everything under /opt: meta-updater's image_types_ostree.bbclass
# (uptane/meta-updater @ f0e1ccaf) links /opt to var/rootdirs/opt and removes the directory with only a
# ${OSTREE_RMDIR_HELPER_MSGTYPE} (default bbwarn). Setting that to bbfatal is not an option: the same
# helper guards /home, where useradd --create-home puts the inference user. So check /opt alone.
python edge_llm_check_opt_empty() {
    import os
    if not bb.utils.contains("DISTRO_FEATURES", "sota", True, False, d):
        return
    opt = d.getVar("IMAGE_ROOTFS") + "/opt"
    left = sorted("/" + os.path.relpath(os.path.join(top, n), d.getVar("IMAGE_ROOTFS"))
                  for top, dirs, files in os.walk(opt) for n in dirs + files)
    if left:
        bb.fatal("an OSTree image drops /opt, but the rootfs has %s -> install it under /usr and link it "
                 "from /opt with a tmpfiles.d snippet (inherit edge-llm-opt)" % ", ".join(left[:5]))
}

# Host keys are generated on each board at first boot (sshd_check_keys, oe-core openssh); one baked
# into the image would be shared by every board flashed with it (lib/edgellm/hostkeys.py says why).
python edge_llm_check_no_host_keys() {
    import edgellm.hostkeys as hk
    found = hk.baked_host_keys(d.getVar("IMAGE_ROOTFS"))
    if found:
        bb.fatal("the image ships SSH host keys (%s): every board flashed with it would share them -> remove "
                 "whatever installs them; sshd_check_keys generates each board's own at first boot"
                 % ", ".join(found[:4]))
}

edge_llm_check_no_host_keys[doc] = "Fails an image that ships SSH host keys (each board must make its own)"
edge_llm_check_opt_empty[doc] = "Fails a sota (OSTree) image that still has files in /opt, which the commit would drop"
edge_llm_check_fastrpc[doc] = "Fails an image in which cdsprpcd (FastRPC daemon for the cDSP) is not enabled"
edge_llm_release_json[doc] = "Writes EDGE_LLM_RELEASE_FILE from EDGE_LLM_RELEASE_JSON"
ROOTFS_POSTPROCESS_COMMAND += "edge_llm_release_json"
# Checks run last, after oe-core's own rootfs post-processing (users, presets) is done.
IMAGE_PREPROCESS_COMMAND += "edge_llm_check_fastrpc edge_llm_check_opt_empty edge_llm_check_no_host_keys"
