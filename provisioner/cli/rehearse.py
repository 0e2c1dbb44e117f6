"""`provisioner rehearse` (placeholder until its issue lands)."""

import click

from provisioner.errors import UserError


@click.command("rehearse", context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
def command() -> None:
    """Not implemented yet."""
    raise UserError("'provisioner rehearse' is not implemented yet", "see the open issues")
