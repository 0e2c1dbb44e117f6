# The production login policy of an image: inherit it in any image that ships to the field.
#
# QLI's images let root log in: qcom-minimal-image.bb (meta-qcom-distro 775dc8c7,
# recipes-products/images/qcom-minimal-image.bb, required by qcom-console-image and
# qcom-multimedia-image) has IMAGE_FEATURES += "... allow-root-login ..." and sets root's
# password to the oelinux123 hash with EXTRA_USERS_PARAMS; meta-qcom's ci/base.yml 'extra' snippet
# adds "allow-empty-password empty-root-password allow-root-login" through EXTRA_IMAGE_FEATURES.
# An EXTRA_IMAGE_FEATURES:remove only reaches the second: oe-core's bitbake.conf (06dd66e6) appends
# EXTRA_IMAGE_FEATURES to IMAGE_FEATURES, so the recipe's own allow-root-login stays and
# rootfs-postcommands.bbclass then runs ssh_allow_root_login (PermitRootLogin yes, dropbear
# without -w). IMAGE_FEATURES:remove takes them out of the final value whoever added them.
#
# Scope: only images that inherit this class, and only when EDGE_LLM_LOGIN_POLICY is not "debug"
# (debug images keep QLI's defaults). edge_llm_check_login then reads the finished rootfs and
# fails the build if root can still log in with a password (lib/edgellm/loginpolicy.py), and a keys-only
# sota (OSTree) image if no key root can use is in the commit (edge-llm-login puts them under /usr there).

# disabled | keys-only | debug (manifest image.root_login)
EDGE_LLM_LOGIN_POLICY ??= "disabled"
# oe-core 06dd66e6 core-image.bbclass: these three were part of debug-tweaks, which image.bbclass
# no longer accepts; debug-tweaks is removed too so an older fragment cannot bring it back.
EDGE_LLM_DEBUG_LOGIN_FEATURES = "allow-empty-password empty-root-password allow-root-login debug-tweaks"
# '*' matches no password (console and SSH password logins fail) while SSH keys still work,
# unlike a locked '!' account; replaces qcom-minimal-image's oelinux123.
EDGE_LLM_ROOT_PASSWORD_PARAMS = "usermod -p '*' root;"

def edge_llm_production(d, value):
    """value for production policies, '' for debug (used in :remove/:append below)."""
    return "" if d.getVar("EDGE_LLM_LOGIN_POLICY") == "debug" else d.getVar(value)

# oelint wants image variables in image recipes; this class is one, for images to inherit.
# nooelint: oelint.vars.outofcontext
IMAGE_FEATURES:remove = "${@edge_llm_production(d, 'EDGE_LLM_DEBUG_LOGIN_FEATURES')}"
# nooelint: oelint.vars.outofcontext
EXTRA_IMAGE_FEATURES:remove = "${@edge_llm_production(d, 'EDGE_LLM_DEBUG_LOGIN_FEATURES')}"
EXTRA_USERS_PARAMS:append = " ${@edge_llm_production(d, 'EDGE_LLM_ROOT_PASSWORD_PARAMS')}"

python edge_llm_check_login() {
    import edgellm.loginpolicy as lp
    policy = d.getVar("EDGE_LLM_LOGIN_POLICY")
    if policy == "debug":
        return
    if policy not in lp.ALLOWED_ROOT_LOGIN:
        bb.fatal("EDGE_LLM_LOGIN_POLICY must be disabled, keys-only or debug, got %r" % policy)
    found = lp.problems(d.getVar("IMAGE_ROOTFS"), policy, d.getVar("sysconfdir"), d.getVar("sbindir"))
    if policy == "keys-only" and bb.utils.contains("DISTRO_FEATURES", "sota", True, False, d):
        # an OSTree (sota) board boots without /root's contents: keys-only with no reachable key locks
        # everyone out, Ansible included (meta-updater image_types_ostree.bbclass @ f0e1ccaf lines 99-100)
        keys = lp.ostree_root_key_problems(d.getVar("IMAGE_ROOTFS"), d.getVar("sysconfdir"), d.getVar("sbindir"),
                                           d.getVar("ROOT_HOME"))
        if keys:
            bb.fatal("sota image (EDGE_LLM_LOGIN_POLICY keys-only) would boot with no key root can log in "
                     "with: %s" % "; ".join(keys))
    if found:
        bb.fatal("production image (EDGE_LLM_LOGIN_POLICY %s) still lets root log in: %s -> check "
                 "IMAGE_FEATURES/EXTRA_IMAGE_FEATURES (allow-root-login, allow-empty-password, "
                 "empty-root-password) and EXTRA_USERS_PARAMS in later kas fragments and bbappends"
                 % (policy, "; ".join(found)))
}
edge_llm_check_login[doc] = "Fails a production image whose rootfs lets root log in with a password or none"
edge_llm_check_login[vardeps] += "EDGE_LLM_LOGIN_POLICY"

# Runs in do_image, after every ROOTFS_POSTPROCESS_COMMAND (oe-core's ssh_allow_* and
# extrausers included) and before any image file is written.
IMAGE_PREPROCESS_COMMAND += "edge_llm_check_login"
