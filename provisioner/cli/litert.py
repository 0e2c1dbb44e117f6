"""`provisioner litert build`: the patched LiteRT-LM runtime tarball for the layer."""

from __future__ import annotations

from pathlib import Path

import click

from provisioner import context
from provisioner.ui import Reporter, print_json, stdout


@click.group("litert")
def command() -> None:
    """LiteRT-LM runtime for the image (patched litert_lm_main + libraries)."""


def _default_out(ctx: context.RunContext) -> Path:
    from provisioner.image.host_config import load_host_config

    host = load_host_config(env=ctx.env)
    if host.get("dl_dir"):
        return Path(host["dl_dir"])
    return ctx.cache_dir / "downloads"


@command.command("build")
@click.option("--work", type=click.Path(path_type=Path), default=None,
              help="Work folder for the checkout (default ~/.cache/edge-llm/litert-lm).")
@click.option("--qairt-sdk", "qairt_sdk", default=None,
              help="Folder that contains qairt/<ver>/ (default $LITERT_QAIRT_SDK).")
@click.option("--out", type=click.Path(path_type=Path), default=None,
              help="Where the tarball + .sha256 go (default: DL_DIR from the build config, so the recipe finds it).")
@click.option("--source", default=None, help="Local clone or mirror of LiteRT-LM to clone from instead of GitHub.")
@click.option("--rev", default=None, help="LiteRT-LM commit (default: the pinned cbf463d97fa3...).")
@click.option("--patches", type=click.Path(path_type=Path, file_okay=False), default=None,
              help="Folder with 0001..0003-*.patch (default: the layer's recipes-ai/litert-lm/files).")
@click.option("--allow-cross", is_flag=True, help="Run on a non-aarch64 host (dry-run/testing only).")
@click.option("--dry-run", is_flag=True, help="Print the steps; run nothing.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable result on stdout.")
def build_cmd(work: Path | None, qairt_sdk: str | None, out: Path | None, source: str | None, rev: str | None,
              patches: Path | None, allow_cross: bool, dry_run: bool, as_json: bool) -> None:
    """Clone, patch (1-3) and bazel-build LiteRT-LM; write the runtime tarball the recipe packages."""
    from provisioner.image import litert

    ctx = context.current()
    opts = litert.LitertOptions(
        work=(work or ctx.cache_dir / "litert-lm").resolve(), out=(out or _default_out(ctx)).resolve(),
        qairt_sdk=qairt_sdk or ctx.get("LITERT_QAIRT_SDK"), source=source, rev=rev or litert.PINNED_COMMIT,
        patches=(patches or litert.PATCH_DIR).resolve(), allow_cross=allow_cross, env=ctx.env,
    )
    result = litert.litert_build(opts, dry_run=dry_run, reporter=Reporter(quiet=as_json))
    if isinstance(result, list):
        if as_json:
            print_json({"plan": result})
        else:
            for line in result:
                stdout.print(line, markup=False)
        return
    if as_json:
        print_json(result.as_dict())
        return
    stdout.print(f"{result.tarball}", markup=False)
    stdout.print(f'LITERT_LM_RUNTIME_SHA256 = "{result.sha256}"', markup=False)
