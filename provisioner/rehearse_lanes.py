"""What a rehearsal is asked to do and what it reports: options, lanes, faults, the report.

Apart from the rehearsal's steps (:mod:`provisioner.rehearse`) because these are plain data and
rules a caller can use and test without starting anything: the options ``provisioner rehearse``
takes, one *lane* per manifest (board type) with the boards it gets, how boards and injected faults
are spread over the lanes, and the report with a failed board's diagnosis in plain words. It imports
no simulator.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from provisioner import catalog
from provisioner.errors import UserError
from provisioner.manifest import Manifest
from provisioner.steps import StepResult

# Faults that only make sense for one runtime: burst mode and the SoC guard are LiteRT-LM patches,
# soc_model lives in a Genie bundle's HTP config.
FAULT_RUNTIME = {"no-burst": "litert_lm", "soc-config-14001": "litert_lm", "wrong-soc-model": "genie"}


class RehearsalError(UserError):
    """A rehearsal stage failed."""


@dataclass
class RehearsalOptions:
    manifests: tuple[Path, ...] = ()
    boards: int = 4
    faults: tuple[str, ...] = ()
    keep: bool = False
    work_dir: Path | None = None
    sim_root: Path | None = None
    prompt: str = "Explain in one sentence what an NPU is."
    ota: bool = False             # then a whole-image update of the launched boards (provisioner.rehearse_ota)


@dataclass
class Lane:
    """One manifest and the virtual boards that receive its release."""

    source: Path
    manifest: Manifest
    count: int
    faults: list[str] = field(default_factory=list)
    synthetic_models: list[str] = field(default_factory=list)
    model_files: dict[str, Path] = field(default_factory=dict)
    release_dir: Path | None = None
    serials: list[str] = field(default_factory=list)
    build_command: str = ""

    @property
    def board(self) -> catalog.Board:
        return self.manifest.board


@dataclass
class RehearsalReport:
    steps: list[StepResult]
    lanes: list[dict[str, Any]]
    boards: list[dict[str, Any]]
    ok: bool
    work_dir: str
    kept: bool

    def as_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "work_dir": self.work_dir, "boards_kept": self.kept,
                "steps": [s.as_dict() for s in self.steps], "lanes": self.lanes, "boards": self.boards}


def split_boards(total: int, lanes: int) -> list[int]:
    """Spread ``total`` boards over ``lanes`` as evenly as possible (4 over 2 -> [2, 2])."""
    if total < lanes:
        raise RehearsalError(f"--boards {total} is fewer than the {lanes} board types being rehearsed",
                             f"use --boards {lanes} or more, or pass one manifest")
    base, extra = divmod(total, lanes)
    return [base + (1 if i < extra else 0) for i in range(lanes)]


def assign_faults(faults: tuple[str, ...], lanes: list[Lane]) -> None:
    """Give each injected fault to one board of a lane whose runtime it applies to."""
    for f in faults:   # names were checked by check_options
        want = FAULT_RUNTIME.get(f)
        lane = next((ln for ln in lanes if want is None or want in ln.manifest.runtimes), None)
        if lane is None:
            raise RehearsalError(f"fault '{f}' needs a board running {want}, and no manifest has one",
                                 "rehearse a manifest with that runtime")
        lane.faults.append(f)


def diagnosis(row: Any) -> str:
    """The first failed check in plain words: what was measured, why, and what to do."""
    for check in getattr(row, "checks", None) or []:
        if check.get("ok") is False:
            text = check.get("detail") or check.get("check", "")
            if check.get("cause"):
                text += f" ({check['cause']})"
            if check.get("remedy"):
                text += f" -> {check['remedy']}"
            return text
    return row.reason or ""
