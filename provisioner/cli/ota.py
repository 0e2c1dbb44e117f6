"""`provisioner ota publish RELEASE --repo DIR`: a release's OSTree commit into a static repository."""

from __future__ import annotations

from pathlib import Path

import click

from provisioner.ui import print_json, stdout


@click.group("ota")
def command() -> None:
    """Whole-image updates: publish a release's OSTree commit for `fleet update-os`."""


@command.command("publish")
@click.argument("release", type=click.Path(path_type=Path, file_okay=False))
@click.option("--repo", "repo", required=True, type=click.Path(path_type=Path, file_okay=False),
              help="Static OSTree archive repository (created if absent); serve this folder over HTTP.")
@click.option("--from", "from_revs", multiple=True, metavar="REV",
              help="Commit, ref or published release id a board group runs now: a static delta from it "
                   "(repeatable; default: what the branch named before this publish).")
@click.option("--gpg-key-file", type=click.Path(path_type=Path, dir_okay=False), default=None,
              help="Sign commit and summary with the GPG secret key in this file (never on argv or in logs); "
                   "for other consumers: QLI boards check no signature.")
@click.option("--ed25519-key-file", type=click.Path(path_type=Path, dir_okay=False), default=None,
              help="Sign with an ed25519 key file (only with an ostree whose `sign` has --keys-file).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def publish_cmd(release: Path, repo: Path, from_revs: tuple[str, ...], gpg_key_file: Path | None,
                ed25519_key_file: Path | None, as_json: bool) -> None:
    """Import RELEASE's commit into --repo, add static deltas, move the branch, update the summary."""
    from provisioner import context
    from provisioner.ota.publish import publish

    result = publish(release, repo, context.current(), from_revs=from_revs, gpg_key_file=gpg_key_file,
                     ed25519_key_file=ed25519_key_file)
    if as_json:
        print_json(result.as_dict())
        return
    for line in result.lines():
        stdout.print(line, highlight=False, markup=False)
