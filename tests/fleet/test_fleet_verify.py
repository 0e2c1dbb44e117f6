"""`provisioner fleet verify` over real ansible-playbook and real SSH against virtual boards of both types.

ONE playbook run over 11 boards: two healthy boards, one board per fault, and a board listed in the
wrong board group. Each failing board must fail for its own reason (the check and its
diagnosis), and the healthy ones must pass every check.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.fleet.simfleet import BoardSpec, build_fleet, can_run

pytestmark = [pytest.mark.root, pytest.mark.slow,
              pytest.mark.skipif(can_run() is not None, reason=str(can_run()))]

TEMPLATED_BUILD_ID = "{{ edge_llm_release_prefix }}-iq8275-2026.11"
SPECS = [
    BoardSpec("ok-8275", "iq-8275-evk"),
    BoardSpec("ok-9075", "iq-9075-evk"),
    BoardSpec("noburst-8275", "iq-8275-evk", ("no-burst",)),
    BoardSpec("memlock-8275", "iq-8275-evk", ("memlock",)),
    BoardSpec("qairt-8275", "iq-8275-evk", ("qairt-mismatch",)),
    BoardSpec("fastrpc-9075", "iq-9075-evk", ("no-fastrpc-group",)),
    BoardSpec("trunc-8275", "iq-8275-evk", ("truncated-model",)),
    BoardSpec("socmodel-9075", "iq-9075-evk", ("wrong-soc-model",)),
    BoardSpec("soc14001-8275", "iq-8275-evk", ("soc-config-14001",)),
    BoardSpec("unreach-9075", "iq-9075-evk", ("unreachable",)),
    BoardSpec("wrongtype-9075", "iq-9075-evk", group="iq_8275_evk"),
    BoardSpec("world-8275", "iq-8275-evk"),          # /dev/fastrpc-cdsp made 0666 after boot (below)
    # the expected release given as a template over another host variable, as an inventory may write it:
    # the action reads edge_llm_* variables by name and must still template them
    BoardSpec("tmpl-8275", "iq-8275-evk", vars={"edge_llm_release_prefix": "gemma4-e2b",
                                                "edge_llm_expected_build_id": TEMPLATED_BUILD_ID}),
    BoardSpec("tmplbad-8275", "iq-8275-evk", vars={"edge_llm_release_prefix": "gemma4-e4b",
                                                   "edge_llm_expected_build_id": TEMPLATED_BUILD_ID}),
    BoardSpec("nogroup-8275", "iq-8275-evk", group="lab"),     # in no board group: no edge_llm_board
    # a newer qcom_scm prints download_mode by name (off/full/mini): off is the production policy 0,
    # full is a debug setting that policy refuses, whichever way the kernel spells it
    BoardSpec("scmoff-8275", "iq-8275-evk", board={"qcom_scm_names": True}),
    BoardSpec("scmfull-8275", "iq-8275-evk", board={"qcom_scm_names": True, "download_mode": 1}),
]

# board -> {check name prefix: diagnosis key} that MUST be among its failures
EXPECTED = {
    "noburst-8275": {"smoke:": "no-burst"},
    "memlock-8275": {"memlock-service:": "memlock", "memlock-root": "memlock", "smoke:": "memlock"},
    "qairt-8275": {"qairt:": "qairt-mismatch", "smoke:": "qairt-mismatch"},
    "fastrpc-9075": {"fastrpc": "fastrpc-group"},
    "trunc-8275": {"model:": "truncated-model", "smoke:": "truncated-model"},
    "socmodel-9075": {"genie-config:": "soc-model", "smoke:": "garbage"},
    "soc14001-8275": {"smoke:": "soc-config-14001"},
    "wrongtype-9075": {"identity": "wrong-board"},
    "world-8275": {"fastrpc": "fastrpc-perms"},
    "scmfull-8275": {"download-mode": "download-mode"},
}


@pytest.fixture(scope="module")
def verified(tmp_path_factory):
    base = tmp_path_factory.mktemp("fleet-verify")
    fleet = build_fleet(base / "sim", SPECS, cache=base / "cache")
    from provisioner.sim import host
    subprocess.run(host.ssh_argv(fleet.boards["world-8275"], "chmod", "0666", "/dev/fastrpc-cdsp"), check=True,
                   timeout=30)
    report = base / "report.json"
    csv_report = base / "report.csv"
    try:
        proc = subprocess.run([sys.executable, "-m", "provisioner", "fleet", "verify", "-i", str(fleet.inventory),
                               "--report", str(report)], capture_output=True, text=True, timeout=300,
                              env={**os.environ, "COLUMNS": "250"})
        data = json.loads(report.read_text())
        # the CSV form from the same data (no second playbook run)
        from provisioner.fleet.shared.report import BoardRow, FleetReport
        FleetReport(data["action"], data["inventory"], data["duration_s"],
                    [BoardRow(**b) for b in data["boards"]], data["returncode"]).write(csv_report)
        yield proc, data, csv_report
    finally:
        fleet.stop()


def _rows(data):
    return {b["board"]: b for b in data["boards"]}


def test_cli_exit_status_table_and_unreachable_list(verified):
    proc, data, _ = verified
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert "did not pass" in proc.stderr
    assert "unreachable: unreach-9075" in proc.stderr
    for name in ("ok-8275", "ok-9075", "memlock-8275"):
        assert name in proc.stdout            # the rich table lists every board
    assert len(data["boards"]) == len(SPECS)


def test_healthy_boards_pass_every_check(verified):
    _, data, _ = verified
    rows = _rows(data)
    for name, model in (("ok-8275", "gemma-4-e2b"), ("ok-9075", "nemotron-nano-8b"), ("scmoff-8275", "gemma-4-e2b")):
        row = rows[name]
        assert row["verdict"] == "pass", row["reason"]
        names = {c["check"] for c in row["checks"]}
        for check in ("identity", "release", "fastrpc", "memlock-root", "download-mode", f"qairt:{model}",
                      f"model:{model}", f"memlock-service:{model}", f"smoke:{model}"):
            assert check in names
        assert all(c["ok"] for c in row["checks"])
        assert row["decode_tok_s"] >= row["expected_decode_tok_s"]
        assert row["release"] and row["qairt"]
    assert "genie-config:nemotron-nano-8b" in {c["check"] for c in rows["ok-9075"]["checks"]}


@pytest.mark.parametrize("board", sorted(EXPECTED))
def test_each_fault_fails_for_its_reason(verified, board):
    _, data, _ = verified
    row = _rows(data)[board]
    assert row["verdict"] == "fail"
    failed = [c for c in row["checks"] if not c["ok"]]
    for prefix, diag in EXPECTED[board].items():
        match = [c for c in failed if c["check"].startswith(prefix)]
        assert match, f"{board}: no failing {prefix} check in {[c['check'] for c in failed]}"
        assert any(c["diagnosis"] == diag for c in match), (board, prefix, match)
        assert all(c.get("remedy") and c.get("cause") for c in match)
    assert row["reason"]


def test_faults_do_not_leak_into_unrelated_checks(verified):
    _, data, _ = verified
    rows = _rows(data)
    ok = {c["check"] for c in rows["noburst-8275"]["checks"] if c["ok"]}
    assert {"identity", "fastrpc", "qairt:gemma-4-e2b", "model:gemma-4-e2b"} <= ok
    assert rows["noburst-8275"]["decode_tok_s"] < rows["noburst-8275"]["expected_decode_tok_s"]


def test_world_accessible_fastrpc_device_fails_in_one_line(verified):
    _, data, _ = verified
    row = _rows(data)["world-8275"]
    assert row["verdict"] == "fail"
    (check,) = [c for c in row["checks"] if c["check"] == "fastrpc"]
    assert check["detail"] == ("/dev/fastrpc-cdsp is fastrpc:fastrpc 0666: world-accessible, any local user can "
                               "drive the cDSP (want fastrpc:fastrpc 0660)")
    assert [c["check"] for c in row["checks"] if not c["ok"]] == ["fastrpc"]   # nothing else is wrong with it


def test_unreachable_board_listed_and_others_proceed(verified):
    _, data, _ = verified
    rows = _rows(data)
    assert rows["unreach-9075"]["verdict"] == "unreachable"
    assert rows["unreach-9075"]["checks"] == []
    assert rows["ok-9075"]["verdict"] == "pass"


def test_csv_report_has_a_row_per_board(verified):
    _, _, csv_report = verified
    lines = csv_report.read_text().splitlines()
    assert lines[0].startswith("board,type,address,release")
    assert len(lines) == len(SPECS) + 1
    assert any(ln.startswith("unreach-9075,") and ",unreachable," in ln for ln in lines)


def test_templated_inventory_variables_are_templated_on_the_controller(verified):
    """The verify role passes no "{{ }}" arguments (one Jinja compile per board and argument); a host variable
    that is itself a template is still rendered before the board is judged against it."""
    _, data, _ = verified
    rows = _rows(data)
    assert rows["tmpl-8275"]["verdict"] == "pass", rows["tmpl-8275"]["reason"]
    bad = rows["tmplbad-8275"]
    assert bad["verdict"] == "fail"
    (release,) = [c for c in bad["checks"] if c["check"] == "release"]
    assert not release["ok"] and "gemma4-e4b-iq8275-2026.11" in release["detail"], release
    assert "{{" not in json.dumps(bad)


def test_board_outside_every_board_group_fails_in_one_line(verified):
    """No per-board argument-spec task checks the role's variables any more: the action says what is missing."""
    _, data, _ = verified
    row = _rows(data)["nogroup-8275"]
    assert row["verdict"] == "fail"
    assert "edge_llm_board is not set for this host: put it in its board group" in row["reason"], row["reason"]
    assert "\n" not in row["reason"] and "Traceback" not in row["reason"]


def test_download_mode_read_back_by_name_is_judged_as_its_number(verified):
    _, data, _ = verified
    rows = _rows(data)
    (off,) = [c for c in rows["scmoff-8275"]["checks"] if c["check"] == "download-mode"]
    assert off["ok"] and "download_mode=off" in off["detail"]
    (full,) = [c for c in rows["scmfull-8275"]["checks"] if c["check"] == "download-mode"]
    assert not full["ok"] and "download_mode=full = 1" in full["detail"] and "policy 0" in full["detail"]
    assert all(c["ok"] for c in rows["scmfull-8275"]["checks"] if c["check"] != "download-mode")
