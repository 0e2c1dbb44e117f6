"""Fleet report rows for update-os: the verdict says why (rolled back / did not come back), bytes as ostree counted."""

from __future__ import annotations

from provisioner.fleet.runner import EventCollector, FleetRun
from provisioner.fleet.shared import inventory
from provisioner.fleet.shared.report import build_report, ostree_pulled_bytes

C2 = "ab" * 32
DELTA_PULL = "1 delta parts, 3 loose fetched; 3 KiB transferred in 0 seconds; 0 bytes content written"


def _row(*events: dict):
    c = EventCollector()
    for e in events:
        c.feed(e)
    run = FleetRun("update-os", "inv.yml", [], 2, 1.0, c.hosts, c.stats, None, c.other)
    return build_report(run, [inventory.Host("a", ["iq_8275_evk"], {"edge_llm_board": "iq-8275-evk"})]).row("a")


def _payload(outcome: str, reason: str = "", pull: str = DELTA_PULL) -> dict:
    return {"event": "host", "host": "a", "task": "Record", "action": "ansible.builtin.debug", "status": "ok",
            "changed": False, "edge_llm": {"kind": "update-os", "outcome": outcome, "from": "cd" * 32, "to": C2,
                                           "pull": pull, "reason": reason}}


def test_rolled_back_row_says_why_and_what_was_pulled():
    why = f"update to {C2[:12]} rolled back: smoke:gemma-4-e2b: decode 16.2 tok/s < 25.6"
    row = _row(_payload("rolled back", why),
               {"event": "host", "host": "a", "action": "edge_llm.fleet.ostree", "status": "failed",
                "task": "edge_llm_update_os : Remove the failed deployment now that the board runs the previous one, "
                        "and report why", "changed": False, "msg": why})
    assert (row.verdict, row.reason) == ("fail", why)          # no task-name prefix: the message is the why
    assert row.bytes_downloaded == 3 * 1024
    assert row.details["update_os"]["outcome"] == "rolled back"


def test_up_to_date_row_pulled_nothing():
    row = _row(_payload("up-to-date", pull=""))
    assert (row.verdict, row.bytes_downloaded, row.details["update_os"]["outcome"]) == ("pass", 0, "up-to-date")


def test_ostree_pull_summary_units():
    assert ostree_pulled_bytes("6 metadata, 1 content objects fetched; 196 KiB transferred in 0 seconds; "
                               "200.0\u00a0kB content written") == 196 * 1024
    assert ostree_pulled_bytes("1 delta parts, 0 loose fetched; 2.5\u00a0MB transferred in 3 seconds") == 2_500_000
    assert ostree_pulled_bytes("error: Connection reset by peer") == 0


def test_the_api_step_goes_to_the_port_the_board_runs_its_instance_on():
    """The gate streams to the service a client reaches: the port and bind in the instance config `fleet
    launch` wrote on the board, even when this run's inventory would compute another port."""
    from provisioner.contracts import inventory
    from provisioner.fleet import update_os

    expect = inventory.HostVars.from_vars({"edge_llm_board": "iq-8275-evk", "edge_llm_models": [
        {"name": "gemma-4-e2b", "kind": "litertlm", "qairt": "2.44.0.260225"}]})
    spec = update_os.gate_spec(expect)
    key = next(k for k, path in spec["read"].items() if str(path).endswith("/serve/gemma-4-e2b.json"))
    enabled = next(k for k, (unit, prop) in spec["units_show"].items()
                   if unit == "edge-llm-serve@gemma-4-e2b.service" and prop == update_os.ENABLED_PROPERTY)
    probe = {"units_show": {enabled: "enabled"},
             "read": {key: {"content": '{"port": 25850, "bind": "127.0.0.1", "model": "gemma-4-e2b"}'}}}
    serve = update_os.enabled_instances(expect, probe, bind="127.0.0.1", port_base=8080)
    assert [(i["model"], i["port"]) for i in serve["instances"]] == [("gemma-4-e2b", 25850)]
    unreadable = {"units_show": {enabled: "enabled"}, "read": {key: {"content": None, "error": "No such file"}}}
    serve = update_os.enabled_instances(expect, unreadable, bind="127.0.0.1", port_base=8080)
    assert [i["port"] for i in serve["instances"]] == [8080]


def test_a_launched_instance_the_update_took_away_fails_the_api_step():
    """fleet launch wrote the instance's config, but after the update its unit is not enabled (another image,
    another board type): the gate fails naming the unit, and never says "fleet launch not run"."""
    from provisioner.contracts import inventory
    from provisioner.fleet import update_os

    expect = inventory.HostVars.from_vars({"edge_llm_board": "iq-8275-evk", "edge_llm_models": [
        {"name": "gemma-4-e2b", "kind": "litertlm", "qairt": "2.44.0.260225"}]})
    spec = update_os.gate_spec(expect)
    key = next(k for k, path in spec["read"].items() if str(path).endswith("/serve/gemma-4-e2b.json"))
    enabled = next(k for k, (_unit, prop) in spec["units_show"].items() if prop == update_os.ENABLED_PROPERTY)
    probe = {"units_show": {enabled: ""}, "read": {key: {"content": '{"port": 8080, "bind": "127.0.0.1"}'}}}
    serve = update_os.enabled_instances(expect, probe, bind="127.0.0.1", port_base=8080)
    assert serve["instances"] == [] and [x["unit"] for x in serve["lost"]] == ["edge-llm-serve@gemma-4-e2b.service"]
    step = update_os.lost_step(serve["lost"])
    assert "not run" not in step and "edge-llm-serve@gemma-4-e2b.service" in step
    never = update_os.enabled_instances(expect, {"units_show": {enabled: ""}, "read": {}}, bind="127.0.0.1",
                                        port_base=8080)
    assert never["lost"] == [] and never["instances"] == []           # never launched: the API step is skipped
