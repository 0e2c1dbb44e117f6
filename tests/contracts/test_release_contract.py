"""The release contract: what the image stage writes is what station, fleet and OTA read, typed."""

from __future__ import annotations

import dataclasses
import json

import jsonschema
import pytest

from provisioner.contracts.release import RELEASE_JSON, ReleaseModel, load_release
from provisioner.contracts.release_document import (
    OtaEntry,
    ReleaseDocument,
    read_release_json,
    schema,
    write_release_json,
)
from provisioner.errors import ArtifactError
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
    # a newer writer adds an entry and model extras: a reader keeps the entry and ignores keys it does not know
    out = write_release(manifest, make_bundle(tmp_path / "d"), tmp_path / "out", simulated=True)
    data = json.loads((out / RELEASE_JSON).read_text())
    data["signing"] = {"kind": "gpg", "key": "ABCD"}
    data["models"][0]["future_field"] = 1
    (out / RELEASE_JSON).write_text(json.dumps(data))
    with load_release(out, hash_files=False) as release:
        assert release.doc.extra["signing"] == {"kind": "gpg", "key": "ABCD"}
        assert release.doc.to_json()["signing"] == {"kind": "gpg", "key": "ABCD"}
        assert release.model_entries()[0].name == manifest.models[0].name


def test_what_the_build_writes_reads_back_as_the_same_document(tmp_path, manifest):  # noqa: F811
    """One writer, one reader: the file is the document's JSON, and reading it gives the document back."""
    out = write_release(manifest, make_bundle(tmp_path / "d"), tmp_path / "out", simulated=True)
    raw = json.loads((out / RELEASE_JSON).read_text())
    doc = read_release_json(out)
    assert isinstance(doc, ReleaseDocument) and doc.to_json() == raw
    assert ReleaseDocument.from_json(raw, out) == doc
    with pytest.raises(dataclasses.FrozenInstanceError):
        doc.release = "other"  # type: ignore[misc]


def test_the_published_schema_is_the_one_the_dataclasses_make(repo_root):
    """release.schema.json is generated from the typed document; a field added to one and not the other fails."""
    published = json.loads((repo_root / "provisioner" / "contracts" / "release.schema.json").read_text())
    assert published == schema(), ("provisioner/contracts/release.schema.json is stale: regenerate it with "
                                   "python3 -m provisioner.contracts.release_document > "
                                   "provisioner/contracts/release.schema.json")
    jsonschema.Draft202012Validator.check_schema(published)
    top = {f.name for f in dataclasses.fields(ReleaseDocument)} - {"extra"}
    assert set(published["properties"]) == top


def test_a_release_the_schema_refuses_is_one_line_naming_the_field(tmp_path, manifest):  # noqa: F811
    out = write_release(manifest, make_bundle(tmp_path / "d"), tmp_path / "out", simulated=True)
    good = json.loads((out / RELEASE_JSON).read_text())
    for path, value, words in [(("artifacts", 0, "size"), -1, "'artifacts.0.size' is not a size in bytes"),
                               (("models", 0, "runtime"), "cuda", "'models.0.runtime' is not a runtime"),
                               (("bundle",), "../elsewhere", "'bundle' is not a path inside the release folder"),
                               (("simulated",), "yes", "'simulated' is not a JSON boolean")]:
        data = json.loads(json.dumps(good))
        node = data
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value
        (out / RELEASE_JSON).write_text(json.dumps(data))
        with pytest.raises(ArtifactError) as err:
            load_release(out, hash_files=False)
        assert words in str(err.value) and "\n" not in str(err.value), str(err.value)
        assert err.value.hint == "rebuild the release with `provisioner build`"


def test_the_writer_refuses_what_readers_would_refuse(tmp_path):
    with pytest.raises(ArtifactError, match="'ota.commit' is not an OSTree commit id"):
        write_release_json(tmp_path, ReleaseDocument(release="r1", ota=OtaEntry(
            kind="ostree", tarball="ostree/ostreecommit.tar.xz", sha256="0" * 64, branch="b", commit="C0FFEE")))
    assert not (tmp_path / RELEASE_JSON).exists()
