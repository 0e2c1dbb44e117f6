"""Release directory: write_release / load_release as the station and rehearse use them."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import pytest

from provisioner.errors import ArtifactError
from provisioner.image.release import hash_bundle, load_release, safe_extract, sha256_file, write_release
from provisioner.manifest import load_manifest

BUNDLE = "qcom-multimedia-image-iq-8275-evk"


def make_bundle(parent: Path, name: str = BUNDLE) -> Path:
    """A small bundle with the file names a qcomflash tarball has."""
    b = parent / name
    b.mkdir(parents=True)
    for i in range(6):
        (b / f"rawprogram{i}.xml").write_text(f'<?xml version="1.0" ?>\n<data><program lun="{i}"/></data>\n')
        (b / f"patch{i}.xml").write_text("<patches/>\n")
    (b / "contents.xml").write_text("<contents/>\n")
    (b / "prog_firehose_ddr.elf").write_bytes(b"\x7fELF" + bytes(range(60)))
    (b / "efi.bin").write_bytes(b"\x00" * 4096)
    (b / "rootfs.img").write_bytes(b"ext4" * 5000)
    (b / "gpt_main0.bin").write_bytes(b"EFI PART" * 16)
    return b


def make_tarball(bundle: Path, out: Path) -> Path:
    with tarfile.open(out, "w:gz") as tf:
        tf.add(bundle, arcname=bundle.name)
    return out


@pytest.fixture
def manifest(tmp_path: Path):
    model = tmp_path / "m.litertlm"
    model.write_bytes(b"LITERTLM" + b"\x01" * 100)
    text = f"""
manifest: 1
release: rel-1.0
board: iq-8275-evk
qairt: ["2.44.0.260225"]
models:
  - name: gemma-4-e2b
    kind: litertlm
    path: {model}
    qairt: "2.44.0.260225"
