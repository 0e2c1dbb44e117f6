"""Inventory generation, report building from the callback's event lines, the CLI's bad-input paths."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from provisioner import catalog
from provisioner.contracts import board as on_board
from provisioner.fleet.runner import EventCollector, FleetRun
from provisioner.fleet.shared import inventory
from provisioner.fleet.shared.report import build_report

REPO = Path(__file__).resolve().parents[2]


def test_committed_group_vars_equal_the_generated_ones():
    expected = inventory.expected_group_vars()
    assert {p.name for p in expected} == {f"{b.replace('-', '_')}.yml" for b in catalog.boards()}
    for path, text in expected.items():
        assert path.read_text(encoding="utf-8") == text, f"{path} is stale: run provisioner fleet inventory " \
                                                          "--from-catalog"
    # and the inventory/ folder sees the same files
    assert (REPO / "inventory" / "group_vars" / "iq_8275_evk.yml").read_text() == \
        (REPO / "playbooks" / "group_vars" / "iq_8275_evk.yml").read_text()


def test_group_vars_carry_catalog_facts_and_thresholds():
    data = yaml.safe_load((REPO / "playbooks" / "group_vars" / "iq_9075_evk.yml").read_text())
    b = catalog.board("iq-9075-evk")
    assert data["edge_llm_board_facts"] == on_board.board_facts(b)
    (model,) = data["edge_llm_models"]
    ref = b.expected("nemotron-nano-8b", "qli")
    assert model["qairt"] == catalog.models()["nemotron-nano-8b"].qairt
    assert model["min_decode_tok_s"] == round(ref.decode_tok_s * 0.8, 2)


def test_any_inventory_gets_board_facts_by_group_name_and_host_vars_override(tmp_path):
    inv = tmp_path / "team.ini"
    inv.write_text("[iq_8275_evk]\nboard-a ansible_host=192.0.2.5\nboard-b ansible_host=192.0.2.6 "
                   "edge_llm_download_mode=1\n")
    hosts = {h.name: h for h in inventory.list_hosts(inv)}
    assert hosts["board-a"].board == "iq-8275-evk"
    assert hosts["board-a"].vars["edge_llm_board_facts"]["soc_id"] == 675
    assert hosts["board-b"].vars["edge_llm_download_mode"] == 1


def test_inventory_from_station_records_and_export_passthrough(tmp_path):
    recs = [{"serial": "0AA94EFD", "board": "IQ-8275", "ssh": {"host": "10.0.0.7", "port": 22}, "release": "r1"},
            {"serial": "0AA94EFE", "board": "iq-9075-evk", "address": "10.0.0.8"},
            {"serial": "0AA94EFF", "board": "iq-9075-evk"}]                     # not on the network yet
    inv = inventory.inventory_from_records(recs)
    hosts = inv["all"]["children"]["iq_8275_evk"]["hosts"]
    assert hosts["0AA94EFD"]["ansible_host"] == "10.0.0.7" and hosts["0AA94EFD"]["edge_llm_expected_build_id"] == "r1"
    assert list(inv["all"]["children"]["iq_9075_evk"]["hosts"]) == ["0AA94EFE"]
    export = tmp_path / "station.yml"
    export.write_text(yaml.safe_dump({"all": {"children": {"iq_8275_evk": {"hosts": {"b1": {"ansible_host": "h"}}}}}}))
    assert inventory.load_records(export)["all"]["children"]["iq_8275_evk"]["hosts"]["b1"]["ansible_host"] == "h"
    bad = tmp_path / "bad.yml"
    bad.write_text(yaml.safe_dump({"all": {"children": {"web": {"hosts": {"x": {}}}}}}))
    with pytest.raises(Exception, match="not a board type"):
        inventory.load_records(bad)


def _events(*events):
    c = EventCollector()
    for e in events:
        c.line(json.dumps(e))
    c.line("[WARNING]: something ansible printed")
    return c


def test_report_rows_from_callback_events():
    verdict = {"kind": "verify", "ok": False, "board": "iq-8275-evk", "release": "r1", "qairt": ["2.44.0.260225"],
               "models": {"gemma-4-e2b": {"decode_tok_s": 15.9, "min_decode_tok_s": 25.6, "ttft_s": 0.1}},
               "checks": [{"check": "smoke:gemma-4-e2b", "ok": False, "diagnosis": "no-burst"}],
               "reason": "smoke:gemma-4-e2b: decode 15.9 tok/s < 25.6"}
    c = _events(
        {"event": "task", "name": "Verify", "action": "edge_llm.fleet.verify"},
        {"event": "host", "host": "a", "task": "Verify", "action": "edge_llm.fleet.verify", "status": "failed",
         "changed": False, "msg": "smoke failed", "edge_llm": verdict},
        {"event": "host", "host": "b", "task": "Verify", "action": "edge_llm.fleet.verify", "status": "unreachable",
         "changed": False, "msg": "ssh: connect to host 192.0.2.9 port 22: Connection refused"},
        {"event": "stats", "hosts": {"a": {"failures": 1, "unreachable": 0}, "b": {"unreachable": 1}}},
    )
    run = FleetRun("verify", "inv.yml", [], 2, 1.0, c.hosts, c.stats, None, c.other)
    hosts = [inventory.Host("a", ["iq_8275_evk"], {"edge_llm_board": "iq-8275-evk"}),
             inventory.Host("b", ["iq_9075_evk"], {"edge_llm_board": "iq-9075-evk"}),
             inventory.Host("c", ["iq_9075_evk"], {"edge_llm_board": "iq-9075-evk"})]
    rep = build_report(run, hosts)
    a, b, cc = (rep.row(n) for n in "abc")
    assert (a.verdict, a.decode_tok_s, a.expected_decode_tok_s) == ("fail", 15.9, 25.6)
    assert a.reason.startswith("smoke:gemma-4-e2b: decode 15.9")
    assert b.verdict == "unreachable" and "Connection refused" in b.reason
    assert cc.verdict == "not-run"
    assert not rep.ok and rep.counts == {"fail": 1, "unreachable": 1, "not-run": 1}
    assert c.other == ["[WARNING]: something ansible printed"]


def _cli(*args, **kw):
    return subprocess.run([sys.executable, "-m", "provisioner", "fleet", *args], capture_output=True, text=True,
                          timeout=120, **kw)


def test_cli_bad_input_is_one_line_and_exit_2(tmp_path):
    proc = _cli("verify", "-i", str(tmp_path / "missing.yml"))
    assert proc.returncode == 2 and "no such file" in proc.stderr and "Traceback" not in proc.stderr
    inv = tmp_path / "inv.yml"
    inv.write_text("all:\n  hosts: {}\n")
    proc = _cli("verify", "-i", str(inv))
    assert proc.returncode == 2 and "no hosts" in proc.stderr
    inv.write_text("[iq_8275_evk]\nx ansible_host=192.0.2.1\n")
    proc = _cli("verify", "-i", str(inv), "-e", "novalue")
    assert proc.returncode == 2 and "key=value" in proc.stderr
    proc = _cli("inventory")
    assert proc.returncode == 2 and "--from-catalog" in proc.stderr


def test_cli_inventory_from_catalog_check_and_records(tmp_path):
    assert _cli("inventory", "--from-catalog", "--check").returncode == 0
    out = tmp_path / "gv"
    assert _cli("inventory", "--from-catalog", "--out", str(out)).returncode == 0
    assert sorted(p.name for p in out.iterdir()) == ["iq_8275_evk.yml", "iq_9075_evk.yml"]
    (out / "iq_8275_evk.yml").write_text("---\n")
    proc = _cli("inventory", "--from-catalog", "--check", "--out", str(out))
    assert proc.returncode == 1 and "out of date" in proc.stderr
    recs = tmp_path / "records.json"
    recs.write_text(json.dumps([{"serial": "0AA94EFD", "board": "iq-8275-evk", "address": "10.1.1.1"}]))
    inv = tmp_path / "fleet.yml"
    assert _cli("inventory", "--from-records", str(recs), "--out", str(inv)).returncode == 0
    assert yaml.safe_load(inv.read_text())["all"]["children"]["iq_8275_evk"]["hosts"]["0AA94EFD"]


def test_hosts_are_listed_when_the_user_runs_ansible_verbose():
    """ANSIBLE_VERBOSITY=3 in the user's environment (a common way to debug a fleet run) makes
    ansible-inventory print its version banner on stdout; the host list must still be read."""
    example = Path(__file__).resolve().parents[2] / "inventory" / "example.yml"
    quiet = inventory.list_hosts(example)
    loud = inventory.list_hosts(example, env={**os.environ, "ANSIBLE_VERBOSITY": "3"})
    assert [h.name for h in loud] == [h.name for h in quiet] and quiet
