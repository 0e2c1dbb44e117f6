"""Manifest `image.ota`: 'ostree' is accepted (the layer keeps /opt trees under /usr); unknown kinds are located."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from provisioner.errors import ManifestError
from provisioner.image.render import render
from provisioner.manifest import load_manifest

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "gemma4-e2b-iq8275.yaml"


def _with_image(tmp_path: Path, **image: object) -> Path:
    data = yaml.safe_load(EXAMPLE.read_text())
    data["image"] = {**data.get("image", {}), **image}
    out = tmp_path / "m.yaml"
    out.write_text(yaml.safe_dump(data))
    return out


@pytest.mark.parametrize("variant", ["production", "debug"])
def test_ota_ostree_is_accepted_and_renders_the_sota_distro(variant: str, tmp_path: Path) -> None:
    """The sota flavour is selected the way meta-qcom's CI does: ci/qcom-distro-sota.yml after the image."""
    assert load_manifest(_with_image(tmp_path)).image.ota is None
    m = load_manifest(_with_image(tmp_path, ota="ostree", variant=variant))
    assert m.image.ota == "ostree"
    plan = render(m, tmp_path / "out", inspect=False).plan
    assert plan.distro == "qcom-distro-sota" and plan.ota == "ostree"
    assert plan.includes[-1] == ("meta-qcom", "ci/qcom-distro-sota.yml")
    assert ("meta-qcom", "ci/qcom-distro-multimedia-image.yml") in plan.includes


def test_unknown_ota_kind_is_a_located_problem(tmp_path: Path) -> None:
    with pytest.raises(ManifestError) as err:
        load_manifest(_with_image(tmp_path, ota="mender"))
    assert any("image.ota" in str(p) and "ostree" in str(p) for p in err.value.problems)
