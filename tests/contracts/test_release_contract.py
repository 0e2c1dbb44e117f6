"""The release contract: what the image stage writes is what station, fleet and OTA read, typed."""

from __future__ import annotations

import json

from provisioner.contracts.release import RELEASE_JSON, ReleaseModel, load_release
from provisioner.image.release import write_release
from tests.image.test_release import make_bundle
from tests.image.test_release import manifest as manifest  # noqa: F401 (fixture)


def test_models_read_back_typed_with_runtime_template_file_and_floors(tmp_path, manifest):  # noqa: F811
    out = write_release(manifest, make_bundle(tmp_path / "d"), tmp_path / "out", simulated=True)
    m = manifest.models[0]
    with load_release(out, hash_files=False) as release:
        (model,) = release.model_entries()
    assert isinstance(model, ReleaseModel)
    assert (model.name, model.runtime, model.file) == (m.name, "litert_lm", m.filename)
    assert model.chat_template and model.version and model.sha256 and model.size == m.path.stat().st_size
    assert (model.min_decode_tok_s, model.max_ttft_s) == manifest.thresholds(m)


def test_fields_a_newer_writer_adds_reach_readers_untouched(tmp_path, manifest):  # noqa: F811
    # OTA adds an "ota" entry and model extras: a reader keeps the entry and ignores keys it does not know
    out = write_release(manifest, make_bundle(tmp_path / "d"), tmp_path / "out", simulated=True)
    data = json.loads((out / RELEASE_JSON).read_text())
    data["ota"] = {"kind": "ostree", "branch": "iq-8275-evk"}
    data["models"][0]["future_field"] = 1
    (out / RELEASE_JSON).write_text(json.dumps(data))
    with load_release(out, hash_files=False) as release:
        assert release.data["ota"] == {"kind": "ostree", "branch": "iq-8275-evk"}
        assert release.model_entries()[0].name == manifest.models[0].name
