"""qdl stand-in: the host command line of qdl 2.5 plus the device side of a virtual board.

Runs as ``<root>/bin/qdl`` (a wrapper around ``python3 -m provisioner.sim.qdl``) so the station
calls it exactly like the real tool: same options, same messages, same exit codes (0 success,
1 any failure), same habit of waiting forever for a device. The rawprogram/patch XML is read by
this module's own small reader, the way qdl reads it (linux-msm/qdl v2.8-rc1 ``src/program.c``,
``src/patch.c``, ``src/util.c``; never the station's parser, so the preflight is tested against
something that behaves like qdl, not against itself): numbers through ``strtoul``, a missing
attribute or an unknown tag fails a rawprogram file, ``filename=""`` is nothing to write, a
missing image fails before any write, an image bigger than its partition is truncated with
qdl's error line and the flash goes on (``src/firehose.c`` firehose_program). The device side then
does what the firehose programmer does on the board: evaluates ``NUM_DISK_SECTORS`` expressions
against the LUN size, writes every program op into the board's LUN image at
``start_sector * sector_size``, applies only ``filename="DISK"`` patches, marks the boot LUN and
resets the board.

``PROVISIONER_SIM_QDL_FLAVOR=debian-2022`` (or the ``qdl-2022`` wrapper) behaves like Debian
bookworm's ``qdl 1.0+git20220718`` instead: no ``--version``/``--serial``/``--dry-run``/
``--allow-missing``, missing files silently skipped, Sahara chatter on stderr.

Knobs (environment): ``PROVISIONER_SIM_QDL_RATE_KBPS`` (throttle writes; the board's ``slow``
fault sets 2048), ``PROVISIONER_SIM_QDL_FAIL_AT=<label>`` (firehose NAKs that partition),
``PROVISIONER_SIM_QDL_DROP_AT=<label>`` (device falls off USB there, like the ``edl-drop`` fault).
"""

from __future__ import annotations

import errno
import functools
import os
import re
import signal
import struct
import sys
import time
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from xml.etree import ElementTree

from provisioner import catalog
from provisioner.errors import UserError
from provisioner.sim import sysfs
from provisioner.sim.board import VirtualBoard, sim_root

VERSION = "2.5"
SLOW_RATE_KBPS = 2048
POLL_S = 0.25
DRY_RUN_DISK_BYTES = 64 * 1024 * 1024 * 1024


class QdlFailure(Exception):
    """A failure qdl reports on stderr before exiting 1."""


@dataclass
class Args:
    storage: str = "ufs"
    serial: str | None = None
    include: list[str] = field(default_factory=list)
    dry_run: bool = False
    allow_missing: bool = False
    debug: bool = False
    programmer: str | None = None
    files: list[str] = field(default_factory=list)


def _out(msg: str) -> None:
    sys.stdout.write(msg + "\n")
    sys.stdout.flush()


def _err(msg: str) -> None:
    sys.stderr.write(msg + "\n")
    sys.stderr.flush()


USAGE_25 = ("Usage: qdl [--debug] [--dry-run] [--version] [--allow-missing] [--storage <emmc|nand|ufs>] "
            "[--serial <NUM>] [--include <PATH>] <prog.mbn> [<program> <patch> ...]\n"
            "       qdl list")
USAGE_2022 = ("Usage: qdl [--debug] [--storage <emmc|ufs>] [--finalize-provisioning] [--include <PATH>] "
              "<prog.mbn> [<program> <patch> ...]")


