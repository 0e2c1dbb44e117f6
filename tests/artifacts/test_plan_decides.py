"""The plan decides and runs nothing: it reads the checksums `fetch` recorded and writes no file."""

from __future__ import annotations

import hashlib
import zipfile

from provisioner.manifest import load_manifest
from provisioner.plan import make_plan
from tests.image.kas_fixtures import write_manifest

QAIRT = "2.44.0.260225"


def _zip(path):
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(f"qairt/{QAIRT}/LICENSE.pdf", b"%PDF-1.4 license")
    return path


def test_plan_hashes_no_zip_and_writes_nothing(tmp_path):
    dl = tmp_path / "dl"
    dl.mkdir()
    _zip(dl / f"v{QAIRT}.zip")   # copied in by hand, not by `provisioner fetch`
    plan = make_plan(load_manifest(write_manifest(tmp_path / "m.yaml", build={"dl_dir": str(dl)})))
    assert sorted(p.name for p in dl.iterdir()) == [f"v{QAIRT}.zip"]
    assert plan.qairt_checksums[QAIRT]["sha256"] is None
    assert any("run `provisioner fetch`" in line for line in plan.lines())


def test_fetch_records_what_the_plan_reads(tmp_path, cli):
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    z = _zip(mirror / f"v{QAIRT}.zip")
    model = mirror / "m.litertlm"
    model.write_bytes(b"model bytes")
    models = [{"name": "m", "kind": "litertlm", "qairt": QAIRT, "url": model.as_uri(), "size": model.stat().st_size}]
    dl = tmp_path / "dl"
    m = write_manifest(tmp_path / "m.yaml", models=models, build={"dl_dir": str(dl), "mirrors": [mirror.as_uri()]})
    assert cli("fetch", m, "--json").code == 0
    plan = make_plan(load_manifest(m))
    assert plan.qairt_checksums[QAIRT] == {
        "sha256": hashlib.sha256(z.read_bytes()).hexdigest(),
        "license_md5": hashlib.md5(b"%PDF-1.4 license").hexdigest(), "zip": z.name}
    assert not any(f"QAIRT {QAIRT}: zip sha256" in w for w in plan.warnings)
