"""The eval report: board text (a model's answer) reaches the terminal and the CSV as inert text."""

from __future__ import annotations

import csv
import io

from rich.console import Console

from provisioner.cli.fleet import Progress
from provisioner.eval.score import score_model
from provisioner.eval.suite import load_suite
from provisioner.fleet.runner import HostOutcome
from provisioner.fleet.shared.eval_report import build_eval_report
from provisioner.fleet.shared.report import BoardRow, FleetReport
from provisioner.ui import Reporter

SUITE = load_suite("default")
HOSTILE = "\x1b]8;;http://evil\x1b\\click\x1b]8;;\x1b\\ [red]=cmd|' /C calc'!A0"


def _report():
    answers = {c.id: {"status": 200, "content": HOSTILE, "tool_calls": []} for c in SUITE.cases}
    outcome = HostOutcome("b1", status="failed", payloads=[{"kind": "eval", "models": {
        "m1": score_model(SUITE, answers)}}])
    fleet = FleetReport(action="eval", inventory="inv", duration_s=1.0, returncode=2,
                        rows=[BoardRow(board="b1", type="iq-9075-evk", address=None, verdict="fail", reason="x")])
    return build_eval_report(SUITE, 0.5, fleet, {"b1": outcome})


def test_worst_failures_and_table_show_control_characters_as_text():
    rep = _report()
    lines = rep.worst_failures()
    assert lines and all("\x1b" not in ln for ln in lines)
    assert any("\\x1b]8;;http://evil" in ln for ln in lines)
    assert all("\x1b" not in cell for row in rep.table_rows() for cell in row)
    assert rep.scores[0].verdict == "fail" and rep.scores[0].score < 0.5


def test_csv_cells_do_not_start_a_formula():
    rows = list(csv.reader(io.StringIO(_report().to_csv())))
    worst = rows[1][-1]
    assert rows[0][-1] == "worst" and not worst.startswith(("=", "+", "-", "@"))


def test_progress_line_of_a_failed_board_is_inert():
    seen = {}
    for terminal in (True, False):
        buf = io.StringIO()
        progress = Progress(Reporter(Console(file=buf, force_terminal=terminal, width=300)), 1)
        progress({"event": "host", "host": "b1", "status": "failed", "msg": f"eval: m1 scored 0.00; worst: {HOSTILE}"})
        seen[terminal] = buf.getvalue()
    assert "\x1b]8" not in seen[True] and "\x1b]8" not in seen[False]       # no hyperlink escape is emitted
    assert "\\x1b]8;;http://evil" in seen[False] and "[red]=cmd" in seen[False]   # shown as typed
