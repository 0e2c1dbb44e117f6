"""rawprogram*.xml / patch*.xml parsing with the rules qdl applies.

Why our own parser: a station must refuse a bad bundle *before* a board sits in EDL with a
half-written LUN. What qdl does with these files (linux-msm/qdl v2.8-rc1, ``src/program.c``,
``src/patch.c``, ``src/util.c``, ``src/firehose.c``): a <program> or <erase> missing an attribute
it reads, or any other tag in a rawprogram file, fails the whole run; ``filename=""`` writes
nothing; ``start_sector`` is text the device evaluates (``NUM_DISK_SECTORS-5.``); only
``filename="DISK"`` patches go to the device; numbers are read with ``strtoul`` into 32 bits.
We refuse what qdl would refuse, and name the file, line, entry and attribute in every error so
the person at the station can fix the bundle. Numbers must be plain ASCII decimals that fit in
32 bits: ``strtoul`` would silently read ``"4k"`` as 4 or wrap ``"4294967296"`` to 0.

The simulator's qdl stand-in has its own reader (``provisioner.sim.qdl_xml``); the two are never shared.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from xml.parsers import expat

from provisioner.errors import StationError

#: Attributes qdl reads from every <program> (a missing one fails the whole file).
PROGRAM_REQUIRED = (
    "SECTOR_SIZE_IN_BYTES",
    "filename",
    "label",
    "num_partition_sectors",
    "physical_partition_number",
    "start_sector",
    "file_sector_offset",
)
#: Attributes qdl reads from every <erase>.
ERASE_REQUIRED = ("SECTOR_SIZE_IN_BYTES", "num_partition_sectors", "physical_partition_number", "start_sector")
#: Attributes qdl reads from every <patch>.
PATCH_REQUIRED = (
    "SECTOR_SIZE_IN_BYTES",
    "byte_offset",
    "filename",
    "physical_partition_number",
    "size_in_bytes",
    "start_sector",
    "value",
)
#: Labels whose LUN qdl makes the boot LUN (setbootablestoragedrive).
BOOT_LABELS = ("xbl", "xbl_a", "sbl1")

#: Longest number accepted in a sector expression (20 digits hold any 64-bit sector number).
MAX_EXPR_DIGITS = 20
#: qdl reads numeric attributes with strtoul into an ``unsigned int`` (src/util.c attr_as_unsigned).
MAX_UNSIGNED = 0xFFFFFFFF

_TOKEN = re.compile(r"\s*(?:(?P<num>[0-9]+)\.?|(?P<name>NUM_DISK_SECTORS)|(?P<op>[-+*/]))", re.ASCII)
_DECIMAL = re.compile(r"[0-9]+\.?", re.ASCII)
_CRC32 = re.compile(r"^\s*CRC32\((?P<start>[^,]+),(?P<length>[^)]+)\)\s*$")


@dataclass(frozen=True)
class Program:
    """One <program> (or <erase>, ``erase=True``) op: write ``filename`` at ``start_sector`` of LUN."""

    xml: Path
    line: int
    sector_size: int
    filename: str
    label: str
    num_partition_sectors: int
    lun: int
    start_sector: str
    file_sector_offset: int
    sparse: bool = False
    erase: bool = False

    @property
    def skipped(self) -> bool:
        """qdl writes nothing for an empty filename (placeholder partitions)."""
        return not self.erase and self.filename == ""

    @property
    def partition_bytes(self) -> int:
        """Size of the target partition (0 = "size of the file", qdl's convention)."""
        return self.num_partition_sectors * self.sector_size

    def start(self, num_disk_sectors: int) -> int:
        """Absolute start sector on the LUN, evaluating ``NUM_DISK_SECTORS-n.`` expressions."""
        return eval_sector(self.start_sector, num_disk_sectors, where=f"{self.xml.name}:{self.line}")

    @property
    def where(self) -> str:
        return f"{self.xml.name}:{self.line}"


@dataclass(frozen=True)
class Patch:
    """One <patch>; only ``device_side`` ones (filename="DISK") are sent to the device by qdl."""

    xml: Path
    line: int
    sector_size: int
    byte_offset: int
    filename: str
    lun: int
    size_in_bytes: int
    start_sector: str
    value: str
    what: str = ""

    @property
    def device_side(self) -> bool:
        return self.filename == "DISK"

    def start(self, num_disk_sectors: int) -> int:
        return eval_sector(self.start_sector, num_disk_sectors, where=f"{self.xml.name}:{self.line}")

    def crc32_args(self) -> tuple[str, int] | None:
        """For ``value="CRC32(start,len)"``: the start expression and length in bytes, else None."""
        m = _CRC32.match(self.value)
        if not m:
            return None
        length = eval_sector(m["length"], 0, where=f"{self.xml.name}:{self.line}")
        return m["start"].strip(), length

    def int_value(self, num_disk_sectors: int) -> int:
        """The numeric value (arithmetic expressions evaluated); CRC32 values need ``crc32_args``."""
        return eval_sector(self.value, num_disk_sectors, where=f"{self.xml.name}:{self.line}")

    @property
    def where(self) -> str:
        return f"{self.xml.name}:{self.line}"


def eval_sector(expr: str, num_disk_sectors: int, *, where: str = "") -> int:
    """Evaluate a sector expression like ``6``, ``131078.`` or ``NUM_DISK_SECTORS-5.``.

    The firehose programmer accepts integers with an optional trailing dot, the symbol
    ``NUM_DISK_SECTORS`` and ``+ - * /`` left to right (that is all real bundles use).
    """
    text = expr.strip()
    prefix = f"{where}: " if where else ""
    if not text:
        raise StationError(f"{prefix}empty sector expression", "fix the rawprogram/patch XML")
    pos = 0
    values: list[int] = []
    ops: list[str] = []
    expect_value = True
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m or m.end() == pos:
            raise StationError(f"{prefix}cannot evaluate sector expression {_short(expr)}",
                               "use an integer or NUM_DISK_SECTORS-<n>.")
        pos = m.end()
        if expect_value:
            if m["num"] is not None:
                if len(m["num"]) > MAX_EXPR_DIGITS:
                    raise StationError(f"{prefix}sector expression {_short(expr)} has a {len(m['num'])}-digit "
                                       f"number (at most {MAX_EXPR_DIGITS})", "fix the rawprogram/patch XML")
                values.append(int(m["num"]))
            elif m["name"] is not None:
                values.append(num_disk_sectors)
            else:
                raise StationError(f"{prefix}cannot evaluate sector expression {_short(expr)}",
                                   "use an integer or NUM_DISK_SECTORS-<n>.")
            expect_value = False
        else:
            if m["op"] is None:
                raise StationError(f"{prefix}cannot evaluate sector expression {_short(expr)}",
                                   "use an integer or NUM_DISK_SECTORS-<n>.")
            ops.append(m["op"])
            expect_value = True
        pos = len(text) if text[pos:].strip() == "" else pos
    if expect_value:
        raise StationError(f"{prefix}incomplete sector expression {_short(expr)}",
                           "use an integer or NUM_DISK_SECTORS-<n>.")
    result = values[0]
    for op, val in zip(ops, values[1:], strict=True):
        if op == "+":
            result += val
        elif op == "-":
            result -= val
        elif op == "*":
            result *= val
        else:
            if val == 0:
                raise StationError(f"{prefix}division by zero in sector expression {_short(expr)}",
                                   "fix the rawprogram/patch XML")
            result //= val
    return result


class FlashXmlUnreadable(StationError):
    """A flash XML that cannot be read or is not well-formed XML: bad input, not a checked-and-unfit bundle."""


def _short(text: str, limit: int = 40) -> str:
    """``repr`` of an attribute value, cut so a 5000-digit number still gives a one-line error."""
    return repr(text) if len(text) <= limit else f"{text[:limit]!r}... ({len(text)} characters)"


def _elements(path: Path) -> tuple[str, list[tuple[str, dict[str, str], int]]]:
    """Parse ``path`` with expat: root tag and its direct children (tag, attributes, line)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise FlashXmlUnreadable(f"{path}: file not found", "check the flash bundle is complete") from None
    except OSError as exc:
        raise FlashXmlUnreadable(f"{path}: cannot read ({exc.strerror})", "check permissions") from None
    parser = expat.ParserCreate()
    depth = 0
    root: list[str] = []
    children: list[tuple[str, dict[str, str], int]] = []

    def start(name: str, attrs: dict[str, str]) -> None:
        nonlocal depth
        if depth == 0:
            root.append(name)
        elif depth == 1:
            children.append((name, attrs, parser.CurrentLineNumber))
        depth += 1

    def end(_name: str) -> None:
        nonlocal depth
        depth -= 1

    parser.StartElementHandler = start
    parser.EndElementHandler = end
    try:
        parser.Parse(data, True)
    except expat.ExpatError as exc:
        raise FlashXmlUnreadable(f"{path.name}:{exc.lineno}: malformed XML ({expat.ErrorString(exc.code)}, "
                                 f"column {exc.offset + 1})", "regenerate the flash bundle or fix the XML") from None
    return (root[0] if root else ""), children


def _entry(path: Path, line: int, tag: str, attrs: dict[str, str]) -> str:
    """``rawprogram4.xml:12: <program label="tz_a">``: where an entry is, for error messages."""
    label = attrs.get("label", "")
    shown = f' label="{label[:40]}"' if label else ""
    return f"{path.name}:{line}: <{tag}{shown}>"


def _unsigned(path: Path, line: int, tag: str, attrs: dict[str, str], name: str) -> int:
    """A numeric attribute: ASCII decimal (an optional trailing dot, as ptool writes) within 32 bits."""
    raw = attrs[name].strip()
    where = _entry(path, line, tag, attrs)
    if not _DECIMAL.fullmatch(raw):
        raise StationError(f"{where} {name}={_short(attrs[name])} is not a decimal number",
                           "fix the XML (qdl would misread it)")
    digits = raw.rstrip(".").lstrip("0") or "0"
    if len(digits) > len(str(MAX_UNSIGNED)) or int(digits) > MAX_UNSIGNED:
        raise StationError(f"{where} {name}={_short(attrs[name])} is larger than {MAX_UNSIGNED} "
                           "(qdl reads it as a 32-bit number)", "fix the XML")
    return int(digits)


def _expression(path: Path, line: int, tag: str, attrs: dict[str, str], name: str) -> str:
    """A sector expression attribute, checked now so a typo is found on the host, not by the device."""
    value = attrs[name]
    eval_sector(value, 1 << 32, where=f"{_entry(path, line, tag, attrs)} {name}")
    return value


def _require(path: Path, line: int, tag: str, attrs: dict[str, str], names: tuple[str, ...]) -> None:
    for name in names:
        if name not in attrs:
            raise StationError(f"{_entry(path, line, tag, attrs)} is missing attribute {name}",
                               "fix the XML (qdl rejects the whole file)")


def parse_rawprogram(path: Path | str) -> list[Program]:
    """All <program> and <erase> ops of one rawprogram XML, in file order.

    Any other tag fails, as in qdl (``unrecognized tag ... in program-type file`` ends the run).
    """
    path = Path(path)
    root, children = _elements(path)
    if root != "data":
        raise StationError(f"{path.name}:1: root element is <{root}>, expected <data>",
                           "is this really a rawprogram XML?")
    out: list[Program] = []
    for tag, attrs, line in children:
        if tag == "program":
            _require(path, line, tag, attrs, PROGRAM_REQUIRED)
            out.append(Program(
                xml=path, line=line,
                sector_size=_unsigned(path, line, tag, attrs, "SECTOR_SIZE_IN_BYTES"),
                filename=attrs["filename"],
                label=attrs["label"],
                num_partition_sectors=_unsigned(path, line, tag, attrs, "num_partition_sectors"),
                lun=_unsigned(path, line, tag, attrs, "physical_partition_number"),
                start_sector=_expression(path, line, tag, attrs, "start_sector"),
                file_sector_offset=_unsigned(path, line, tag, attrs, "file_sector_offset"),
                sparse=attrs.get("sparse") == "true",     # qdl: exactly "true" (src/util.c attr_as_bool)
            ))
        elif tag == "erase":
            _require(path, line, tag, attrs, ERASE_REQUIRED)
            op = Program(
                xml=path, line=line,
                sector_size=_unsigned(path, line, tag, attrs, "SECTOR_SIZE_IN_BYTES"),
                filename="", label=attrs.get("label", ""),
                num_partition_sectors=_unsigned(path, line, tag, attrs, "num_partition_sectors"),
                lun=_unsigned(path, line, tag, attrs, "physical_partition_number"),
                start_sector=_expression(path, line, tag, attrs, "start_sector"), file_sector_offset=0,
                erase=True,
            )
            if op.num_partition_sectors == 0:
                raise StationError(f"{_entry(path, line, tag, attrs)} erases 0 sectors",
                                   "qdl refuses <erase num_partition_sectors=\"0\">; fix the XML")
            out.append(op)
        else:
            raise StationError(f"{_entry(path, line, tag, attrs)}: unknown tag in a rawprogram file",
                               "qdl fails on any tag but <program> and <erase>; fix the XML")
    return out


def parse_patch(path: Path | str) -> list[Patch]:
    """All <patch> ops of one patch XML, in file order (host-side ones included; see ``device_side``).

    Other tags are ignored, as qdl does for patch files.
    """
    path = Path(path)
    root, children = _elements(path)
    if root != "patches":
        raise StationError(f"{path.name}:1: root element is <{root}>, expected <patches>",
                           "is this really a patch XML?")
    out: list[Patch] = []
    for tag, attrs, line in children:
        if tag != "patch":
            continue
        _require(path, line, tag, attrs, PATCH_REQUIRED)
        patch = Patch(
            xml=path, line=line,
            sector_size=_unsigned(path, line, tag, attrs, "SECTOR_SIZE_IN_BYTES"),
            byte_offset=_unsigned(path, line, tag, attrs, "byte_offset"),
            filename=attrs["filename"],
            lun=_unsigned(path, line, tag, attrs, "physical_partition_number"),
            size_in_bytes=_unsigned(path, line, tag, attrs, "size_in_bytes"),
            start_sector=attrs["start_sector"],
            value=attrs["value"],
            what=attrs.get("what", ""),
        )
        if patch.device_side:      # what the device will evaluate must make sense on the host first
            _expression(path, line, tag, attrs, "start_sector")
            crc = patch.crc32_args()
            if crc is not None:
                eval_sector(crc[0], 1 << 32, where=f"{_entry(path, line, tag, attrs)} value")
            else:
                _expression(path, line, tag, attrs, "value")
        out.append(patch)
    return out


def _index(p: Path) -> tuple[int, str]:
    m = re.search(r"(\d+)\.xml$", p.name)
    return (int(m.group(1)) if m else 1 << 30, p.name)


def find_flash_xml(bundle_dir: Path | str) -> tuple[list[Path], list[Path]]:
    """rawprogram*.xml and patch*.xml of a bundle folder, sorted by LUN number (0..5).

    Excludes the ``*_BLANK_GPT``/``*_WIPE_PARTITIONS`` variants some bundles ship, which would
    wipe the board if passed to qdl together with the real ones.
    """
    d = Path(bundle_dir)

    def keep(p: Path) -> bool:
        return re.fullmatch(r"(rawprogram|patch)\d+\.xml", p.name) is not None

    raw = sorted((p for p in d.glob("rawprogram*.xml") if keep(p)), key=_index)
    patches = sorted((p for p in d.glob("patch*.xml") if keep(p)), key=_index)
    return raw, patches


def boot_lun(programs: list[Program]) -> int | None:
    """LUN qdl marks bootable: the one holding ``xbl``/``xbl_a``/``sbl1`` (None if absent)."""
    for label in BOOT_LABELS:
        for p in programs:
            if p.label == label and not p.erase:
                return p.lun
    return None
