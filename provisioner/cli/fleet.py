"""`provisioner fleet`: verify|deploy|launch|rollback|benchmark|inventory (thin layer over provisioner.fleet)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import click

from provisioner.errors import CheckFailed, FleetError
from provisioner.ui import Reporter, print_json, stderr, stdout, table

_COMMON_HELP = {
    "verify": "Check identity, release, FastRPC, QAIRT, models, limits, download_mode and a smoke inference.",
    "deploy": "Pull QAIRT, runtime and models onto running boards (versioned, atomic switch, health gate, rollback).",
    "launch": "Start edge-llm-serve@<model> on every board and wait for GET /health.",
    "rollback": "Switch every model back to its previous version and health-gate it.",
    "benchmark": "Repeated inference per board: median decode tok/s and TTFT.",
}


@click.group("fleet")
def command() -> None:
    """Ansible over the fleet: verify, deploy, launch, rollback, benchmark, eval, update-os; inventories from the
    catalog."""


class Progress:
    """Live per-board progress from the JSON-lines callback (one line per board result that matters)."""

    def __init__(self, rep: Reporter, total: int) -> None:
        self.rep = rep
        self.total = total
        self.done: dict[str, str] = {}
        self.task = ""
        self.started = time.monotonic()

    def __call__(self, ev: dict[str, Any]) -> None:
        kind = ev.get("event")
        if kind == "task":
            self.task = ev.get("name") or ""
            self.rep.info(f"[dim]{time.monotonic() - self.started:6.1f}s[/] [bold]{self.task}[/]")
        elif kind == "host":
            status, h = ev.get("status"), ev.get("host")
            from provisioner.fleet.runner import payloads_of  # lazy like the rest: `--help` stays quick

            payload = next(iter(payloads_of(ev)), {})
            if status in ("failed", "unreachable") and not ev.get("ignored"):
                from provisioner.fleet.shared.report import terminal_text

                # a failure's message can quote the board (a model's answer, a runtime's log): no markup, no
                # control characters reach the terminal
                msg = terminal_text(" ".join(str(ev.get("msg") or "").split()), 200)
                self.rep.info(f"  [red]{status:11}[/] {terminal_text(h)}: {msg}")
            elif payload.get("kind") in ("verify", "benchmark"):
                figs = ", ".join(f"{m} {f.get('decode_tok_s')} tok/s" for m, f in (payload.get("models") or {}).items())
                self.rep.info(f"  [green]ok[/]          {h}: {figs or 'checks passed'}")
            elif payload.get("kind") == "eval":
                scores = ", ".join(f"{m} {r.get('score', 0):.2f}" for m, r in (payload.get("models") or {}).items())
                self.rep.info(f"  [green]ok[/]          {h}: eval {scores or 'nothing scored'}")
            elif status == "changed":
                self.rep.info(f"  [yellow]changed[/]     {h}")
        elif kind == "tuning":
            self.rep.info(f"[dim]ansible: {ev.get('line')}[/]")
        elif kind == "output":
            line = ev.get("line", "")
            if "ERROR" in line or "WARNING" in line:
                self.rep.info(f"  [dim]{line[:300]}[/]")


def _run(action: str, inventory: Path, limit: str | None, report: Path | None, extra: tuple[str, ...],
         as_json: bool, dry_run: bool, forks: int | None, timeout_s: float | None, log: Path | None,
         extra_vars: dict[str, Any] | None = None) -> None:
    from provisioner import context
    from provisioner.fleet.runner import FleetOptions, run_fleet
    from provisioner.fleet.shared.report import COLUMNS

    rep = Reporter(quiet=as_json)
    rep.step(f"fleet {action}: {inventory}" + (f" (limit {limit})" if limit else "") + (" --check" if dry_run else ""))
    result = run_fleet(action, inventory, context.current(rep),
                       FleetOptions(limit=limit, extra_vars=extra_vars, extra_args=extra, report_path=report,
                                    dry_run=dry_run, forks=forks, log_path=log, timeout_s=timeout_s),
                       on_event=Progress(rep, 0))
    if as_json:
        print_json(result.as_dict())
    else:
        stdout.print(table(f"fleet {action} ({result.duration_s:.1f} s)",
                           list(COLUMNS),
                           [r.cells() for r in result.rows]))
        unreachable = [r.board for r in result.rows if r.verdict == "unreachable"]
        if unreachable:
            stderr.print(f"unreachable: {', '.join(unreachable)}", markup=False)
        if report:
            rep.info(f"report: {report}")
    _fail_unless_all_pass(action, result.rows, report)


def _fail_unless_all_pass(action: str, rows: list[Any], report: Path | None) -> None:
    """Exit 1 (checked and unfit) when any board of the report did not pass."""
    bad = [r for r in rows if r.verdict != "pass"]
    if bad:
        raise CheckFailed(f"fleet {action}: {len(bad)} of {len(rows)} board(s) did not pass "
                          f"({', '.join(f'{r.board}={r.verdict}' for r in bad[:6])})",
                          "see the reason column" + (f" and {report}" if report else ""))


def _options(f):
    f = click.option("--log", type=click.Path(dir_okay=False, path_type=Path), help="Append ansible output here.")(f)
    f = click.option("--timeout", "timeout_s", type=float, default=None, help="Kill the run after N seconds.")(f)
    f = click.option("--forks", type=int, default=None,
                     help="Parallel boards (default: ANSIBLE_FORKS, else all, <= 25 per core).")(f)
    f = click.option("--check", "dry_run", is_flag=True, help="Ansible check mode: report what would change.")(f)
    f = click.option("--json", "as_json", is_flag=True, help="Machine-readable report on stdout.")(f)
    f = click.option("-e", "--extra-vars", "extra", multiple=True, help="key=value or @file (repeatable).")(f)
    f = click.option("--report", type=click.Path(dir_okay=False, path_type=Path),
                     help="Write the report here (.json or .csv).")(f)
    f = click.option("--limit", "-l", help="Ansible host pattern.")(f)
    f = click.option("-i", "--inventory", type=click.Path(path_type=Path), required=True,
                     help="Ansible inventory (file or directory).")(f)
    return f


def _simple(action: str):
    @command.command(action, help=_COMMON_HELP[action])
    @_options
    def _cmd(inventory: Path, limit: str | None, report: Path | None, extra: tuple[str, ...], as_json: bool,
             dry_run: bool, forks: int | None, timeout_s: float | None, log: Path | None) -> None:
        _run(action, inventory, limit, report, extra, as_json, dry_run, forks, timeout_s, log)
    return _cmd


for _a in ("verify", "launch", "rollback"):
    _simple(_a)


@command.command("deploy", help=_COMMON_HELP["deploy"])
@_options
@click.option("--artifacts", type=click.Path(path_type=Path), required=True,
              help="Artifact server document root (scanned and hashed once) or an index .json.")
@click.option("--artifact-url", help="URL the BOARDS use to reach the artifact server (required with a directory).")
@click.option("--manifest", type=click.Path(dir_okay=False, path_type=Path),
              help="Release manifest whose verify.eval gates each switched model on its eval score.")
def deploy_cmd(inventory: Path, limit: str | None, report: Path | None, extra: tuple[str, ...], as_json: bool,
               dry_run: bool, forks: int | None, timeout_s: float | None, log: Path | None, artifacts: Path,
               artifact_url: str | None, manifest: Path | None) -> None:
    from provisioner.fleet.shared import deploy_index as art

    if artifacts.is_file():
        index = art.load_index(artifacts)
    else:
        if not artifact_url:
            raise FleetError("--artifact-url is required with an artifact directory",
                             "the URL the boards reach the server at, e.g. http://10.0.0.2:8000")
        index = art.build_index(artifacts, artifact_url)
    from provisioner.cli.fleet_eval import manifest_gate

    _run("deploy", inventory, limit, report, extra, as_json, dry_run, forks, timeout_s, log,
         extra_vars={"edge_llm_deploy_index": index, **manifest_gate(manifest)})


@command.command("update-os")
@_options
@click.option("--release", type=click.Path(file_okay=False, path_type=Path), required=True,
              help="Release folder whose release.json names the OSTree commit (image.ota: ostree).")
@click.option("--repo", "repo_url", required=True,
              help="URL the BOARDS pull from: the repository `provisioner ota publish` wrote, served statically.")
@click.option("--serial", default="1", show_default=True, help="Boards per rolling batch (number or N%).")
@click.option("--max-fail-percentage", type=click.IntRange(0, 100), default=0, show_default=True,
              help="Stop the rollout when more than this share of a batch failed.")
def update_os_cmd(inventory: Path, limit: str | None, report: Path | None, extra: tuple[str, ...], as_json: bool,
                  dry_run: bool, forks: int | None, timeout_s: float | None, log: Path | None, release: Path,
                  repo_url: str, serial: str, max_fail_percentage: int) -> None:
    """Whole-image OTA: pull the release's OSTree commit, reboot into it, health-gate, commit or roll back."""
    from provisioner.cli.fleet_eval import release_gate
    from provisioner.contracts.release_document import RELEASE_JSON, read_release_json
    from provisioner.ota.commit import ota_target

    _check_serial(serial)
    doc = read_release_json(release)
    target = ota_target(doc, release / RELEASE_JSON)
    _run("update-os", inventory, limit, report, extra, as_json, dry_run, forks, timeout_s, log,
         extra_vars={"edge_llm_update_os_repo_url": repo_url, "edge_llm_update_os_branch": target.branch,
                     "edge_llm_update_os_commit": target.commit, "edge_llm_update_os_board": target.board,
                     "edge_llm_update_os_kargs": list(target.kargs),
                     "edge_llm_update_os_serial": serial,
                     "edge_llm_update_os_max_fail_percentage": max_fail_percentage,
                     "edge_llm_expected_build_id": target.build_id, **release_gate(doc, release / RELEASE_JSON)})


