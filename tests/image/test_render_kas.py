"""The rendered configuration resolved by the real kas against local git fixtures of the QLI repos."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import subprocess
from pathlib import Path

import pytest
import yaml

from provisioner import catalog, context
from provisioner.errors import RenderError
from provisioner.image.render import MAIN_FILE, render, validate_with_kas
from provisioner.manifest import load_manifest
from tests.image.kas_fixtures import (
    META_QCOM_CI,
    MULTIMEDIA_YML,
    QCOM_DISTRO_YML,
    build_qli_fixture,
    git,
    meta_qcom_ci,
    write_manifest,
)


@pytest.fixture
def realworld_ci() -> Path:
    return meta_qcom_ci()


@pytest.fixture(scope="module")
def fx(tmp_path_factory):
    return build_qli_fixture(tmp_path_factory.mktemp("qli") / "repos")


@pytest.fixture(scope="module")
def fx618(tmp_path_factory):
    return build_qli_fixture(tmp_path_factory.mktemp("qli618") / "repos", with_618=True)


def _add_release(monkeypatch, rid: str, entry: dict) -> None:
    """Adding a supported QLI release is one catalog entry (this dict is releases.yaml's shape)."""
    rel = catalog.Release(id=rid, yocto_series=entry["yocto_series"], kas_header_version=entry["kas_header_version"],
                          distro=entry["distro"], base_image=entry["base_image"], system_qairt=entry["system_qairt"],
                          machines=tuple(entry["machines"]), meta_qcom_releases=dict(entry["meta_qcom_releases"]),
                          lock={k: dict(v) for k, v in entry["lock"].items()},
                          meta_qcom_ci_files=tuple(entry["meta_qcom_ci_files"]))
    table = {**catalog.releases(), rid: rel}
    monkeypatch.setattr(catalog, "releases", lambda: table)


def _manifest(tmp_path: Path, qli: str, **kw):
    m = load_manifest(write_manifest(tmp_path / "m.yaml", **kw))
    return dataclasses.replace(m, qli=qli)


def _other_repos(fx) -> dict[str, dict[str, str]]:
    """URL-only overrides for the repos meta-qcom's own fragments name (their pins come from base.lock.yml)."""
    return {n: {"url": fx.url(n)} for n in ("meta-qcom-distro", "meta-openembedded")}


def test_kas_dump_resolves_release_pins_and_base_lock(tmp_path, monkeypatch, fx):
    _add_release(monkeypatch, "qli-fixture", fx.release_entry())
    res = render(_manifest(tmp_path, "qli-fixture"), tmp_path / "out", repo_overrides=_other_repos(fx))
    cfg = validate_with_kas(res, env=context.current().env, work_dir=tmp_path / "work")
    repos = cfg["repos"]
    for name in ("bitbake", "meta-qcom", "oe-core", "meta-lts-mixins"):
        assert repos[name]["commit"] == fx.head(name), name
    # base.lock.yml pins oe-core to an older commit: the release lock wins
    assert fx.commits["oe-core"][0] != fx.head("oe-core")
    # the other layers are pinned by meta-qcom's ci/base.lock.yml (not their branch heads)
    assert repos["meta-qcom-distro"]["commit"] == fx.commits["meta-qcom-distro"][0] != fx.head("meta-qcom-distro")
    assert cfg["machine"] == "iq-8275-evk" and cfg["distro"] == "qcom-distro" and cfg["target"] == ["edge-llm-image"]
    lch = cfg["local_conf_header"]
    base = yaml.safe_load((META_QCOM_CI / "base.yml").read_text())["local_conf_header"]
    assert {k: lch[k] for k in base} == base  # every meta-qcom entry survives the merge unchanged
    assert 'KERNEL_CMDLINE_EXTRA:append = " qcom_scm.download_mode=0"' in lch["edge-llm-cmdline"]
    assert "EXTRA_IMAGE_FEATURES:remove" in lch["edge-llm-login"]
    assert 'BUILD_ID = "rel-1"' in lch["edge-llm-os-release"]


def test_kas_checkout_end_to_end(tmp_path, monkeypatch, fx):
    _add_release(monkeypatch, "qli-fixture", fx.release_entry())
    res = render(_manifest(tmp_path, "qli-fixture"), tmp_path / "out", repo_overrides=_other_repos(fx))
    work = tmp_path / "work"
    work.mkdir()
    env = {**os.environ, "KAS_WORK_DIR": str(work), "HOME": str(work)}
    proc = subprocess.run(["kas", "checkout", str(res.kas_file)], cwd=work, env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert git(work / "oe-core", "rev-parse", "HEAD") == fx.head("oe-core")
    assert git(work / "meta-qcom", "rev-parse", "HEAD") == fx.head("meta-qcom")
    bblayers = (work / "build" / "conf" / "bblayers.conf").read_text()
    assert "out/layers/meta-edge-llm " in bblayers and "out/layers/meta-edge-llm-release" in bblayers
    assert "meta-qcom-distro" in bblayers and "oe-core/meta" in bblayers
    local = (work / "build" / "conf" / "local.conf").read_text()
    assert 'MACHINE ??= "iq-8275-evk"' in local
    assert 'EDGE_LLM_QAIRT_VERSIONS = "2.44.0.260225"' in local
    # kas writes meta-qcom's entries and ours, sorted by key; ours add to meta-qcom's, nothing is replaced
    assert 'OS_RELEASE_FIELDS:append = " BUILD_ID"' in local and 'BUILD_ID = "rel-1"' in local
    assert 'DISTRO_FEATURES:append = " efi pam pni-names"' in local


def test_production_pins_stay_while_repos_are_redirected(tmp_path, fx):
    """qli-2.0 itself, every repo redirected to the fixtures: edge-llm.yml keeps the real pins."""
    m = load_manifest(write_manifest(tmp_path / "m.yaml"))
    plain = render(m, tmp_path / "plain")
    res = render(m, tmp_path / "out", repo_overrides=fx.overrides(
        ("bitbake", "meta-qcom", "oe-core", "meta-lts-mixins", "meta-qcom-distro", "meta-openembedded")))
    assert (res.out_dir / MAIN_FILE).read_bytes() == (plain.out_dir / MAIN_FILE).read_bytes()
    assert "ef0004df267743cc89d6a09bc724bc99ff541c01" in (res.out_dir / MAIN_FILE).read_text()
    cfg = validate_with_kas(res, env=context.current().env, work_dir=tmp_path / "work")
    assert cfg["repos"]["meta-qcom"]["commit"] == fx.head("meta-qcom")


def test_include_missing_in_the_checkout_is_caught_by_kas(tmp_path, monkeypatch, fx):
    """The catalog claims ci/linux-qcom-6.18.yml exists, the pinned meta-qcom has none: kas says so."""
    entry = fx.release_entry()
    entry["meta_qcom_ci_files"] = [*entry["meta_qcom_ci_files"], "ci/linux-qcom-6.18.yml"]
    _add_release(monkeypatch, "qli-wrong", entry)
    res = render(_manifest(tmp_path, "qli-wrong"), tmp_path / "out", repo_overrides=_other_repos(fx),
                 extra_includes=("ci/linux-qcom-6.18.yml",))
    with pytest.raises(RenderError) as e:
        validate_with_kas(res, env=context.current().env, work_dir=tmp_path / "work")
    assert "kas cannot resolve" in str(e.value) and "not found" in str(e.value).lower()


def test_rc3_like_release_with_618_include(tmp_path, monkeypatch, fx618):
    _add_release(monkeypatch, "qli-rc3-like", fx618.release_entry())
    res = render(_manifest(tmp_path, "qli-rc3-like"), tmp_path / "out", repo_overrides=_other_repos(fx618),
                 extra_includes=("ci/linux-qcom-6.18.yml",))
    cfg = validate_with_kas(res, env=context.current().env, work_dir=tmp_path / "work")
    assert "linux-qcom-6.18" in cfg["local_conf_header"]["kernel"]


@contextlib.contextmanager
def _meta_qcom_commit(monkeypatch, fx, rid: str, change):
    """A release pinning a meta-qcom commit with ``change(base_yml_dict)`` applied to ci/base.yml."""
    repo = fx.root / "meta-qcom"
    base = yaml.safe_load((repo / "ci" / "base.yml").read_text())
    change(base)
    (repo / "ci" / "base.yml").write_text(yaml.safe_dump(base, sort_keys=False))
    git(repo, "commit", "-qam", f"fixture: {rid}")
    entry = fx.release_entry()
    entry["lock"]["meta-qcom"]["commit"] = git(repo, "rev-parse", "HEAD")
    try:
        _add_release(monkeypatch, rid, entry)
        yield
    finally:
        git(repo, "reset", "-q", "--hard", "HEAD~1")


def test_validate_refuses_an_entry_that_would_replace_meta_qcoms(tmp_path, monkeypatch, fx):
    """A meta-qcom release that starts using one of our entry names: kas would replace one of the two."""
    with _meta_qcom_commit(monkeypatch, fx, "qli-clash",
                           lambda b: b["local_conf_header"].update({"edge-llm-cache": "INHERIT += \"x\"\n"})):
        res = render(_manifest(tmp_path, "qli-clash"), tmp_path / "out", repo_overrides=_other_repos(fx))
        with pytest.raises(RenderError, match="entry 'edge-llm-cache' replaces meta-qcom ci/base.yml's entry"):
            validate_with_kas(res, env=context.current().env, work_dir=tmp_path / "work")


def test_validate_refuses_a_configuration_without_build_id_in_os_release(tmp_path, monkeypatch, fx):
    with _meta_qcom_commit(monkeypatch, fx, "qli-no-os-release", lambda b: b["local_conf_header"].pop("os-release")):
        res = render(_manifest(tmp_path, "qli-no-os-release"), tmp_path / "out", repo_overrides=_other_repos(fx))
        with pytest.raises(RenderError, match="no local_conf_header entry adds BUILD_ID to OS_RELEASE_FIELDS"):
            validate_with_kas(res, env=context.current().env, work_dir=tmp_path / "work")


def test_reduced_qcom_distro_fixtures_agree_with_the_real_files(realworld_ci):
    """The stand-ins for ci/qcom-distro*.yml: same distro/target/include, a subset of the real repos."""
    fixture = yaml.safe_load(QCOM_DISTRO_YML)
    real = yaml.safe_load((realworld_ci / "qcom-distro.yml").read_text())
    assert fixture["distro"] == real["distro"]
    assert set(fixture["repos"]) <= set(real["repos"])
    assert "local_conf_header" not in fixture
    mm_fixture = yaml.safe_load(MULTIMEDIA_YML)
    mm_real = yaml.safe_load((realworld_ci / "qcom-distro-multimedia-image.yml").read_text())
    assert mm_fixture["target"] == mm_real["target"]
    assert mm_fixture["header"]["includes"] == mm_real["header"]["includes"]


def test_render_inside_a_git_checkout_points_kas_at_the_right_layer_dirs(tmp_path, monkeypatch, fx):
    """kas takes the config's git top level as the repo root: layer paths must be relative to it."""
    top = tmp_path / "checkout"
    top.mkdir()
    git(top, "init", "-q")
    _add_release(monkeypatch, "qli-fixture", fx.release_entry())
    res = render(_manifest(tmp_path, "qli-fixture"), top / "build" / "render", repo_overrides=_other_repos(fx))
    cfg = yaml.safe_load((res.out_dir / MAIN_FILE).read_text())
    assert list(cfg["repos"]["edge-llm"]["layers"]) == ["build/render/layers/meta-edge-llm",
                                                        "build/render/layers/meta-edge-llm-release"]
    work = tmp_path / "work"
    work.mkdir()
    env = {**os.environ, "KAS_WORK_DIR": str(work), "HOME": str(work)}
    proc = subprocess.run(["kas", "checkout", str(res.kas_file)], cwd=work, env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    bblayers = (work / "build" / "conf" / "bblayers.conf").read_text()
    layer_lines = [ln.strip().rstrip("\\").strip() for ln in bblayers.splitlines() if "meta-edge-llm" in ln]
    assert len(layer_lines) == 2
    for line in layer_lines:
        path = (work / "build" / line.replace("${TOPDIR}/", "")).resolve()
        assert (path / "conf" / "layer.conf").is_file(), path


def test_cli_validate_flag(tmp_path, fx, capsys):
    from provisioner.cli import main

    mf = write_manifest(tmp_path / "m.yaml")
    args = ["render", str(mf), "--out", str(tmp_path / "o"), "--validate", "--kas-work-dir", str(tmp_path / "w")]
    for name, o in fx.overrides(("bitbake", "meta-qcom", "oe-core", "meta-lts-mixins", "meta-qcom-distro",
                                 "meta-openembedded")).items():
        args += ["--repo-override", f"{name}={o['url']}@{o['commit']}"]
    assert main(args) == 0
    assert "kas dump: every include and pin resolves" in capsys.readouterr().out
