"""Each board's identity from the line: serials and first-boot SSH host keys read on the console,
validated as untrusted input, exported as known_hosts, and enforced by the fleet's ssh."""

from __future__ import annotations

import base64
import json
import struct
import subprocess

import pytest
import yaml

from provisioner import context
from provisioner.cli import main
from provisioner.contracts import inventory
from provisioner.errors import UserError
from provisioner.fleet.shared.hostkey import mismatch_reason
from provisioner.sim import control, host
from provisioner.station import identity
from provisioner.station.records import Records
from tests.fleet.simfleet import can_run

FP = "SHA256:" + "A" * 43


def _keygen(tmp_path, kind="ed25519"):
    key = tmp_path / f"k_{kind}"
    subprocess.run(["ssh-keygen", "-q", "-t", kind, "-N", "", "-f", str(key)], check=True)
    pub = key.with_suffix(".pub").read_text()
    printed = subprocess.run(["ssh-keygen", "-lf", str(key.with_suffix(".pub"))], check=True,
                             capture_output=True, text=True).stdout.split()[1]
    return pub, printed


@pytest.mark.parametrize("kind", ["ed25519", "ecdsa", "rsa"])
def test_fingerprint_is_what_ssh_keygen_prints(tmp_path, kind):
    pub, printed = _keygen(tmp_path, kind)
    (key,) = identity.host_keys_from_text(pub)
    assert key.fingerprint == printed and identity.FINGERPRINT_RE.match(key.fingerprint)


def test_untrusted_console_values_are_validated_by_type(tmp_path):
    pub, _ = _keygen(tmp_path)
    kind, b64 = pub.split()[:2]
    blob = base64.b64decode(b64)
    lying = base64.b64encode(struct.pack(">I", 7) + b"ssh-rsa" + blob[4 + len(kind):]).decode()
    assert identity.host_key(kind, lying) is None                 # blob says another type
    assert identity.host_key("ssh-dss", b64) is None              # a type sshd_check_keys never makes
    assert identity.host_key(kind, b64 + "!") is None             # not base64
    assert identity.host_key(kind, "A" * 10000) is None           # far too long for a public key
    assert identity.soc_serial("178867965\n") == "0AA94EFD"      # socinfo prints %u
    assert identity.soc_serial("12; rm -rf /") is None
    assert identity.soc_serial("9" * 40) is None
    assert identity.ufs_serial("3E4F-AB12\n") == "3E4F-AB12"
    assert identity.ufs_serial("\x1b[2J evil") is None
    banner = (f"edge-llm release r1\nedge-llm id serial 178867965\nedge-llm id hostkey {kind} {b64}\n"
              f"edge-llm id hostkey ssh-ed25519 $(reboot)\nedge-llm id ufs-serial <script>\n")
    got = identity.parse_banner(banner)
    assert got["serial"] == "0AA94EFD" and "ufs_serial" not in got
    assert [k["key"] for k in got["host_keys"]] == [b64]


def test_hostname_rule():
    assert inventory.hostname_for(None, "iq-8275-evk", "0AA94EFD") == "iq-8275-0aa94efd"
    assert inventory.hostname_for("edge-{serial}", "iq-9075-evk", "0AA94EFD") == "edge-0aa94efd"
    for bad in ("{board}", "{serial}-{slot}", "{serial}_x", "{serial}" + "x" * 70):
        with pytest.raises(UserError):
            inventory.check_hostname_rule(bad)


def test_mismatch_reason_names_both_fingerprints():
    offered = "SHA256:" + "B" * 43
    msg = ("Failed to connect to the host via ssh: @@@ WARNING: REMOTE HOST IDENTIFICATION HAS CHANGED! @@@ "
           f"The fingerprint for the ECDSA key sent by the remote host is\n{offered}.\nHost key verification failed.")
    reason = mismatch_reason(msg, [FP, "not a fingerprint"])
    assert reason.startswith(f"host key mismatch: the board presents {offered} (ECDSA), the factory recorded {FP};")
    assert mismatch_reason("ssh: connect to host 10.0.0.7 port 22: Connection refused", [FP]) is None


@pytest.fixture
def networked(station, monkeypatch):
    """Booted virtual boards with their sshd up (a fleet can reach them)."""
    monkeypatch.setenv("PROVISIONER_SIM_BOOT_SCALE", "0")
    monkeypatch.setenv("PROVISIONER_SIM_TIME_SCALE", "0")
    monkeypatch.setenv("PROVISIONER_CONSOLE_PASSWORD", "oelinux123")    # QLI's image before the flash
    yield lambda n: control.up(n, "iq-8275-evk", root=station.root).boards
    control.down(station.root)


def _board_key(vb) -> str:
    path = vb.rootfs_dir / host.SIM_HOST_KEY
    return subprocess.run(["ssh-keygen", "-lf", f"{path}.pub"], check=True, capture_output=True,
                          text=True).stdout.split()[1]


def _fleet_verify(inv, capsys):
    rc = main(["fleet", "verify", "-i", str(inv), "--json"])
    out = json.loads(capsys.readouterr().out)
    return rc, {r["board"]: r for r in out["boards"]}