def _check_serial(serial: str) -> None:
    """``--serial``: a batch size Ansible's play keyword ``serial`` accepts, a positive count or percentage."""
    text = serial.removesuffix("%")
    if not text.isascii() or not text.isdigit() or int(text) < 1 or (serial.endswith("%") and int(text) > 100):
        raise FleetError(f"--serial {serial}: not a batch size",
                         "give a number of boards (>= 1) or a percentage (1%..100%), e.g. --serial 10%")


@command.command("benchmark", help=_COMMON_HELP["benchmark"])
@_options
@click.option("--runs", type=int, default=5, show_default=True, help="Runs per model and board.")
def benchmark_cmd(inventory: Path, limit: str | None, report: Path | None, extra: tuple[str, ...], as_json: bool,
                  dry_run: bool, forks: int | None, timeout_s: float | None, log: Path | None, runs: int) -> None:
    if runs < 1:
        raise FleetError(f"--runs {runs}: must be at least 1", "e.g. --runs 5")
    _run("benchmark", inventory, limit, report, extra, as_json, dry_run, forks, timeout_s, log,
         extra_vars={"edge_llm_benchmark_runs": runs})


@command.command("report")
@click.option("--from-pull", "pull_dir", type=click.Path(path_type=Path), required=True,
              help="Directory of <board>.jsonl reports uploaded by boards in ansible-pull mode (role edge_llm_pull).")
