"""Preflight of a qcomflash bundle: refuse a bad or foreign bundle before any board enters a flash.

qdl finds many problems only mid-flash (a missing file after three LUNs are written) or not at
all (an image bigger than its partition is truncated with an error line and qdl flashes on), so
every check here runs on the host first: XML parsed with qdl's rules, programmer present, every
referenced file a regular file inside the bundle and fitting its partition, sector size and
storage type of the board, LUNs covered, boot LUN present, checksums as recorded in release.json,
and the bundle made for this board (machine name, chip id in contents.xml).

What qdl does with the XML (linux-msm/qdl v2.8-rc1, ``src/firehose.c`` firehose_program): an
image larger than ``num_partition_sectors`` is cut to the partition ("too big for ... truncated")
and the flash goes on; ``num_partition_sectors="0"`` writes the whole file, however big;
``filename=""`` writes nothing. Every QLI 2.0 bundle for the EVKs programs ``zeros_33sectors.bin``
(33 sectors, 135168 bytes: qcom-ptool 9fe48574 ``qcom_ptool/ptool.py`` CreateFileOfZeros) into the
64 KiB ``apdp_a``/``apdp_b`` partitions, so a ptool fill file of zeros that overflows is a warning;
a real image that overflows is an error, because the cut-off part would be missing on the board.
"""

from __future__ import annotations

import os
import re
import stat
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from xml.parsers import expat

from provisioner import catalog
from provisioner.contracts.release import Release, load_release
from provisioner.errors import CheckFailed, StationError, UserError
from provisioner.station.flashxml import (
    FlashXmlUnreadable,
    Patch,
    Program,
    boot_lun,
    find_flash_xml,
    parse_patch,
    parse_rawprogram,
)

PROGRAMMER_NAMES = ("prog_firehose_ddr.elf", "prog_firehose_ddr.mbn", "prog_firehose_lite.elf")
SPARSE_MAGIC = 0xED26FF3A
#: Fill files qcom-ptool writes (ptool.py CreateFileOfZeros: zeros_1sector.bin, zeros_<n>sectors.bin).
FILL_FILE = re.compile(r"zeros_(?P<n>[0-9]+)sectors?\.bin")
#: Largest fill file whose bytes are read to confirm they are zeros (ptool's are a few sectors).
FILL_FILE_MAX = 1 << 20


class PreflightFailed(CheckFailed, StationError):
    """The bundle was checked and is unfit for this board (exit 1); still a StationError for callers."""