"""
    p = tmp_path / "manifest.yaml"
    p.write_text(text)
    return load_manifest(p)


def test_write_release_layout_and_checksums(tmp_path, manifest):
    bundle = make_bundle(tmp_path / "deploy")
    kas = tmp_path / "kas"
    kas.mkdir()
    (kas / "edge-llm.yml").write_text("header:\n  version: 14\n")
    (kas / "edge-llm.lock.yml").write_text(
        "header:\n  version: 14\noverrides:\n  repos:\n"
        "    meta-qcom:\n      commit: ef0004df267743cc89d6a09bc724bc99ff541c01\n"
        "    oe-core:\n      commit: 06dd66e6220e5ce4ed4b9af4d8231ae5f0a8ce80\n")
    log = tmp_path / "build.log"
    log.write_text("NOTE: Tasks Summary: all succeeded\n")
    out = write_release(manifest, bundle, tmp_path / "out", kas_files=[kas / "edge-llm.yml", kas / "edge-llm.lock.yml"],
                        build_info={"duration_s": 12.5, "sstate": {"wanted": 10}}, log_file=log)
    assert out == tmp_path / "out" / "rel-1.0"
    data = json.loads((out / "release.json").read_text())
    assert data["format"] == 1 and data["release"] == "rel-1.0"
    assert data["board"] == "iq-8275-evk" and data["machine"] == "iq-8275-evk"
    assert data["image"] == "qcom-multimedia-image"
    assert data["bundle"] == f"flash/{BUNDLE}"
    assert data["layers"] == {"meta-qcom": "ef0004df267743cc89d6a09bc724bc99ff541c01",
                              "oe-core": "06dd66e6220e5ce4ed4b9af4d8231ae5f0a8ce80"}
    assert data["build"]["sstate"] == {"wanted": 10} and data["build"]["duration_s"] == 12.5
    assert data["simulated"] is False
    assert (out / "kas" / "edge-llm.lock.yml").is_file()
    assert (out / "logs" / "build.log").read_text().startswith("NOTE")
    # every bundle file, with its real sha256 and size
    paths = {a["path"]: a for a in data["artifacts"]}
    assert set(paths) == {p.name for p in bundle.iterdir()}
    for name, a in paths.items():
        assert a["sha256"] == sha256_file(bundle / name)
        assert a["size"] == (bundle / name).stat().st_size
    m = data["models"][0]
    assert m["name"] == "gemma-4-e2b" and m["size"] == 108
    assert m["sha256"] == sha256_file(manifest.models[0].path) and m["version"] == m["sha256"][:16]
    # no staging leftovers
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["rel-1.0"]


def test_load_release_dir_and_verify_detects_tampering(tmp_path, manifest):
    out = write_release(manifest, make_bundle(tmp_path / "d"), tmp_path / "out", simulated=True)
    rel = load_release(out)
    assert rel.root == out and rel.id == "rel-1.0" and rel.simulated
    assert rel.bundle_dir == out / "flash" / BUNDLE
    assert len(rel.rawprogram_files()) == 6 and rel.verify() == []
    (rel.bundle_dir / "rootfs.img").write_bytes(b"ext4" * 5000 + b"!")
    (rel.bundle_dir / "efi.bin").write_bytes(b"\x01" * 4096)
    (rel.bundle_dir / "extra.bin").write_bytes(b"x")
    problems = load_release(out).verify()
    assert any(p.startswith("rootfs.img: size") for p in problems)
    assert any(p.startswith("efi.bin: sha256") for p in problems)
    assert any(p.startswith("extra.bin: in the bundle but not") for p in problems)
    # the bundle folder inside a release opens as that release
    assert load_release(out / "flash" / BUNDLE).id == "rel-1.0"


def test_write_release_from_tarball_and_replace(tmp_path, manifest):
    tarball = make_tarball(make_bundle(tmp_path / "d"), tmp_path / f"{BUNDLE}.rootfs.qcomflash.tar.gz")
    out = write_release(manifest, tarball, tmp_path / "out")
    first = json.loads((out / "release.json").read_text())
    assert len(first["artifacts"]) == 17
    # a second build with the same id replaces the first completely
    b2 = make_bundle(tmp_path / "d2")
    (b2 / "rootfs.img").write_bytes(b"new")
    out2 = write_release(manifest, b2, tmp_path / "out")
    assert out2 == out
    rel = load_release(out)
    assert rel.verify() == [] and rel.path("rootfs.img").read_bytes() == b"new"
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["rel-1.0"]


def test_write_release_refuses_other_machine_and_leaves_nothing(tmp_path, manifest):
    b = make_bundle(tmp_path / "d", "qcom-multimedia-image-iq-9075-evk")
    with pytest.raises(ArtifactError, match="iq-9075-evk"):
        write_release(manifest, b, tmp_path / "out")
    assert list((tmp_path / "out").iterdir()) == []


def test_load_bare_bundle_and_tarball(tmp_path):
    bundle = make_bundle(tmp_path / "d")
    rel = load_release(bundle)
    assert rel.root is None and rel.machine == "iq-8275-evk" and rel.board == "iq-8275-evk"
    assert rel.image == "qcom-multimedia-image"
    assert [a.path for a in rel.artifacts] == [a.path for a in hash_bundle(bundle)]
    tarball = make_tarball(bundle, tmp_path / f"{BUNDLE}.rootfs.qcomflash.tar.gz")
    with load_release(tarball) as rel2:
        tmp = rel2.tmpdir
        assert rel2.bundle_dir.name == BUNDLE and rel2.verify() == []
        assert {a.sha256 for a in rel2.artifacts} == {a.sha256 for a in rel.artifacts}
    assert not tmp.exists()
    rel3 = load_release(tarball, extract_dir=tmp_path / "x")
    assert rel3.bundle_dir == tmp_path / "x" / BUNDLE and rel3.tmpdir is None


def _evil_tar(path: Path, member: tarfile.TarInfo, data: bytes = b"") -> Path:
    with tarfile.open(path, "w:gz") as tf:
        member.size = len(data) if member.isfile() else 0
        tf.addfile(member, io.BytesIO(data) if member.isfile() else None)
    return path


@pytest.mark.parametrize("member", [
    tarfile.TarInfo("../escape.txt"),
    tarfile.TarInfo("/etc/evil"),
    tarfile.TarInfo("b/../../x"),
])
def test_safe_extract_refuses_path_traversal(tmp_path, member):
    tb = _evil_tar(tmp_path / "evil.tar.gz", member, b"pwned")
    dest = tmp_path / "dest"
    dest.mkdir()
    with pytest.raises(ArtifactError, match="unsafe member path|escapes"):
        safe_extract(tb, dest)
    assert not (tmp_path / "escape.txt").exists() and list(dest.iterdir()) == []


def test_safe_extract_refuses_escaping_symlink_and_devices(tmp_path):
    link = tarfile.TarInfo("b/link")
    link.type = tarfile.SYMTYPE
    link.linkname = "../../outside"
    tb = _evil_tar(tmp_path / "l.tar.gz", link)
    with pytest.raises(ArtifactError, match="points outside"):
        safe_extract(tb, tmp_path / "dest")
    dev = tarfile.TarInfo("b/dev")
    dev.type = tarfile.CHRTYPE
    tb2 = _evil_tar(tmp_path / "d.tar.gz", dev)
    with pytest.raises(ArtifactError, match="device"):
        safe_extract(tb2, tmp_path / "dest")


def test_load_release_bad_inputs(tmp_path):
    with pytest.raises(ArtifactError, match="no such file"):
        load_release(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ArtifactError, match="neither a release"):
        load_release(tmp_path / "empty")
    trunc = tmp_path / "t.qcomflash.tar.gz"
    good = make_tarball(make_bundle(tmp_path / "d"), tmp_path / "g.tar.gz").read_bytes()
    trunc.write_bytes(good[: len(good) // 2])
    with pytest.raises(ArtifactError, match="damaged|truncated|not a readable"):
        load_release(trunc)
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "release.json").write_text('{"format": 99}')
    with pytest.raises(ArtifactError, match="unsupported release.json format"):
        load_release(tmp_path / "r")
