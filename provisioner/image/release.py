"""Writing a release directory: what a build hands to the factory station and to rehearsals.

The format (``release.json``, the bundle layout) and its reader are the release contract,
:mod:`provisioner.contracts.release`; this module only assembles a release folder from a build's
flash bundle, kas files and log.
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from provisioner import catalog
from provisioner.contracts import board as on_board
from provisioner.contracts.release import (  # noqa: F401 - re-exported for the image stage's callers
    FORMAT,
    RELEASE_JSON,
    TARBALL_SUFFIX,
    Artifact,
    FleetPolicy,
    OtaEntry,
    Release,
    ReleaseDocument,
    ReleaseModel,
    bundle_in,
    hash_bundle,
    load_release,
    safe_extract,
    split_bundle_name,
    tree_digest,
    write_release_json,
)
from provisioner.errors import ArtifactError, UserError
from provisioner.hashing import sha256_file

# (ostreecommit tarball, release staging dir, machine) -> release.json "ota" as JSON (provisioner.ota.commit.collect)
OtaCollector = Callable[[Path, Path, str], Mapping[str, Any]]

# -- writing -------------------------------------------------------------------------------

def layers_from_lock(lock_files: Iterable[Path]) -> dict[str, str]:
    """``{repo: commit}`` from kas lock files (``overrides: repos: X: commit:``) or plain ``repos:`` pins."""
    layers: dict[str, str] = {}
    for f in lock_files:
        try:
            data = yaml.safe_load(Path(f).read_text(encoding="utf-8")) or {}
        except (OSError, yaml.YAMLError):
            continue
        if not isinstance(data, dict):
            continue
        for section in ((data.get("overrides") or {}).get("repos") or {}, data.get("repos") or {}):
            if not isinstance(section, dict):
                continue
            for name, spec in section.items():
                if isinstance(spec, dict) and spec.get("commit"):
                    layers[str(name)] = str(spec["commit"])
    return dict(sorted(layers.items()))


def ota_kargs(manifest: Any) -> list[str]:
    """The kernel arguments a release's update carries (provisioner.ota.commit.OtaTarget.kargs says why): one
    rule for real releases and the OTA rehearsal's, so a rehearsal never tests arguments a build would not set."""
    return [f"qcom_scm.download_mode={int(manifest.image.download_mode)}"]


def _model_entries(manifest: Any) -> tuple[ReleaseModel, ...]:
    """Model records for release.json: sha256/size from the manifest, else computed from the local file."""
    out = []
    for m in manifest.models:
        sha, size = m.sha256, m.size
        if m.path is not None and m.path.exists() and (sha is None or size is None):
            if m.path.is_dir():
                sha, size = tree_digest(m.path)
            else:
                size = m.path.stat().st_size
                sha = sha256_file(m.path)
        info = catalog.models().get(m.reference or m.name)
        out.append(ReleaseModel(
            name=m.name, kind=m.kind, runtime=m.runtime, qairt=m.qairt,
            chat_template=m.chat_template or (info.chat_template if info else "plain"),
            file=m.filename if m.kind == "litertlm" else None, sha256=sha, size=size,
            version=on_board.model_version_id(sha, manifest.release),
            # the verify floors travel with the release, so station and fleet never read the manifest
            min_decode_tok_s=manifest.min_decode_tok_s(m), max_ttft_s=manifest.max_ttft_s(m),
        ))
    return tuple(out)


def _place_bundle(bundle: Path, flash_dir: Path) -> Path:
    """Put the bundle under ``flash_dir``: extract a tarball, or hard-link/copy a folder."""
    flash_dir.mkdir(parents=True, exist_ok=True)
    if bundle.is_file():
        safe_extract(bundle, flash_dir)
        return bundle_in(flash_dir, bundle)
    if not any(bundle.glob("rawprogram*.xml")):
        raise ArtifactError(f"{bundle}: not a flash bundle (no rawprogram*.xml)",
                            "pass the unpacked <image>-<machine>/ folder or its .qcomflash.tar.gz")
    target = flash_dir / bundle.name

    def _link_or_copy(src: str, dst: str) -> None:
        try:
            os.link(src, dst)
        except OSError:
            shutil.copy2(src, dst)

    shutil.copytree(bundle, target, symlinks=True, copy_function=_link_or_copy)
    return target


