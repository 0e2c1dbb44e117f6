"""The locked-memory limit a board ends up with, for a login session and for the inference service.

One rule (provisioner/contracts/memlock.py) turns the manifest's image.memlock into both limits. Here the
real writers run: render writes the layer's variables, bitbake's parser runs edge-llm-memlock's and
edge-llm-serve's do_install, and the fleet's launch plan adds its unit and per-model drop-in on top. The
effective value is then read the way pam_limits (limits.conf(5)) and systemd (systemd.unit(5) drop-in
order, systemd.exec(5) LimitMEMLOCK=) read it, by a reader written here from the man pages, and by the
virtual boards' systemctl stand-in, which must agree.
"""

from __future__ import annotations

import contextlib
import shutil
from pathlib import Path

import pytest
import yaml

from provisioner import catalog
from provisioner.contracts import board as on_board
from provisioner.contracts import memlock
from provisioner.contracts.inventory import HostVars, ModelVars
from provisioner.fleet import launch
from provisioner.fleet.verify import pam_memlock
from provisioner.image.render import render
from provisioner.manifest import load_manifest
from provisioner.sim.service_manager import Manager
from provisioner.sim.unit_files import INFINITY, parse_size
from tests.image import bbparse
from tests.image.kas_fixtures import write_manifest

LAYER = bbparse.LAYER
POLICIES = ["unlimited", "4194304"]          # the default, and 4 GiB in KiB (above the ~1.17 GB FastRPC pins)
#: unit directories, highest precedence first (systemd.unit(5) "Unit File Load Path", system mode)
UNIT_DIRS = ("etc/systemd/system", "run/systemd/system", "usr/lib/systemd/system")
SYSTEMD_DEFAULT = "8M"                       # QLI's manager default without the image's system.conf.d file
MODEL = "gemma-4-e2b"


def test_the_rule_gives_sessions_and_services_the_same_amount():
    assert memlock.limits("unlimited") == memlock.limits()
    assert (memlock.limits().session, memlock.limits().service, memlock.limits().bytes) == \
        ("unlimited", "infinity", None)
    rule = memlock.limits("4194304")
    assert (rule.session, rule.service, rule.bytes) == ("4194304", "4194304K", 4 * 1024**3)
    assert memlock.layer_variables(4194304) == {"EDGE_LLM_MEMLOCK": "4194304", "EDGE_LLM_SERVICE_MEMLOCK": "4194304K"}
    for bad in ("4G", "", "-1", "infinity"):
        with pytest.raises(ValueError):
            memlock.limits(bad)


