"""The fake USB sysfs tree a virtual board appears in while it is in EDL (9008) or ramdump (900e).

Production code (the station's EDL scanner) reads ``<sysfs root>/bus/usb/devices/<port>/...``
exactly as it would read ``/sys``; the simulator only creates and removes those entries, so the
scanner never learns it is talking to a simulation. The port directory name is the station slot
(USB port path such as ``1-4.2``), which is what identifies a physical slot on a real station.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from provisioner import catalog

EDL_PRODUCT_PREFIX = "QUSB_BULK_CID:040E_SN:"


def sysfs_root(sim_root: Path) -> Path:
    """The directory that plays ``/sys`` for this sim root (pass it to the station's scanner)."""
    return Path(sim_root) / "sysfs"


def usb_devices_dir(sim_root: Path) -> Path:
    return sysfs_root(sim_root) / "bus" / "usb" / "devices"


def busnum_of(port: str) -> int:
    """USB bus number of a port path (``1-4.2`` -> 1), as the kernel names ports."""
    head = port.split("-", 1)[0]
    return int(head) if head.isdigit() else 1


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text + "\n", encoding="ascii")
    os.replace(tmp, path)


def add_usb_device(sim_root: Path, port: str, *, product_id: str, serial: str, devnum: int) -> Path:
    """Create (or replace) the sysfs entry of a Qualcomm device in EDL/ramdump mode at ``port``.

    The directory is populated under a temporary name and renamed into place so a scanner never
    sees a half-written device (the kernel publishes a device's attributes before its uevent too).
    """
    ids = catalog.usb_ids()
    devices = usb_devices_dir(sim_root)
    devices.mkdir(parents=True, exist_ok=True)
    final = devices / port
    tmp = devices / f".{port}.new"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    _write(tmp / "idVendor", ids["vendor"])
    _write(tmp / "idProduct", product_id)
    _write(tmp / "product", f"{EDL_PRODUCT_PREFIX}{serial}")
    _write(tmp / "manufacturer", "Qualcomm CDMA Technologies MSM")
    _write(tmp / "serial", serial)
    _write(tmp / "busnum", str(busnum_of(port)))
    _write(tmp / "devnum", str(devnum))
    _write(tmp / "speed", "480")
    remove_usb_device(sim_root, port)
    os.replace(tmp, final)
    return final


def remove_usb_device(sim_root: Path, port: str) -> None:
    """Remove the entry for ``port`` (the device left EDL or fell off the bus). Idempotent."""
    path = usb_devices_dir(sim_root) / port
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.exists():
        shutil.rmtree(path, ignore_errors=True)


def list_usb_devices(sim_root: Path) -> list[str]:
    """Port names currently present (for tests and ``sim status``)."""
    devices = usb_devices_dir(sim_root)
    if not devices.is_dir():
        return []
    return sorted(p.name for p in devices.iterdir() if not p.name.startswith("."))
