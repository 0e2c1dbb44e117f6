"""`provisioner build MANIFEST`: render, kas-container build, collect the release directory."""

from __future__ import annotations

from pathlib import Path

import click

from provisioner.ui import Reporter, print_json, stdout


@click.command("build")
@click.argument("manifest", type=click.Path(path_type=Path))
@click.option("--out", "out_dir", type=click.Path(path_type=Path), default=None,
              help="Where <release-id>/ (release.json, kas/, flash/, logs/) is written. Default: releases/ "
                   "beside MANIFEST, so a release lands by the manifest that made it whatever the current "
                   "directory (this repository's .gitignore ignores releases/; ignore it in yours too).")
@click.option("--config", "config", type=click.Path(path_type=Path), default=None,
              help="Host build config (folders, engine, mirrors); default $PROVISIONER_BUILD_CONFIG or "
                   "~/.config/edge-llm/build.yaml.")
@click.option("--dry-run", is_flag=True, help="Print the exact kas-container command and environment; run nothing.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable result on stdout.")
def command(manifest: Path, out_dir: Path | None, config: Path | None, dry_run: bool, as_json: bool) -> None:
    """Build the QLI image for MANIFEST in kas-container and collect <out>/<release-id>/.

    Shared folders (KAS_WORK_DIR, KAS_BUILD_DIR, DL_DIR, SSTATE_DIR, KAS_REPO_REF_DIR) persist
    between builds; an interrupted build resumes with the same command.
    """
    from provisioner import context
    from provisioner.image.build import BuildSetup, build
    from provisioner.image.host_config import load_host_config

    reporter = Reporter(quiet=as_json)
    out_dir = out_dir if out_dir is not None else default_out(manifest)
    ctx = context.current(reporter)
    host = load_host_config(config, env=ctx.env) if config else None
    from functools import partial

    from provisioner.ota.commit import collect as collect_ota

    result = build(manifest, out_dir, ctx, dry_run=dry_run, host_config=host,
                   ota_collector=partial(collect_ota, env=ctx.env))
    if isinstance(result, BuildSetup):
        if as_json:
            print_json(result.as_dict())
            return
        stdout.print("# environment set for kas-container (on top of yours):", markup=False)
        for k, v in sorted(result.env.items()):
            stdout.print(f"{k}={v}", markup=False)
        stdout.print("# command:", markup=False)
        stdout.print(result.command_line(), markup=False)
        for host_path, cpath, mode in result.mounts:
            stdout.print(f"# extra mount: {host_path} -> {cpath} ({mode})", markup=False)
        for p in result.to_create:
            stdout.print(f"# would create: {p}", markup=False)
        stdout.print(f"# log: {result.log_path}", markup=False)
        return
    if as_json:
        print_json({"ok": result.ok, "release_dir": str(result.release_dir), "log": str(result.log_path),
                    "duration_s": round(result.duration_s, 1), "summary": result.summary})
    else:
        stdout.print(f"release ready: {result.release_dir}", markup=False)


def default_out(manifest: Path) -> Path:
    """``releases/`` beside the manifest: never the current directory, which may be any checkout."""
    return manifest.parent / "releases"
