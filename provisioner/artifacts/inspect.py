"""One question for any model artifact: what is it, is it whole, and can it run on this board?

``inspect_path`` accepts a ``.litertlm`` file or a Genie bundle folder and returns an
:class:`Inspection` with the facts every later stage checks (QAIRT build, soc_model, NPU-only,
context size, truncation) and a list of ``problems`` - each one a reason it cannot run, with the
fix. It raises only when the input is not a model artifact at all (wrong magic, corrupt header,
missing folder); an unfit-but-readable artifact is reported, not raised, so ``check`` can list
every problem at once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from provisioner.artifacts.litertlm import LitertlmInfo, allowed_backends, read_litertlm
from provisioner.errors import ArtifactError

if TYPE_CHECKING:
    from provisioner.catalog import Board

# The catalog (YAML) and the Genie reader are imported where they are used: `provisioner inspect
# FILE.litertlm` needs neither, and its whole run is about as long as their import.


@dataclass
class Inspection:
    """Facts about a model artifact (see CONTRACTS section 1)."""

    kind: str  # "litertlm" | "genie"
    path: Path
    size: int
    declared_size: int | None
    truncated: bool
    qairt_builds: list[str]
    soc_model: int | None
    dsp_arch: str | None
    npu_only: bool | None
    context_size: int | None
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    target_soc: str | None = None
    board: str | None = None
    bytes_read: int = 0
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.problems

    def as_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind, "path": str(self.path), "size": self.size, "declared_size": self.declared_size,
            "truncated": self.truncated, "qairt_builds": self.qairt_builds, "soc_model": self.soc_model,
            "dsp_arch": self.dsp_arch, "npu_only": self.npu_only, "context_size": self.context_size,
            "target_soc": self.target_soc, "board": self.board, "can_run": self.ok if self.board else None,
            "problems": self.problems, "warnings": self.warnings, "bytes_read": self.bytes_read,
            "details": self.details,
        }


def inspect_path(path: str | Path, board: Board | None = None) -> Inspection:
    """Inspect a ``.litertlm`` file or Genie bundle folder; with ``board``, also judge fitness."""
    p = Path(path)
    if not p.exists():
        raise ArtifactError(f"{p}: no such file or folder", "check the path (run `provisioner fetch` first?)")
    if p.is_dir():
        ins = _genie(p)
    elif p.is_file():
        if p.suffix in (".tar", ".gz", ".tgz", ".zip") or p.name.endswith(".tar.gz"):
            raise ArtifactError(f"{p}: archived bundle", "unpack it and inspect the folder")
        ins = _litertlm(p)
    else:
        raise ArtifactError(f"{p}: not a regular file or folder", "pass a .litertlm file or a Genie bundle folder")
    if board is not None:
        ins.board = board.id
        _judge(ins, board)
    return ins


def _litertlm(p: Path) -> Inspection:
    info = read_litertlm(p)
    problems: list[str] = []
    warnings: list[str] = []
    if info.truncated:
        problems.append(f"truncated: {info.size} bytes on disk but the sections end at {info.declared_size} "
                        f"({info.declared_size - info.size} missing; the runtime fails with "
                        "'TF_LITE_PREFILL_DECODE not found') -> re-download and check size and sha256")
    unscanned: set[int] = set()
    if not info.truncated:  # a cut file has one problem; what lies past the cut is unknown
        npu_problem, unscanned = _npu_service_problem(info)
        if npu_problem:
            problems.append(npu_problem)
    if len(info.qairt_builds) > 1:
        problems.append(f"context binaries from several QAIRT builds ({', '.join(info.qairt_builds)}) "
                        "-> one runtime can only load one; re-export")
    for s in info.sections:
        if s.note and not info.truncated and s.index not in unscanned:
            warnings.append(f"section {s.index} ({s.data_type}): {s.note}")
    return Inspection(
        kind="litertlm", path=p, size=info.size, declared_size=info.declared_size, truncated=info.truncated,
        qairt_builds=info.qairt_builds, soc_model=None, dsp_arch=None, npu_only=info.npu_only,
        context_size=info.context_size, problems=problems, warnings=warnings, target_soc=info.target_soc,
        bytes_read=info.bytes_read, details=info.as_dict(),
    )


# LiteRT-LM's "Main" model: the section the engine checks the --backend flag against (its error
# "Main backend constraint mismatch"); the embedder and aux models may stay on the CPU.
MAIN_MODEL_TYPE = "tf_lite_prefill_decode"
NPU_EXPORT_FIX = ("use the model's Qualcomm NPU export (AOT-compiled with LiteRT's Qualcomm plugin; "
                  "edge-llm-serve runs litert_lm_main --backend npu)")


def _npu_service_problem(info: LitertlmInfo) -> tuple[str | None, set[int]]:
    """Why the NPU service cannot run this file (None: it can), and the sections that say so.

    It can when its main model section(s) (``tf_lite_prefill_decode``; every model section in a
    file that names none) hold ``DISPATCH_OP``s - the NPU partitions LiteRT hands to the Qualcomm
    dispatch library - and every one of their QNN context binaries carries a QAIRT build id
    (``litert_lm_builder.litertlm_builder``: sections, ``model_type``, ``backend_constraint``).
    """
    models = [s for s in info.sections if s.is_model]
    if not models:
        kinds = ", ".join(sorted({s.data_type for s in info.sections})) or "no sections at all"
        return (f"has no model section (only {kinds}) -> this is not a model file; {NPU_EXPORT_FIX}", set())
    main = [s for s in models if s.model_type == MAIN_MODEL_TYPE] or models
    if not any(s.dispatch_ops for s in main):
        s = main[0]
        what = f"section {s.index} ({s.model_type or 'TFLiteModel'})"
        allowed = allowed_backends(s.backend_constraint)
        if "npu" not in allowed:
            on = "/".join(sorted(b.upper() for b in allowed))
            return (f"model runs on the {on} ({what} has backend_constraint '{s.backend_constraint}'; "
                    f"no DISPATCH_OP for the Qualcomm NPU) -> {NPU_EXPORT_FIX}", set())
        if s.note:
            return (f"cannot tell whether {what} runs on the NPU ({s.note}) -> re-download the file; "
                    "check its sha256", {s.index})
        if allowed == {"npu"}:
            return (f"NPU model without a QNN context binary ({what} has backend_constraint 'npu' but no "
                    f"DISPATCH_OP, so it is not compiled ahead of time for the Qualcomm NPU) -> {NPU_EXPORT_FIX}",
                    set())
        return (f"model runs on the CPU/GPU ({what}: no DISPATCH_OP for the Qualcomm NPU) -> {NPU_EXPORT_FIX}",
                set())
    blank = [op for s in models for op in s.dispatch_ops if op.qairt_build is None]
    if blank:
        op = blank[0]
        return (f"NPU model without a QNN context binary build id ({len(blank)} DISPATCH_OP(s); the first, "
                f"at byte {op.absolute_offset:,}, has no QAIRT build id) -> check the export; "
                "`qnn-context-binary-utility` shows info.buildId", set())
    return None, set()


def _genie(p: Path) -> Inspection:
    from provisioner import catalog
    from provisioner.artifacts.genie import read_genie

    info = read_genie(p)
    target = None
    if info.soc_model is not None and info.soc_model in catalog.soc_models():
        target = catalog.soc_models()[info.soc_model]["soc"]
    return Inspection(
        kind="genie", path=p, size=info.size, declared_size=None,
        truncated=any(f.size is None for f in info.files if f.referenced),
        qairt_builds=info.qairt_builds, soc_model=info.soc_model, dsp_arch=info.dsp_arch, npu_only=info.npu_only,
        context_size=info.context_size, problems=list(info.problems), warnings=list(info.warnings),
        target_soc=target, bytes_read=info.bytes_read, details=info.as_dict(),
    )


def _judge_genie_backend(ins: Inspection) -> None:
    """The board's Genie service (edge-llm-serve) runs bundles on the Hexagon NPU: a bundle with no
    QnnHtp engine would run on the CPU or GPU far below the speed the fleet is verified against."""
    engines = ins.details.get("engines") or []
    off_npu = [e for e in engines if e["processor"] != "NPU"]
    if not off_npu:
        return
    backend = ins.details.get("backend") or "?"
    if len(off_npu) == len(engines):
        ins.problems.append(f"Genie backend {backend}: not the NPU, and edge-llm-serve runs Genie on the "
                            "Hexagon NPU (QnnHtp) -> use the NPU export of this model (QnnHtp context binaries)")
    else:
        for e in off_npu:
            ins.warnings.append(f"{e['where']} ({e['role'] or 'engine'}) runs on the {e['processor'] or 'unknown'} "
                                f"({e['backend']}): that part of the dialog is not NPU speed")


def _soc_names(board: Board) -> set[str]:
    return {board.soc.upper(), board.soc_family.upper(), *(c.upper() for c in board.contents_chip_ids)}


def _judge(ins: Inspection, board: Board) -> None:
    """Add the reasons ``ins`` cannot run on ``board`` (SoC, Hexagon arch, QAIRT known)."""
    from provisioner import catalog

    if ins.kind == "genie":
        _judge_genie_backend(ins)
        if ins.soc_model not in (None, 0) and ins.soc_model != board.qnn_soc_model:
            other = catalog.soc_models().get(ins.soc_model, {}).get("soc", "an unknown SoC")
            ins.problems.append(f"compiled for soc_model {ins.soc_model} ({other}) but {board.id} ({board.soc}) "
                                f"needs soc_model {board.qnn_soc_model} -> export for {board.soc} "
                                f"(soc_model {board.qnn_soc_model}, dsp_arch {board.hexagon_arch})")
        if ins.dsp_arch and ins.dsp_arch.lower() != board.hexagon_arch:
            ins.problems.append(f"compiled for Hexagon {ins.dsp_arch} but {board.id} has {board.hexagon_arch} "
                                f"-> export with dsp_arch {board.hexagon_arch}")
    elif ins.target_soc and ins.target_soc.upper() not in _soc_names(board):
        ins.problems.append(f"file is exported for {ins.target_soc} but {board.id} is {board.soc} -> use the "
                            f"{board.soc.lower()} export of this model")
    known = catalog.qairt_catalog()["versions"]
    for b in ins.qairt_builds:
        if b not in known:
            ins.warnings.append(f"QAIRT {b} is not in the catalog: the image has no recipe for it yet")
