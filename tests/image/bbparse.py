"""Parse layer files with bitbake's real parser (PyPI bitbake-setup ships ``bb``), offline.

Full OpenEmbedded parsing needs oe-core; here the oe-core classes our recipes inherit are empty
stand-ins (``classes/*.bbclass`` in a temp dir) and a small ``bitbake.conf`` defines the few
directory variables the recipes expand. Everything else - syntax, includes, ``require``,
overrides, ``:append``/``:remove``, anonymous python, ``addpylib`` from conf/layer.conf - is
bitbake's own code. ``task_signatures`` uses bitbake's dependency tracker (the same code
siggen uses) to compute which variables each task reads and hashes their values, so tests can
see which recipes a manifest change would rebuild.
"""

from __future__ import annotations

import logging
import sys
import types
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
LAYER = REPO / "layers" / "meta-edge-llm"
# meta-qcom-distro's image stack (qcom-minimal -> console -> multimedia) as the real recipes set it
QCOM_DISTRO_FIXTURE = REPO / "tests" / "fixtures" / "bitbake" / "meta-qcom-distro"

STUB_CLASSES = ("packagegroup", "useradd", "systemd", "allarch", "extrausers", "image", "features_check",
                "image-adbd", "python3-dir")

# What a fixture meta-qcom-distro image stack (tests/fixtures/bitbake/meta-qcom-distro) needs to be
# judged like the real one. The login-related ROOTFS_POSTPROCESS_COMMANDs oe-core schedules from
# IMAGE_FEATURES (openembedded-core 06dd66e6 meta/classes-recipe/rootfs-postcommands.bbclass:
# zap_empty_root_password unless empty-root-password, ssh_allow_empty_password with
# allow-empty-password, ssh_allow_root_login with allow-root-login); the functions themselves are
# not needed, only which of them a configuration would run.
ROOTFS_POSTCOMMANDS_BBCLASS = """\
def _feature_cmd(d, feature, when_set, when_unset):
    return when_set if bb.utils.contains("IMAGE_FEATURES", feature, True, False, d) else when_unset
ROOTFS_POSTPROCESS_COMMAND += "${@_feature_cmd(d, 'empty-root-password', '', 'zap_empty_root_password')}"
ROOTFS_POSTPROCESS_COMMAND += "${@_feature_cmd(d, 'allow-empty-password', 'ssh_allow_empty_password', '')}"
ROOTFS_POSTPROCESS_COMMAND += "${@_feature_cmd(d, 'allow-root-login', 'ssh_allow_root_login', '')}"
"""

# The task chain of oe-core's base.bbclass, reduced to what decides a task's signature here:
# which variables each task reads (fetch: SRC_URI and checksums; package: PACKAGES/FILES/RDEPENDS).
BASE_BBCLASS = """\
bbfatal() {
    echo "ERROR: $*" >&2
    exit 1
}
bbnote() {
    echo "NOTE: $*"
}
python do_fetch() {
    for url in (d.getVar("SRC_URI") or "").split():
        pass
}
do_fetch[vardeps] += "SRC_URI"
addtask fetch
python do_unpack() {
    d.getVar("SRC_URI")
}
addtask unpack after do_fetch
do_patch() {
    :
}
addtask patch after do_unpack
do_configure() {
    :
}
addtask configure after do_patch
do_compile() {
    :
}
addtask compile after do_configure
do_install() {
    :
}
addtask install after do_compile
python do_package() {
    for pkg in (d.getVar("PACKAGES") or "").split():
        d.getVar("FILES:" + pkg)
}
do_package[vardeps] += "PACKAGES FILES RDEPENDS RRECOMMENDS PACKAGE_ARCH"
addtask package after do_install
addtask build after do_package
"""

CORE_IMAGE_BBCLASS = """\
inherit rootfs-postcommands
python do_rootfs() {
    d.getVar("IMAGE_INSTALL")
}
do_rootfs[vardeps] += "IMAGE_INSTALL EXTRA_IMAGE_FEATURES EXTRA_USERS_PARAMS ${ROOTFS_POSTPROCESS_COMMAND}"
addtask rootfs after do_install before do_build
"""

BITBAKE_CONF = """\
TMPDIR = "{tmp}/tmp"
WORKDIR = "${{TMPDIR}}/work/${{PN}}"
UNPACKDIR = "${{WORKDIR}}/sources"
T = "${{WORKDIR}}/temp"
D = "${{WORKDIR}}/image"
B = "${{S}}"
S = "${{WORKDIR}}/${{BP}}"
BP = "${{PN}}-${{PV}}"
PN = "${{@bb.parse.vars_from_file(d.getVar('FILE', False), d)[0] or 'defaultpkgname'}}"
PV = "${{@bb.parse.vars_from_file(d.getVar('FILE', False), d)[1] or '1.0'}}"
DL_DIR = "{tmp}/downloads"
COMMON_LICENSE_DIR = "{tmp}/licenses"
sysconfdir = "/etc"
exec_prefix = "/usr"
# as in oe-core 06dd66e6 meta/conf/bitbake.conf line 35: export datadir = "${{prefix}}/share"
prefix = "/usr"
datadir = "${{prefix}}/share"
nonarch_libdir = "${{exec_prefix}}/lib"
sbindir = "/usr/sbin"
# as in oe-core 06dd66e6 meta/conf/bitbake.conf: export libexecdir = "${{exec_prefix}}/libexec"
libexecdir = "${{exec_prefix}}/libexec"
ROOT_HOME = "/root"
systemd_unitdir = "/usr/lib/systemd"
systemd_system_unitdir = "/usr/lib/systemd/system"
MACHINE_ARCH = "${{@d.getVar('MACHINE').replace('-', '_')}}"
IMAGE_ROOTFS = "${{WORKDIR}}/rootfs"
OVERRIDES = "${{MACHINE}}:pn-${{PN}}"
# as in oe-core's bitbake.conf (06dd66e6): EXTRA_IMAGE_FEATURES reaches images through IMAGE_FEATURES
EXTRA_IMAGE_FEATURES ??= ""
IMAGE_FEATURES += "${{EXTRA_IMAGE_FEATURES}}"
export PATH = "/usr/bin:/bin"
# as in oe-core's bitbake.conf: every other varflag (e.g. SRC_URI[name.sha256sum]) is part of a signature
BB_SIGNATURE_EXCLUDE_FLAGS = "doc deps depends interactive lockfiles type vardepsexclude vardeps vardepvalue \
    vardepvalueexclude file-checksums python func task export unexport noexec nostamp dirs cleandirs \
    sstate-lockfile-shared prefuncs postfuncs export_func deptask rdeptask recrdeptask nodeprrecs \
    stamp-extra-info sstate-outputdirs filename lineno progress mcdepends number_threads"
BB_BASEHASH_IGNORE_VARS = "TMPDIR WORKDIR UNPACKDIR T D B S DL_DIR FILE FILE_DIRNAME BBPATH THISDIR COMMON_LICENSE_DIR"
"""


