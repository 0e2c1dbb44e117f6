"""`station preflight` and the qdl stand-in on qcom-ptool's own output for both EVKs.

The bundle is laid out the way meta-qcom's image_types_qcom.bbclass (ef0004df) does it: one flat
folder with the real gpt_main*/gpt_backup*/gpt_both*/zeros_*.bin, rawprogram[0-9].xml, patch*.xml
and contents.xml (deploy_partition_files), next to the images the build adds (efi.bin, dtb.bin,
rootfs.img, boot firmware *.elf/*.mbn/*.fv, cdt.bin). Only those images are stand-ins here.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path
from xml.etree import ElementTree

import pytest

BOARDS = ("iq-8275-evk", "iq-9075-evk")
SECTOR = 4096
GIB = 1 << 30


def _program_entries(bundle: Path) -> list[dict[str, str]]:
    """Every <program> of the real rawprogram files (read here with ElementTree, not the tool's parser)."""
    return [node.attrib for xml in sorted(bundle.glob("rawprogram[0-9].xml"))
            for node in ElementTree.parse(xml).getroot() if node.tag == "program"]


def make_bundle(realworld: Path, tmp_path: Path, board: str, *, rootfs_bytes: int = 64 << 20) -> Path:
    src = realworld / "ptool" / board
    bundle = tmp_path / f"qcom-multimedia-image-{board}"
    bundle.mkdir()
    for pattern in ("gpt_main*.bin", "gpt_backup*.bin", "gpt_both*.bin", "zeros_*.bin", "rawprogram[0-9].xml",
                    "patch*.xml", "contents.xml"):
        for f in src.glob(pattern):
            shutil.copyfile(f, bundle / f.name)
    (bundle / "prog_firehose_ddr.elf").write_bytes(b"\x7fELF" + b"\x02" * (SECTOR - 4))
    for entry in _program_entries(bundle):
        name = entry["filename"]
        if name and not (bundle / name).exists():
            (bundle / name).write_bytes(b"\xa5" * SECTOR)          # one sector fits every partition
    with open(bundle / "rootfs.img", "wb") as f:                     # sparse, like tar --sparse unpacks it
        f.truncate(rootfs_bytes)
    return bundle


@pytest.fixture(params=BOARDS)
def board_bundle(request, realworld, tmp_path) -> tuple[str, Path]:
    return request.param, make_bundle(realworld, tmp_path, request.param)


def test_real_bundle_passes_with_a_warning_for_the_zeros_fill_file(board_bundle, cli):
    board, bundle = board_bundle
    res = cli("station", "preflight", bundle, "--board", board)
    assert res.code == 0, res.err
    assert re.search(r"warn .*zeros_33sectors\.bin is 135168 bytes of zeros", res.out)
    assert "apdp_a holds 65536" in res.out and "apdp_b holds 65536" in res.out
    chip = {"iq-8275-evk": "QCS8300", "iq-9075-evk": "QCS9100"}[board]
    assert len(re.findall(rf"\b{chip}\b", res.out)) == 1     # contents.xml names it per flavour; shown once
    data = cli("station", "preflight", bundle, "--board", board, "--json").json()
    assert data["ok"] is True and len(data["warnings"]) == 1 and "apdp_a" in data["warnings"][0]
    chips = next(c["detail"] for c in data["checks"] if c["name"] == "chip id").split(", ")
    assert len(chips) == len(set(chips))


def test_real_image_bigger_than_its_partition_is_an_error(board_bundle, cli):
    board, bundle = board_bundle
    dtb_a = next(e for e in _program_entries(bundle) if e["label"] == "dtb_a")
    size = (int(dtb_a["num_partition_sectors"]) + 1) * SECTOR
    (bundle / "dtb.bin").write_bytes(b"\xd7" * size)
    res = cli("station", "preflight", bundle, "--board", board)
    assert res.code == 1
    assert f"dtb.bin is {size} bytes, partition dtb_a holds {size - SECTOR} (qdl would cut it off)" in res.err


def test_zeros_file_with_data_in_it_is_not_a_fill_file(board_bundle, cli):
    board, bundle = board_bundle
    data = bytearray((bundle / "zeros_33sectors.bin").read_bytes())
    data[-1] = 1
    (bundle / "zeros_33sectors.bin").write_bytes(bytes(data))
    res = cli("station", "preflight", bundle, "--board", board)
    assert res.code == 1 and "zeros_33sectors.bin is 135168 bytes, partition apdp_a holds 65536" in res.err


def test_rootfs_larger_than_the_boards_ufs_is_refused(realworld, tmp_path, cli):
    # rootfs has num_partition_sectors="0": it grows to the end of LUN 0, which no XML sizes. The
    # catalog's 128 GB UFS bounds it; a 120 GiB image cannot fit, a 100 GiB one can.
    bundle = make_bundle(realworld, tmp_path, "iq-8275-evk", rootfs_bytes=120 * GIB)
    res = cli("station", "preflight", bundle, "--board", "iq-8275-evk", "--no-hash")
    assert res.code == 1
    assert re.search(r"rootfs\.img is 128849018880 bytes, partition rootfs grows to the end of LUN 0 and has at "
                     r"most \d+ bytes on iq-8275-evk's 128 GB UFS", res.err)
    with open(bundle / "rootfs.img", "r+b") as f:
        f.truncate(100 * GIB)
    assert cli("station", "preflight", bundle, "--board", "iq-8275-evk", "--no-hash").code == 0


def _bytes_read() -> int:
    """Bytes this process has read through read(2) so far (/proc/self/io rchar), page cache included."""
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])
    raise AssertionError("no rchar in /proc/self/io")


