"""Cross-check a validated manifest against the model files it names.

``load_manifest`` can only compare the manifest with the catalog. A model file knows more: the
QAIRT build its context binaries were compiled with, the SoC and Hexagon arch it targets, its
real size and sha256. This module reads those (cheaply, via :mod:`provisioner.artifacts.inspect`)
for every model already on disk - at ``path``, or in ``build.dl_dir`` after ``provisioner fetch``
- and returns every disagreement as a :class:`~provisioner.manifest.Problem` with its location
(``models[0].qairt``) and a fix, so a release engineer sees them all in one run, before a
multi-hour image build.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from provisioner.artifacts.inspect import Inspection, inspect_path
from provisioner.errors import ArtifactError
from provisioner.hashing import hash_files
from provisioner.manifest import Manifest, Model, Problem


@dataclass
class ModelCheck:
    """What ``check`` learned about one model."""

    index: int
    model: Model
    file: Path | None
    state: str  # checked | not-on-disk | skipped
    inspection: Inspection | None = None
    sha256: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.model.name, "kind": self.model.kind, "qairt": self.model.qairt,
                "file": str(self.file) if self.file else None, "state": self.state, "sha256": self.sha256,
                "inspection": self.inspection.as_dict() if self.inspection else None}


@dataclass
class CheckResult:
    manifest: Manifest
    problems: list[Problem] = field(default_factory=list)
    warnings: list[Problem] = field(default_factory=list)
    models: list[ModelCheck] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def as_dict(self) -> dict[str, Any]:
        m = self.manifest
        return {
            "manifest": str(m.path), "ok": self.ok, "release": m.release, "board": m.board.id,
            "machine": m.board.kas_machine, "qli": m.qli, "qairt": list(m.qairt), "runtimes": list(m.runtimes),
            "image": dict(m.image.__dict__), "dl_dir": str(m.build.dl_dir) if m.build.dl_dir else None,
            "problems": [p.__dict__ for p in self.problems], "warnings": [w.__dict__ for w in self.warnings],
            "models": [mc.as_dict() for mc in self.models],
        }


def locate(manifest: Manifest, model: Model) -> Path | None:
    """Where the model is on disk: its ``path``, else its file in the downloads directory."""
    if model.path is not None:
        return model.path if model.path.exists() else None
    if manifest.build.dl_dir is not None:
        candidate = manifest.build.dl_dir / model.filename
        if candidate.exists():
            return candidate
    return None


def _split(text: str) -> tuple[str, str]:
    msg, _, fix = text.partition(" -> ")
    return msg, fix


def run_check(manifest: Manifest, inspect_files: bool = True, *, verify_hashes: bool = True,
              progress: bool = False) -> CheckResult:
    """Cross-check every model file on disk against ``manifest``; collect all problems."""
    res = CheckResult(manifest, warnings=list(manifest.warnings))
    to_hash: dict[Path, list[ModelCheck]] = {}
    for i, model in enumerate(manifest.models):
        where = f"models[{i}]"
        loc = f"{where}.path" if model.path else f"{where}.url"
        if not inspect_files:
            res.models.append(ModelCheck(i, model, None, "skipped"))
            continue
        f = locate(manifest, model)
        if f is None:
            if model.path is not None:
                res.problems.append(Problem(f"{where}.path", f"{model.path}: no such file or folder",
                                            "fix the path, or give a url and run `provisioner fetch`"))
            else:
                res.warnings.append(Problem(loc, "not downloaded yet, so not cross-checked",
                                            "run `provisioner fetch MANIFEST`, then check again"))
            res.models.append(ModelCheck(i, model, None, "not-on-disk"))
            continue
        mc = ModelCheck(i, model, f, "checked")
        res.models.append(mc)
        if model.kind == "litertlm" and f.is_dir():
            res.problems.append(Problem(loc, f"{f} is a folder but kind is litertlm", "point at the .litertlm file "
                                        "or set kind: genie"))
            continue
        if model.kind == "genie" and f.is_file():
            res.warnings.append(Problem(loc, f"{f.name} is an archive: unpack it to cross-check the bundle",
                                        "point path at the unpacked folder"))
            continue
        try:
            ins = inspect_path(f, manifest.board)
        except ArtifactError as exc:
            res.problems.append(Problem(loc, exc.message, exc.hint or ""))
            continue
        mc.inspection = ins
        _cross_check(res, where, loc, model, ins)
        if f.is_file():
            if model.size is not None and ins.size != model.size:
                res.problems.append(Problem(f"{where}.size", f"{f.name} has {ins.size:,} bytes but the manifest says "
                                            f"{model.size:,}", "re-download (`provisioner fetch`) or correct size"))
            if model.sha256 and verify_hashes:
                to_hash.setdefault(f, []).append(mc)
    if to_hash:
        for f, digest in hash_files(list(to_hash), progress=progress).items():
            for mc in to_hash[f]:
                mc.sha256 = digest
                if digest != mc.model.sha256:
                    res.problems.append(Problem(f"models[{mc.index}].sha256",
                                                f"{f.name} has sha256 {digest[:16]}..., manifest says "
                                                f"{mc.model.sha256[:16]}...",  # type: ignore[index]
                                                "re-download (`provisioner fetch` deletes and refetches it) "
                                                "or correct the sha256"))
    return res


def _cross_check(res: CheckResult, where: str, loc: str, model: Model, ins: Inspection) -> None:
    builds = ins.qairt_builds
    if builds and model.qairt and model.qairt not in builds:
        found = builds[0]
        pinned = found in res.manifest.qairt
        res.problems.append(Problem(
            f"{where}.qairt",
            f"the model file was compiled with QAIRT {', '.join(builds)} but the manifest says {model.qairt} "
            "(the runtime needs the exact build)",
            f"set {where}.qairt: {found}" + ("" if pinned else f" and pin {found} in 'qairt'")))
    if not builds and ins.kind != "litertlm":  # for a .litertlm, inspect already made it a problem (or truncated)
        res.warnings.append(Problem(loc, "no QAIRT build id found in the model", "compare with "
                                    "`qnn-context-binary-utility --context_binary ...` info.buildId"))
    for p in ins.problems:
        msg, fix = _split(p)
        res.problems.append(Problem(loc, msg, fix))
    for w in ins.warnings:
        msg, fix = _split(w)
        res.warnings.append(Problem(loc, msg, fix))
    ref = model.reference
    if ref and ins.context_size:
        from provisioner import catalog

        info = catalog.models().get(ref)
        if info and info.context and info.context != ins.context_size:
            res.warnings.append(Problem(loc, f"context size {ins.context_size} differs from the reference "
                                        f"{ref} ({info.context})", "expected for a re-export; check verify limits"))


def check_manifest(manifest: Manifest, inspect_files: bool = True) -> list[Problem]:
    """Problems found by cross-checking ``manifest`` with its model files (CONTRACTS section 1)."""
    return run_check(manifest, inspect_files).problems
