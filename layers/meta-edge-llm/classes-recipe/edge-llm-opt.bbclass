# edge-llm-opt: where a recipe that belongs in /opt (QAIRT builds, LiteRT-LM, models) really installs.
#
# An OSTree (sota) image keeps only /usr in the commit: meta-updater's image_types_ostree.bbclass
# (github.com/uptane/meta-updater classes/image_types_ostree.bbclass @ f0e1ccaf) replaces /opt with a
# link to var/rootdirs/opt and deletes what the image put there, with only a bbwarn. The `sota`
# DISTRO_FEATURE is the switch meta-updater itself uses (conf/distro/sota.conf.inc @ f0e1ccaf appends it;
# meta-qcom-distro conf/distro/include/qcom-distro-sota.inc @ 775dc8c7 requires that file).
#
# With `sota`, each tree goes to ${EDGE_LLM_OPT_STORE}<its /opt path> (inside the commit, read-only,
# one copy per deployment) and a tmpfiles.d snippet makes the /opt path a link to it at boot:
#   d  <parent>                        real directories in /var/rootdirs/opt, so the fleet can still
#                                      deploy other versions beside them (they persist across deployments)
#   L+ <versioned dir> -> <store path> re-pointed at every boot, so a new deployment's tree wins
#   L  <dir>/current   -> <version>    only created when missing: a model the fleet switched to stays
# Without `sota` the store prefix is empty: /opt as before, no snippet.
#
# A recipe sets EDGE_LLM_OPT_DIRS (the /opt parents it needs), EDGE_LLM_OPT_LINKS (its versioned /opt
# directories) and optionally EDGE_LLM_OPT_CURRENT ("<dir>/current=<version>" pairs).

EDGE_LLM_OPT_STORE = "${@bb.utils.contains('DISTRO_FEATURES', 'sota', '${nonarch_libdir}/edge-llm', '', d)}"
# systemd-tmpfiles' vendor directory, as oe-core's recipes install there (openembedded-core 06dd66e6
# meta/recipes-core/systemd/systemd_259.5.bb, dbus_1.16.2.bb: ${nonarch_libdir}/tmpfiles.d).
EDGE_LLM_TMPFILES_DIR = "${nonarch_libdir}/tmpfiles.d"
EDGE_LLM_TMPFILES_CONF = "${@'${EDGE_LLM_TMPFILES_DIR}/edge-llm-${PN}.conf' if d.getVar('EDGE_LLM_OPT_STORE') else ''}"
EDGE_LLM_OPT_DIRS ??= ""
EDGE_LLM_OPT_LINKS ??= ""
EDGE_LLM_OPT_CURRENT ??= ""

def edge_llm_opt_tmpfiles_lines(d):
    """The tmpfiles.d lines that link this recipe's /opt paths to its trees in the commit."""
    store = d.getVar("EDGE_LLM_OPT_STORE")
    lines = ["d %s 0755 root root -" % p for p in (d.getVar("EDGE_LLM_OPT_DIRS") or "").split()]
    lines += ["L+ %s - - - - %s%s" % (p, store, p) for p in (d.getVar("EDGE_LLM_OPT_LINKS") or "").split()]
    for pair in (d.getVar("EDGE_LLM_OPT_CURRENT") or "").split():
        link, _, target = pair.partition("=")
        lines.append("L %s - - - - %s" % (link, target))
    return lines

python edge_llm_opt_tmpfiles() {
    import os
    conf = d.getVar("EDGE_LLM_TMPFILES_CONF")
    if not conf:
        return
    path = d.getVar("D") + conf
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write("# /opt links of %s into the OSTree commit (edge-llm-opt.bbclass)\n" % d.getVar("PN"))
        f.write("".join(line + "\n" for line in edge_llm_opt_tmpfiles_lines(d)))
}
edge_llm_opt_tmpfiles[doc] = "Writes the tmpfiles.d snippet linking /opt paths to their trees under /usr (sota images)"
do_install[postfuncs] += "edge_llm_opt_tmpfiles"
do_install[vardeps] += "EDGE_LLM_OPT_STORE EDGE_LLM_OPT_DIRS EDGE_LLM_OPT_LINKS EDGE_LLM_OPT_CURRENT"

FILES:${PN} += "${EDGE_LLM_TMPFILES_CONF}"