def test_no_hash_reads_no_file_past_its_header(realworld, tmp_path, cli):
    if not Path("/proc/self/io").is_file():
        pytest.skip("needs /proc/self/io (task I/O accounting) to count the bytes read")
    bundle = make_bundle(realworld, tmp_path, "iq-9075-evk", rootfs_bytes=2 * GIB)
    cli("boards")                                          # warm up imports outside the measurement
    before = _bytes_read()
    res = cli("station", "preflight", bundle, "--board", "iq-9075-evk", "--no-hash")
    read = _bytes_read() - before
    assert res.code == 0, res.err
    assert read < 32 << 20, f"preflight --no-hash read {read} bytes of a bundle with a 2 GiB rootfs"


def test_names_that_leave_the_bundle_are_refused_by_name(realworld, tmp_path, cli):
    bundle = make_bundle(realworld, tmp_path, "iq-8275-evk")
    outside = tmp_path / "outside.bin"
    outside.write_bytes(b"\xa5" * SECTOR)
    raw4 = bundle / "rawprogram4.xml"
    text = raw4.read_text()
    raw4.write_text(text.replace('filename="tz.mbn"', f'filename="{outside}"', 1)
                    .replace('filename="hypvm.mbn"', 'filename="../outside.bin"', 1))
    (bundle / "cdt.bin").unlink()
    (bundle / "cdt.bin").symlink_to(outside)
    os.mkfifo(bundle / "aop.mbn.fifo")
    raw4.write_text(raw4.read_text().replace('filename="aop.mbn"', 'filename="aop.mbn.fifo"', 1))
    res = cli("station", "preflight", bundle, "--board", "iq-8275-evk", "--no-hash")
    assert res.code == 1
    assert f"'{outside}' is an absolute path" in res.err
    assert "'../outside.bin' climbs out of the bundle with '..'" in res.err
    assert f"'cdt.bin' is a link to {outside}, outside the bundle" in res.err
    assert "'aop.mbn.fifo' is not a regular file" in res.err
    assert "links to outside the bundle: cdt.bin -> " in res.err


def test_non_ascii_and_huge_numbers_are_located_errors(realworld, tmp_path, cli):
    bundle = make_bundle(realworld, tmp_path, "iq-9075-evk")
    raw4 = bundle / "rawprogram4.xml"
    lines = raw4.read_text().splitlines()
    i = next(n for n, line in enumerate(lines) if 'label="tz_a"' in line)
    lines[i] = re.sub(r'num_partition_sectors="\d+"', 'num_partition_sectors="\u00b2"', lines[i])
    raw4.write_text("\n".join(lines) + "\n", encoding="utf-8")
    res = cli("station", "preflight", bundle, "--board", "iq-9075-evk", "--no-hash")
    assert res.code == 1 and "internal error" not in res.err
    assert f"rawprogram4.xml:{i + 1}: <program label=\"tz_a\"> num_partition_sectors='\u00b2' is not a decimal " \
           "number" in res.err
    lines[i] = re.sub(r'num_partition_sectors="[^"]*"', 'num_partition_sectors="' + "7" * 5000 + '"', lines[i])
    raw4.write_text("\n".join(lines) + "\n", encoding="utf-8")
    res = cli("station", "preflight", bundle, "--board", "iq-9075-evk", "--no-hash")
    assert res.code == 1 and "is larger than 4294967295" in res.err and len(res.err) < 2000


@pytest.mark.parametrize("board", BOARDS)
def test_qdl_stand_in_flashes_the_real_bundle_truncating_the_fill_file(realworld, tmp_path, board):
    import contextlib
    import io

    from provisioner.sim.board import VirtualBoard
    from provisioner.sim.qdl import Args, flash

    bundle = make_bundle(realworld, tmp_path, board)
    vb = VirtualBoard.create(tmp_path / "sim", board, "0AA94EFD", "1-4.2", state="edl", lun_mib=512, lun0_mib=1024)
    apdp = next(e for e in _program_entries(bundle) if e["label"] == "apdp_a")
    after = (int(apdp["start_sector"]) + int(apdp["num_partition_sectors"]) + 1) * SECTOR  # 2nd sector past apdp_a
    with open(vb.lun_path(4), "r+b") as f:
        f.seek(after)
        f.write(b"\xee" * SECTOR)
    args = Args(programmer=str(bundle / "prog_firehose_ddr.elf"),
                files=[str(bundle / f"rawprogram{n}.xml") for n in range(6)]
                + [str(bundle / f"patch{n}.xml") for n in range(6)])
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        assert flash(args, vb.root, "2.5", board=vb) == 0, err.getvalue()
    assert "zeros_33sectors.bin to big for apdp_a truncated to 65536" in err.getvalue()
    disk = sum(len(re.findall(r'filename="DISK"', (bundle / f"patch{n}.xml").read_text())) for n in range(6))
    assert f"{disk} patches applied" in out.getvalue()          # only the DISK ones go to the device
    assert "partition 1 is now bootable" in out.getvalue()
    with open(vb.lun_path(4), "rb") as f:
        f.seek(after)
        assert f.read(SECTOR) == b"\xee" * SECTOR             # the 17 sectors past apdp_a were not zeroed
    parts = json.loads(vb.partitions_path.read_text())
    assert parts["apdp_a"]["num_sectors"] == 16 and parts["rootfs"]["lun"] == 0
