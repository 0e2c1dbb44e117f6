"""The qdl stand-in: qdl's command line, messages and exit codes, and bytes on the LUN images."""

from __future__ import annotations

import json
import re
import shutil
import struct
import subprocess
import sys
import time
import zlib
from pathlib import Path

import pytest

from provisioner.sim.board import VirtualBoard
from provisioner.sim.qdl import install_wrappers
from provisioner.station.flashxml import parse_rawprogram

from .simcore import ROOT, build_bundle, qdl_cmd, run


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    return build_bundle(tmp_path_factory.mktemp("qdlbundle"))


@pytest.fixture
def sim(tmp_path):
    root = tmp_path / "sim"
    return root, install_wrappers(root)


@pytest.fixture
def broken(bundle, tmp_path):
    dst = tmp_path / "broken"
    shutil.copytree(bundle, dst)
    return dst


def _board(root, serial="0AA94EFD", slot="1-4.2", state="edl", **kw):
    return VirtualBoard.create(root, "iq-8275-evk", serial, slot, state=state, **kw)


def _read(vb, lun, sector, nbytes):
    with open(vb.lun_path(lun), "rb") as fh:
        fh.seek(sector * vb.sector_size)
        return fh.read(nbytes)


def test_flash_writes_every_program_at_its_sector_and_resets_the_board(bundle, sim):
    root, tools = sim
    vb = _board(root)
    other = _board(root, "0AA94E01", "1-4.3")           # a second board in EDL must stay untouched
    res = run(qdl_cmd(tools["qdl"], bundle, "--serial", "0aa94efd"))
    assert res.returncode == 0, res.stderr
    assert 'flashed "rootfs" successfully at' in res.stdout
    assert re.search(r"^\d+ patches applied$", res.stdout, re.M)
    assert "partition 1 is now bootable" in res.stdout
    ss = vb.sector_size
    for lun in range(6):
        for prog in parse_rawprogram(bundle / f"rawprogram{lun}.xml"):
            if not prog.filename or prog.label in ("PrimaryGPT", "BackupGPT"):
                continue
            data = (bundle / prog.filename).read_bytes()
            assert _read(vb, lun, int(prog.start_sector), len(data)) == data, prog.label
    # The backup GPT went to NUM_DISK_SECTORS-5 of the real LUN size, and the DISK patches made
    # both headers consistent with that size (valid CRCs), like the firehose programmer does.
    nsec = vb.lun_size(0) // ss
    primary = bytearray(_read(vb, 0, 1, 92))
    backup = bytearray(_read(vb, 0, nsec - 1, 92))
    assert primary[:8] == backup[:8] == b"EFI PART"
    assert struct.unpack_from("<Q", primary, 32)[0] == nsec - 1
    assert struct.unpack_from("<Q", backup, 24)[0] == nsec - 1
    for hdr in (primary, backup):
        crc = struct.unpack_from("<I", hdr, 16)[0]
        hdr[16:20] = b"\0\0\0\0"
        assert zlib.crc32(hdr) == crc
    vb.reload()
    assert vb.state == "booting" and vb.boot_lun == 1
    parts = json.loads(vb.partitions_path.read_text())
    assert parts["rootfs"]["lun"] == 0 and parts["rootfs"]["start_sector"] == 4102
    assert other.lun_path(0).stat().st_blocks == 0 and other.reload().state == "edl"
    assert not (root / "sysfs/bus/usb/devices/1-4.2").exists()     # reset: gone from USB


def test_missing_attribute_fails_the_file_before_any_write(broken, sim):
    root, tools = sim
    vb = _board(root)
    xml = broken / "rawprogram0.xml"
    xml.write_text(xml.read_text().replace('label="rootfs" ', "", 1))
    res = run(qdl_cmd(tools["qdl"], broken, "--serial", vb.serial))
    assert res.returncode == 1
    assert "rawprogram0.xml" in res.stderr and "missing attribute label" in res.stderr
    assert vb.lun_path(0).stat().st_blocks == 0 and vb.reload().state == "edl"


def test_missing_file_is_fatal_unless_allow_missing(broken, sim):
    root, tools = sim
    vb = _board(root)
    (broken / "cdt.bin").unlink()
    res = run(qdl_cmd(tools["qdl"], broken, "--serial", vb.serial))
    assert res.returncode == 1 and "unable to open cdt.bin...failing" in res.stderr
    assert vb.lun_path(3).stat().st_blocks == 0
    res = run(qdl_cmd(tools["qdl"], broken, "--serial", vb.serial, "--allow-missing"))
    assert res.returncode == 0, res.stderr
    assert 'flashed "cdt"' not in res.stdout and 'flashed "rootfs"' in res.stdout


