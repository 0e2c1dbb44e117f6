"""The build side: the simulator's ostreecommit.tar.xz is read the way the build collects the real one."""

from __future__ import annotations

import io
import os
import subprocess
import tarfile
from pathlib import Path

import pytest

from provisioner import context
from provisioner.errors import ArtifactError, BuildError
from provisioner.image.collect import find_ostree_commit
from provisioner.ota.commit import extract_repo, read_tarball
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
    info = read_tarball(tarball, MACHINE, context.current().env)
    assert (info.commit, info.branch, info.version) == (commit, MACHINE, "2.0")
    assert info.subject.startswith("Commit-id: qcom-multimedia-image-iq-8275-evk.rootfs-")
    assert info.content_size >= 200 and info.size == tarball.stat().st_size


def test_rebuild_keeps_the_old_commit_and_the_branch_names_the_new_one(tmp_path: Path) -> None:
    work = tmp_path / "work"
    build_commit(rootfs(tmp_path / "a", runtime=b"1", model=b"m"), work, tmp_path / "d1", image=IMAGE,
                 machine=MACHINE)
    tarball, second, _ = build_commit(rootfs(tmp_path / "b", runtime=b"2", model=b"m"), work, tmp_path / "d2",
                                      image=IMAGE, machine=MACHINE)
    assert read_tarball(tarball, MACHINE, context.current().env).commit == second


def test_not_a_commit_tarball_is_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "x.ostreecommit.tar.xz"
    with tarfile.open(bad, "w:xz") as tf:
        (tmp_path / "hello").write_text("hi")
        tf.add(tmp_path / "hello", arcname="./hello")
    with pytest.raises(ArtifactError, match="no archive-mode OSTree repository"):
        read_tarball(bad, MACHINE, context.current().env)
    with pytest.raises(BuildError, match="BUILD_OSTREE_REPO_TARBALL"):
        find_ostree_commit(tmp_path, MACHINE, IMAGE)


# -- hostile tarballs: names that leave the folder, sizes that fill the disk ---------------------------

SYSTEM_PYTHON = "/usr/bin/python3"       # Debian 12's own interpreter: 3.11.2, no tarfile data filter (PEP 706)
REPO_ROOT = Path(__file__).resolve().parents[2]


class _Zeros(io.RawIOBase):
    """``n`` zero bytes, streamed (a bomb's member without holding it in memory)."""

    def __init__(self, n: int) -> None:
        self.left = n

    def readable(self) -> bool:
        return True

    def readinto(self, buf) -> int:  # noqa: ANN001 - io's buffer protocol
        k = min(len(buf), self.left)
        buf[:k] = bytes(k)
        self.left -= k
        return k


def _tarball(path: Path, name: str, data: bytes = b"pwned\n") -> Path:
    """An xz tarball with a config file and one more member called ``name`` (what an attacker controls)."""
    with tarfile.open(path, "w:xz") as tf:
        for member, body in (("./config", b"[core]\nrepo_version=1\nmode=archive-z2\n"), (name, data)):
            info = tarfile.TarInfo(member)
            info.size = len(body)
            tf.addfile(info, io.BytesIO(body))
    return path


def _escapes(tmp_path: Path) -> list[str]:
    """Names that point outside a folder three levels below ``tmp_path``."""
    return ["../../../escaped", "objects/../../../../escaped", str(tmp_path / "escaped")]


def test_a_member_named_outside_the_folder_is_refused_and_nothing_is_written(tmp_path: Path) -> None:
    for name in _escapes(tmp_path):
        tarball = _tarball(tmp_path / "hostile.ostreecommit.tar.xz", name)
        dest = tmp_path / "a" / "b" / "dest"
        dest.mkdir(parents=True, exist_ok=True)
        with pytest.raises(ArtifactError) as err:
            extract_repo(tarball, dest)
        assert f"unsafe member path '{name}'" in str(err.value) and "\n" not in str(err.value)
        assert not (tmp_path / "escaped").exists() and list(dest.iterdir()) == []


def _system_python_reason() -> str | None:
    """Why the Debian 12 interpreter test cannot run here (None: it can)."""
    if not os.access(SYSTEM_PYTHON, os.X_OK):
        return f"no {SYSTEM_PYTHON}"
    probe = subprocess.run([SYSTEM_PYTHON, "-c", "import sys, tarfile; "
                            "print('%d.%d.%d' % sys.version_info[:3], hasattr(tarfile, 'data_filter'))"],
                           capture_output=True, text=True, check=False)
    version, _, has_filter = probe.stdout.strip().partition(" ")
    if probe.returncode != 0 or has_filter != "False":
        return (f"{SYSTEM_PYTHON} is {version or 'unusable'} with tarfile's data filter: not Debian 12's 3.11.2, "
                "where only our own checks stand between a member name and the disk")
    return None


@pytest.mark.skipif(_system_python_reason() is not None, reason=str(_system_python_reason()))
def test_debian_12s_python_refuses_a_member_named_outside_the_folder(tmp_path: Path) -> None:
    """The same extractor on /usr/bin/python3 (3.11.2 has no tarfile data filter, PEP 706): nothing escapes."""
    script = ("import sys\nfrom pathlib import Path\nfrom provisioner.errors import ArtifactError\n"
              "from provisioner.ota.commit import extract_repo\n"
              "try:\n    extract_repo(Path(sys.argv[1]), Path(sys.argv[2]))\n"
              "except ArtifactError as exc:\n    print('refused:', exc)\nelse:\n    print('extracted')\n")
    for name in _escapes(tmp_path):
        tarball = _tarball(tmp_path / "hostile.ostreecommit.tar.xz", name)
        dest = tmp_path / "a" / "b" / "dest"
        dest.mkdir(parents=True, exist_ok=True)
        # stdlib only: the extractor's imports resolve from the source tree, no venv needed
        proc = subprocess.run([SYSTEM_PYTHON, "-s", "-c", script, str(tarball), str(dest)], capture_output=True,
                              text=True, check=False, env={"PATH": os.environ.get("PATH", os.defpath),
                                                           "PYTHONPATH": str(REPO_ROOT)})
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.startswith(f"refused: {tarball}: unsafe member path '{name}'"), proc.stdout
        assert not (tmp_path / "escaped").exists() and list(dest.iterdir()) == []


def test_a_tarball_that_unpacks_far_beyond_its_size_is_refused_before_the_disk_fills(tmp_path: Path) -> None:
    """A few KB of xz that claims 80 MiB: more than an archive repo (objects already compressed) ever unpacks to."""
    tarball = tmp_path / "bomb.ostreecommit.tar.xz"
    size = 80 << 20
    with tarfile.open(tarball, "w:xz", preset=0) as tf:
        info = tarfile.TarInfo("./objects/00/zeros.filez")
        info.size = size
        tf.addfile(info, io.BufferedReader(_Zeros(size)))
    assert tarball.stat().st_size < 64 * 1024
    dest = tmp_path / "dest"
    dest.mkdir()
    with pytest.raises(ArtifactError) as err:
        extract_repo(tarball, dest)
    assert "unpacks to more than" in str(err.value) and "\n" not in str(err.value)
    assert sum(f.stat().st_size for f in dest.rglob("*") if f.is_file()) == 0
    # the cap is the caller's to raise: the same file within a bigger bound is read (and found to be no repo)
    with pytest.raises(ArtifactError, match="no archive-mode OSTree repository"):
        extract_repo(tarball, tmp_path / "dest2", max_unpacked=size + 1)