def write_release(
    manifest: Any,
    bundle_dir: Path,
    out_root: Path,
    *,
    kas_files: Iterable[Path] = (),
    build_info: Mapping[str, Any] | None = None,
    simulated: bool = False,
    log_file: Path | None = None,
    layers: Mapping[str, str] | None = None,
    ota: tuple[Path, OtaCollector] | None = None,
) -> Path:
    """Assemble ``<out_root>/<release-id>/`` atomically and return its path.

    ``bundle_dir`` is the unpacked ``<image>-<machine>/`` folder or the ``.qcomflash.tar.gz``.
    ``kas_files`` are copied into ``kas/``; commits of any ``*.lock.yml`` among them become
    ``layers`` (unless ``layers`` is given). ``build_info`` is stored as ``build`` (host,
    started, duration_s, sstate...). Everything is built in a hidden sibling folder and renamed
    into place, so a crash never leaves a half-written release; an existing release with the
    same id is replaced only once the new one is complete. ``ota`` is a sota build's
    ``(ostreecommit tarball, collector)``: the collector (the OTA stage's ``commit.collect``, handed in so
    this stage does not import a later one) copies it into the release and returns release.json ``ota``.
    """
    bundle_dir = Path(bundle_dir)
    out_root = Path(out_root)
    if not bundle_dir.exists():
        raise ArtifactError(f"{bundle_dir}: flash bundle not found",
                            "the build did not produce a .qcomflash.tar.gz; check IMAGE_FSTYPES has qcomflash")
    release_id = manifest.release
    out_root.mkdir(parents=True, exist_ok=True)
    final = out_root / release_id
    staging = Path(tempfile.mkdtemp(prefix=f".{release_id}.", suffix=".tmp", dir=out_root))
    try:
        bundle = _place_bundle(bundle_dir, staging / "flash")
        kas_dir = staging / "kas"
        kas_dir.mkdir()
        copied: list[Path] = []
        for f in kas_files:
            f = Path(f)
            if not f.is_file():
                raise UserError(f"{f}: kas file not found", "render the configuration again")
            dst = kas_dir / f.name
            shutil.copy2(f, dst)
            copied.append(dst)
        (staging / "logs").mkdir()
        if log_file is not None and Path(log_file).is_file():
            shutil.copy2(log_file, staging / "logs" / "build.log")
        image, machine, _ = split_bundle_name(bundle.name)
        artifacts = hash_bundle(bundle)
        build: dict[str, Any] = {"host": socket.gethostname(), "started": None, "duration_s": None, "sstate": None}
        if build_info:
            build.update(dict(build_info))
        if machine and machine != manifest.board.kas_machine:
            raise ArtifactError(f"{bundle_dir}: bundle is for machine '{machine}' but the manifest board is "
                                f"{manifest.board.id} ({manifest.board.kas_machine})",
                                "collect the bundle built for this manifest's board")
        ota_entry = None
        if ota is not None:
            tarball, collector = ota
            collected = collector(Path(tarball), staging, manifest.board.kas_machine)
            # the kernel arguments an update must carry (OtaEntry says why)
            ota_entry = OtaEntry.from_json({**collected, "kargs": ota_kargs(manifest)}, staging / RELEASE_JSON)
        write_release_json(staging, ReleaseDocument(
            release=release_id,
            board=manifest.board.id,
            machine=manifest.board.kas_machine,
            qli=manifest.qli,
            image=image,
            qairt=tuple(manifest.qairt),
            runtimes=tuple(manifest.runtimes),
            models=_model_entries(manifest),
            bundle=bundle.relative_to(staging).as_posix(),
            artifacts=tuple(artifacts),
            layers=dict(layers) if layers is not None else layers_from_lock(
                p for p in copied if p.name.endswith((".lock.yml", ".lock.yaml"))),
            build=build,
            simulated=bool(simulated),
            # what the station and the fleet need of the manifest beyond models: the host name rule and
            # how far a board may fall below its factory baseline
            fleet=FleetPolicy(hostname=manifest.hostname, baseline_max_drop=manifest.verify.baseline_max_drop,
                              eval=release_eval(manifest).get("eval")),
            written=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            ota=ota_entry,
        ))
        _swap_into_place(staging, final)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return final


def release_eval(manifest: Any) -> dict[str, Any]:  # noqa: ANN401 - a Manifest, as ota_kargs takes it
    """``fleet.eval`` of release.json: the manifest's ``verify.eval`` with the suite's data itself (the release
    folder then carries what `fleet update-os` gates on, wherever it is copied), or nothing."""
    gate = manifest.verify.eval
    if gate is None:
        return {}
    return {"eval": {"suite": gate.suite.raw, "source": gate.suite.source, "min_score": gate.min_score}}


def _swap_into_place(staging: Path, final: Path) -> None:
    """Rename the complete staging folder to ``final``, replacing an older release of the same id."""
    old = None
    if final.exists():
        old = final.with_name(f".{final.name}.old-{os.getpid()}")
        os.rename(final, old)
    try:
        os.rename(staging, final)
    except OSError:
        if old is not None:
            os.rename(old, final)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
