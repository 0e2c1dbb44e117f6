"""Manifest `image.ota`: refused with the reason while the layer installs under /opt; unknown kinds are located."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from provisioner.errors import ManifestError
from provisioner.manifest import load_manifest

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "gemma4-e2b-iq8275.yaml"


def _with_image(tmp_path: Path, **image: object) -> Path:
    data = yaml.safe_load(EXAMPLE.read_text())
    data["image"] = {**data.get("image", {}), **image}
    out = tmp_path / "m.yaml"
    out.write_text(yaml.safe_dump(data))
    return out


def test_ota_ostree_is_refused_while_the_layer_installs_under_opt(tmp_path: Path) -> None:
    """A sota image empties /opt (meta-updater image_types_ostree.bbclass): refuse before a 250 GB build."""
    assert load_manifest(_with_image(tmp_path)).image.ota is None
    with pytest.raises(ManifestError) as err:
        load_manifest(_with_image(tmp_path, ota="ostree"))
    problem = next(str(p) for p in err.value.problems if "image.ota" in str(p))
    assert "empties /opt" in problem and "QAIRT" in problem and "leave image.ota unset" in problem


def test_unknown_ota_kind_is_a_located_problem(tmp_path: Path) -> None:
    with pytest.raises(ManifestError) as err:
        load_manifest(_with_image(tmp_path, ota="mender"))
    assert any("image.ota" in str(p) and "ostree" in str(p) for p in err.value.problems)