@dataclass
class Check:
    """One preflight check. ``warning``: passed, but the operator should know (shown as "warn").
    ``unreadable``: failed because the input could not be read at all (exit 2, not 1)."""

    name: str
    ok: bool
    detail: str = ""
    warning: bool = False
    unreadable: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "ok": self.ok, "warning": self.warning, "detail": self.detail}


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
    def warnings(self) -> list[str]:
        return [c.detail for c in self.checks if c.ok and c.warning]

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
        """Refuse the bundle: :class:`PreflightFailed` (exit 1) when checked and unfit,
        :class:`StationError` (exit 2) when part of it could not be read at all."""
        if not self.ok:
            probs = self.problems
            more = f" (+{len(probs) - 1} more: {'; '.join(probs[1:])})" if len(probs) > 1 else ""
            unreadable = any(c.unreadable for c in self.checks if not c.ok)
            cls = StationError if unreadable else PreflightFailed
            raise cls(f"preflight failed for {self.release_id} on {self.board.id}: {probs[0]}{more}",
                      "fix or rebuild the bundle; nothing was flashed")

    def as_dict(self) -> dict[str, Any]:
        return {
            "release": self.release_id, "board": self.board.id, "bundle": str(self.bundle_dir),
            "ok": self.ok, "programmer": str(self.programmer) if self.programmer else None,
            "rawprogram": [p.name for p in self.rawprograms], "patch": [p.name for p in self.patches],
            "programs": sum(1 for p in self.programs if not p.skipped and not p.erase),
            "luns": sorted({p.lun for p in self.programs}), "boot_lun": boot_lun(self.programs),
            "bytes_to_write": self.bytes_to_write, "checks": [c.as_dict() for c in self.checks],
            "warnings": self.warnings,
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


def _unique(items: list[str]) -> list[str]:
    """``items`` without repeats, first occurrence kept (contents.xml names a chip once per flavour)."""
    return list(dict.fromkeys(items))


def read_contents(path: Path) -> tuple[list[str], list[str]]:
    """Chip ids and storage types named in a bundle's contents.xml, each once, in file order.

    Reads every ``chipid``/``storage_type`` attribute, ``<chipid>``/``<chip_id>`` element and the
    comma-separated ``<additional_chipid>`` (qcom-ptool's contents.xml for the IQ-9075 EVK names
    ``SA8775P,QCS9075,...`` there).
    """
    chips: list[str] = []
    storage: list[str] = []
    text: list[str] = []

    def start(name: str, attrs: dict[str, str]) -> None:
        text.clear()
        for k, v in attrs.items():
            if k.lower() == "storage_type" and v.strip():
                storage.append(v.strip().lower())
            if k.lower() == "chipid" and v.strip():
                chips.append(v.strip())

    def end(name: str) -> None:
        value = "".join(text).strip()
        if name.lower() in ("chipid", "chip_id", "additional_chipid") and value:
            chips.extend(c.strip() for c in value.split(",") if c.strip())
        if name.lower() == "storage_type" and value:
            storage.append(value.lower())
        text.clear()

    parser = expat.ParserCreate()
    parser.StartElementHandler = start
    parser.EndElementHandler = end
    parser.CharacterDataHandler = text.append
    try:
        parser.Parse(path.read_bytes(), True)
    except OSError as exc:
        raise FlashXmlUnreadable(f"{path}: cannot read ({exc.strerror})", "check permissions") from None
    except expat.ExpatError as exc:
        raise FlashXmlUnreadable(f"{path.name}:{exc.lineno}: malformed XML ({expat.ErrorString(exc.code)})",
                                 "regenerate the flash bundle") from None
    return _unique(chips), _unique(storage)


def _within(base: Path, target: Path) -> bool:
    return target == base or base in target.parents


def resolve_in_bundle(bundle: Path, name: str, xml_dir: Path) -> tuple[Path | None, str | None]:
    """Where qdl would find ``name`` (the XML's own folder, then the bundle root), refused unless safe.

    Returns ``(path, None)`` for a regular file inside the bundle, ``(None, None)`` when there
    is no such file, and ``(None, why)`` when the name must not be flashed: an absolute path or
    ``..`` (qdl would open it as given, src/program.c program_resolve_path), a link that leaves
    the bundle, or something that is not a regular file (a FIFO would hang qdl, a device node
    would copy a host disk onto the board).
    """
    parts = re.split(r"[/\\]", name)
    if name.startswith(("/", "\\")) or Path(name).is_absolute():
        return None, f"{name!r} is an absolute path"
    if ".." in parts:
        return None, f"{name!r} climbs out of the bundle with '..'"
    inside = bundle.resolve()
    for base in dict.fromkeys((xml_dir, bundle)):
        cand = base / name
        if not os.path.lexists(cand):
            continue
        real = cand.resolve()
        if not _within(inside, real):
            return None, f"{name!r} is a link to {real}, outside the bundle"
        try:
            mode = os.stat(real).st_mode
        except OSError:
            return None, f"{name!r} is a dangling link"
        if not stat.S_ISREG(mode):
            return None, f"{name!r} is not a regular file"
        return cand, None
    return None, None


def _fill_file(path: Path, sector_size: int, size: int, *, read: bool) -> bool:
    """Is ``path`` a qcom-ptool fill file of zeros: its name, ``n`` sectors long and (``read``) all zeros?

    With ``read=False`` (``--no-hash``) the name and size decide, so no file is read past its header.
    """
    m = FILL_FILE.fullmatch(path.name)
    if not m or size != int(m["n"]) * sector_size or size > FILL_FILE_MAX:
        return False
    if not read:
        return True
    with open(path, "rb") as f:
        return f.read(FILL_FILE_MAX + 1).count(0) == size


def _lun_limit(op: Program, others: list[Program], board: catalog.Board) -> tuple[int, int] | None:
    """(start byte, end byte) a grow-to-end partition may use on ``board``, or None if unknown.

    Its LUN is at most the board's whole UFS, and the partition ends where the next op on the
    same LUN starts (the backup GPT at ``NUM_DISK_SECTORS-5.``), both evaluated on a LUN of that size.
    """
    if not board.storage_bytes:
        return None
    nsec = board.storage_bytes // board.sector_size
    start = op.start(nsec)
    end = nsec
    for o in others:
        if o is op or o.lun != op.lun or o.erase:
            continue
        s = o.start(nsec)
        if start < s < end:
            end = s
    return start * board.sector_size, end * board.sector_size


def _checks_of_sizes(pf: Preflight, bundle: Path, hash_files: bool) -> None:
    """files / names / sizes checks: every program op's file, where qdl finds it, and whether it fits."""
    board, checks = pf.board, pf.checks
    missing, refused, oversized, bad_sector = [], [], [], []
    fills: dict[str, tuple[int, list[str]]] = {}      # fill file -> (its size, "label holds N" of each op)
    for op in pf.programs:
        if op.sector_size != board.sector_size:
            bad_sector.append(f"{op.where} {op.label or '<erase>'}: sector size {op.sector_size}")
        if op.skipped or op.erase:
            continue
        f, why = resolve_in_bundle(bundle, op.filename, op.xml.parent)
        if why:
            refused.append(f"{why} ({op.where}, {op.label})")
            continue
        if f is None:
            missing.append(f"{op.filename} ({op.where}, {op.label})")
            continue
        size = image_size(f) - op.file_sector_offset * op.sector_size
        if op.num_partition_sectors == 0:
            limit = _lun_limit(op, pf.programs, board)
            if limit is not None and size > limit[1] - limit[0]:
                oversized.append(f"{op.filename} is {size} bytes, partition {op.label} grows to the end of LUN "
                                 f"{op.lun} and has at most {limit[1] - limit[0]} bytes on {board.id}'s "
                                 f"{board.storage_bytes // 10**9} GB {board.storage_type.upper()}")
            pf.bytes_to_write += max(0, size)
            continue
        if size > op.partition_bytes:
            if _fill_file(f, op.sector_size, size, read=hash_files):
                fills.setdefault(op.filename, (size, []))[1].append(f"{op.label} holds {op.partition_bytes}")
            else:
                oversized.append(f"{op.filename} is {size} bytes, partition {op.label} holds {op.partition_bytes}"
                                 " (qdl would cut it off)")
        pf.bytes_to_write += max(0, min(size, op.partition_bytes))
    checks.append(Check("files", not missing, f"missing: {', '.join(missing)}" if missing else "all present"))
    if refused:
        checks.append(Check("names", False, "refused: " + "; ".join(refused)))
    checks.append(Check("sizes", not oversized, "; ".join(oversized) if oversized else
                        "every image fits its partition" + (" (fill files: see truncated)" if fills else "")))
    for name, (size, parts) in fills.items():
        checks.append(Check("truncated", True, f"{name} is {size} bytes of zeros (a qcom-ptool fill file), partition "
                            f"{', '.join(parts)}: qdl truncates it to the partition and flashes on", warning=True))
    checks.append(Check("sector size", not bad_sector,
                        f"{board.id} has {board.sector_size}-byte sectors: {', '.join(bad_sector[:3])}"
                        if bad_sector else str(board.sector_size)))


def _links_out(bundle: Path) -> list[str]:
    """Every link in the bundle whose target is outside it (no file is read, only link targets)."""
    inside = bundle.resolve()
    out = []
    for dirpath, dirnames, filenames in os.walk(bundle):
        dirnames.sort()
        for name in sorted(filenames + dirnames):
            p = Path(dirpath) / name
            if p.is_symlink() and not _within(inside, p.resolve()):
                out.append(f"{p.relative_to(bundle).as_posix()} -> {os.readlink(p)}")
    return out


def preflight(path: Path | str | Release, board_id: str | None = None, *, hash_files: bool = True,
              extract_dir: Path | None = None) -> Preflight:
    """Check a release dir / bundle dir / ``.qcomflash.tar.gz`` for ``board_id``.

    Returns a :class:`Preflight` listing every check; call ``raise_for_problems()`` to refuse.
    Raises :class:`StationError` only when the input cannot be opened at all or the board is unknown.
    ``hash_files=False`` reads no file past its header (sizes, sparse headers and link targets only).
    """
    if isinstance(path, Release):
        release = path
    else:
        try:
            release = load_release(path, extract_dir=extract_dir, hash_files=hash_files)
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
            checks.append(Check("contents.xml", False, str(exc.message), unreadable=True))
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
                checks.append(Check("storage", False, f"contents.xml targets {', '.join(storage)} "
                                    f"storage, {board.id} has {board.storage_type}"))
    else:
        checks.append(Check("contents.xml", False, "contents.xml is missing from the bundle"))

    # programmer (the same rule as every file qdl is given: a regular file inside the bundle)
    prog = next((bundle / n for n in PROGRAMMER_NAMES if os.path.lexists(bundle / n)), None)
    if prog is None:
        found = sorted(bundle.glob("prog_firehose*"))
        prog = found[0] if found else None
    why = resolve_in_bundle(bundle, prog.name, bundle)[1] if prog is not None else None
    pf.programmer = prog if why is None else None
    checks.append(Check("programmer", pf.programmer is not None,
                        why or (prog.name if prog else "firehose programmer (prog_firehose_ddr.elf) is missing")))
    links = _links_out(bundle)
    if links:
        checks.append(Check("links", False, "links to outside the bundle: " + ", ".join(links)))

    # XML
    pf.rawprograms, pf.patches = find_flash_xml(bundle)
    if not pf.rawprograms:
        checks.append(Check("rawprogram", False, "no rawprogram*.xml in the bundle"))
    xml_ok = True
    for xml, parse, into in [(x, parse_rawprogram, pf.programs) for x in pf.rawprograms] + \
                            [(x, parse_patch, pf.patch_ops) for x in pf.patches]:
        try:
            into.extend(parse(xml))
        except StationError as exc:
            xml_ok = False
            checks.append(Check("xml", False, exc.message, unreadable=isinstance(exc, FlashXmlUnreadable)))
    if xml_ok:
        checks.append(Check("xml", True, f"{len(pf.rawprograms)} rawprogram, {len(pf.patches)} patch"))

    # files, names, sizes, sector size
    _checks_of_sizes(pf, bundle, hash_files)
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
