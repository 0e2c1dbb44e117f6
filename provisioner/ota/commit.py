"""The build side of OTA: find meta-updater's ``ostreecommit.tar.xz``, read it, put it in the release.

What the file is (meta-updater f0e1ccaf, see :mod:`provisioner.ota`): a tar of the build's whole
archive-mode ``OSTREE_REPO`` (``-C ${OSTREE_REPO} .``), xz-compressed, in the deploy folder as
``<image>-<machine>.rootfs.ostreecommit.tar.xz``. The repo persists across builds, so the release's
commit is the one ``refs/heads/<OSTREE_BRANCHNAME>`` names, not "the only commit in it".
"""

from __future__ import annotations

import re
import shutil
import tarfile
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from provisioner import catalog
from provisioner.contracts.release import check_member_name, extract_checked
from provisioner.contracts.release_document import (  # noqa: F401 - the entry's shapes, used by OTA callers
    COMMIT_RE,
    KARG_RE,
    REF_RE,
    OtaEntry,
    ReleaseDocument,
)
from provisioner.errors import ArtifactError
from provisioner.hashing import sha256_file
from provisioner.ota import TARBALL_PATH, ostree

#: How much larger than its tarball an ostreecommit repo may unpack. An archive-mode repo stores every file
#: object zlib-compressed (ostree docs, "Repository types and locations": archive), so xz gains little on
#: top and a real tarball unpacks to about its own size; the floor leaves room for tiny test repos.
UNPACK_RATIO = 16
UNPACK_FLOOR = 64 << 20


def unpack_limit(tarball: Path) -> int:
    """The most bytes of member data :func:`extract_repo` writes for ``tarball`` unless told otherwise."""
    return max(UNPACK_FLOOR, UNPACK_RATIO * tarball.stat().st_size)


def extract_repo(tarball: Path, dest: Path, *, max_unpacked: int | None = None) -> Path:
    """Unpack the archive repo into ``dest``: regular files and folders only, nothing outside ``dest``.

    An archive-mode repository holds only files and folders (symlinks of the image are stored as
    objects), so anything else means the file is not what meta-updater wrote. Names go through the
    bundle extractor's check (Debian 12's Python 3.11.2 has no tarfile data filter, PEP 706), and the
    members' sizes are summed while the headers are read, so a tarball that would unpack to more than
    ``max_unpacked`` bytes (default :func:`unpack_limit`) is refused before anything is written.
    """
    dest = dest.resolve()
    try:
        limit = unpack_limit(tarball) if max_unpacked is None else max_unpacked
        with tarfile.open(tarball, "r:*") as tf:
            members: list[tarfile.TarInfo] = []
            total = 0
            while (m := tf.next()) is not None:
                check_member_name(tarball, dest, m.name)
                if not (m.isfile() or m.isdir()):
                    raise ArtifactError(f"{tarball}: member '{m.name}' is not a file or folder",
                                        "an OSTree archive repo holds only files; re-copy the build's tarball")
                total += m.size
                if total > limit:
                    raise ArtifactError(f"{tarball}: unpacks to more than {limit >> 20} MiB, far more than an "
                                        "archive-mode repo of its size; not the tarball a build wrote",
                                        "re-copy it from the build's deploy folder and compare its sha256")
                members.append(m)
            extract_checked(tf, dest, members)
    except (tarfile.TarError, EOFError, OSError, ValueError) as exc:
        raise ArtifactError(f"{tarball}: not a readable ostreecommit tarball ({exc})",
                            "re-copy it from the build's deploy folder and compare its sha256") from exc
    if ostree.repo_mode(dest) not in ("archive", "archive-z2"):
        raise ArtifactError(f"{tarball}: holds no archive-mode OSTree repository (no config with mode=archive)",
                            "use the <image>-<machine>.rootfs.ostreecommit.tar.xz of a qcom-distro-sota build")
    return dest


