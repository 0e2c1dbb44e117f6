"""Command line: thin click commands, one module per command group (kas-plugin style).

Every module in ``COMMAND_MODULES`` exposes ``command`` (a click command or group). ``main``
is the only place that turns errors into exit codes, by the one rule in :mod:`provisioner.errors`:
0 ok, 1 checked and unfit, 2 could not do it (bad input), 130 interrupted, 70 a bug.
"""

from __future__ import annotations

import importlib
import sys

import click

from provisioner import __version__, context, ui
from provisioner.errors import EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_OK, ManifestError, UserError

COMMAND_MODULES = (
    "boards",
    "check",
    "inspect",
    "fetch",
    "render",
    "build",
    "litert",
    "cache",
    "station",
    "console",
    "fleet",
    "ota",
    "sim",
    "rehearse",
)


class LazyGroup(click.Group):
    """Import a command's module only when that command runs.

    Startup time matters: `provisioner inspect` must answer in well under a second, and
    importing every stage (ansible helpers, kas, rich live displays) for it would dominate.
    """

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMAND_MODULES)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in COMMAND_MODULES:
            return None
        return importlib.import_module(f"provisioner.cli.{cmd_name}").command


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="provisioner")
def cli() -> None:
    """Put LLMs on Qualcomm Dragonwing boards: manifest -> image -> station -> fleet."""


def main(argv: list[str] | None = None) -> int:
    """Entry point: run the CLI and map failures to one line and an exit code."""
    try:
        cli.main(args=argv, prog_name="provisioner", standalone_mode=False)
        return EXIT_OK
    except ManifestError as err:
        if err.problems:
            ui.stderr.print(f"error: {err.message.split(':')[0]}: {len(err.problems)} problem(s) in the manifest",
                         markup=False)
            for p in err.problems:
                ui.stderr.print(f"  {p}", markup=False)
        else:
            _one_line(err)
        return err.exit_code
    except UserError as err:
        _one_line(err)
        return err.exit_code
    except click.exceptions.Abort:
        ui.stderr.print("interrupted")
        return EXIT_INTERRUPTED
    except KeyboardInterrupt:
        ui.stderr.print("interrupted")
        return EXIT_INTERRUPTED
    except click.ClickException as err:
        err.show()
        return err.exit_code
    except click.exceptions.Exit as err:
        return err.exit_code
    except BrokenPipeError:
        return EXIT_OK
    except Exception as err:  # a bug: say so on one line, traceback only on request
        if context.current().get("PROVISIONER_DEBUG"):
            raise
        ui.stderr.print(f"internal error: {type(err).__name__}: {err} (rerun with PROVISIONER_DEBUG=1 for a "
                     "traceback and report it)", markup=False)
        return EXIT_INTERNAL


def _one_line(err: UserError) -> None:
    ui.stderr.print(f"error: {err}", markup=False)


def run() -> None:
    sys.exit(main())
