"""`provisioner sim` (placeholder until its issue lands)."""

import click

from provisioner.errors import UserError


@click.command("sim", context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
def command() -> None:
    """Not implemented yet."""
    raise UserError("'provisioner sim' is not implemented yet", "see the open issues")