def branch_commit(repo: Path, machine: str, tarball: Path) -> tuple[str, str]:
    """(branch, commit): the only branch, or the one named like the machine (OSTREE_BRANCHNAME default)."""
    heads = repo / "refs" / "heads"
    refs = sorted(str(p.relative_to(heads)) for p in heads.rglob("*") if p.is_file()) if heads.is_dir() else []
    if not refs:
        raise ArtifactError(f"{tarball}: the OSTree repository has no branch (refs/heads is empty)",
                            "the build did not commit; look for do_image_ostreecommit in the build log")
    if len(refs) == 1:
        branch = refs[0]
    elif machine in refs:
        branch = machine
    else:
        raise ArtifactError(f"{tarball}: branches {', '.join(refs)}; none is {machine!r}",
                            "OSTREE_BRANCHNAME defaults to the machine (meta-updater sota.bbclass); "
                            "build with a clean ostree_repo or keep the default")
    commit = (heads / branch).read_text().strip()
    if not COMMIT_RE.match(commit):
        raise ArtifactError(f"{tarball}: refs/heads/{branch} is not a commit id ({commit[:70]!r})",
                            "re-copy the tarball from the build's deploy folder")
    return branch, commit


def read_tarball(tarball: Path, machine: str, env: Mapping[str, str]) -> OtaEntry:
    """Read commit id, branch, subject, version and sizes from an ostreecommit tarball (``ostree`` runs with
    the run's ``env``, :func:`provisioner.ota.ostree.child_env`)."""
    with tempfile.TemporaryDirectory(prefix="edge-llm-ostree-") as tmp:
        repo = extract_repo(tarball, Path(tmp))
        branch, commit = branch_commit(repo, machine, tarball)
        if ostree.rev_parse(repo, commit, env) is None:
            raise ArtifactError(f"{tarball}: refs/heads/{branch} names {commit[:12]}, which is not in the repo",
                                "the tarball is incomplete; re-copy it from the build's deploy folder")
        return OtaEntry(kind="ostree", tarball=TARBALL_PATH, commit=commit, branch=branch,
                        size=tarball.stat().st_size, sha256=sha256_file(tarball),
                        content_size=ostree.content_size(repo, commit, env),
                        version=ostree.commit_version(repo, commit, env),
                        subject=ostree.commit_subject(repo, commit, env))


def collect(tarball: Path, release_dir: Path, machine: str, *, env: Mapping[str, str]) -> dict[str, Any]:
    """Copy the tarball to ``<release>/ostree/`` and return release.json's ``ota`` entry as JSON; ``env`` is the
    run's (the build hands this in as its ``ota_collector`` with the run's environment bound)."""
    info = read_tarball(tarball, machine, env)
    dest = release_dir / TARBALL_PATH
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_name(dest.name + ".part")
    shutil.copyfile(tarball, part)
    part.replace(dest)
    return info.to_json()


#: the release id, as the manifest allows it (it becomes BUILD_ID in /etc/os-release)
RELEASE_ID_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,127}$")


@dataclass(frozen=True)
class OtaTarget:
    """What ``fleet update-os`` hands every board, read from a release.json and validated by type.

    A release folder is data from elsewhere (a build host, a share, a download): every field that reaches
    the boards or Ansible has the one shape it may have, or the release is refused before anything runs.
    """

    commit: str
    branch: str
    board: str
    build_id: str
    #: the kernel arguments the release sets (:class:`OtaEntry` says why update-os carries them)
    kargs: tuple[str, ...] = ()


def _bad(where: Path, what: str) -> ArtifactError:
    return ArtifactError(f"{where}: release.json {what}", "rebuild the release with `provisioner build`")


def ota_target(doc: ReleaseDocument, where: Path) -> OtaTarget:
    """Commit, branch, board and BUILD_ID of a release whose ``ota`` the contract checked, plus what only
    update-os asks: a board this tool knows and a release id the manifest would allow."""
    ota = doc.ota_entry(where)
    board = doc.board
    if not isinstance(board, str) or board not in catalog.boards():
        raise _bad(where, f"'board' is not a board this tool knows: {board!r:.80}")
    build_id = doc.release
    if not isinstance(build_id, str) or not RELEASE_ID_RE.match(build_id):
        raise _bad(where, f"'release' is not a release id (lowercase letters, digits, . _ -): {build_id!r:.80}")
    return OtaTarget(commit=ota.commit, branch=ota.branch, board=board, build_id=build_id, kargs=ota.kargs)
