"""``fleet eval``: run a suite on every board's models and report scores per board, model and category.

The run is the ``eval`` playbook through :func:`provisioner.fleet.runner.run_fleet` (Ansible, forks for
parallelism); each board's task result carries the eval payload (kind ``eval``) the action judged. The
report adds, beside the usual fleet report rows, one row per board and model: the score, each
category's share, and the worst failures with the model's own words (board text: shown as plain text with
control characters made visible, :func:`provisioner.fleet.shared.report.visible_text`; CSV cells guarded by
:func:`provisioner.fleet.shared.report.csv_cell`). JSON and CSV go beside the fleet report (``<stem>.eval.json``,
``<stem>.eval.csv``).
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from provisioner.context import RunContext
from provisioner.errors import FleetError
from provisioner.eval.suite import Suite
from provisioner.fleet import eval as fleet_eval
from provisioner.fleet.runner import FleetOptions, HostOutcome
from provisioner.fleet.shared.inventory import atomic_write
from provisioner.fleet.shared.report import FleetReport, csv_cell, visible_text

#: failures the terminal shows (the JSON keeps all of them)
SHOWN_FAILURES = 8


@dataclass
class ModelScore:
    board: str
    type: str | None
    model: str
    score: float
    passed: int
    total: int
    categories: dict[str, dict[str, Any]]
    failures: list[dict[str, Any]]
    verdict: str
    reason: str = ""


@dataclass
class EvalReport:
    suite: str
    source: str
    min_score: float | None
    categories: list[str]
    fleet: FleetReport
    scores: list[ModelScore] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        boards = []
        for r in self.fleet.rows:
            mine = [s for s in self.scores if s.board == r.board]
            boards.append({"board": r.board, "type": r.type, "verdict": r.verdict, "reason": r.reason,
                           "models": {s.model: {"score": s.score, "passed": s.passed, "total": s.total,
                                                "categories": s.categories, "failures": s.failures} for s in mine}})
        return {"suite": self.suite, "source": self.source, "min_score": self.min_score,
                "categories": self.categories, "duration_s": self.fleet.duration_s, "ok": self.fleet.ok,
                "boards": boards}

    def to_csv(self) -> str:
        """One line per board and model: score, each category's score, verdict and the worst failure."""
        buf = io.StringIO()
        w = csv.writer(buf)
        w.writerow(["board", "type", "model", "score", "passed", "total", *self.categories, "verdict", "worst"])
        for s in self.scores:
            cats = [(s.categories.get(c) or {}).get("score", "") for c in self.categories]
            worst = _failure_line(s.failures[0]) if s.failures else ""
            w.writerow([csv_cell(c) for c in (s.board, s.type or "", s.model, s.score, s.passed, s.total, *cats,
                                              s.verdict, worst)])
        for r in self.fleet.rows:             # boards with no score (unreachable, service down) are rows too
            if not any(s.board == r.board for s in self.scores):
                w.writerow([csv_cell(c) for c in (r.board, r.type or "", "", "", "", "", *([""] * len(self.categories)),
                                                  r.verdict, r.reason)])
        return buf.getvalue()

    def table_rows(self) -> list[list[str]]:
        """Terminal rows: board, model, score, categories (passed/total), verdict; board text made visible."""
        rows = []
        for s in self.scores:
            cats = [f"{c['passed']}/{c['total']}" if (c := s.categories.get(k)) else "-" for k in self.categories]
            rows.append([visible_text(x, 120) for x in (s.board, s.model, f"{s.score:.2f}", *cats, s.verdict)])
        for r in self.fleet.rows:
            if not any(s.board == r.board for s in self.scores):
                rows.append([visible_text(x, 120) for x in (r.board, "-", "-", *(["-"] * len(self.categories)),
                                                              r.verdict)])
        return rows

    def worst_failures(self, limit: int = SHOWN_FAILURES) -> list[str]:
        """The failed cases, most widespread first: how many board/models failed it, then one line per board
        with the model's actual output (plain text, control characters visible)."""
        by_case: dict[str, list[tuple[ModelScore, dict[str, Any]]]] = {}
        for s in self.scores:
            for f in s.failures:
                by_case.setdefault(str(f["case"]), []).append((s, f))
        lines = []
        for case, hits in sorted(by_case.items(), key=lambda kv: -len(kv[1]))[:limit]:
            lines.append(f"{case} ({hits[0][1]['category']}): failed on {len(hits)} of {len(self.scores)} "
                         f"board models; expected {visible_text(hits[0][1]['expected'], 160)}")
            for s, f in hits[:3]:
                lines.append(f"    {s.board} {s.model}: {visible_text(f['got'], 200)}"
                             + (f"  [{visible_text(f['why'], 100)}]" if f.get("why") else ""))
        return lines

    def write_beside(self, report_path: Path) -> list[Path]:
        """``<stem>.eval.json`` and ``<stem>.eval.csv`` beside the fleet report at ``report_path``."""
        report_path = Path(report_path)
        stem = report_path.with_suffix("") if report_path.suffix else report_path
        out = [stem.with_name(stem.name + ".eval.json"), stem.with_name(stem.name + ".eval.csv")]
        try:
            atomic_write(out[0], json.dumps(self.as_dict(), indent=2, sort_keys=True, default=str) + "\n")
            atomic_write(out[1], self.to_csv())
        except OSError as exc:
            raise FleetError(f"cannot write the eval report beside {report_path}: {exc.strerror or exc}",
                             "free space or name another file with --report") from None
        return out


