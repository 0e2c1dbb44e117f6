"""Preflight refuses bad or foreign bundles before any board is touched."""

from __future__ import annotations

import json
import re
import tarfile

import pytest

from provisioner import context
from provisioner.cli import main
from provisioner.errors import StationError
from provisioner.station.bundle import preflight


def _problems(path, board="iq-8275-evk"):
    pf = preflight(path, board)
    return {c.name: c.detail for c in pf.checks if not c.ok}


def test_good_release_passes(release_8275):
    pf = preflight(release_8275)
    assert pf.ok, pf.problems
    assert pf.board.id == "iq-8275-evk" and pf.release_id == "gemma4-e2b-iq8275-2026.11"
    assert pf.as_dict()["luns"] == [0, 1, 2, 3, 4, 5] and pf.as_dict()["boot_lun"] == 1
    assert pf.qdl_args()[0].endswith("prog_firehose_ddr.elf") and pf.qdl_args()[-1].endswith("patch5.xml")


def test_tarball_is_unpacked_and_checked(release_8275, tmp_path):
    bundle = next((release_8275 / "flash").iterdir())
    tgz = tmp_path / f"{bundle.name}.rootfs.qcomflash.tar.gz"
    with tarfile.open(tgz, "w:gz") as tf:
        tf.add(bundle, arcname=bundle.name)
    pf = preflight(tgz)
    try:
        assert pf.ok and pf.board.id == "iq-8275-evk"
    finally:
        pf.close()


def test_wrong_board_is_refused(release_8275):
    probs = _problems(release_8275, "iq-9075-evk")
    assert probs["board"] == "release is for iq-8275-evk, not iq-9075-evk"
    assert "QCS8300" in probs["chip id"] and "SA8775P" in probs["chip id"]


def test_wrong_chip_in_bare_bundle(bundle_copy):
    c = bundle_copy / "contents.xml"
    c.write_text(c.read_text().replace("QCS8300", "SA8775P"))
    assert "contents.xml is for chip SA8775P" in _problems(bundle_copy)["chip id"]


def test_missing_file(bundle_copy):
    (bundle_copy / "cdt.bin").unlink()
    assert re.search(r"missing: cdt.bin \(rawprogram3.xml:\d+, cdt\)", _problems(bundle_copy)["files"])


def test_missing_programmer(bundle_copy):
    (bundle_copy / "prog_firehose_ddr.elf").unlink()
    assert "programmer" in _problems(bundle_copy)


def test_oversized_image(bundle_copy):
    with open(bundle_copy / "dtb.bin", "ab") as f:
        f.write(b"\xaa" * (1024 * 4096))  # partition dtb_a holds 1024 sectors
    assert re.search(r"dtb.bin is \d+ bytes, partition dtb_a holds 4194304", _problems(bundle_copy)["sizes"])


def test_malformed_xml_names_line_and_attribute(bundle_copy):
    raw = bundle_copy / "rawprogram4.xml"
    lines = raw.read_text().splitlines()
    idx = next(i for i, ln in enumerate(lines) if 'label="tz_a"' in ln)
    lines[idx] = lines[idx].replace(' physical_partition_number="4"', "")
    raw.write_text("\n".join(lines) + "\n")
    assert _problems(bundle_copy)["xml"] == f'rawprogram4.xml:{idx + 1}: <program label="tz_a"> is missing ' \
                                            "attribute physical_partition_number"
    raw.write_text("<data>\n<program label='x'\n</data>\n")
    assert _problems(bundle_copy)["xml"].startswith("rawprogram4.xml:3: malformed XML")


def test_uncovered_lun_and_no_boot_lun(bundle_copy):
    (bundle_copy / "rawprogram5.xml").unlink()
    for n in (1, 2):
        p = bundle_copy / f"rawprogram{n}.xml"
        p.write_text(p.read_text().replace('label="xbl_a"', 'label="xbl_x"').replace('label="xbl_b"', 'label="xbl_y"'))
    probs = _problems(bundle_copy)
    assert probs["luns"] == "no partitions for LUN 5"
    assert "no xbl" in probs["boot lun"]


def test_wrong_sector_size(bundle_copy):
    p = bundle_copy / "rawprogram3.xml"
    p.write_text(p.read_text().replace('SECTOR_SIZE_IN_BYTES="4096"', 'SECTOR_SIZE_IN_BYTES="512"'))
    assert "4096-byte sectors" in _problems(bundle_copy)["sector size"]


def test_checksum_mismatch_in_release(release_8275, tmp_path):
    import shutil

    rel = tmp_path / release_8275.name
    shutil.copytree(release_8275, rel)
    bundle = next((rel / "flash").iterdir())
    data = bytearray((bundle / "efi.bin").read_bytes())
    data[100] ^= 0xFF
    (bundle / "efi.bin").write_bytes(bytes(data))
    assert "efi.bin: sha256" in _problems(rel)["checksums"]


def test_cli_preflight_exit_codes(release_8275, bundle_copy, capsys):
    assert main(["station", "preflight", str(release_8275), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["ok"] is True
    # checked and unfit: exit 1 (README: "1 checked and unfit")
    assert main(["station", "preflight", str(release_8275), "--board", "iq-9075-evk"]) == 1
    err = capsys.readouterr().err
    assert "preflight failed for gemma4-e2b-iq8275-2026.11 on iq-9075-evk: release is for iq-8275-evk" in err
    assert "nothing was flashed" in err
    (bundle_copy / "cdt.bin").unlink()
    assert main(["station", "preflight", str(bundle_copy), "--board", "iq-8275-evk"]) == 1
    assert "missing: cdt.bin" in capsys.readouterr().err
    # could not read it: exit 2
    assert main(["station", "preflight", str(bundle_copy / "nope"), "--board", "iq-8275-evk"]) == 2
    (bundle_copy / "rawprogram2.xml").write_text("<data>\n<program label='x'\n</data>\n")
    assert main(["station", "preflight", str(bundle_copy), "--board", "iq-8275-evk"]) == 2
    assert "rawprogram2.xml:3: malformed XML" in capsys.readouterr().err


def test_flash_refuses_bad_bundle_before_touching_boards(station, bundle_copy):
    (bundle_copy / "cdt.bin").unlink()
    board = station.add(1)[0]
    with pytest.raises(StationError, match="preflight failed.*missing: cdt.bin"):
        from provisioner.station.flash import FlashOptions, flash_release
        flash_release(bundle_copy, station.config, context.current(), FlashOptions(all_boards=True))
    with open(board.lun_path(3), "rb") as f:
        assert f.read(1 << 16).count(0) == 1 << 16  # LUN 3 untouched
