"""`provisioner render MANIFEST --out DIR`: write the kas configuration and print the build plan."""

from __future__ import annotations

from pathlib import Path

import click

from provisioner import context
from provisioner.image.render import parse_repo_override, render, validate_with_kas
from provisioner.manifest import load_manifest
from provisioner.ui import print_json, stderr, stdout


@click.command("render")
@click.argument("manifest", type=click.Path(path_type=Path))
@click.option("--out", "out_dir", required=True, type=click.Path(path_type=Path, file_okay=False),
              help="Directory for edge-llm.yml and the layers (kas-container mounts it).")
@click.option("--include", "includes", multiple=True, metavar="CI_FILE",
              help="Extra meta-qcom kas fragment, e.g. ci/linux-qcom-6.18.yml (checked against the release).")
@click.option("--repo-override", "overrides", multiple=True, metavar="NAME=URL[@COMMIT]",
              help="Redirect a repo (mirror, local fixture) in a separate edge-llm-local.yml; production "
                   "pins in edge-llm.yml stay as they are.")
@click.option("--no-inspect", is_flag=True, help="Trust the manifest's declared QAIRT/SoC; do not read model files.")
@click.option("--validate", is_flag=True,
              help="Also resolve the result with `kas dump` (clones the pinned repos into --kas-work-dir).")
@click.option("--kas-work-dir", type=click.Path(path_type=Path, file_okay=False), default=None,
              help="Where --validate checks the repos out (default: a temporary directory).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def command(manifest: Path, out_dir: Path, includes: tuple[str, ...], overrides: tuple[str, ...],
            no_inspect: bool, validate: bool, kas_work_dir: Path | None, as_json: bool) -> None:
    """Render MANIFEST into a kas configuration (byte-identical for the same manifest)."""
    m = load_manifest(manifest)
    repo_overrides = dict(parse_repo_override(o) for o in overrides)
    result = render(m, out_dir, repo_overrides=repo_overrides, extra_includes=includes, inspect=not no_inspect)
    if validate:
        validate_with_kas(result, env=context.current().env, work_dir=kas_work_dir)
    if as_json:
        print_json({**result.as_dict(), "validated": validate})
        return
    for line in result.lines():
        if line.startswith("warning: "):
            stderr.print(f"[yellow]warning:[/] {line[9:]}", highlight=False, markup=True)
        else:
            stdout.print(line, highlight=False, markup=False)
    if validate:
        stdout.print("kas dump: every include and pin resolves", highlight=False, markup=False)