def _failure_line(f: dict[str, Any]) -> str:
    return f"{f['case']}: expected {f['expected']}, got {f['got']}"


def build_eval_report(suite: Suite, min_score: float | None, fleet: FleetReport,
                      outcomes: dict[str, HostOutcome]) -> EvalReport:
    """Scores per board and model from each board's eval payload (rows without one have no score)."""
    rep = EvalReport(suite=suite.name, source=suite.source, min_score=min_score, categories=suite.categories,
                     fleet=fleet)
    for r in fleet.rows:
        o = outcomes.get(r.board)
        payload = o.payload("eval") if o else None
        for model, res in ((payload or {}).get("models") or {}).items():
            below = min_score is not None and res["score"] < min_score
            rep.scores.append(ModelScore(board=r.board, type=r.type, model=str(model), score=float(res["score"]),
                                         passed=int(res["passed"]), total=int(res["total"]),
                                         categories=dict(res.get("categories") or {}),
                                         failures=list(res.get("failures") or []),
                                         verdict="fail" if below or r.verdict != "pass" else "pass",
                                         reason=fleet_eval.below(str(model), res, min_score) if below else ""))
    return rep


def run_eval(inventory: Path | str, suite: Suite, min_score: float | None, ctx: RunContext,
             options: FleetOptions | None = None, *,
             on_event: Callable[[dict[str, Any]], None] | None = None) -> EvalReport:
    """Run the eval playbook over ``inventory`` and build the :class:`EvalReport` (written beside
    ``options.report_path`` when given, after the fleet report itself)."""
    from provisioner.fleet.runner import run_fleet

    opts = options or FleetOptions()
    report_path = opts.report_path

    outcomes: dict[str, HostOutcome] = {}

    def collect(ev: dict[str, Any]) -> None:
        if ev.get("event") == "host":
            from provisioner.fleet.runner import payloads_of

            o = outcomes.setdefault(str(ev.get("host")), HostOutcome(str(ev.get("host"))))
            o.payloads.extend(payloads_of(ev))
        if on_event:
            on_event(ev)

    fleet = run_fleet("eval", inventory, ctx,
                      dataclasses.replace(opts, extra_vars={**(opts.extra_vars or {}),
                                                            **fleet_eval.eval_vars(suite, min_score)}),
                      on_event=collect)
    rep = build_eval_report(suite, min_score, fleet, outcomes)
    if report_path:
        rep.write_beside(report_path)
    return rep
