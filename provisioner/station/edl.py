"""EDL resources: Qualcomm boards in Emergency Download (05c6:9008) or crash-dump (05c6:900e) mode.

A *resource* in labgrid's sense: plain data about what exists, read from sysfs. The sysfs root is
a parameter (``/sys`` on a station) so the scanner reads a test tree exactly as it reads the
kernel's. The board serial is taken from the USB product string after ``_SN:`` (the USB serial
field does not carry it on these boards); the USB port path (``1-4.2``) names the physical slot.
"""

from __future__ import annotations

import re
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from provisioner import catalog

_SN = re.compile(r"_SN:([0-9A-Fa-f]+)")
_PORT = re.compile(r"^\d+-\d+(\.\d+)*$")


@dataclass(frozen=True)
class EdlDevice:
    """One Qualcomm USB device in EDL or crash-dump mode at a station port."""

    serial: str
    port: str
    mode: str  # "edl" | "ramdump"
    product: str
    busnum: int | None = None
    devnum: int | None = None
    slot: str | None = None  # human slot name from the station config

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="ascii", errors="replace").strip()
    except OSError:
        return None


def _int(text: str | None) -> int | None:
    return int(text) if text and text.isdigit() else None


def serial_from_product(product: str) -> str | None:
    """``QUSB_BULK_CID:040E_SN:0AA94EFD`` -> ``0AA94EFD`` (upper case), None if absent."""
    m = _SN.search(product or "")
    return m.group(1).upper() if m else None


def scan_edl(sysfs_root: Path | str = "/sys", slots: dict[str, str] | None = None) -> list[EdlDevice]:
    """Every 05c6:9008 / 05c6:900e device under ``<sysfs_root>/bus/usb/devices``, sorted by port.

    Interfaces (``1-4.2:1.0``) and root hubs (``usb1``) are skipped; a device whose entry
    vanishes while being read (unplugged, reset) is skipped too, not an error. A missing
    ``bus/usb/devices`` folder means no USB devices (callers name the root in their errors).
    """
    root = Path(sysfs_root)
    devices = root / "bus" / "usb" / "devices"
    ids = catalog.usb_ids()
    modes = {ids["edl_product"].lower(): "edl", ids["ramdump_product"].lower(): "ramdump"}
    out: list[EdlDevice] = []
    if not devices.is_dir():
        return out
    for entry in devices.iterdir():
        if not _PORT.match(entry.name):
            continue
        vendor = (_read(entry / "idVendor") or "").lower()
        product_id = (_read(entry / "idProduct") or "").lower()
        if vendor != ids["vendor"].lower() or product_id not in modes:
            continue
        product = _read(entry / "product") or ""
        serial = serial_from_product(product) or (_read(entry / "serial") or "").upper()
        if not serial:
            continue
        out.append(EdlDevice(
            serial=serial, port=entry.name, mode=modes[product_id], product=product,
            busnum=_int(_read(entry / "busnum")), devnum=_int(_read(entry / "devnum")),
            slot=(slots or {}).get(entry.name),
        ))
    return sorted(out, key=lambda d: (_port_key(d.port), d.serial))


def _port_key(port: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.split(r"[-.]", port) if x.isdigit())


def find_device(sysfs_root: Path | str, serial: str, slots: dict[str, str] | None = None) -> EdlDevice | None:
    """The device with board serial ``serial`` (case-insensitive), or None."""
    serial = serial.upper()
    for dev in scan_edl(sysfs_root, slots):
        if dev.serial == serial:
            return dev
    return None


def wait_for_device(sysfs_root: Path | str, serial: str, *, mode: str = "edl", timeout_s: float = 30.0,
                    poll_s: float = 0.1, slots: dict[str, str] | None = None) -> EdlDevice | None:
    """Poll sysfs until ``serial`` shows up in ``mode``; None after ``timeout_s``.

    Used after ``reboot edl`` on the console and before retrying a flash whose device dropped
    off the bus: re-enumeration takes a second or two on real hardware.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        dev = find_device(sysfs_root, serial, slots)
        if dev is not None and dev.mode == mode:
            return dev
        if time.monotonic() >= deadline:
            return None
        time.sleep(poll_s)
