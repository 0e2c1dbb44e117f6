"""The qdl stand-in's own reader of rawprogram/patch XML, following qdl's rules.

The station's preflight must be tested against something that reads the flash XML the way qdl
does, never against its own parser (``provisioner.station.flashxml``), so the stand-in has this
reader (linux-msm/qdl v2.8-rc1 ``src/program.c``, ``src/patch.c``, ``src/util.c``): numbers through
``strtoul``, a missing attribute or an unknown tag fails a rawprogram file, ``filename=""`` is
nothing to write, only ``filename="DISK"`` patches are for the device, and ``NUM_DISK_SECTORS``
expressions are evaluated as the firehose programmer evaluates them. It imports nothing of the
station.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from xml.etree import ElementTree


class QdlFailure(Exception):
    """A failure qdl reports on stderr before exiting 1."""



def _stderr_line(msg: str) -> None:
    sys.stderr.write(msg + "\n")
    sys.stderr.flush()


def strtoul32(text: str) -> int:
    """C ``(unsigned int)strtoul(text, NULL, 0)``, as qdl reads every numeric attribute (src/util.c).

    Leading blanks and sign, ``0x`` hex, ``0`` octal, then digits up to the first other character
    (``"4k"`` is 4, ``"²"`` is 0); saturates at ULONG_MAX like strtoul, then keeps the low 32 bits.
    """
    s = text.lstrip(" \t\n\r\f\v")
    negative = s[:1] == "-"
    if s[:1] in ("+", "-"):
        s = s[1:]
    if s[:2] in ("0x", "0X") and s[2:3] and s[2].lower() in "0123456789abcdef":
        base, s = 16, s[2:]
    elif s[:1] == "0":
        base = 8
    else:
        base = 10
    digits = "0123456789abcdef"[:base]
    n = 0
    for ch in s:
        d = digits.find(ch.lower()) if ch.isascii() else -1
        if d < 0:
            break
        n = min(n * base + d, (1 << 64) - 1)
    if negative:
        n = (-n) % (1 << 64)
    return n & 0xFFFFFFFF


@dataclass(frozen=True)
class Program:
    """A <program> or <erase> as qdl holds it (struct firehose_op); ``filename`` "" = NULL in qdl."""

    xml: Path
    sector_size: int
    filename: str
    label: str
    num_partition_sectors: int
    lun: int
    start_sector: str
    file_sector_offset: int = 0
    sparse: bool = False
    erase: bool = False

    @property
    def skipped(self) -> bool:
        return not self.erase and not self.filename

    def start(self, num_disk_sectors: int) -> int:
        return device_eval(self.start_sector, num_disk_sectors)


@dataclass(frozen=True)
class Patch:
    """A <patch>; qdl sends only ``filename="DISK"`` ones to the device (firehose_apply_patch)."""

    xml: Path
    index: int
    sector_size: int
    byte_offset: int
    filename: str
    lun: int
    size_in_bytes: int
    start_sector: str
    value: str

    @property
    def device_side(self) -> bool:
        return self.filename == "DISK"

    @property
    def where(self) -> str:
        return f"{self.xml.name} patch #{self.index}"


class DeviceError(Exception):
    """The firehose programmer NAKs a command (bad expression, out of range)."""


_DEV_TOKEN = re.compile(r"\s*(?:([0-9]+)\.?|(NUM_DISK_SECTORS)|([-+*/]))", re.ASCII)
DEV_CRC = re.compile(r"^\s*CRC32\(([^,]+),([^)]+)\)\s*$")


def device_eval(expr: str, num_disk_sectors: int) -> int:
    """What the programmer on the board does with ``start_sector``/``value`` text qdl passes on
    verbatim: decimals (trailing dot allowed), ``NUM_DISK_SECTORS``, ``+ - * /`` left to right."""
    values: list[int] = []
    ops: list[str] = []
    pos, text = 0, expr.strip()
    while pos < len(text):
        m = _DEV_TOKEN.match(text, pos)
        if not m or m.end() == pos:
            raise DeviceError(f"cannot evaluate {expr[:40]!r}")
        pos = m.end()
        number, name, op = m.groups()
        if (op is None) != (len(values) == len(ops)) or (number and len(number) > 20):
            raise DeviceError(f"cannot evaluate {expr[:40]!r}")
        if op is not None:
            ops.append(op)
        else:
            values.append(num_disk_sectors if name else int(number))
    if not values or len(values) != len(ops) + 1:
        raise DeviceError(f"cannot evaluate {expr[:40]!r}")
    result = values[0]
    for op, v in zip(ops, values[1:], strict=True):
        if op == "/" and v == 0:
            raise DeviceError(f"division by zero in {expr[:40]!r}")
        if op == "+":
            result += v
        elif op == "-":
            result -= v
        elif op == "*":
            result *= v
        else:
            result //= v
    return result


def _attrs(node: ElementTree.Element, names: tuple[str, ...]) -> dict[str, str] | None:
    """The attributes qdl reads, or None when one is missing (attr_as_* count it as an error)."""
    if any(n not in node.attrib for n in names):
        return None
    return {n: node.attrib[n] for n in names}


_PROGRAM_ATTRS = ("SECTOR_SIZE_IN_BYTES", "filename", "label", "num_partition_sectors",
                  "physical_partition_number", "start_sector", "file_sector_offset")
_ERASE_ATTRS = ("SECTOR_SIZE_IN_BYTES", "num_partition_sectors", "physical_partition_number", "start_sector")
_PATCH_ATTRS = ("SECTOR_SIZE_IN_BYTES", "byte_offset", "filename", "physical_partition_number",
                "size_in_bytes", "start_sector", "value", "what")


def load_flash_file(path: Path, warn: Callable[[str], None] = _stderr_line) -> tuple[list[Program], list[Patch]]:
    """Read one rawprogram or patch XML like qdl: file type from the root tag, then every entry.

    ``warn`` prints qdl's lines for entries it skips (stderr by default; the qdl CLI passes its own)."""
    try:
        root = ElementTree.parse(path).getroot()
    except FileNotFoundError:
        raise QdlFailure(f"{path} is not a verb and not a XML file") from None
    except (OSError, ElementTree.ParseError):
        raise QdlFailure(f'failed to parse XML file "{path}"\nfailed to detect file type of {path}') from None
    programs: list[Program] = []
    patches: list[Patch] = []
    if root.tag == "patches":
        for i, node in enumerate(root):
            if node.tag != "patch":
                warn(f'unrecognized tag "{node.tag}" in patch-type file, ignoring')
                continue
            a = _attrs(node, _PATCH_ATTRS)
            if a is None:                           # qdl skips just this entry
                warn(f'errors while parsing patch-type file "{path}"')
                continue
            patches.append(Patch(path, i, strtoul32(a["SECTOR_SIZE_IN_BYTES"]), strtoul32(a["byte_offset"]),
                                 a["filename"], strtoul32(a["physical_partition_number"]),
                                 strtoul32(a["size_in_bytes"]), a["start_sector"], a["value"]))
        return programs, patches
    if root.tag != "data" or not any(n.tag == "program" for n in root):
        raise QdlFailure(f"failed to detect file type of {path}")
    for node in root:
        if node.tag == "program":
            a = _attrs(node, _PROGRAM_ATTRS)
            if a is None:
                missing = next(n for n in _PROGRAM_ATTRS if n not in node.attrib)
                raise QdlFailure(f"[PROGRAM] {path.name}: missing attribute {missing}\n"
                                 f"errors while parsing program tag\nprogram_load {path} failed")
            programs.append(Program(path, strtoul32(a["SECTOR_SIZE_IN_BYTES"]), a["filename"], a["label"],
                                    strtoul32(a["num_partition_sectors"]),
                                    strtoul32(a["physical_partition_number"]), a["start_sector"],
                                    strtoul32(a["file_sector_offset"]), node.attrib.get("sparse") == "true"))
        elif node.tag == "erase":
            a = _attrs(node, _ERASE_ATTRS)
            if a is None or strtoul32(a["num_partition_sectors"]) == 0:
                why = "errors while parsing erase tag" if a is None else "erase tag with num_sectors=0 not allowed"
                raise QdlFailure(f"{why}\nprogram_load {path} failed")
            programs.append(Program(path, strtoul32(a["SECTOR_SIZE_IN_BYTES"]), "", node.attrib.get("label", ""),
                                    strtoul32(a["num_partition_sectors"]),
                                    strtoul32(a["physical_partition_number"]), a["start_sector"], erase=True))
        else:
            raise QdlFailure(f'unrecognized tag "{node.tag}" in program-type file "{path}"\n'
                             f"program_load {path} failed")
    return programs, patches


def bootable_lun(programs: list[Program]) -> int | None:
    """program_find_bootable_partition: the LUN of label xbl, else xbl_a, else sbl1."""
    for label in ("xbl", "xbl_a", "sbl1"):
        for p in programs:
            if not p.erase and p.label == label:
                return p.lun
    return None
