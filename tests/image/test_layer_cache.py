"""Cache-friendly by construction: which recipes a manifest change would rebuild, per bitbake's signatures.

Each render's local.conf snippets and release layer are parsed with bitbake's real parser and every
task's base hash is computed with bitbake's own dependency tracker (``bbparse.task_signatures``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from provisioner.image.render import render
from provisioner.manifest import load_manifest
from tests.image import bbparse
from tests.image.kas_fixtures import write_manifest

LAYER = bbparse.LAYER


@pytest.fixture(scope="module")
def distro_layer(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("distro") / "meta-qcom-distro"
    (d / "conf").mkdir(parents=True)
    (d / "conf" / "layer.conf").write_text('BBPATH .= ":${LAYERDIR}"\nBBFILE_COLLECTIONS += "qcom-distro"\n')
    (d / "recipes-products" / "images").mkdir(parents=True)
    (d / "recipes-products" / "images" / "qcom-multimedia-image.bb").write_text(
        'LICENSE = "MIT"\ninherit core-image\nIMAGE_INSTALL = "packagegroup-core-boot"\n')
    return d


def signatures(result, tmp: Path, distro_layer: Path) -> dict[str, dict[str, str]]:
    """recipe -> task -> base hash, for every recipe of both layers under this render's local.conf."""
    release_layer = result.out_dir / "layers" / "meta-edge-llm-release"
    local = "".join(result.snippets[k] for k in sorted(result.snippets))
    env = bbparse.make_env(tmp, (distro_layer, release_layer), local_conf=local,
                           machine=result.plan.machine)
    out = {}
    for recipe in sorted([*LAYER.glob("recipes-*/*/*.bb"), *release_layer.glob("recipes-*/*/*.bb")]):
        d = bbparse.parse_recipe(recipe, env)
        out[d.getVar("PN")] = bbparse.task_signatures(d)
    return out


def _changed(a: dict, b: dict) -> set[str]:
    return {pn for pn in a.keys() | b.keys() if a.get(pn) != b.get(pn)}


def _render(tmp_path: Path, name: str, **kw):
    return render(load_manifest(write_manifest(tmp_path / f"{name}.yaml", **kw)), tmp_path / name)


def test_same_manifest_changes_nothing(tmp_path, distro_layer):
    a = signatures(_render(tmp_path, "a"), tmp_path / "ea", distro_layer)
    b = signatures(_render(tmp_path, "b"), tmp_path / "eb", distro_layer)
    assert a == b
    assert {"qairt-runtime-2.44.0.260225", "litert-lm-runtime", "edge-llm-model-gemma-4-e2b",
            "edge-llm-image"} <= a.keys()
    assert all(a[pn] for pn in a)  # every recipe has task signatures


def test_model_change_rebuilds_only_the_model_and_the_image(tmp_path, distro_layer):
    base = signatures(_render(tmp_path, "a"), tmp_path / "ea", distro_layer)
    new_model = [{"name": "gemma-4-e2b", "kind": "litertlm", "qairt": "2.44.0.260225", "size": 3294593000,
                  "sha256": "cd" * 32, "url": "https://models.example.invalid/v2/gemma-4-E2B-it_qualcomm_qcs8275.litertlm"}]
    changed = signatures(_render(tmp_path, "b", models=new_model), tmp_path / "eb", distro_layer)
    assert _changed(base, changed) == {"edge-llm-model-gemma-4-e2b", "edge-llm-image"}
    # inside the model recipe it is the fetch and install that change
    m_a, m_b = base["edge-llm-model-gemma-4-e2b"], changed["edge-llm-model-gemma-4-e2b"]
    assert m_a["do_fetch"] != m_b["do_fetch"] and m_a["do_install"] != m_b["do_install"]


def test_signatures_do_see_real_changes(tmp_path, distro_layer):
    """Not vacuous: a policy change or a QAIRT checksum reaches exactly the recipes that read it."""
    base = signatures(_render(tmp_path, "a"), tmp_path / "ea", distro_layer)
    dbg = signatures(_render(tmp_path, "b", image={"variant": "production", "download_mode": 1,
                                                   "root_login": "disabled"}), tmp_path / "eb", distro_layer)
    assert _changed(base, dbg) == {"edge-llm-download-mode", "edge-llm-login", "edge-llm-image"}
    # `provisioner fetch` put the QAIRT zip in DL_DIR and recorded its sha256 and LICENSE.pdf md5 beside it
    import hashlib
    import zipfile

    from provisioner.artifacts.fetch import record_qairt_checksums

    (tmp_path / "dl").mkdir()
    zpath = tmp_path / "dl" / "v2.44.0.260225.zip"
    with zipfile.ZipFile(zpath, "w") as z:
        z.writestr("qairt/2.44.0.260225/LICENSE.pdf", b"%PDF-1.4 license text")
    record_qairt_checksums(zpath, "2.44.0.260225", hashlib.sha256(zpath.read_bytes()).hexdigest())
    res = _render(tmp_path, "c", build={"dl_dir": str(tmp_path / "dl")})
    assert res.plan.qairt_checksums["2.44.0.260225"] == {
        "sha256": hashlib.sha256(zpath.read_bytes()).hexdigest(),
        "license_md5": hashlib.md5(b"%PDF-1.4 license text").hexdigest(), "zip": zpath.name}
    sums = signatures(res, tmp_path / "ec", distro_layer)
    assert _changed(base, sums) == {"qairt-runtime-2.44.0.260225"}
