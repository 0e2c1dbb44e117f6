"""`provisioner fleet eval`: each board's models judged on the board with an eval suite (thin layer over
provisioner.fleet.shared.eval_report)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from provisioner.cli.fleet import Progress, _fail_unless_all_pass, _options, command
from provisioner.contracts.release_document import ReleaseDocument
from provisioner.ui import Reporter, print_json, stdout, table


@command.command("eval")
@_options
@click.option("--suite", default=None,
              help="Eval suite YAML (golden questions, tool use), or 'default' (the one edge-llm ships; the default).")
@click.option("--min-score", type=click.FloatRange(0, 1), default=None,
              help="Fail a board whose model scores below this (0..1).")
@click.option("--manifest", type=click.Path(dir_okay=False, path_type=Path),
              help="Take the suite and min score of this release manifest's verify.eval (the deploy gate's).")
def eval_cmd(inventory: Path, limit: str | None, report: Path | None, extra: tuple[str, ...], as_json: bool,
             dry_run: bool, forks: int | None, timeout_s: float | None, log: Path | None, suite: str | None,
             min_score: float | None, manifest: Path | None) -> None:
    """Ask every board's serving models the suite through their OpenAI API (fleet launch first) and score
    the answers: per board and model, per category, with the worst failures. With --report, the JSON and
    CSV of the scores go beside it (<name>.eval.json, <name>.eval.csv)."""
    from provisioner import context
    from provisioner.eval.suite import load_suite
    from provisioner.fleet.runner import FleetOptions
    from provisioner.fleet.shared.eval_report import run_eval
    from provisioner.fleet.shared.report import visible_text

    gate = None
    if manifest is not None:
        from provisioner.manifest import load_manifest

        gate = load_manifest(manifest).verify.eval
    loaded = load_suite(suite or "default") if suite or gate is None else gate.suite   # mistakes before any board
    if min_score is None and gate is not None:
        min_score = gate.min_score
    rep = Reporter(quiet=as_json)
    rep.step(f"fleet eval: {inventory} with suite {loaded.name} ({len(loaded.cases)} cases)"
             + (f", min score {min_score:g}" if min_score is not None else ""))
    if dry_run:
        rep.info("--check: nothing is asked; the suite is valid")
        return
    result = run_eval(inventory, loaded, min_score, context.current(rep),
                      FleetOptions(limit=limit, report_path=report, forks=forks, extra_args=extra, log_path=log,
                                   timeout_s=timeout_s), on_event=Progress(rep, 0))
    if as_json:
        print_json(result.as_dict())
    else:
        stdout.print(table(f"fleet eval: {loaded.name} ({result.fleet.duration_s:.1f} s)",
                           ["board", "model", "score", *result.categories, "verdict"], result.table_rows()))
        lines = result.worst_failures()
        if lines:
            stdout.print("worst failures (the models' own words):", markup=False)
            for line in lines:
                stdout.print(f"  {line}", markup=False, highlight=False)
        for r in result.fleet.rows:
            if r.verdict != "pass":
                stdout.print(visible_text(f"{r.board}: {r.verdict}: {r.reason}", 600), markup=False, highlight=False)
        if report:
            rep.info(f"report: {report} (scores beside it: .eval.json, .eval.csv)")
    _fail_unless_all_pass("eval", result.fleet.rows, report)


def manifest_gate(manifest: Path | None) -> dict[str, Any]:
    """The extra variables of ``--manifest``'s ``verify.eval`` (nothing without one, or without the gate)."""
    if manifest is None:
        return {}
    from provisioner.fleet.eval import eval_vars
    from provisioner.manifest import load_manifest

    gate = load_manifest(manifest).verify.eval
    return eval_vars(gate.suite, gate.min_score) if gate else {}


def release_gate(doc: ReleaseDocument, where: Path) -> dict[str, Any]:
    """The extra variables of a release's ``fleet.eval`` (its manifest's verify.eval), validated here."""
    from provisioner.errors import FleetError
    from provisioner.fleet.eval import eval_vars, from_vars

    raw = doc.eval_gate
    if raw is None:
        return {}
    try:
        suite, min_score = from_vars(raw)
    except ValueError as exc:
        raise FleetError(f"{where}: fleet.eval: {exc}", "rebuild the release from a valid manifest") from None
    return eval_vars(suite, min_score)
