"""Preflight of a qcomflash bundle: refuse a bad or foreign bundle before any board enters a flash.

qdl finds many problems only mid-flash (a missing file after three LUNs are written) or not at
all (an image bigger than its partition is truncated with a warning and qdl still exits 0), so
every check here runs on the host first: XML parsed with qdl's rules, programmer present, every
referenced file present and fitting its partition, sector size and storage type of the board,
LUNs covered, boot LUN present, checksums as recorded in release.json, and the bundle made for
this board (machine name, chip id in contents.xml).
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from xml.parsers import expat

from provisioner import catalog
from provisioner.errors import StationError, UserError
from provisioner.image.release import Release, load_release
from provisioner.station.flashxml import Patch, Program, boot_lun, find_flash_xml, parse_patch, parse_rawprogram

PROGRAMMER_NAMES = ("prog_firehose_ddr.elf", "prog_firehose_ddr.mbn", "prog_firehose_lite.elf")
SPARSE_MAGIC = 0xED26FF3A


@dataclass
class Check:
    name: str
    ok: bool
    detail: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "ok": self.ok, "detail": self.detail}


@dataclass
class Preflight:
    """A bundle checked against one board type. ``ok`` is False if any check failed."""

    release: Release
    board: catalog.Board
    programmer: Path | None = None
    rawprograms: list[Path] = field(default_factory=list)
    patches: list[Path] = field(default_factory=list)
    programs: list[Program] = field(default_factory=list)
    patch_ops: list[Patch] = field(default_factory=list)
    checks: list[Check] = field(default_factory=list)
    bytes_to_write: int = 0

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    @property
    def problems(self) -> list[str]:
        return [c.detail for c in self.checks if not c.ok]

    @property
    def bundle_dir(self) -> Path:
        return self.release.bundle_dir

    @property
    def release_id(self) -> str:
        return self.release.id or self.release.bundle_dir.name

    @property
    def artifact_sha256(self) -> dict[str, str]:
        return {a.path: a.sha256 for a in self.release.artifacts}

    def qdl_args(self) -> list[str]:
        """Positional qdl arguments: programmer, then every rawprogram and patch XML (LUN order)."""
        if self.programmer is None:
            raise StationError(f"{self.bundle_dir}: no firehose programmer", "rebuild the bundle")
        return [str(self.programmer), *map(str, self.rawprograms), *map(str, self.patches)]

    def raise_for_problems(self) -> None:
        if not self.ok:
            probs = self.problems
            more = f" (+{len(probs) - 1} more: {'; '.join(probs[1:])})" if len(probs) > 1 else ""
            raise StationError(f"preflight failed for {self.release_id} on {self.board.id}: {probs[0]}{more}",
                               "fix or rebuild the bundle; nothing was flashed")

    def as_dict(self) -> dict[str, Any]:
        return {
            "release": self.release_id, "board": self.board.id, "bundle": str(self.bundle_dir),
            "ok": self.ok, "programmer": str(self.programmer) if self.programmer else None,
            "rawprogram": [p.name for p in self.rawprograms], "patch": [p.name for p in self.patches],
            "programs": sum(1 for p in self.programs if not p.skipped and not p.erase),
            "luns": sorted({p.lun for p in self.programs}), "boot_lun": boot_lun(self.programs),
            "bytes_to_write": self.bytes_to_write, "checks": [c.as_dict() for c in self.checks],
        }

    def close(self) -> None:
        self.release.close()


def image_size(path: Path) -> int:
    """Bytes an image occupies once written: expanded size for Android sparse images."""
    size = path.stat().st_size
    try:
        with open(path, "rb") as f:
            head = f.read(28)
    except OSError:
        return size
    if len(head) == 28 and struct.unpack_from("<I", head, 0)[0] == SPARSE_MAGIC:
        blk_sz, total_blks = struct.unpack_from("<II", head, 12)
        return blk_sz * total_blks
    return size


def read_contents(path: Path) -> tuple[list[str], list[str]]:
    """Chip ids and storage types named in a bundle's contents.xml (any ``chipid``/``storage_type``)."""
    chips: list[str] = []
    storage: list[str] = []
    stack: list[str] = []
    text: list[str] = []

    def start(name: str, attrs: dict[str, str]) -> None:
        stack.append(name.lower())
        text.clear()
        for k, v in attrs.items():
            if k.lower() == "storage_type" and v.strip():
                storage.append(v.strip().lower())
            if k.lower() == "chipid" and v.strip():
                chips.append(v.strip())

    def end(name: str) -> None:
        value = "".join(text).strip()
        if name.lower() in ("chipid", "chip_id") and value:
            chips.append(value)
        if name.lower() == "storage_type" and value:
            storage.append(value.lower())
        stack.pop()
        text.clear()

    parser = expat.ParserCreate()
    parser.StartElementHandler = start
    parser.EndElementHandler = end
    parser.CharacterDataHandler = text.append
    try:
        parser.Parse(path.read_bytes(), True)
    except expat.ExpatError as exc:
        raise StationError(f"{path.name}:{exc.lineno}: malformed XML ({expat.ErrorString(exc.code)})",
                           "regenerate the flash bundle") from None
    return chips, storage