def parse_args(argv: list[str], flavor: str) -> Args:
    """getopt_long-like parsing (``--opt value``, ``--opt=value``, short ``-s/-S/-i/-d``)."""
    old = flavor == "debian-2022"
    with_value = {"--storage": "storage", "-s": "storage", "--include": "include", "-i": "include"}
    flags = {"--debug": "debug", "-d": "debug", "--finalize-provisioning": None}
    if not old:
        with_value |= {"--serial": "serial", "-S": "serial"}
        flags |= {"--dry-run": "dry_run", "--allow-missing": "allow_missing", "-f": "allow_missing"}
    args = Args()
    positional: list[str] = []
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "--":
            positional += argv[i + 1:]
            break
        if a.startswith("-") and a != "-":
            name, _, inline = a.partition("=") if a.startswith("--") else (a, "", "")
            if name in with_value:
                if inline:
                    value = inline
                else:
                    i += 1
                    if i >= len(argv):
                        raise QdlFailure(f"qdl: option '{name}' requires an argument\n" +
                                         (USAGE_2022 if old else USAGE_25))
                    value = argv[i]
                key = with_value[name]
                if key == "include":
                    args.include.append(value)
                else:
                    setattr(args, key, value)
            elif name in flags:
                if flags[name]:
                    setattr(args, flags[name], True)
            elif name == "--version" and not old:
                raise _Version()
            else:
                kind = "unrecognized option" if a.startswith("--") else "invalid option --"
                shown = f"'{name}'" if a.startswith("--") else f"'{name.lstrip('-')}'"
                raise QdlFailure(f"qdl: {kind} {shown}\n" + (USAGE_2022 if old else USAGE_25))
        else:
            positional.append(a)
        i += 1
    if not positional:
        raise QdlFailure(USAGE_2022 if old else USAGE_25)
    args.programmer, args.files = positional[0], positional[1:]
    if args.storage not in ("ufs", "emmc", "nand", "nvme", "spinor"):
        raise QdlFailure(f"qdl: unknown storage type \"{args.storage}\"")
    return args


class _Version(Exception):
    pass


# ---------------------------------------------------------------------------------------------- devices
@dataclass(frozen=True)
class UsbDevice:
    port: str
    product_id: str
    serial: str


def scan(root: Path) -> list[UsbDevice]:
    """Qualcomm devices in the sim's fake sysfs (what libusb would enumerate)."""
    out = []
    vendor = catalog.usb_ids()["vendor"]
    for port in sysfs.list_usb_devices(root):
        d = sysfs.usb_devices_dir(root) / port
        try:
            if (d / "idVendor").read_text().strip() != vendor:
                continue
            pid = (d / "idProduct").read_text().strip()
            product = (d / "product").read_text().strip()
        except OSError:
            continue            # vanished while reading (reset / unplug)
        serial = product.split("_SN:", 1)[1] if "_SN:" in product else ""
        out.append(UsbDevice(port, pid, serial))
    return out


def wait_for_device(root: Path, serial: str | None) -> UsbDevice:
    """Poll for an EDL (9008) device, forever, like qdl (callers need their own timeout)."""
    edl = catalog.usb_ids()["edl_product"]
    said_waiting = False
    said_mismatch = -1
    while True:
        devices = [d for d in scan(root) if d.product_id == edl]
        if serial is None and devices:
            return devices[0]
        for d in devices:
            if d.serial.upper() == (serial or "").upper():
                return d
        if devices and serial is not None and len(devices) != said_mismatch:
            _out(f'{len(devices)} EDL device(s) visible, none match serial "{serial}"')
            said_mismatch = len(devices)
        if not said_waiting:
            _out("Waiting for EDL device")
            said_waiting = True
        time.sleep(POLL_S)


# ---------------------------------------------------------------------------------------------- XML reader
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
_DEV_CRC = re.compile(r"^\s*CRC32\(([^,]+),([^)]+)\)\s*$")


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


def load_flash_file(path: Path) -> tuple[list[Program], list[Patch]]:
    """Read one rawprogram or patch XML like qdl: file type from the root tag, then every entry."""
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
                _err(f'unrecognized tag "{node.tag}" in patch-type file, ignoring')
                continue
            a = _attrs(node, _PATCH_ATTRS)
            if a is None:                           # qdl skips just this entry
                _err(f'errors while parsing patch-type file "{path}"')
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


