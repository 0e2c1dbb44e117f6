"""`provisioner rehearse`: the whole path on virtual boards, manifest in, inference out."""

from __future__ import annotations

from pathlib import Path

import click

from provisioner.errors import CheckFailed
from provisioner.steps import StepEvent
from provisioner.ui import Reporter, print_json, stderr, stdout, table


@click.command("rehearse")
@click.argument("manifests", nargs=-1, type=click.Path(path_type=Path))
@click.option("--boards", "boards", default=4, show_default=True, help="Number of virtual boards (split per manifest).")
@click.option("--fault", "faults", multiple=True, metavar="FAULT",
              help="Inject a virtual-board fault into one board (repeatable), e.g. no-burst, memlock.")
@click.option("--keep", is_flag=True, help="Leave the boards running afterwards (`provisioner sim down` stops them).")
@click.option("--work-dir", type=click.Path(path_type=Path), default=Path("rehearsal"), show_default=True,
              help="Where releases, records, inventory and reports go.")
@click.option("--ota", is_flag=True,
              help="Then update the boards' whole image over the air: a runtime-only release as an OSTree "
                   "commit, `ota publish` (static delta), `fleet update-os`; faults ota-no-boot/ota-bad-npu roll back.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable report on stdout.")
def command(manifests: tuple[Path, ...], boards: int, faults: tuple[str, ...], keep: bool, work_dir: Path,
            ota: bool, as_json: bool) -> None:
    """Rehearse a release end to end on virtual EVKs (built-in examples when no MANIFEST is given).

    check -> render (+kas schema) -> build command -> release -> boards up -> EDL via console ->
    parallel flash -> boot check -> fleet verify -> fleet launch -> one completion per board
    (--ota: -> ota release -> ota publish -> ota boards -> fleet update-os).
    """
    from provisioner import context
    from provisioner.rehearse import Rehearsal, RehearsalOptions

    reporter = Reporter(quiet=as_json)
    rehearsal = Rehearsal(RehearsalOptions(manifests=manifests, boards=boards, faults=faults, keep=keep,
                                           work_dir=work_dir, ota=ota), context.current(reporter))

    def on_event(ev: StepEvent) -> None:
        if as_json:
            return
        if ev.kind == "start":
            stderr.print(f"[bold cyan]==>[/] {ev.step}")
        elif ev.kind in ("stop", "error"):
            mark = "[green]ok[/]" if ev.kind == "stop" else "[red]FAILED[/]"
            detail = ev.detail.get("result" if ev.kind == "stop" else "error", "")
            stderr.print(f"    {mark} {detail} [dim]({ev.duration_s or 0:.1f} s)[/]", highlight=False)

    report = rehearsal.run(on_event)
    if as_json:
        print_json(report.as_dict())
    else:
        rows = [(b.get("host") or b["serial"], b["board"], b.get("build_id") or "-", ",".join(b.get("faults") or [])
                 or "-", _num(b.get("decode_tok_s")), _num(b.get("min_decode_tok_s"), ">= "),
                 b.get("verdict", "-"), _num((b.get("eval") or {}).get("score")),
                 (b.get("reason") or b.get("completion") or "")[:90])
                for b in report.boards]
        stdout.print(table("fleet report", ["board", "type", "release", "fault", "decode tok/s", "floor", "verdict",
                                            "eval", "reason / completion"], rows))
        ota_rows = [(b.get("host") or b["serial"], b["update_os"]["outcome"], _short(b["update_os"].get("from")),
                     _short(b["update_os"].get("to")), str(b["update_os"].get("bytes_pulled") or 0),
                     b["update_os"].get("reason", "")[:90])
                    for b in report.boards if b.get("update_os")]
        if ota_rows:
            stdout.print(table("update-os (whole-image OTA)", ["board", "outcome", "from", "to", "bytes pulled",
                                                                "reason"], ota_rows))
        steps = [(s.name, "ok" if s.ok else ("skipped" if s.skipped else "FAILED"),
                  "simulated" if s.simulated else "real", f"{s.duration_s:.1f}", s.what) for s in report.steps]
        stdout.print(table("stages (real = production code on real tools; simulated = virtual boards / NPU)",
                           ["stage", "result", "", "s", "what did the work"], steps))
        stdout.print(f"work dir: {report.work_dir} (rehearsal.json, releases/, station.db, inventory.yml, logs)")
    if not report.ok:
        failed = [s for s in report.steps if not s.ok]
        if failed:
            raise CheckFailed(f"rehearsal failed at '{failed[0].name}': {failed[0].detail}")
        n = sum(1 for b in report.boards if b.get("verdict") not in (None, "pass"))
        raise CheckFailed(f"{n} board(s) failed verification (see the fleet report)",
                          "injected faults are expected to fail; otherwise read the reason column")


def _num(value, prefix: str = "") -> str:
    return f"{prefix}{value:.1f}" if isinstance(value, int | float) else "-"


def _short(commit: str | None) -> str:
    return (commit or "-")[:12]