@click.option("-i", "--inventory", type=click.Path(path_type=Path),
              help="Report on these hosts: one without a report is not-run; reports of boards not in it are "
                   "named on stderr, not counted.")
@click.option("--limit", "-l", help="Ansible host pattern (with -i).")
@click.option("--report", type=click.Path(dir_okay=False, path_type=Path),
              help="Write the report here (.json or .csv).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable report on stdout.")
def report_cmd(pull_dir: Path, inventory: Path | None, limit: str | None, report: Path | None,
               as_json: bool) -> None:
    """Merge the reports of boards in ansible-pull mode into the usual fleet report (exit 1 if any did not pass)."""
    from provisioner.fleet.pull import from_pull
    from provisioner.fleet.shared.inventory import list_hosts
    from provisioner.fleet.shared.report import COLUMNS, terminal_text

    hosts = list_hosts(inventory, limit) if inventory else None
    result = from_pull(pull_dir, hosts)
    for note in result.notes:
        stderr.print(f"note: {terminal_text(note)}")
    if report:
        result.write(report)
    if as_json:
        print_json(result.as_dict())
    else:
        stdout.print(table(f"fleet pull reports ({terminal_text(pull_dir)})", list(COLUMNS),
                           [r.cells() for r in result.rows]))
    _fail_unless_all_pass("pull", result.rows, report)


@command.command("inventory")
@click.option("--from-catalog", is_flag=True, help="(Re)generate playbooks/group_vars/<board group>.yml.")
@click.option("--check", "check_only", is_flag=True, help="With --from-catalog: fail if the files are out of date.")
@click.option("--from-records", type=click.Path(dir_okay=False, path_type=Path),
              help="Station records (JSON/YAML list, or `provisioner station export-inventory` output).")
@click.option("--out", type=click.Path(path_type=Path), help="Output file (inventory) or directory (group_vars).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def inventory_cmd(from_catalog: bool, check_only: bool, from_records: Path | None, out: Path | None,
                  as_json: bool) -> None:
    """Generate group_vars from the catalog, or an inventory from station records."""
    from provisioner.fleet.shared import inventory as inv

    if from_catalog == bool(from_records):
        raise FleetError("choose one of --from-catalog or --from-records", "see `provisioner fleet inventory -h`")
    if from_catalog:
        out_dir = out or inv.GROUP_VARS_DIR
        if check_only:
            stale = [str(p) for p, text in inv.expected_group_vars(out_dir).items()
                     if not p.exists() or p.read_text(encoding="utf-8") != text]
            if stale:
                raise CheckFailed(f"group_vars out of date: {', '.join(stale)}",
                                  "run `provisioner fleet inventory --from-catalog`")
            (print_json({"ok": True}) if as_json else stdout.print("group_vars match the catalog"))
            return
        written = inv.generate_group_vars(out_dir)
        if as_json:
            print_json({"written": [str(p) for p in written]})
        else:
            for p in written:
                stdout.print(f"wrote {p}")
        return
    assert from_records is not None
    records = inv.load_records(from_records)
    data = records if isinstance(records, dict) else inv.inventory_from_records(records)
    text = inv.dump_inventory(data)
    if out:
        inv.atomic_write(out, text)
        (print_json({"written": str(out)}) if as_json else stdout.print(f"wrote {out}"))
    elif as_json:
        print_json(data)
    else:
        stdout.print(text, markup=False, highlight=False, end="")



# `fleet eval` lives in its own module and registers itself on this group (either module may load first)
import provisioner.cli.fleet_eval  # noqa: E402, F401
