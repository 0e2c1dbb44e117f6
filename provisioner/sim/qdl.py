"""qdl stand-in: the host command line of qdl 2.5 plus the device side of a virtual board.

Runs as ``<root>/bin/qdl`` (a wrapper around ``python3 -m provisioner.sim.qdl``) so the station
calls it exactly like the real tool: same options, same messages, same exit codes (0 success, 1 any
failure), same habit of waiting forever for a device. The rawprogram/patch XML is read by the
stand-in's own small reader (:mod:`provisioner.sim.qdl_xml`), the way qdl reads it (linux-msm/qdl
v2.8-rc1 ``src/program.c``, ``src/patch.c``, ``src/util.c``; never the station's parser, so the
preflight is tested against something that behaves like qdl, not against itself): numbers through
``strtoul``, a missing attribute or an unknown tag fails a rawprogram file, ``filename=""`` is
nothing to write, a missing image fails before any write, an image bigger than its partition is
truncated with qdl's error line and the flash goes on (``src/firehose.c`` firehose_program). The
device side (:mod:`provisioner.sim.lun_images`) then does what the firehose programmer does on the
board: evaluates ``NUM_DISK_SECTORS`` expressions against the LUN size, writes every program op into
the board's LUN image at ``start_sector * sector_size``, applies only ``filename="DISK"`` patches,
marks the boot LUN and resets the board.

``PROVISIONER_SIM_QDL_FLAVOR=debian-2022`` (or the ``qdl-2022`` wrapper) behaves like Debian
bookworm's ``qdl 1.0+git20220718`` instead: no ``--version``/``--serial``/``--dry-run``/
``--allow-missing``, missing files silently skipped, Sahara chatter on stderr.

Knobs (environment): ``PROVISIONER_SIM_QDL_RATE_KBPS`` (throttle writes; the board's ``slow``
fault sets 2048), ``PROVISIONER_SIM_QDL_FAIL_AT=<label>`` (firehose NAKs that partition),
``PROVISIONER_SIM_QDL_DROP_AT=<label>`` (device falls off USB there, like the ``edl-drop`` fault).
"""

from __future__ import annotations

import os
import signal
import struct
import sys
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path

from provisioner import catalog
from provisioner.errors import UserError
from provisioner.sim import qdl_xml, sysfs
from provisioner.sim.board import VirtualBoard, sim_root
from provisioner.sim.lun_images import Device, image_extents
from provisioner.sim.qdl_xml import DEV_CRC, DeviceError, Patch, Program, QdlFailure, bootable_lun, device_eval

VERSION = "2.5"
SLOW_RATE_KBPS = 2048
POLL_S = 0.25


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


def load_flash_file(path: Path) -> tuple[list[Program], list[Patch]]:
    """One rawprogram or patch XML read by the stand-in's own reader, its warnings on qdl's stderr."""
    return qdl_xml.load_flash_file(path, warn=_err)


# ---------------------------------------------------------------------------------------------- flashing
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
        crc = DEV_CRC.match(patch.value)
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
