"""The build side: the simulator's ostreecommit.tar.xz is read the way the build collects the real one."""

from __future__ import annotations

import tarfile
from pathlib import Path

import pytest

from provisioner.errors import ArtifactError, BuildError
from provisioner.image.collect import find_ostree_commit
from provisioner.ota.commit import read_tarball
from provisioner.sim.ostree_image import build_commit
from tests.ota.conftest import IMAGE, MACHINE, needs_ostree, rootfs

pytestmark = needs_ostree


def test_tarball_has_meta_updaters_name_and_shape(tmp_path: Path) -> None:
    tree = rootfs(tmp_path / "rootfs", runtime=b"r" * 100, model=b"m" * 100)
    (tree / "opt/qairt/2.44").mkdir(parents=True)
    (tree / "opt/qairt/2.44/libQnnHtp.so").write_bytes(b"q")
    deploy = tmp_path / "build" / "tmp" / "deploy" / "images" / MACHINE
    tarball, commit, dropped = build_commit(tree, tmp_path / "work", deploy, image=IMAGE, machine=MACHINE)
    assert find_ostree_commit(tmp_path / "build", MACHINE, IMAGE) == tarball.resolve()
    assert tarball.name == "qcom-multimedia-image-iq-8275-evk.rootfs.ostreecommit.tar.xz"
    with tarfile.open(tarball) as tf:
        names = tf.getnames()
    assert "./config" in names and f"./refs/heads/{MACHINE}" in names
    assert dropped == ["opt"]                        # meta-updater does not keep /opt in the commit
    info = read_tarball(tarball, MACHINE)
    assert (info.commit, info.branch, info.version) == (commit, MACHINE, "2.0")
    assert info.subject.startswith("Commit-id: qcom-multimedia-image-iq-8275-evk.rootfs-")
    assert info.content_size >= 200 and info.size == tarball.stat().st_size


def test_rebuild_keeps_the_old_commit_and_the_branch_names_the_new_one(tmp_path: Path) -> None:
    work = tmp_path / "work"
    build_commit(rootfs(tmp_path / "a", runtime=b"1", model=b"m"), work, tmp_path / "d1", image=IMAGE,
                 machine=MACHINE)
    tarball, second, _ = build_commit(rootfs(tmp_path / "b", runtime=b"2", model=b"m"), work, tmp_path / "d2",
                                      image=IMAGE, machine=MACHINE)
    assert read_tarball(tarball, MACHINE).commit == second


def test_not_a_commit_tarball_is_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "x.ostreecommit.tar.xz"
    with tarfile.open(bad, "w:xz") as tf:
        (tmp_path / "hello").write_text("hi")
        tf.add(tmp_path / "hello", arcname="./hello")
    with pytest.raises(ArtifactError, match="no archive-mode OSTree repository"):
        read_tarball(bad, MACHINE)
    with pytest.raises(BuildError, match="BUILD_OSTREE_REPO_TARBALL"):
        find_ostree_commit(tmp_path, MACHINE, IMAGE)
