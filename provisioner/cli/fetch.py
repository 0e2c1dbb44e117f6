"""`provisioner fetch MANIFEST`: models and QAIRT zips into the downloads directory (bitbake's DL_DIR)."""

from __future__ import annotations

from pathlib import Path

import click

from provisioner import context, ui
from provisioner.artifacts.fetch import downloads_dir, fetch_all, fetch_list
from provisioner.manifest import load_manifest


@click.command("fetch")
@click.argument("manifest", type=click.Path(path_type=Path))
@click.option("--dl-dir", type=click.Path(path_type=Path), help="Downloads directory (default: build.dl_dir).")
@click.option("--models-only", is_flag=True, help="Skip the QAIRT SDK zips.")
@click.option("--timeout", type=float, default=60.0, show_default=True,
              help="Seconds to wait for a connection or for the next byte.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def command(manifest: Path, dl_dir: Path | None, models_only: bool, timeout: float, as_json: bool) -> None:
    """Download (resumable, sha256-verified, mirrors first) every artifact MANIFEST needs."""
    m = load_manifest(manifest)
    target = downloads_dir(m, dl_dir.resolve() if dl_dir else None)
    items = fetch_list(m, models_only=models_only)
    reporter = ui.Reporter(quiet=as_json)
    ctx = context.current(reporter)
    if not items:
        reporter.info("nothing to fetch (models have local paths and --models-only was given)")
    results = fetch_all(items, target, ctx, progress=not as_json and ui.stderr.is_terminal,
                        timeout=(min(timeout, 10.0), timeout))
    if as_json:
        ui.print_json({"dl_dir": str(target), "files": [r.as_dict() for r in results]})
        return
    rows = [(r.item.filename, r.item.kind, r.status, f"{r.path.stat().st_size:,}",
             f"{r.transferred / max(r.seconds, 1e-6) / 1e6:,.1f} MB/s" if r.transferred else "-",
             r.sha256[:16] + "...") for r in results]
    if rows:
        columns = ["file", "kind", "status", "bytes", "speed", "sha256"]
        ui.stdout.print(ui.table(f"downloads in {target}", columns, rows))
