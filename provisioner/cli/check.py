"""`provisioner check MANIFEST`: validate a manifest and cross-check it with the model files on disk."""

from __future__ import annotations

from pathlib import Path

import click

from provisioner.check import CheckResult, run_check
from provisioner.errors import ManifestError, ManifestUnfit
from provisioner.manifest import load_manifest
from provisioner.ui import print_json, stderr, stdout, table


@click.command("check")
@click.argument("manifest", type=click.Path(path_type=Path))
@click.option("--no-files", is_flag=True, help="Only validate the manifest; do not read model files.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def command(manifest: Path, no_files: bool, as_json: bool) -> None:
    """Find every problem in MANIFEST (and its model files) at once, before a long build.

    Exit 1 when the manifest or a model is unfit (every problem listed), 2 when MANIFEST cannot be read.
    """
    try:
        m = load_manifest(manifest)
    except ManifestError as err:
        if not err.problems:
            raise
        raise ManifestUnfit(err.message, err.hint, err.problems) from None
    res = run_check(m, inspect_files=not no_files, progress=not as_json and stderr.is_terminal)
    if as_json:
        print_json(res.as_dict())
    else:
        for w in res.warnings:
            stderr.print(f"[yellow]warning:[/] {w}", highlight=False)
        if res.ok:
            _summary(res)
    if res.problems:
        n = len(res.problems)
        raise ManifestUnfit(f"{m.path.name}: {n} problem{'s' if n > 1 else ''}: "
                            + "; ".join(str(p) for p in res.problems), None, res.problems)


def _summary(res: CheckResult) -> None:
    """A plan-like view of what the manifest will produce (nothing is run)."""
    m = res.manifest
    rows = [
        ("release (BUILD_ID)", m.release),
        ("board", f"{m.board.name} ({m.board.id}, {m.board.soc}, Hexagon {m.board.hexagon_arch}, "
                  f"soc_model {m.board.qnn_soc_model})"),
        ("QLI / kas machine", f"{m.qli} / {m.board.kas_machine}"),
        ("QAIRT (exact builds)", ", ".join(m.qairt)),
        ("runtimes", ", ".join(m.runtimes)),
        ("image", f"{m.image.variant}, memlock {m.image.memlock}, download_mode {m.image.download_mode}, "
                  f"root login {m.image.root_login}"),
        ("downloads (DL_DIR)", str(m.build.dl_dir) if m.build.dl_dir else "-"),
    ]
    stdout.print(table(f"{m.path.name}: OK", ["", ""], rows))
    mrows = []
    for mc in res.models:
        ins = mc.inspection
        state = {"checked": "on disk, cross-checked", "not-on-disk": "to fetch", "skipped": "not read (--no-files)"}
        facts = ""
        if ins is not None:
            facts = f"QAIRT {', '.join(ins.qairt_builds) or '?'}"
            if ins.soc_model is not None:
                facts += f", soc_model {ins.soc_model}/{ins.dsp_arch}"
            if ins.context_size:
                facts += f", context {ins.context_size}"
            if mc.sha256:
                facts += ", sha256 ok"
        mrows.append((mc.model.name, mc.model.kind, mc.model.qairt, state[mc.state], facts))
    stdout.print(table("models", ["name", "kind", "QAIRT", "file", "read from the file"], mrows))