@pytest.mark.root
@pytest.mark.slow
@pytest.mark.skipif(can_run() is not None, reason=str(can_run()))
def test_keys_from_the_line_pin_the_fleet_and_a_changed_key_fails_verify(networked, station, release_8275,
                                                                          tmp_path, capsys):
    """Production image (root refused on the console): the banner gives serial and host key; the
    key is new after the flash (made at first boot, not shipped); the exported known_hosts lets the
    fleet in with strict checking; a board whose key changed fails verify naming both keys."""
    boards = networked(2)
    before = {b.serial: _board_key(b) for b in boards}
    db = tmp_path / "station.db"
    argv = ["station", "flash", str(release_8275), "--qdl", station.config.qdl, "--sysfs-root",
            str(station.config.sysfs_root), "--db", str(db), "--boot-check", "--boot-timeout", "60", "--json"]
    for b in boards:
        argv += ["--serial", b.serial, "--console", f"{b.serial}={b.console_link}"]
    assert main(argv) == 0, capsys.readouterr().err
    run = json.loads(capsys.readouterr().out)
    for r, b in zip(run["boards"], boards, strict=True):
        ident = r["identity"]
        assert ident["source"] == "console banner" and ident["serial"] == b.serial
        assert ident["ufs_serial"] == f"SIMUFS{b.serial}"
        assert [k["fingerprint"] for k in ident["host_keys"]] == [_board_key(b)] != [before[b.serial]]
        assert ident["fleet_hostname"] == f"iq-8275-{b.serial.lower()}"
    with Records(db, writer=False) as rec:
        assert all(h["identity"]["host_keys"] for h in rec.history())

    inv = tmp_path / "fleet" / "station.yml"
    addrs = [f"--address={b.serial}=127.0.0.1:{b.reload().data['ssh']['port']}" for b in boards]
    assert main(["station", "export-inventory", "--db", str(db), "--out", str(inv), *addrs]) == 0
    assert "known_hosts" in capsys.readouterr().out
    known = (inv.parent / "station.known_hosts").read_text().splitlines()
    assert sorted(line.split()[0] for line in known) == sorted(f"iq-8275-{b.serial.lower()}" for b in boards)
    data = yaml.safe_load(inv.read_text())
    hosts = data["all"]["children"]["iq_8275_evk"]["hosts"]
    for hv in hosts.values():
        assert "StrictHostKeyChecking=yes" in hv["ansible_ssh_common_args"]
        assert f"UserKnownHostsFile={inv.parent / 'station.known_hosts'}" in hv["ansible_ssh_common_args"]
    # what the operator adds for this controller: its key and (virtual boards only) their python
    data["all"]["vars"] = {"ansible_ssh_private_key_file": str(host.controller_key(station.root)),
                           "ansible_python_interpreter": "/run/edge-llm-sim/python3"}
    inv.write_text(yaml.safe_dump(data))
    rc, rows = _fleet_verify(inv, capsys)
    # ssh let the fleet in on every board (strict checking against the recorded keys) and verify ran its
    # checks there; whether the synthetic model passes them is the fleet tests' business
    for r in rows.values():
        assert r["verdict"] in ("pass", "fail") and r["checks"] and "host key" not in r["reason"], r

    # board 0 now shows another key (replaced by an impostor, or re-imaged off the line)
    swapped = boards[0]
    recorded = _board_key(swapped)
    host.stop_host(swapped)
    (swapped.rootfs_dir / host.SIM_HOST_KEY).unlink()
    host.start_host(swapped, time_scale=0)
    now = _board_key(swapped)
    rc, rows = _fleet_verify(inv, capsys)
    row = rows[f"iq-8275-{swapped.serial.lower()}"]
    assert rc != 0 and row["verdict"] == "fail"
    assert f"the board presents {now} (ECDSA), the factory recorded {recorded}" in row["reason"]
    assert rows[f"iq-8275-{boards[1].serial.lower()}"]["checks"]      # the other board is still reached


def test_inventory_beside_a_path_with_a_space_is_refused(tmp_path, capsys):
    db = tmp_path / "station.db"
    Records(db).close()
    out = tmp_path / "my fleet" / "station.yml"
    assert main(["station", "export-inventory", "--db", str(db), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "which ssh reads as two files" in err and "Traceback" not in err


def test_debug_image_identity_is_read_as_root(station, release_8275_debug, monkeypatch):
    """Debug image: root logs in on the console and reads soc0, the UFS descriptor and the host key
    files itself (no banner needed); the key is the one the board made at its first boot."""
    monkeypatch.setenv("PROVISIONER_SIM_BOOT_SCALE", "0")
    monkeypatch.setenv("PROVISIONER_CONSOLE_PASSWORD", "oelinux123")
    (vb,) = control.up(1, "iq-8275-evk", root=station.root, faults=("unreachable",)).boards
    try:
        from provisioner.station.flash import FlashOptions, flash_release

        station.config.consoles = {vb.serial: str(vb.console_link)}
        with Records(station.config.database) as rec:
            run = flash_release(release_8275_debug, station.config, context.current(),
                                FlashOptions(serials=(vb.serial,), boot_check=True, boot_timeout_s=30,
                                             edl_timeout_s=15), records=rec)
        assert run.ok, [r.error for r in run.results]
        ident = run.results[0].identity
        assert "source" not in ident and ident["serial"] == vb.serial and ident["ufs_serial"] == f"SIMUFS{vb.serial}"
        assert [k["fingerprint"] for k in ident["host_keys"]] == [_board_key(vb)]
    finally:
        control.down(station.root)