def test_bad_sector_expression_fails_that_partition(broken, sim):
    root, tools = sim
    vb = _board(root)
    xml = broken / "rawprogram5.xml"
    xml.write_text(xml.read_text().replace('start_sector="NUM_DISK_SECTORS-5."', 'start_sector="NUM_DISK_SECTORS-x."'))
    res = run(qdl_cmd(tools["qdl"], broken, "--serial", vb.serial))
    assert res.returncode == 1
    assert "flashing of BackupGPT failed" in res.stderr


def test_file_bigger_than_partition_is_truncated_with_a_warning(broken, sim):
    root, tools = sim
    vb = _board(root)
    (broken / "cdt.bin").write_bytes(b"\xab" * (40 * 4096))     # partition cdt holds 32 sectors
    res = run(qdl_cmd(tools["qdl"], broken, "--serial", vb.serial))
    assert res.returncode == 0
    assert f"cdt.bin to big for cdt truncated to {32 * 4096}" in res.stderr     # qdl 2.5: ux_err, flashes on
    start = 6
    assert _read(vb, 3, start + 31, 4096) == b"\xab" * 4096
    assert _read(vb, 3, start + 32, 4096) != b"\xab" * 4096      # the next partition is not overwritten


def test_waits_for_the_device_and_reports_serial_mismatch(bundle, sim):
    root, tools = sim
    vb = _board(root, state="off")
    _board(root, "0AA94E01", "1-4.3")                    # another board is in EDL
    proc = subprocess.Popen(qdl_cmd(tools["qdl"], bundle, "--serial", vb.serial), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        first = proc.stdout.readline() + proc.stdout.readline()
        assert '1 EDL device(s) visible, none match serial "0AA94EFD"' in first
        assert "Waiting for EDL device" in first
        time.sleep(0.5)
        assert proc.poll() is None                       # still waiting, like qdl (forever)
        vb.set_state("edl")
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert "partition 1 is now bootable" in out


def test_edl_drop_fault_ends_with_usb_error_and_board_off(bundle, sim):
    root, tools = sim
    vb = _board(root, faults=("edl-drop",))
    res = run(qdl_cmd(tools["qdl"], bundle, "--serial", vb.serial))
    assert res.returncode == 1
    assert "LIBUSB_ERROR_NO_DEVICE" in res.stderr and "flashing of rootfs failed" in res.stderr
    assert vb.reload().state == "off"
    assert not (root / "sysfs/bus/usb/devices/1-4.2").exists()


def test_version_list_and_dry_run(bundle, sim):
    root, tools = sim
    assert run([str(tools["qdl"]), "--version"]).stdout.strip() == "qdl version 2.5"
    assert run([str(tools["qdl"]), "list"]).stdout.strip() == "No devices found"
    _board(root)
    assert run([str(tools["qdl"]), "list"]).stdout.strip() == "05c6:9008\t0AA94EFD"
    res = run(qdl_cmd(tools["qdl"], bundle, "--dry-run"))
    assert res.returncode == 0
    assert "This is a dry-run execution of QDL. No actual flashing has been performed" in res.stdout


def test_debian_2022_flavour_has_no_version_or_serial(bundle, sim):
    root, tools = sim
    old = tools["qdl-2022"]
    res = run([str(old), "--version"])
    assert res.returncode == 1 and "unrecognized option '--version'" in res.stderr
    res = run(qdl_cmd(old, bundle, "--serial", "0AA94EFD"))
    assert res.returncode == 1 and "unrecognized option '--serial'" in res.stderr
    vb = _board(root)
    res = run(qdl_cmd(old, bundle))                        # takes the first EDL device it finds
    assert res.returncode == 0
    assert "HELLO version:" in res.stderr and '[PROGRAM] flashed "rootfs" successfully at' in res.stderr
    assert vb.reload().state == "booting"


def _android_sparse(blk: int = 4096) -> bytes:
    """RAW(2 blocks 0x11) FILL(3 blocks DEADBEEF) DONT_CARE(1) RAW(1 block 0x22)."""
    chunks = [struct.pack("<HHII", 0xCAC1, 0, 2, 12 + 2 * blk) + b"\x11" * (2 * blk),
              struct.pack("<HHII", 0xCAC2, 0, 3, 16) + struct.pack("<I", 0xDEADBEEF),
              struct.pack("<HHII", 0xCAC3, 0, 1, 12),
              struct.pack("<HHII", 0xCAC1, 0, 1, 12 + blk) + b"\x22" * blk]
    head = struct.pack("<IHHHHIIII", 0xED26FF3A, 1, 0, 28, 12, blk, 7, len(chunks), 0)
    return head + b"".join(chunks)


def test_sparse_image_is_expanded_on_the_device(broken, sim):
    root, tools = sim
    vb = _board(root)
    (broken / "cdt.bin").write_bytes(_android_sparse())
    xml = broken / "rawprogram3.xml"
    text = xml.read_text()
    cdt_line = next(line for line in text.splitlines() if 'label="cdt"' in line)
    xml.write_text(text.replace(cdt_line, cdt_line.replace('sparse="false"', 'sparse="true"')))
    res = run(qdl_cmd(tools["qdl"], broken, "--serial", vb.serial))
    assert res.returncode == 0, res.stderr
    start = 6
    assert _read(vb, 3, start, 2 * 4096) == b"\x11" * 8192
    assert _read(vb, 3, start + 2, 3 * 4096) == struct.pack("<I", 0xDEADBEEF) * 3072
    assert _read(vb, 3, start + 5, 4096) == b"\0" * 4096              # DONT_CARE: left as it was
    assert _read(vb, 3, start + 6, 4096) == b"\x22" * 4096


def test_reflash_replaces_old_bytes(bundle, broken, sim):
    root, tools = sim
    vb = _board(root)
    assert run(qdl_cmd(tools["qdl"], bundle, "--serial", vb.serial)).returncode == 0
    (broken / "efi.bin").write_bytes(b"\0" * 4096 + b"\x5a" * 100)
    vb.set_state("edl")
    assert run(qdl_cmd(tools["qdl"], broken, "--serial", vb.serial)).returncode == 0
    assert _read(vb, 0, 6, 4096) == b"\0" * 4096                        # old efi bytes are gone
    assert _read(vb, 0, 7, 4096) == b"\x5a" * 100 + b"\0" * 3996


def test_include_dir_is_searched_first_and_fail_at_naks_a_partition(bundle, tmp_path, sim):
    root, tools = sim
    vb = _board(root)
    xml_only = tmp_path / "xml"
    xml_only.mkdir()
    for f in bundle.glob("*.xml"):
        shutil.copy(f, xml_only / f.name)
    argv = qdl_cmd(tools["qdl"], xml_only, "--serial", vb.serial, "--include", str(bundle))
    argv[7] = str(bundle / "prog_firehose_ddr.elf")     # images only in --include, XML elsewhere
    res = run(argv)
    assert res.returncode == 0, res.stderr
    assert _read(vb, 0, 6, 16) == (bundle / "efi.bin").read_bytes()[:16]
    vb.set_state("edl")
    env = dict(__import__("os").environ, PROVISIONER_SIM_QDL_FAIL_AT="xbl_a")
    res = run(qdl_cmd(tools["qdl"], bundle, "--serial", vb.serial), env=env)
    assert res.returncode == 1 and "flashing of xbl_a failed" in res.stderr
    assert vb.reload().state == "edl"                    # no reset after a failed flash


def test_stand_in_reads_xml_with_its_own_reader():
    """The stand-in must not test the preflight against itself: no station code behind its XML reading."""
    import ast

    import provisioner.sim.qdl_xml as simqdl

    tree = ast.parse(Path(simqdl.__file__).read_text(encoding="utf-8"))
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert not [m for m in imported if m.startswith("provisioner.station")], imported


@pytest.mark.parametrize("text,value", [
    ("131078", 131078), ("6.", 6), ("0x10", 16), ("010", 8), ("4k", 4), ("\u00b2", 0), ("", 0),
    ("4294967296", 0), ("9" * 5000, 0xFFFFFFFF), ("-1", 0xFFFFFFFF),
])
def test_numbers_are_read_like_strtoul_into_32_bits(text, value):
    from provisioner.sim.qdl_xml import strtoul32

    assert strtoul32(text) == value


def test_unknown_tag_fails_a_rawprogram_but_not_a_patch_file(broken, sim):
    root, tools = sim
    vb = _board(root)
    raw = broken / "rawprogram3.xml"
    raw.write_text(raw.read_text().replace("</data>", "<frobnicate/></data>"))
    res = run(qdl_cmd(tools["qdl"], broken, "--serial", vb.serial))
    assert res.returncode == 1 and 'unrecognized tag "frobnicate" in program-type file' in res.stderr
    assert vb.lun_path(0).stat().st_blocks == 0
    raw.write_text(raw.read_text().replace("<frobnicate/>", ""))
    patch = broken / "patch3.xml"
    patch.write_text(patch.read_text().replace("</patches>", "<frobnicate/></patches>"))
    res = run(qdl_cmd(tools["qdl"], broken, "--serial", vb.serial))
    assert res.returncode == 0, res.stderr
    assert 'unrecognized tag "frobnicate" in patch-type file, ignoring' in res.stderr


class _FakeClock:
    """Stands in for the ``time`` module inside the stand-in: sleeping advances it, nothing waits."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now

    def time(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += max(0.0, seconds)


def test_modelled_usb_time_absorbs_the_stand_ins_own_work(bundle, sim, monkeypatch):
    """A flash lasts what the link needs for its bytes, from the moment qdl talks to the device,
    however slow the host side is: the 8-board station benchmark measures the station, not Python."""
    from provisioner.sim import qdl

    root, _ = sim
    _board(root)
    clock = _FakeClock()
    lines: list[tuple[float, str]] = []

    def slow_out(msg: str) -> None:             # every line qdl prints costs the host 10 ms here
        lines.append((clock.now, msg))
        clock.now += 0.01

    rate_kbps = 1024
    monkeypatch.setenv("PROVISIONER_SIM_QDL_RATE_KBPS", str(rate_kbps))
    monkeypatch.setattr(qdl, "time", clock)
    monkeypatch.setattr(qdl, "_out", slow_out)
    monkeypatch.setattr(qdl, "_err", lambda msg: None)
    args = qdl.parse_args(qdl_cmd(Path("qdl"), bundle)[1:], "2.5")
    assert qdl.flash(args, root, "2.5") == 0
    talk = next(t for t, msg in lines if msg.startswith("Talking to device"))
    end = lines[-1][0]
    flashed = sum(1 for _, msg in lines if msg.startswith("flashed "))
    assert flashed > 10
    sizes = [(bundle / "prog_firehose_ddr.elf").stat().st_size]     # what the modelled link carries
    for xml in args.files:
        for prog in qdl.load_flash_file(Path(xml))[0]:
            if not prog.skipped and not prog.erase:
                size = qdl.resolve(prog.filename, prog.xml, []).stat().st_size
                sizes.append(min(size, prog.num_partition_sectors * 4096 or size))
    modelled = 0.05 + sum(sizes) / 1024 / rate_kbps
    assert end - talk >= modelled                             # the link was modelled, bytes and the programmer's start
    assert end - talk <= modelled + 0.1, (end - talk, modelled, flashed)   # the host's 10 ms lines did not add up


def test_start_up_and_cpu_queueing_come_off_the_link_time_but_waiting_for_the_board_does_not(
        bundle, sim, monkeypatch):
    """Eight Python stand-ins started at once queue for the CPU before their first byte; eight C qdl
    processes would not. That time (since the station started qdl) comes off the modelled link
    time, so the 8-board benchmark measures the station. Waiting for a board that is not in EDL
    yet is real waiting: the link is not faster for it."""
    from provisioner.sim import qdl

    root, _ = sim
    vb = _board(root, state="off")
    appears_at = 1002.0            # the board enters EDL 2 s after qdl started waiting for it

    class Clock(_FakeClock):
        def sleep(self, seconds: float) -> None:
            super().sleep(seconds)
            if self.now >= appears_at and vb.reload().state != "edl":
                vb.set_state("edl")

    clock = Clock()
    queued = 0.6                   # the process existed this long before flash() ran
    started = clock.now - queued
    lines: list[tuple[float, str]] = []
    rate_kbps = 1024
    monkeypatch.setenv("PROVISIONER_SIM_QDL_RATE_KBPS", str(rate_kbps))
    monkeypatch.setattr(qdl, "time", clock)
    monkeypatch.setattr(qdl, "since_start", lambda: clock.now - started)
    monkeypatch.setattr(qdl, "_out", lambda msg: lines.append((clock.now, msg)))
    monkeypatch.setattr(qdl, "_err", lambda msg: None)
    args = qdl.parse_args(qdl_cmd(Path("qdl"), bundle, "--serial", vb.serial)[1:], "2.5")
    assert qdl.flash(args, root, "2.5", own_process=True) == 0
    talk = next(t for t, msg in lines if msg.startswith("Talking to device"))
    assert talk >= appears_at                                 # it did wait for the board
    sizes = [(bundle / "prog_firehose_ddr.elf").stat().st_size]
    for xml in args.files:
        for prog in qdl.load_flash_file(Path(xml))[0]:
            if not prog.skipped and not prog.erase:
                size = qdl.resolve(prog.filename, prog.xml, []).stat().st_size
                sizes.append(min(size, prog.num_partition_sectors * 4096 or size))
    modelled = 0.05 + sum(sizes) / 1024 / rate_kbps
    took = lines[-1][0] - talk
    assert modelled - queued - 0.05 <= took <= modelled - queued + 0.05, (took, modelled)


def test_since_start_counts_time_off_the_cpu(tmp_path):
    """The stand-in's start-up credit is the time since its fork, not only its own CPU time."""
    code = ("import time; time.sleep(0.3); from provisioner.sim.qdl import since_start; "
            "print(since_start(), time.process_time())")
    out = run([sys.executable, "-c", code], cwd=str(ROOT)).stdout.split()
    since, cpu = float(out[0]), float(out[1])
    assert since >= 0.29 > cpu
