"""A performance baseline per board from the line (station.yaml ``baseline``), and `fleet verify`
comparing each board with its own factory figures: virtual boards, real ansible-playbook over SSH
with the host keys recorded on the console."""

from __future__ import annotations

import json

import pytest
import yaml

from provisioner.cli import main
from provisioner.contracts.inventory import FactoryBaseline, ModelVars
from provisioner.errors import StationError
from provisioner.fleet.verify import baseline_check
from provisioner.image.release import write_release
from provisioner.manifest import load_manifest
from provisioner.sim import control, host
from provisioner.sim.bundle import make_bundle
from provisioner.sim.synthetic_models import make_litertlm
from provisioner.station.config import load_config
from provisioner.station.inventory_export import BASELINE_STEP
from provisioner.station.records import Records
from tests.fleet.simfleet import EXAMPLES, can_run

GEMMA = ModelVars(name="gemma-4-e2b", kind="litertlm", runtime="litert_lm", qairt="2.44.0.260225")


def test_drop_against_the_factory_is_reported_in_one_line():
    base = FactoryBaseline("gemma-4-e2b", 32.1, 0.2, max_drop=0.1)
    (bad,) = baseline_check(GEMMA, {"decode_tok_s": 27.4}, base)
    assert not bad.ok and bad.detail == "32.1 tok/s at the factory, 27.4 now: -15% (at most -10% allowed)"
    assert bad.diagnosis == "slower-than-factory" and bad.as_dict()["remedy"]
    (ok,) = baseline_check(GEMMA, {"decode_tok_s": 30.0}, base)
    assert ok.ok and ok.detail == "32.1 tok/s at the factory, 30.0 now: -7%"
    assert baseline_check(GEMMA, {"decode_tok_s": None}, base) == []           # the smoke check says why
    assert baseline_check(GEMMA, {"decode_tok_s": 30.0}, None) == []
    assert FactoryBaseline.from_vars({"model": "m", "decode_tok_s": "fast"}) is None     # hand-edited inventory
    assert FactoryBaseline.from_vars({"model": "m", "decode_tok_s": 9, "max_drop": 7}).max_drop == 0.1


def test_station_yaml_baseline(tmp_path):
    cfg = tmp_path / "station.yaml"
    cfg.write_text("baseline: true\n")
    assert load_config(cfg).baseline
    cfg.write_text("baseline: {ansible_ssh_private_key_file: /etc/edge-llm/station_key}\n")
    got = load_config(cfg)
    assert got.baseline and got.baseline_connection == {"ansible_ssh_private_key_file": "/etc/edge-llm/station_key"}
    for bad in ("baseline: {user: root}\n", "baseline: {ansible_ssh_pass: x}\n", "baseline: 3\n"):
        cfg.write_text(bad)
        with pytest.raises(StationError):
            load_config(cfg)


@pytest.fixture
def release_dir(tmp_path_factory):
    """The IQ-8275 example release, its model file named as release.json names it."""
    tmp = tmp_path_factory.mktemp("relbase")
    manifest = load_manifest(EXAMPLES["iq-8275-evk"])
    mf = make_litertlm(tmp / manifest.models[0].filename)
    bundle = make_bundle(manifest, tmp / "bundle", model_files={manifest.models[0].name: mf})
    return write_release(manifest, bundle, tmp / "out", simulated=True)


@pytest.mark.root
@pytest.mark.slow
@pytest.mark.skipif(can_run() is not None, reason=str(can_run()))
def test_factory_baseline_is_recorded_and_verify_compares_with_it(station, release_dir, tmp_path, monkeypatch,
                                                                   capsys):
    monkeypatch.setenv("PROVISIONER_SIM_BOOT_SCALE", "0")
    monkeypatch.setenv("PROVISIONER_SIM_TIME_SCALE", "0")
    monkeypatch.setenv("PROVISIONER_CONSOLE_PASSWORD", "oelinux123")    # QLI's image before the flash
    (vb,) = control.up(1, "iq-8275-evk", root=station.root).boards
    try:
        connection = {"ansible_ssh_private_key_file": str(host.controller_key(station.root)),
                      "ansible_python_interpreter": "/run/edge-llm-sim/python3"}
        cfg = tmp_path / "station.yaml"
        cfg.write_text(yaml.safe_dump({
            "qdl": station.config.qdl, "sysfs_root": str(station.config.sysfs_root), "database": "station.db",
            "consoles": {vb.serial: str(vb.console_link)}, "baseline": connection,
            "addresses": {vb.serial: f"127.0.0.1:{vb.reload().data['ssh']['port']}"}}))
        assert main(["station", "flash", str(release_dir), "--config", str(cfg), "--serial", vb.serial,
                     "--boot-check", "--boot-timeout", "60"]) == 0, capsys.readouterr().err
        err = capsys.readouterr().err
        assert f"baseline {vb.serial} (iq-8275-{vb.serial.lower()}): gemma-4-e2b" in err, err
        with Records(tmp_path / "station.db", writer=False) as rec:
            (attempt,) = rec.history()
            (ev,) = [e for e in rec.events(attempt["id"]) if e["step"] == BASELINE_STEP]
        factory = ev["detail"]
        assert ev["kind"] == "stop" and factory["model"] == "gemma-4-e2b" and factory["decode_tok_s"] > 20
        assert factory["max_drop"] == 0.1                     # the manifest's default verify.baseline_max_drop

        inv = tmp_path / "fleet" / "station.yml"
        assert main(["station", "export-inventory", "--config", str(cfg), "--out", str(inv)]) == 0
        data = yaml.safe_load(inv.read_text())
        (hv,) = data["all"]["children"]["iq_8275_evk"]["hosts"].values()
        assert hv["edge_llm_factory_baseline"] == factory
        data["all"]["vars"] = connection
        inv.write_text(yaml.safe_dump(data))
        capsys.readouterr()

        def baseline_row() -> dict:
            main(["fleet", "verify", "-i", str(inv), "--json"])
            (row,) = json.loads(capsys.readouterr().out)["boards"]
            return next(c for c in row["checks"] if c["check"] == "baseline:gemma-4-e2b")

        same = baseline_row()
        assert same["ok"] and same["detail"].startswith(f"{factory['decode_tok_s']:.1f} tok/s at the factory, ")
        vb.add_fault("no-burst")                     # the same board, now without HTP burst: about half the speed
        slower = baseline_row()
        assert not slower["ok"] and slower["diagnosis"] == "slower-than-factory"
        assert f"{factory['decode_tok_s']:.1f} tok/s at the factory, " in slower["detail"]
        assert "now: -" in slower["detail"] and "(at most -10% allowed)" in slower["detail"]
    finally:
        control.down(station.root)