# ---------------------------------------------------------------------------------------------- flashing
class Device:
    """The firehose side: a board's LUN images (or, for --dry-run, nothing at all).

    LUN sizes and file descriptors are looked up once per run: the patch step makes about
    seventy small writes after the last image byte, where no modelled link time hides the
    stand-in's own work (an open and a stat each was most of it).
    """

    def __init__(self, board: VirtualBoard | None, sector_size: int) -> None:
        self.board = board
        self.sector_size = sector_size
        self.partitions: dict[str, dict[str, int]] = {}
        self._sectors: dict[int, int] = {}
        self._fds: dict[int, int] = {}

    def num_disk_sectors(self, lun: int) -> int:
        if self.board is None:
            return DRY_RUN_DISK_BYTES // self.sector_size
        if lun not in self._sectors:
            path = self.board.lun_path(lun)
            if not path.exists():
                raise QdlFailure(f"firehose: LUN {lun} does not exist on this device")
            self._sectors[lun] = path.stat().st_size // self.sector_size
        return self._sectors[lun]

    def _fd(self, lun: int) -> int:
        assert self.board is not None
        if lun not in self._fds:
            self._fds[lun] = os.open(self.board.lun_path(lun), os.O_RDWR)
        return self._fds[lun]

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()

    def write(self, lun: int, offset: int, data: bytes) -> None:
        if self.board is None:
            return
        os.pwrite(self._fd(lun), data, offset)

    def zero(self, lun: int, offset: int, length: int) -> None:
        if self.board is None:
            return
        with open(self.board.lun_path(lun), "r+b") as fh:
            _zero_range(fh.fileno(), offset, length)

    def write_extents(self, lun: int, base: int, image: Path, extents: Iterable[Extent], limit: int,
                      usb: UsbClock | None = None) -> None:
        """Write an image's extents at byte ``base`` of the LUN, up to ``limit`` bytes.

        Data is copied kernel-side (``copy_file_range``), never through Python buffers, the way
        real qdl's cost is the USB link and not the host CPU; zero extents become holes (punched,
        so a re-flash really clears old data while LUN images stay sparse). ``usb`` paces the
        bytes to the modelled link rate by sleeping.
        """
        if self.board is None:
            return
        done = 0
        with open(self.board.lun_path(lun), "r+b") as out, open(image, "rb") as src:
            for ext in extents:
                if ext.offset >= limit:
                    break
                length = min(ext.length, limit - ext.offset)
                for pos, n in _slices(ext.offset, length, usb):
                    if ext.src is not None:
                        _copy_range(src.fileno(), ext.src + (pos - ext.offset), out.fileno(), base + pos, n)
                    elif ext.fill is not None:
                        os.pwrite(out.fileno(), ext.fill * (n // len(ext.fill)), base + pos)
                    else:
                        _zero_range(out.fileno(), base + pos, n)
                    if usb is not None:
                        usb.spend(n)
                done = ext.offset + length
            end = -(-done // self.sector_size) * self.sector_size      # zero-pad the last sector
            if end > done:
                _zero_range(out.fileno(), base + done, min(end, limit) - done)

    def read(self, lun: int, offset: int, length: int) -> bytes:
        if self.board is None:
            return b"\0" * length
        return os.pread(self._fd(lun), length, offset).ljust(length, b"\0")


SPARSE_MAGIC = 0xED26FF3A
CHUNK_RAW, CHUNK_FILL, CHUNK_DONT_CARE, CHUNK_CRC32 = 0xCAC1, 0xCAC2, 0xCAC3, 0xCAC4
PACE_CHUNK = 256 * 1024          # bytes between two pacing sleeps on a throttled link


@dataclass(frozen=True)
class Extent:
    """A piece of the expanded image at ``offset``: the image file's bytes at ``src``, a repeated
    4-byte ``fill`` pattern (sparse FILL chunk), or zeros (both None)."""

    offset: int
    length: int
    src: int | None = None
    fill: bytes | None = None


def image_extents(path: Path, skip: int, sparse: bool) -> tuple[int, Iterator[Extent]]:
    """(expanded size, iterator of :class:`Extent`) for an image file; reads headers, never data.

    Android sparse images (``sparse="true"``, qdl >= 2.2) are expanded chunk by chunk; DONT_CARE
    chunks are not written at all, as on the real device. A raw image's holes (``SEEK_HOLE``)
    become zero extents, its data ranges file ranges.
    """
    with open(path, "rb") as fh:
        head = fh.read(28)
    if sparse and len(head) == 28 and struct.unpack_from("<I", head)[0] == SPARSE_MAGIC:
        _, _, _, hdr_sz, chunk_hdr_sz, blk_sz, total_blks, total_chunks, _ = struct.unpack("<IHHHHIIII", head)
        file_size = path.stat().st_size

        def sparse_iter() -> Iterator[Extent]:
            with open(path, "rb") as fh:
                pos, off = hdr_sz, 0
                for _ in range(total_chunks):
                    ch = os.pread(fh.fileno(), chunk_hdr_sz, pos)
                    if len(ch) < 12:
                        raise QdlFailure(f"{path.name}: sparse image is truncated")
                    ctype, _, nblk, _ = struct.unpack_from("<HHII", ch)
                    pos += chunk_hdr_sz
                    length = nblk * blk_sz
                    if ctype == CHUNK_RAW:
                        if pos + length > file_size:
                            raise QdlFailure(f"{path.name}: sparse image is truncated")
                        yield Extent(off, length, src=pos)
                        pos += length
                    elif ctype == CHUNK_FILL:
                        value = os.pread(fh.fileno(), 4, pos)
                        pos += 4
                        yield Extent(off, length, fill=None if value == b"\0\0\0\0" else value)
                    elif ctype == CHUNK_CRC32:
                        pos += 4
                    elif ctype != CHUNK_DONT_CARE:
                        raise QdlFailure(f"{path.name}: unknown sparse chunk type 0x{ctype:04x}")
                    off += length
        return blk_sz * total_blks, sparse_iter()

    end = path.stat().st_size
    size = max(0, end - skip)

    def raw_iter() -> Iterator[Extent]:
        with open(path, "rb") as fh:
            fd, pos = fh.fileno(), skip
            while pos < end:
                try:
                    data = os.lseek(fd, pos, os.SEEK_DATA)
                except OSError as exc:      # ENXIO: only a hole is left; EINVAL: no hole support
                    data = end if exc.errno == errno.ENXIO else pos
                if data > pos:
                    yield Extent(pos - skip, min(data, end) - pos)
                    pos = data
                    if pos >= end:
                        return
                try:
                    hole = min(os.lseek(fd, pos, os.SEEK_HOLE), end)
                except OSError:
                    hole = end
                yield Extent(pos - skip, hole - pos, src=pos)
                pos = hole
    return size, raw_iter()


def _slices(offset: int, length: int, usb: UsbClock | None) -> Iterator[tuple[int, int]]:
    """One slice unthrottled (the kernel copies it at once), else PACE_CHUNK pieces to pace."""
    step = length if usb is None or not usb.rate else PACE_CHUNK
    pos, stop = offset, offset + length
    while pos < stop:
        n = min(step, stop - pos)
        yield pos, n
        pos += n


def _copy_range(src_fd: int, src_off: int, dst_fd: int, dst_off: int, length: int) -> None:
    """Copy ``length`` bytes file to file in the kernel; pread/pwrite where copy_file_range is not."""
    while length > 0:
        try:
            n = os.copy_file_range(src_fd, dst_fd, length, src_off, dst_off)
        except OSError as exc:
            if exc.errno not in (errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
                raise
            n = os.pwrite(dst_fd, os.pread(src_fd, min(length, 1 << 20), src_off), dst_off)
        if n <= 0:                          # the image shrank under us: the rest reads as zeros
            _zero_range(dst_fd, dst_off, length)
            return
        src_off, dst_off, length = src_off + n, dst_off + n, length - n


@functools.cache
def _fallocate() -> Callable[[int, int, int, int], int] | None:
    """libc fallocate(2), looked up once per process (Python's os has no PUNCH_HOLE)."""
    try:
        import ctypes

        fn = ctypes.CDLL(None, use_errno=True).fallocate
        fn.argtypes = (ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64)
        return fn
    except (OSError, AttributeError):
        return None


def _zero_range(fd: int, offset: int, length: int) -> None:
    """Zero ``length`` bytes at ``offset``: punch a hole (stays sparse), else write zeros."""
    if length <= 0:
        return
    fallocate = _fallocate()
    if fallocate is not None and fallocate(fd, 0x01 | 0x02, offset, length) == 0:   # KEEP_SIZE | PUNCH_HOLE
        return
    zeros = bytes(min(length, 1 << 20))
    while length:
        n = os.pwrite(fd, zeros[:min(length, len(zeros))], offset)
        offset, length = offset + n, length - n


class UsbClock:
    """The modelled USB link: every byte costs ``1 / rate`` seconds from the moment qdl starts
    talking to the device, and :meth:`spend` sleeps until the link would have carried it.

    One clock for the whole run (not one per partition), so the stand-in's own CPU time (the
    copies, its lines) hides under the modelled transfer time, as real qdl's does under USB waits.
    ``host_s`` is time the stand-in already spent before its first byte (Python start-up, XML)
    that the real C tool, which starts in milliseconds, does not have: the clock starts that much
    earlier. Rate 0 models no link time.
    """

    def __init__(self, rate_kbps: float, host_s: float = 0.0) -> None:
        self.rate = rate_kbps * 1024
        self.t0 = time.monotonic() - host_s
        self.due = 0.0

    def spend(self, nbytes: int = 0, seconds: float = 0.0) -> None:
        self.due += seconds + (nbytes / self.rate if self.rate else 0.0)
        ahead = self.t0 + self.due - time.monotonic()
        if ahead > 0:
            time.sleep(ahead)


def since_start() -> float:
    """Seconds since the station started this process (its fork: /proc/self/stat field 22, on the
    CLOCK_BOOTTIME scale), whether they went to CPU or to waiting for a CPU.

    Eight Python stand-ins starting at once on a small host queue for the CPU for a good part of
    a second; eight real qdl processes (C, milliseconds to start) do not. Crediting only our own
    CPU time (``process_time``) would leave that queueing in the flash time, so the benchmark
    would measure the simulator rather than the station. Falls back to our CPU time where /proc
    does not say.
    """
    try:
        fields = Path("/proc/self/stat").read_text(encoding="ascii").rsplit(")", 1)[1].split()
        started = int(fields[19]) / os.sysconf("SC_CLK_TCK")
        return max(0.0, time.clock_gettime(time.CLOCK_BOOTTIME) - started)
    except (OSError, ValueError, IndexError):
        return time.process_time()


def resolve(filename: str, xml: Path, include: list[str]) -> Path | None:
    """qdl's lookup order: each --include dir, the XML's own folder, then the name as given."""
    for d in include:
        p = Path(d) / filename
        if p.is_file():
            return p
    p = xml.parent / filename
    if p.is_file():
        return p
    p = Path(filename)
    return p if p.is_file() else None


def _rate(board: VirtualBoard | None) -> float:
    env = os.environ.get("PROVISIONER_SIM_QDL_RATE_KBPS")
    if env:
        return float(env)
    if board is not None and board.has_fault("slow"):
        return SLOW_RATE_KBPS
    return 0.0


def flash(args: Args, root: Path, flavor: str, *, board: VirtualBoard | None = None,
          own_process: bool = False) -> int:
    """Everything after option parsing; returns the exit status.

    ``board`` given: flash that board directly (no USB wait) - how ``sim up --state booted``
    installs an image without a station. ``own_process``: this is the ``qdl`` command, whose time
    since the station started it, less the wait for the device, is the stand-in's start-up (see
    :class:`UsbClock` and :func:`since_start`).
    """
    old = flavor == "debian-2022"
    waited = 0.0
    direct = board is not None        # factory install by the sim itself: no USB faults, no throttling
    programmer = Path(args.programmer or "")
    # qdl loads every XML before talking to the device: a broken file fails before any write.
    programs: list[Program] = []
    patches: list[Patch] = []
    for f in args.files:
        more_programs, more_patches = load_flash_file(Path(f))
        programs += more_programs
        patches += more_patches
    files: dict[int, Path | None] = {}
    for i, prog in enumerate(programs):
        if prog.skipped or prog.erase:
            continue
        found = resolve(prog.filename, prog.xml, args.include)
        if found is None and not (args.allow_missing or old):
            raise QdlFailure(f"unable to open {prog.filename}...failing")
        files[i] = found
    if not programmer.is_file():
        raise QdlFailure(f"unable to open {programmer}...failing" if not old else
                         f"failed to load programmer {programmer}")

    if args.dry_run:
        _out("This is a dry-run execution of QDL. No actual flashing has been performed")
        board = None
        dev_serial = "00000000"
    elif board is not None:
        dev_serial = board.serial
    else:
        t_wait = time.monotonic()
        dev = wait_for_device(root, args.serial)
        waited = time.monotonic() - t_wait       # a real wait for the board: never credited below
        board = VirtualBoard.load(root, dev.serial)
        dev_serial = dev.serial
    sector_size = board.sector_size if board else (programs[0].sector_size if programs else 4096)
    device = Device(board, sector_size)
    claim = _claim(board) if board else None
    try:
        if not old:
            _out(f"Talking to device (PID 0x{catalog.usb_ids()['edl_product']}, serial: {dev_serial})")
        usb = UsbClock(0.0 if direct else _rate(board), max(0.0, since_start() - waited) if own_process else 0.0)
        _sahara(programmer, old, usb)
        fail_at = os.environ.get("PROVISIONER_SIM_QDL_FAIL_AT")
        drop_at = os.environ.get("PROVISIONER_SIM_QDL_DROP_AT")
        if board is not None and board.has_fault("edl-drop") and not drop_at and not direct:
            drop_at = _middle_label(programs, files)
        for i, prog in enumerate(programs):
            if prog.skipped:
                continue
            if prog.sector_size != sector_size:
                _err(f"firehose: ERROR: SECTOR_SIZE_IN_BYTES {prog.sector_size} does not match the "
                     f"{args.storage} sector size {sector_size}")
                raise QdlFailure(f"flashing of {prog.label} failed")
            nsec = device.num_disk_sectors(prog.lun)
            try:
                start = prog.start(nsec)
            except DeviceError as exc:
                _err(f"firehose: ERROR: {exc}")
                raise QdlFailure(f"flashing of {prog.label} failed") from None
            if prog.erase:
                device.zero(prog.lun, start * sector_size, prog.num_partition_sectors * sector_size)
                _out(f'successfully erased "{prog.label}"') if not old else None
                continue
            path = files.get(i)
            if path is None:
                if not old:
                    _out(f"{prog.filename} not found, skipping (--allow-missing)")
                continue
            size, extents = image_extents(path, prog.file_sector_offset * sector_size, prog.sparse)
            part_bytes = prog.num_partition_sectors * sector_size
            if part_bytes and size > part_bytes:     # qdl 2.5's spelling ("too big" from 2.8 on), on stderr
                _err(f"{prog.filename} to big for {prog.label} truncated to {part_bytes}")
                size = part_bytes
            sectors = -(-size // sector_size)
            if start < 0 or start + sectors > nsec:
                _err(f"firehose: ERROR: write of {sectors} sectors at {start} is beyond the end of LUN "
                     f"{prog.lun} ({nsec} sectors)")
                raise QdlFailure(f"flashing of {prog.label} failed")
            if fail_at and prog.label == fail_at:
                _err("firehose: ERROR: Failed to program the partition (NAK)")
                raise QdlFailure(f"flashing of {prog.label} failed")
            if drop_at and prog.label == drop_at and board is not None:
                device.write_extents(prog.lun, start * sector_size, path, extents, size // 2)
                board.set_state("off")
                _err("qdl: failed to write: LIBUSB_ERROR_NO_DEVICE (device disconnected)")
                raise QdlFailure(f"flashing of {prog.label} failed")
            t0 = time.monotonic()
            device.write_extents(prog.lun, start * sector_size, path, extents, sectors * sector_size, usb)
            elapsed = time.monotonic() - t0
            kbps = int(size / 1024 / max(elapsed, 1e-4))
            if old:
                _err(f'[PROGRAM] flashed "{prog.label}" successfully at {kbps}kB/s')
            else:
                _out(f'flashed "{prog.label}" successfully at {kbps}kB/s')
            if prog.label not in ("PrimaryGPT", "BackupGPT"):   # GPT copies, not partitions
                device.partitions[prog.label] = {"lun": prog.lun, "start_sector": start,
                                                 "num_sectors": prog.num_partition_sectors or sectors}
        applied = 0
        for patch in patches:
            if not patch.device_side:
                continue
            _apply_patch(device, patch, sector_size)
            applied += 1
        _out(f"{applied} patches applied")
        lun = bootable_lun(programs)
        if lun is not None:
            _out(f"partition {lun} is now bootable")
        if board is not None:
            _commit(board, device, lun)
        return 0
    finally:
        device.close()
        if claim is not None:
            os.close(claim)


def _middle_label(programs: list, files: dict) -> str | None:
    """The partition the ``edl-drop`` fault kills the transfer at: the biggest one (the rootfs)."""
    best, size = None, -1
    for i, p in enumerate(programs):
        path = files.get(i)
        if path is not None and path.stat().st_size > size:
            best, size = p.label, path.stat().st_size
    return best


def _claim(board: VirtualBoard) -> int:
    """Claim the USB interface: one qdl per device, like libusb_claim_interface."""
    import fcntl

    fd = os.open(board.dir / ".usb-claim", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise QdlFailure("failed to claim USB interface: Resource busy (another qdl is using the device)") from None
    return fd


def _sahara(programmer: Path, old: bool, usb: UsbClock) -> None:
    data = programmer.read_bytes()
    if old:
        _err("HELLO version: 0x2 compatible: 0x1 max_len: 1024 mode: 0")
        _err("READ64 image: 13 offset: 0x0 length: 0x40")
        _err(f"READ64 image: 13 offset: 0x40 length: 0x{min(len(data), 0x1000):x}")
        _err("END OF IMAGE image: 13 status: 0")
        _err("DONE status: 0")
    else:
        _out(f"Sahara: sending {programmer.name} ({len(data)} bytes)")
    if not data.startswith(b"\x7fELF"):
        raise QdlFailure(f"sahara: {programmer.name} is not a valid programmer ELF image (device rejected it)")
    if not old:
        _out("waiting for Firehose programmer...")
    usb.spend(len(data), seconds=0.05)            # the programmer's upload and its start on the device


def _apply_patch(device: Device, patch, sector_size: int) -> None:
    nsec = device.num_disk_sectors(patch.lun)
    try:
        start = device_eval(patch.start_sector, nsec)
        crc = _DEV_CRC.match(patch.value)
        if crc is not None:
            crc_start, crc_len = device_eval(crc[1], nsec), device_eval(crc[2], nsec)
            value = zlib.crc32(device.read(patch.lun, crc_start * sector_size, crc_len)) & 0xFFFFFFFF
        else:
            value = device_eval(patch.value, nsec)
    except DeviceError as exc:
        _err(f"firehose: ERROR: {exc}")
        raise QdlFailure(f"failed to apply patch at {patch.where}") from None
    size = patch.size_in_bytes
    if size not in (1, 2, 4, 8):
        raise QdlFailure(f"failed to apply patch at {patch.where}: size_in_bytes {size}")
    fmt = {1: "<B", 2: "<H", 4: "<I", 8: "<Q"}[size]
    device.write(patch.lun, start * sector_size + patch.byte_offset,
                 struct.pack(fmt, value & ((1 << (8 * size)) - 1)))


def _commit(board: VirtualBoard, device: Device, boot_lun: int | None) -> None:
    """Record the partition table, then reset the board (qdl's final <power value="reset"/>)."""
    import json

    tmp = board.partitions_path.with_name(".partitions.json.tmp")
    tmp.write_text(json.dumps(device.partitions, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(tmp, board.partitions_path)
    board.set_state("booting", boot_lun=boot_lun, build_id=None, flashed=time.time())


def flash_bundle(board: VirtualBoard, bundle: Path) -> None:
    """Write a whole qcomflash bundle into ``board`` in-process (quietly) and reset it to booting."""
    import contextlib
    import io

    args = Args(programmer=str(bundle / "prog_firehose_ddr.elf"),
                files=[str(bundle / f"rawprogram{n}.xml") for n in board.catalog_board.luns]
                + [str(bundle / f"patch{n}.xml") for n in board.catalog_board.luns])
    out, err = io.StringIO(), io.StringIO()
    saved = os.environ.pop("PROVISIONER_SIM_QDL_RATE_KBPS", None)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = flash(args, board.root, "2.5", board=board)
    except QdlFailure as exc:
        raise UserError(f"flashing virtual board {board.serial} failed: {exc}") from None
    finally:
        if saved is not None:
            os.environ["PROVISIONER_SIM_QDL_RATE_KBPS"] = saved
    if rc != 0:
        raise UserError(f"flashing virtual board {board.serial} failed: {err.getvalue().strip()}")


# ---------------------------------------------------------------------------------------------- wrappers
#: what the wrappers run; ``provisioner.sim.qdl`` stays in the command line, where the sim's
#: clean-up (and the tests) look for stand-ins that outlived their station
WRAPPER_ENTRY = "import sys; from provisioner.sim.qdl import main; sys.exit(main())"


def install_wrappers(root: Path | str | None = None) -> dict[str, Path]:
    """Write ``<root>/bin/qdl`` (qdl 2.5) and ``<root>/bin/qdl-2022`` (Debian's 2022 qdl).

    Tiny shell scripts with the sim root and this interpreter baked in, so the station can be
    pointed at them like at any qdl binary (``qdl: <root>/bin/qdl`` in station.yaml).
    """
    root_p = sim_root(root)
    bindir = root_p / "bin"
    bindir.mkdir(parents=True, exist_ok=True)
    pkg_parent = Path(__file__).resolve().parents[2]
    out = {}
    for name, flavor in (("qdl", "2.5"), ("qdl-2022", "debian-2022")):
        if name == "qdl":
            flavor_line = f'PROVISIONER_SIM_QDL_FLAVOR="${{PROVISIONER_SIM_QDL_FLAVOR:-{flavor}}}"\n'
        else:
            flavor_line = f"PROVISIONER_SIM_QDL_FLAVOR={flavor}\n"
        text = ("#!/bin/sh\n"
                "# qdl stand-in for virtual boards (provisioner.sim.qdl); not the real qdl.\n"
                f"PROVISIONER_SIM_ROOT='{root_p}'\n"
                + flavor_line +
                f"PYTHONPATH='{pkg_parent}'${{PYTHONPATH:+:$PYTHONPATH}}\n"
                "export PROVISIONER_SIM_ROOT PROVISIONER_SIM_QDL_FLAVOR PYTHONPATH\n"
                # an import, not `-m`: -m compiles this module from source at every start (the
                # __main__ module gets no cached bytecode), ~40 ms of CPU per board flashed
                f"exec '{sys.executable}' -c '{WRAPPER_ENTRY}' \"$@\"\n")
        path = bindir / name
        tmp = bindir / f".{name}.tmp"
        tmp.write_text(text, encoding="utf-8")
        tmp.chmod(0o755)
        os.replace(tmp, path)
        out[name] = path
    return out


# ---------------------------------------------------------------------------------------------- list / main
def list_devices(root: Path) -> int:
    devices = [d for d in scan(root) if d.product_id in (catalog.usb_ids()["edl_product"],
                                                         catalog.usb_ids()["ramdump_product"])]
    if not devices:
        _out("No devices found")
    for d in devices:
        _out(f"{catalog.usb_ids()['vendor']}:{d.product_id}\t{d.serial}")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    flavor = os.environ.get("PROVISIONER_SIM_QDL_FLAVOR", "2.5")
    root = sim_root()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    try:
        if flavor != "debian-2022" and argv[:1] == ["list"]:
            return list_devices(root)
        try:
            args = parse_args(argv, flavor)
        except _Version:
            _out(f"qdl version {VERSION}")
            return 0
        return flash(args, root, flavor, own_process=True)
    except QdlFailure as exc:
        _err(str(exc))
        return 1
    except UserError as exc:
        _err(f"qdl: {exc}")
        return 1
    except KeyboardInterrupt:
        return 1


if __name__ == "__main__":
    sys.exit(main())
