"""Manifest `image.ota`: 'ostree' is accepted, anything else is a located problem with the fix."""

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


def test_ota_ostree_is_read(tmp_path: Path) -> None:
    assert load_manifest(_with_image(tmp_path, ota="ostree")).image.ota == "ostree"
    assert load_manifest(_with_image(tmp_path)).image.ota is None


def test_unknown_ota_kind_is_a_located_problem(tmp_path: Path) -> None:
    with pytest.raises(ManifestError) as err:
        load_manifest(_with_image(tmp_path, ota="mender"))
    assert any("image.ota" in str(p) and "ostree" in str(p) for p in err.value.problems)
