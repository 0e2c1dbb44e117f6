"""A release whose bundle links to files outside it is refused, and verify never reads the link's target."""

from __future__ import annotations

import shutil

from provisioner.contracts.release import load_release
from provisioner.station.bundle import preflight


def test_link_out_of_a_release_bundle_is_refused_even_with_identical_bytes(release_8275, tmp_path):
    rel = tmp_path / release_8275.name
    shutil.copytree(release_8275, rel)
    bundle = next((rel / "flash").iterdir())
    outside = tmp_path / "efi-elsewhere.bin"
    shutil.copyfile(bundle / "efi.bin", outside)         # same bytes: a hash check alone would pass it
    (bundle / "efi.bin").unlink()
    (bundle / "efi.bin").symlink_to(outside)
    with load_release(rel) as release:
        assert release.verify() == ["efi.bin: points outside the bundle"]
    pf = preflight(rel, "iq-8275-evk")
    problems = {c.name: c.detail for c in pf.checks if not c.ok}
    assert problems["checksums"] == "efi.bin: points outside the bundle"
    assert problems["names"].startswith(f"refused: 'efi.bin' is a link to {outside}, outside the bundle")
    assert problems["links"] == f"links to outside the bundle: efi.bin -> {outside}"


def test_link_inside_the_bundle_is_fine(bundle_copy):
    (bundle_copy / "dtb.bin").rename(bundle_copy / "dtb-default.bin")
    (bundle_copy / "dtb.bin").symlink_to("dtb-default.bin")
    pf = preflight(bundle_copy, "iq-8275-evk", hash_files=False)
    assert pf.ok, pf.problems