def _stub_hashserv() -> None:
    """bb.parse imports hashserv (a package) and hashserv.client; PyPI's bitbake-setup lacks them."""
    if "hashserv" not in sys.modules:
        pkg = types.ModuleType("hashserv")
        pkg.__path__ = []  # type: ignore[attr-defined]
        sys.modules["hashserv"] = pkg
        sys.modules["hashserv.client"] = types.ModuleType("hashserv.client")


def make_env(tmp: Path, extra_layers: tuple[Path, ...] = (), local_conf: str = "",
             machine: str = "iq-8275-evk") -> Path:
    """Write the stand-in classes/bitbake.conf/local.conf under ``tmp``; return its directory."""
    env = tmp / "bbenv"
    (env / "classes").mkdir(parents=True, exist_ok=True)
    (env / "conf").mkdir(exist_ok=True)
    for name in STUB_CLASSES:
        (env / "classes" / f"{name}.bbclass").write_text(f"# stand-in for oe-core {name}.bbclass\n")
    (env / "classes" / "base.bbclass").write_text(BASE_BBCLASS)
    (env / "classes" / "core-image.bbclass").write_text(CORE_IMAGE_BBCLASS)
    (env / "classes" / "rootfs-postcommands.bbclass").write_text(ROOTFS_POSTCOMMANDS_BBCLASS)
    (env / "conf" / "bitbake.conf").write_text(BITBAKE_CONF.format(tmp=tmp) + f'MACHINE = "{machine}"\n')
    (env / "conf" / "local.conf").write_text(local_conf)
    (env / "layers.txt").write_text("\n".join(str(p) for p in (LAYER, *extra_layers)))
    return env


def base_data(env: Path):
    """A datastore like bitbake's base config: bitbake.conf, every layer.conf (with addpylib), local.conf."""
    _stub_hashserv()
    import bb.data
    import bb.parse
    import bb.siggen
    import bb.utils

    layers = [Path(p) for p in (env / "layers.txt").read_text().splitlines() if p]
    d = bb.data.init()
    d.setVar("__bbclasstype", "global")
    d.setVar("BBPATH", ":".join([str(env)] + [str(p) for p in layers]))
    d = bb.parse.handle(str(env / "conf" / "bitbake.conf"), d, True)
    for layer in layers:
        d.setVar("LAYERDIR", str(layer))
        d = bb.parse.handle(str(layer / "conf" / "layer.conf"), d, baseconfig=True)
        d.delVar("LAYERDIR")
    d = bb.parse.handle(str(env / "conf" / "local.conf"), d, True)
    bb.parse.BBHandler.inherit("base", "configuration INHERITs", 0, d)
    d.setVar("BBPATH", ":".join([str(env)] + [str(p) for p in layers]))
    bb.parse.siggen = bb.siggen.init(d)
    return d


def parse_recipe(path: Path, env: Path):
    """Parse one .bb (with its .bbappends none) and return the finalized datastore."""
    _stub_hashserv()
    import bb.data
    import bb.parse

    d = bb.data.createCopy(base_data(env))
    d.setVar("__bbclasstype", "recipe")
    result = bb.parse.handle(str(path), d)
    return result[""] if isinstance(result, dict) else result


def task_signatures(d) -> dict[str, str]:
    """Each task's base hash, computed by bitbake's own siggen code path.

    ``bb.data.generate_dependencies`` + ``generate_dependency_hash`` are what
    ``SignatureGeneratorBasic._build_data`` runs for every recipe; BB_BASEHASH_IGNORE_VARS applies.
    Equal hashes = the task (and its sstate object) is reused.
    """
    import bb.data

    ignore = set((d.getVar("BB_BASEHASH_IGNORE_VARS") or "").split())
    tasklist, gendeps, lookupcache = bb.data.generate_dependencies(d, ignore)
    _, basehash = bb.data.generate_dependency_hash(tasklist, gendeps, lookupcache, ignore, "recipe")
    return {tid.split(":")[-1]: h for tid, h in basehash.items()}


class BitbakeErrors(logging.Handler):
    """Collects bitbake's error/fatal log lines (bb.fatal logs, then raises BBHandledException)."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())
