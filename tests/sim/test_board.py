"""Virtual board state on disk: what separate sim processes rely on."""

from __future__ import annotations

import multiprocessing

import pytest

from provisioner import catalog
from provisioner.errors import SimError
from provisioner.sim.board import VirtualBoard, list_boards
from provisioner.station.edl import scan_edl


def test_create_load_and_sparse_luns(tmp_path):
    VirtualBoard.create(tmp_path, "IQ-8275", "0aa94efd", "1-4.2", lun_mib=8, lun0_mib=16)
    again = VirtualBoard.load(tmp_path, "0AA94EFD")
    assert again.board_id == "iq-8275-evk" and again.slot == "1-4.2" and again.state == "off"
    assert again.lun_size(0) == 16 << 20 and again.lun_size(5) == 8 << 20
    assert again.lun_path(0).stat().st_blocks == 0          # sparse until qdl writes
    assert [b.serial for b in list_boards(tmp_path)] == ["0AA94EFD"]


def test_bad_input_is_refused(tmp_path):
    VirtualBoard.create(tmp_path, "iq-8275-evk", "0AA94EFD", "1-4.2")
    with pytest.raises(SimError, match="already taken"):
        VirtualBoard.create(tmp_path, "iq-8275-evk", "0AA94EFE", "1-4.2")
    with pytest.raises(SimError, match="8 hex digits"):
        VirtualBoard.create(tmp_path, "iq-8275-evk", "XYZ", "1-4.3")
    with pytest.raises(SimError, match="unknown fault"):
        VirtualBoard.create(tmp_path, "iq-8275-evk", "0AA94EF0", "1-4.3", faults=("bogus",))
    with pytest.raises(SimError, match="no virtual board"):
        VirtualBoard.load(tmp_path, "12345678")


def test_edl_and_ramdump_appear_in_sysfs_for_the_station_scanner(tmp_path):
    vb = VirtualBoard.create(tmp_path, "iq-9075-evk", "0AA94EFD", "2-1.3")
    sysfs = tmp_path / "sysfs"
    ids = catalog.usb_ids()
    vb.set_state("edl")
    (dev,) = scan_edl(sysfs)
    assert (dev.serial, dev.port, dev.mode, dev.busnum) == ("0AA94EFD", "2-1.3", "edl", 2)
    port = sysfs / "bus/usb/devices/2-1.3"
    assert (port / "idProduct").read_text().strip() == ids["edl_product"]
    assert (port / "product").read_text().strip() == "QUSB_BULK_CID:040E_SN:0AA94EFD"
    first_devnum = dev.devnum
    vb.set_state("booted")
    assert scan_edl(sysfs) == []
    vb.set_state("ramdump")
    (dev,) = scan_edl(sysfs)
    assert dev.mode == "ramdump" and (port / "idProduct").read_text().strip() == ids["ramdump_product"]
    assert dev.devnum != first_devnum                       # re-enumeration gets a new address
    vb.set_state("off")
    assert not port.exists()


def _bump(root, serial, n):
    vb = VirtualBoard.load(root, serial)
    for _ in range(n):
        with vb.transaction() as data:
            data["pids"]["count"] = data["pids"].get("count", 0) + 1


def test_concurrent_updates_from_processes_are_not_lost(tmp_path):
    VirtualBoard.create(tmp_path, "iq-8275-evk", "0AA94EFD", "1-4.2")
    procs = [multiprocessing.Process(target=_bump, args=(tmp_path, "0AA94EFD", 25)) for _ in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(30)
    assert VirtualBoard.load(tmp_path, "0AA94EFD").pids["count"] == 100