def _image_files(tmp_path: Path, policy: str) -> Path:
    """The board's root after the image (render + the layer's do_install) and ``fleet launch``."""
    manifest = load_manifest(write_manifest(tmp_path / "m.yaml", image={
        "variant": "debug", "root_login": "debug", "memlock": policy}))
    res = render(manifest, tmp_path / "out")
    entries = yaml.safe_load(res.kas_file.read_text())["local_conf_header"]
    local = "".join(entries[k] for k in sorted(entries)) + 'DEBUG_LOGIN = "x"\n'
    for key, value in memlock.layer_variables(policy).items():
        assert f'{key} = "{value}"' in entries["edge-llm"].splitlines()
    env = bbparse.make_env(tmp_path, (bbparse.QCOM_DISTRO_FIXTURE, res.out_dir / "layers" / "meta-edge-llm-release"),
                           local_conf=local)
    root = tmp_path / "board"
    import bb.build

    for recipe in ("recipes-core/edge-llm-memlock/edge-llm-memlock.bb",
                   "recipes-ai/edge-llm-serve/edge-llm-serve_1.0.bb"):
        d = bbparse.parse_recipe(LAYER / recipe, env)
        for var in ("T", "D", "UNPACKDIR"):
            Path(d.getVar(var)).mkdir(parents=True, exist_ok=True)
        files = LAYER / Path(recipe).parent / "files"
        if files.is_dir():
            shutil.copytree(files, d.getVar("UNPACKDIR"), dirs_exist_ok=True)
        bb.build.exec_func("do_install", d)
        shutil.copytree(d.getVar("D"), root, dirs_exist_ok=True, symlinks=True)
    expect = HostVars(board=catalog.board("iq-8275-evk"), serve_user="llm", models=(
        ModelVars(name=MODEL, kind="litertlm", runtime="litert_lm", qairt="2.44.0.260225", chat_template="gemma",
                  file="m.litertlm"),))
    plan = launch.units(expect)
    inst = plan["instances"][0]
    for path, text in ((plan["unit_path"], plan["unit_text"]), (inst["dropin_path"], inst["dropin"])):
        (root / path.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
        (root / path.lstrip("/")).write_text(text)
    return root


def _values(path: Path, key: str) -> list[str]:
    return [ln.split("=", 1)[1].strip() for ln in path.read_text().splitlines() if ln.strip().startswith(key + "=")]


def effective_service_limit(root: Path, instance: str) -> str:
    """LimitMEMLOCK= of ``instance`` as systemd reads it, from systemd.unit(5) and systemd.exec(5):

    the unit file (the literal name, else the template, from the directory of highest precedence), then
    its drop-ins from the instance's and the template's ``.d/`` in every unit directory (a name masks the
    same name in a directory of lower precedence) in lexicographic order of their names, wherever they
    reside; the last assignment wins; without one, the manager's DefaultLimitMEMLOCK=
    (systemd-system.conf(5): system.conf, then system.conf.d/*.conf in lexicographic order)."""
    template = instance.split("@")[0] + "@.service"
    fragment = next(root / d / n for n in (instance, template) for d in UNIT_DIRS if (root / d / n).is_file())
    by_name: dict[str, Path] = {}
    for d in UNIT_DIRS:
        for n in (instance, template):
            for f in sorted((root / d / f"{n}.d").glob("*.conf")):
                by_name.setdefault(f.name, f)
    found = [v for f in [fragment, *(by_name[k] for k in sorted(by_name))] for v in _values(f, "LimitMEMLOCK")]
    if found:
        return found[-1]
    conf = root / "etc/systemd"
    default = [v for f in [conf / "system.conf", *sorted((conf / "system.conf.d").glob("*.conf"))] if f.is_file()
               for v in _values(f, "DefaultLimitMEMLOCK")]
    return default[-1] if default else SYSTEMD_DEFAULT


def _sim_manager(root: Path, tmp_path: Path) -> Manager:
    return Manager(state_dir=str(tmp_path / "sim-state"), unit_dirs=tuple(str(root / d) for d in UNIT_DIRS),
                   etc_dir=str(root / "etc/systemd"))


@pytest.mark.parametrize("policy", POLICIES)
def test_each_process_gets_the_images_policy(policy, tmp_path):
    """A login session (root and the inference user) and the launched service both get image.memlock."""
    rule = memlock.limits(policy)
    root = _image_files(tmp_path, policy)
    limits = (root / on_board.LIMITS_FILE.lstrip("/")).read_text()
    session = "infinity" if rule.bytes is None else rule.bytes
    assert pam_memlock("llm", [limits]) == session and pam_memlock("root", [limits]) == session
    instance = on_board.SERVE_UNIT.replace("@.", f"@{MODEL}.")
    # the fleet's unit is the one that counts (/etc over the image's /usr/lib), and it and the fleet's
    # per-model drop-in (which sorts after the image's) leave the limit to the image's drop-in
    assert (root / on_board.SERVE_UNIT_DIR.lstrip("/") / on_board.SERVE_UNIT).is_file()
    assert effective_service_limit(root, instance) == rule.service
    assert (root / on_board.SERVE_MEMLOCK_DROPIN.lstrip("/")).is_file()
    sim = _sim_manager(root, tmp_path)
    unit = sim.load(instance)
    assert unit is not None and unit.dropins[-1].endswith(on_board.SERVE_MODEL_DROPIN_NAME)
    assert sim.memlock_for(unit) == (INFINITY if rule.bytes is None else rule.bytes)
    assert sim.default_memlock() == parse_size(rule.service)          # every other service: the same policy


def test_a_later_drop_in_would_override_the_policy(tmp_path):
    """Why the fleet's drop-in sets no limit: one that sorts after the image's wins, whatever its directory."""
    root = _image_files(tmp_path, "4194304")
    instance = on_board.SERVE_UNIT.replace("@.", f"@{MODEL}.")
    late = root / "usr/lib/systemd/system" / f"{instance}.d" / "90-vendor.conf"
    late.parent.mkdir(parents=True)
    late.write_text("[Service]\nLimitMEMLOCK=infinity\n")
    assert effective_service_limit(root, instance) == "infinity"
    sim = _sim_manager(root, tmp_path)
    assert sim.memlock_for(sim.load(instance)) == INFINITY
    # the same name in /etc masks it (a higher-precedence directory replaces a file of that name)
    mask = root / "etc/systemd/system" / f"{instance}.d" / "90-vendor.conf"
    mask.parent.mkdir(parents=True, exist_ok=True)
    mask.write_text("[Service]\n")
    assert effective_service_limit(root, instance) == "4194304K"
    assert sim.memlock_for(sim.load(instance)) == 4 * 1024**3


@pytest.mark.parametrize(("policy", "said"), [("4G", "'4G' is not 'unlimited' or a KiB count"),
                                              ("8192", "8192 KiB is below the ~1.17 GB FastRPC pins")])
def test_the_manifest_refuses_what_the_rule_cannot_give(policy, said, tmp_path):
    from provisioner.errors import ManifestError

    with pytest.raises(ManifestError) as err:
        load_manifest(write_manifest(tmp_path / "m.yaml", image={"variant": "debug", "memlock": policy}))
    assert "image.memlock" in str(err.value) and said in str(err.value)
    assert memlock.limits(2 * 1024 * 1024).bytes == memlock.MIN_BYTES       # the least the manifest takes


def _memlock_recipe_installs(tmp_path: Path, variables: dict[str, str]) -> bool:
    """Whether edge-llm-memlock's do_install takes these EDGE_LLM_*MEMLOCK values (False: bb.fatal)."""
    import bb
    import bb.build

    local = "".join(f'{k} = "{v}"\n' for k, v in variables.items())
    d = bbparse.parse_recipe(LAYER / "recipes-core/edge-llm-memlock/edge-llm-memlock.bb",
                             bbparse.make_env(tmp_path, (bbparse.QCOM_DISTRO_FIXTURE,), local_conf=local))
    for var in ("T", "D"):
        Path(d.getVar(var)).mkdir(parents=True, exist_ok=True)
    try:
        bb.build.exec_func("do_install", d)
    except bb.BBHandledException:
        return False
    return True


@pytest.mark.parametrize("policy", ["unlimited", "0", "1", "4194304", "007"])
def test_the_recipe_takes_every_value_the_rule_gives(policy, tmp_path):
    """The recipe's check of its two variables only guards a hand-set value: whatever memlock.limits()
    gives for a policy, it installs."""
    assert _memlock_recipe_installs(tmp_path, memlock.layer_variables(policy))


@pytest.mark.parametrize("session,service", [("4G", "4G"), ("-1", "infinity"), ("unlimited", "4194304"),
                                             ("4194304", "4M"), ("infinity", "infinity")])
def test_the_recipe_refuses_hand_set_values_the_rule_never_gives(session, service, tmp_path, fatal):
    hand_set = {"EDGE_LLM_MEMLOCK": session, "EDGE_LLM_SERVICE_MEMLOCK": service}
    with contextlib.suppress(ValueError):
        assert memlock.layer_variables(session) != hand_set          # not a pair the rule gives
    assert _memlock_recipe_installs(tmp_path, hand_set) is False
    assert any("MEMLOCK must be" in m for m in fatal.messages), fatal.messages