def _lookup(bundle: Path, name: str, xml_dir: Path) -> Path | None:
    """qdl's lookup order, minus contents.xml paths: the XML's own folder, then the bundle root."""
    for base in (xml_dir, bundle):
        cand = base / name
        if cand.is_file():
            return cand
    cand = Path(name)
    return cand if cand.is_absolute() and cand.is_file() else None


def preflight(path: Path | str | Release, board_id: str | None = None, *, hash_files: bool = True,
              extract_dir: Path | None = None) -> Preflight:
    """Check a release dir / bundle dir / ``.qcomflash.tar.gz`` for ``board_id``.

    Returns a :class:`Preflight` listing every check; call ``raise_for_problems()`` to refuse.
    Raises :class:`StationError` only when the input cannot be opened at all or the board is unknown.
    """
    if isinstance(path, Release):
        release = path
    else:
        try:
            release = load_release(path, extract_dir=extract_dir)
        except UserError as exc:
            raise StationError(str(exc.message), exc.hint) from None
    bid = board_id or release.board
    if not bid:
        release.close()
        raise StationError(f"{release.bundle_dir}: cannot tell which board this bundle is for",
                           "pass --board (e.g. --board iq-8275-evk)")
    try:
        board = catalog.board(bid)
    except UserError:
        release.close()
        raise
    pf = Preflight(release=release, board=board)
    checks = pf.checks
    bundle = release.bundle_dir

    # this board?
    if release.board and release.board != board.id:
        checks.append(Check("board", False, f"release is for {release.board}, not {board.id}"))
    elif release.machine and release.machine != board.kas_machine:
        checks.append(Check("board", False, f"bundle is for machine {release.machine}, not {board.kas_machine}"))
    else:
        checks.append(Check("board", True, board.id))
    contents = bundle / "contents.xml"
    if contents.is_file():
        try:
            chips, storage = read_contents(contents)
        except StationError as exc:
            checks.append(Check("contents.xml", False, str(exc.message)))
            chips, storage = [], []
        else:
            accepted = {c.upper() for c in board.contents_chip_ids}
            if not chips:
                checks.append(Check("chip id", False, "contents.xml names no chip id"))
            elif not any(c.upper() in accepted for c in chips):
                checks.append(Check("chip id", False, f"contents.xml is for chip {', '.join(chips)}, "
                                    f"{board.id} needs one of {', '.join(board.contents_chip_ids)}"))
            else:
                checks.append(Check("chip id", True, ", ".join(chips)))
            if storage and board.storage_type.lower() not in storage:
                checks.append(Check("storage", False, f"contents.xml targets {', '.join(sorted(set(storage)))} "
                                    f"storage, {board.id} has {board.storage_type}"))
    else:
        checks.append(Check("contents.xml", False, "contents.xml is missing from the bundle"))

    # programmer
    prog = next((bundle / n for n in PROGRAMMER_NAMES if (bundle / n).is_file()), None)
    if prog is None:
        found = sorted(bundle.glob("prog_firehose*"))
        prog = found[0] if found else None
    pf.programmer = prog
    checks.append(Check("programmer", prog is not None,
                        prog.name if prog else "firehose programmer (prog_firehose_ddr.elf) is missing"))

    # XML
    pf.rawprograms, pf.patches = find_flash_xml(bundle)
    if not pf.rawprograms:
        checks.append(Check("rawprogram", False, "no rawprogram*.xml in the bundle"))
    xml_ok = True
    for xml in pf.rawprograms:
        try:
            pf.programs.extend(parse_rawprogram(xml))
        except StationError as exc:
            xml_ok = False
            checks.append(Check("xml", False, exc.message))
    for xml in pf.patches:
        try:
            pf.patch_ops.extend(parse_patch(xml))
        except StationError as exc:
            xml_ok = False
            checks.append(Check("xml", False, exc.message))
    if xml_ok:
        checks.append(Check("xml", True, f"{len(pf.rawprograms)} rawprogram, {len(pf.patches)} patch"))

    # files, sizes, sector size
    missing, oversized, bad_sector = [], [], []
    for op in pf.programs:
        if op.sector_size != board.sector_size:
            bad_sector.append(f"{op.where} {op.label or '<erase>'}: sector size {op.sector_size}")
        if op.skipped or op.erase:
            continue
        f = _lookup(bundle, op.filename, op.xml.parent)
        if f is None:
            missing.append(f"{op.filename} ({op.where}, {op.label})")
            continue
        size = image_size(f) - op.file_sector_offset * op.sector_size
        if op.num_partition_sectors and size > op.partition_bytes:
            oversized.append(f"{op.filename} is {size} bytes, partition {op.label} holds {op.partition_bytes}")
        pf.bytes_to_write += max(0, min(size, op.partition_bytes) if op.num_partition_sectors else size)
    checks.append(Check("files", not missing, f"missing: {', '.join(missing)}" if missing else "all present"))
    checks.append(Check("sizes", not oversized, "; ".join(oversized) if oversized else "all fit"))
    checks.append(Check("sector size", not bad_sector,
                        f"{board.id} has {board.sector_size}-byte sectors: {', '.join(bad_sector[:3])}"
                        if bad_sector else str(board.sector_size)))
    for op in pf.patch_ops:
        if op.device_side and op.sector_size != board.sector_size:
            checks.append(Check("sector size", False, f"{op.where}: patch sector size {op.sector_size}, "
                                f"{board.id} has {board.sector_size}"))
            break
    if board.storage_type.lower() != "ufs":
        checks.append(Check("storage", False, f"{board.id} uses {board.storage_type}; this station flashes UFS"))

    # LUNs and boot LUN
    if xml_ok and pf.rawprograms:
        luns = {op.lun for op in pf.programs}
        uncovered = [lun for lun in board.luns if lun not in luns]
        extra = sorted(luns - set(board.luns))
        detail = ", ".join(filter(None, [f"no partitions for LUN {', '.join(map(str, uncovered))}" if uncovered
                                         else "", f"LUN {', '.join(map(str, extra))} does not exist on {board.id}"
                                         if extra else ""]))
        checks.append(Check("luns", not uncovered and not extra, detail or ", ".join(map(str, sorted(luns)))))
        bl = boot_lun(pf.programs)
        checks.append(Check("boot lun", bl is not None,
                            f"LUN {bl}" if bl is not None else "no xbl/xbl_a/sbl1 partition: the board would not boot"))

    # checksums
    if release.root is not None:
        problems = release.verify(hash_files=hash_files)
        checks.append(Check("checksums", not problems,
                            "; ".join(problems[:5]) + (f" (+{len(problems) - 5} more)" if len(problems) > 5 else "")
                            if problems else f"{len(release.artifacts)} files match release.json"))
    return pf


_SAFE = re.compile(r"[^A-Za-z0-9._-]+")


def safe_name(text: str) -> str:
    """A string usable as a file name (log files per board)."""
    return _SAFE.sub("_", text)[:80] or "x"
