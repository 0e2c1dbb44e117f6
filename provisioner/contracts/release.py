"""The release contract: ``release.json`` and the bundle it describes, read by every later stage.

The image stage writes a release (:func:`provisioner.image.release.write_release`); the factory
station, the OTA publisher, the fleet and the rehearsal read it through THIS module only, so the
format lives in one place. A release is one folder::

    <out>/<release-id>/
      release.json
      kas/                      rendered kas files + the kas lock actually used
      flash/<image>-<machine>/  the unpacked qcomflash bundle
      logs/build.log

``release.json`` is the typed document of :mod:`provisioner.contracts.release_document` (its schema,
its one reader and its one writer); this module opens the folder around it and the bundle it names.

:func:`load_release` accepts three things a station operator may hold: a release folder, a bare
bundle folder (``<image>-<machine>/`` with rawprogram XML), or the ``.qcomflash.tar.gz`` that
bitbake wrote. Tarballs are extracted safely (no absolute paths, no ``..``, no links that
escape, no device files) because a flash bundle often arrives from another machine.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from provisioner import catalog
from provisioner.contracts import inventory
from provisioner.contracts.release_document import (  # noqa: F401 - the contract's names, re-exported here
    FORMAT,
    MODEL_KINDS,
    OTA_KINDS,
    RELEASE_JSON,
    RUNTIMES,
    Artifact,
    FleetPolicy,
    OtaEntry,
    ReleaseDocument,
    ReleaseModel,
    read_release_json,
    write_release_json,
)
from provisioner.errors import ArtifactError
from provisioner.hashing import sha256_file

#: What meta-updater's sota.bbclass (uptane/meta-updater @ f0e1ccaf) adds to IMAGE_FSTYPES with
#: BUILD_OSTREE_REPO_TARBALL = "1"; bitbake names the file ``<IMAGE_LINK_NAME>.ostreecommit.tar.xz``.
OSTREE_TARBALL_SUFFIX = ".ostreecommit.tar.xz"


def ostree_tarball_name(image: str, machine: str) -> str:
    """``<image>-<machine>.rootfs.ostreecommit.tar.xz`` (oe-core's IMAGE_LINK_NAME is ``<image>-<machine>.rootfs``)."""
    return f"{image}-{machine}.rootfs{OSTREE_TARBALL_SUFFIX}"


TARBALL_SUFFIX = ".qcomflash.tar.gz"


@dataclass
class Release:
    """A loaded release (or a bare bundle seen as one).

    ``root`` is the release folder, or ``None`` when only a bundle was given. ``doc`` is its
    ``release.json`` (for a bare bundle: what could be inferred, with ``artifacts`` computed from the
    files). ``tmpdir`` is set when a tarball was extracted to a temporary folder; :meth:`close` (or
    ``with``) removes it.
    """

    bundle_dir: Path
    doc: ReleaseDocument
    root: Path | None = None
    tmpdir: Path | None = None

    # -- convenience views -------------------------------------------------------------
    @property
    def id(self) -> str | None:
        return self.doc.release

    @property
    def board(self) -> str | None:
        return self.doc.board

    @property
    def machine(self) -> str | None:
        return self.doc.machine

    @property
    def image(self) -> str | None:
        return self.doc.image

    @property
    def simulated(self) -> bool:
        return self.doc.simulated

    @property
    def artifacts(self) -> list[Artifact]:
        return list(self.doc.artifacts)

    @property
    def models(self) -> list[dict[str, Any]]:
        """``models`` as JSON objects (the shape the inventory's ``edge_llm_models`` takes them in)."""
        return [m.to_json() for m in self.doc.models]

    @property
    def hostname_rule(self) -> str:
        """The manifest's rule for a board's fleet host name (release.json ``fleet.hostname``)."""
        return (self.doc.fleet and self.doc.fleet.hostname) or inventory.DEFAULT_HOSTNAME_RULE

    @property
    def baseline_max_drop(self) -> float:
        """How far below its factory baseline a board may run (release.json ``fleet.baseline_max_drop``)."""
        v = self.doc.fleet.baseline_max_drop if self.doc.fleet else None
        return v if v is not None and 0 < v < 1 else inventory.DEFAULT_BASELINE_MAX_DROP

    @property
    def eval_gate(self) -> dict[str, Any] | None:
        """The manifest's ``verify.eval`` (release.json ``fleet.eval``: suite data, source, min_score), or None."""
        return self.doc.eval_gate

    def model_entries(self) -> list[ReleaseModel]:
        """``models`` as typed entries (see :class:`ReleaseModel`)."""
        return list(self.doc.models)

    @property
    def layers(self) -> dict[str, str]:
        return dict(self.doc.layers)

    def path(self, relative: str) -> Path:
        """Absolute path of a bundle file named as in ``artifacts``."""
        return self.bundle_dir / relative

    def rawprogram_files(self) -> list[Path]:
        return sorted(self.bundle_dir.glob("rawprogram*.xml"))

    def verify(self, *, hash_files: bool = True) -> list[str]:
        """Problems between ``artifacts`` and the files on disk (empty list = intact).

        Checks that every listed file exists with its size (and sha256 unless ``hash_files`` is
        False, for a fast preflight), and that the bundle holds no file the list does not name.
        """
        problems: list[str] = []
        listed = set()
        inside = self.bundle_dir.resolve()
        for art in self.doc.artifacts:
            listed.add(art.path)
            p = self.bundle_dir / art.path
            if not is_within(inside, p.resolve()):       # absolute, '..' or a link out: never read it
                problems.append(f"{art.path}: points outside the bundle")
                continue
            if not p.is_file():
                problems.append(f"{art.path}: missing from the bundle")
                continue
            size = p.stat().st_size
            if size != art.size:
                problems.append(f"{art.path}: size {size} != {art.size} recorded in {RELEASE_JSON}")
                continue
            if hash_files:
                digest = sha256_file(p)
                if digest != art.sha256:
                    problems.append(f"{art.path}: sha256 {digest[:12]}... != {art.sha256[:12]}... recorded")
        for rel in _bundle_files(self.bundle_dir):
            if not is_within(inside, (self.bundle_dir / rel).resolve()):
                if rel not in listed:
                    problems.append(f"{rel}: points outside the bundle")
            elif rel not in listed:
                problems.append(f"{rel}: in the bundle but not in {RELEASE_JSON}")
        return problems

    def as_dict(self) -> dict[str, Any]:
        out = self.doc.to_json()
        out["bundle_dir"] = str(self.bundle_dir)
        out["root"] = str(self.root) if self.root else None
        return out

    def close(self) -> None:
        """Remove a temporary extraction folder (no-op otherwise)."""
        if self.tmpdir is not None:
            shutil.rmtree(self.tmpdir, ignore_errors=True)
            self.tmpdir = None

    def __enter__(self) -> Release:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# -- hashing ---------------------------------------------------------------------------------

def _bundle_files(bundle: Path) -> list[str]:
    """Every regular file below ``bundle``, as sorted POSIX relative paths."""
    out = []
    for dirpath, dirnames, filenames in os.walk(bundle):
        dirnames.sort()
        for name in filenames:
            p = Path(dirpath) / name
            if p.is_file():
                out.append(p.relative_to(bundle).as_posix())
    return sorted(out)


def hash_bundle(bundle: Path) -> list[Artifact]:
    """sha256 + size of every file of a bundle folder, sorted by path."""
    return [Artifact(rel, sha256_file(bundle / rel), (bundle / rel).stat().st_size) for rel in _bundle_files(bundle)]


def tree_digest(folder: Path) -> tuple[str, int]:
    """One sha256 for a folder (Genie bundle): over sorted 'path sha256 size' lines. Also total size."""
    h = hashlib.sha256()
    total = 0
    for art in hash_bundle(folder):
        h.update(f"{art.path} {art.sha256} {art.size}\n".encode())
        total += art.size
    return h.hexdigest(), total


# -- safe tarball extraction --------------------------------------------------------------

def is_within(base: Path, target: Path) -> bool:
    try:
        target.relative_to(base)
        return True
    except ValueError:
        return False


def check_member_name(tarball: Path, dest: Path, name: str) -> None:
    """Refuse a member whose name lands outside ``dest``: absolute, with a ``..`` part, or resolving out.

    Every tarball we unpack (flash bundles, ostreecommit tarballs) goes through this one check, because
    Python before 3.11.4 (Debian 12's 3.11.2) writes such a member where its name points (PEP 706; the
    tarfile docs' "Extraction filters"). ``dest`` must be resolved already.
    """
    if name.startswith("/") or os.path.isabs(name) or ".." in Path(name).parts:
        raise ArtifactError(f"{tarball}: unsafe member path '{name}'",
                            "refusing to extract; the archive was not made by bitbake")
    if not is_within(dest, (dest / name).resolve()):
        raise ArtifactError(f"{tarball}: member '{name}' escapes the extraction folder",
                            "refusing to extract; the archive was not made by bitbake")


def extract_checked(tf: tarfile.TarFile, dest: Path, members: list[tarfile.TarInfo]) -> None:
    """Extract members the caller has already checked (names, links, types stay inside ``dest``).

    Python 3.12 and 3.11.4+ add tarfile's ``data`` filter as a second guard; 3.11.0-3.11.3 (Debian 12's
    3.11.2) do not have it, and the caller's checks are then the only ones (PEP 706).
    """
    if hasattr(tarfile, "data_filter"):
        tf.extractall(dest, members=members, filter="data")
    else:
        tf.extractall(dest, members=members)  # noqa: S202 - every member was checked by the caller


def safe_extract(tarball: Path, dest: Path) -> list[str]:
    """Extract ``tarball`` into ``dest`` refusing anything that could write outside it.

    Refused: absolute names, ``..`` components, symlinks/hardlinks whose target leaves
    ``dest``, device/fifo entries. Returns the top-level names extracted.
    """
    dest = dest.resolve()
    try:
        tf = tarfile.open(tarball, "r:*")  # noqa: SIM115 - closed by the `with tf` below
    except (tarfile.TarError, OSError) as exc:
        raise ArtifactError(f"{tarball}: not a readable tar archive ({exc})",
                            "re-copy the .qcomflash.tar.gz from the build's deploy folder") from exc
    tops: set[str] = set()
    with tf:
        try:
            members = tf.getmembers()
        except (tarfile.TarError, EOFError, OSError) as exc:
            raise ArtifactError(f"{tarball}: archive is damaged or truncated ({exc})",
                                "re-copy it from the build host and compare its sha256") from exc
        for m in members:
            name = m.name
            parts = Path(name).parts
            check_member_name(tarball, dest, name)
            if m.issym() or m.islnk():
                link = m.linkname
                base = (dest / name).parent if m.issym() else dest
                ltarget = (base / link).resolve() if not os.path.isabs(link) else Path(link)
                if os.path.isabs(link) or not is_within(dest, ltarget):
                    raise ArtifactError(f"{tarball}: link '{name}' -> '{link}' points outside the bundle",
                                        "refusing to extract; the archive was not made by bitbake")
            elif not (m.isfile() or m.isdir()):
                raise ArtifactError(f"{tarball}: member '{name}' is a device or fifo",
                                    "refusing to extract; the archive was not made by bitbake")
            if parts and parts[0] != ".":
                tops.add(parts[0])
        try:
            extract_checked(tf, dest, members)
        except (tarfile.TarError, EOFError, OSError) as exc:
            raise ArtifactError(f"{tarball}: archive is damaged or truncated ({exc})",
                                "re-copy it from the build host and compare its sha256") from exc
    return sorted(tops)


def bundle_in(folder: Path, origin: Path) -> Path:
    """The bundle folder inside an extraction: the single top folder holding rawprogram XML."""
    if any(folder.glob("rawprogram*.xml")):
        return folder
    cands = [d for d in sorted(folder.iterdir()) if d.is_dir() and any(d.glob("rawprogram*.xml"))]
    if len(cands) != 1:
        raise ArtifactError(f"{origin}: no flash bundle inside (expected one <image>-<machine>/ folder with "
                            "rawprogram*.xml)", "pass the .qcomflash.tar.gz from tmp/deploy/images/<machine>/")
    return cands[0]


# -- inference for bare bundles ----------------------------------------------------------

def split_bundle_name(name: str) -> tuple[str | None, str | None, str | None]:
    """``qcom-multimedia-image-iq-8275-evk`` -> (image, machine, board id) using the catalog."""
    name = name.removesuffix(TARBALL_SUFFIX).removesuffix(".rootfs")
    for b in catalog.boards().values():
        suffix = "-" + b.kas_machine
        if name.endswith(suffix) and len(name) > len(suffix):
            return name[: -len(suffix)], b.kas_machine, b.id
    return None, None, None


def load_release(path: str | Path, *, extract_dir: Path | None = None, hash_files: bool = True) -> Release:
    """Open a release folder, a bundle folder or a ``.qcomflash.tar.gz``.

    For a tarball, ``extract_dir`` (created if needed) receives the contents; without it a
    temporary folder is used and removed by :meth:`Release.close`. A bundle folder that sits
    inside a release (``<release>/flash/<bundle>/``) is opened as that release. A bundle without
    ``release.json`` gets its artifact list computed; ``hash_files=False`` lists sizes only and
    leaves ``sha256`` empty, so a 100 GiB sparse rootfs is not read (``station preflight --no-hash``).
    """
    p = Path(path).expanduser()
    if not p.exists():
        raise ArtifactError(f"{p}: no such file or folder",
                            "pass a release folder, a flash bundle folder or a .qcomflash.tar.gz")
    p = p.resolve()
    if p.is_file():
        if not (p.name.endswith(".tar.gz") or p.name.endswith(".tgz") or p.name.endswith(".tar")):
            if p.name == RELEASE_JSON:
                return load_release(p.parent)
            raise ArtifactError(f"{p}: not a release, bundle folder or .qcomflash.tar.gz",
                                "pass the release folder that holds release.json")
        tmp = None
        if extract_dir is None:
            tmp = Path(tempfile.mkdtemp(prefix="edge-llm-bundle-"))
            dest = tmp
        else:
            dest = Path(extract_dir)
            dest.mkdir(parents=True, exist_ok=True)
        try:
            safe_extract(p, dest)
            bundle = bundle_in(dest, p)
        except BaseException:
            if tmp is not None:
                shutil.rmtree(tmp, ignore_errors=True)
            raise
        rel = _bare_release(bundle, p, hash_files=hash_files)
        rel.tmpdir = tmp
        return rel
    if (p / RELEASE_JSON).is_file():
        doc = read_release_json(p)
        bundle = (p / (doc.bundle or "")).resolve()
        if not is_within(p, bundle) or not bundle.is_dir():
            raise ArtifactError(f"{p}: bundle folder '{doc.bundle}' named in release.json is missing",
                                "copy the whole release folder, including flash/")
        return Release(bundle_dir=bundle, doc=doc, root=p)
    # a bundle folder, possibly inside a release
    parent_release = p.parent.parent
    if p.parent.name == "flash" and (parent_release / RELEASE_JSON).is_file():
        rel = load_release(parent_release)
        if rel.bundle_dir == p:
            return rel
    if not any(p.glob("rawprogram*.xml")):
        raise ArtifactError(f"{p}: neither a release folder (no release.json) nor a flash bundle "
                            "(no rawprogram*.xml)", "pass <out>/<release-id>/ or the unpacked qcomflash folder")
    return _bare_release(p, p, hash_files=hash_files)


def _bare_release(bundle: Path, origin: Path, *, hash_files: bool = True) -> Release:
    """A Release for a bundle without release.json: facts inferred from the name, hashes computed."""
    image, machine, board = split_bundle_name(bundle.name)
    if machine is None and origin.is_file():
        image, machine, board = split_bundle_name(origin.name)
    artifacts = hash_bundle(bundle) if hash_files else [
        Artifact(rel, "", (bundle / rel).stat().st_size) for rel in _bundle_files(bundle)]
    doc = ReleaseDocument(board=board, machine=machine, image=image, bundle=bundle.name, artifacts=tuple(artifacts))
    return Release(bundle_dir=bundle, doc=doc, root=None)
