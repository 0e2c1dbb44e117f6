"""Output for people (rich) and for machines (``--json``).

Library code reports through a :class:`Reporter` rather than printing, so commands, the
rehearsal and tests can reuse every stage and choose how to show it.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from provisioner import context

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table


def _width(stream) -> int | None:
    """Wide tables in logs and pipes: rich assumes 80 columns when not on a terminal."""
    return None if stream.isatty() or context.current().get("COLUMNS") else 160


def __getattr__(name: str) -> Any:
    """``ui.stdout`` and ``ui.stderr``: rich consoles, made on first use.

    Importing rich costs ~30 ms of start-up; ``provisioner inspect --json`` answers in well under
    that and never prints through rich, so the consoles (and rich) wait until someone needs them.
    """
    if name not in ("stdout", "stderr"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from rich.console import Console

    stream = sys.stderr if name == "stderr" else sys.stdout
    console = Console(stderr=name == "stderr", highlight=False, soft_wrap=True, width=_width(stream))
    globals()[name] = console  # later lookups find the module attribute, not this hook
    return console


def _stderr() -> Console:
    return globals()["stderr"] if "stderr" in globals() else __getattr__("stderr")


class Reporter:
    """Where library code sends what it wants the user to see.

    ``quiet`` reporters (used with ``--json`` and in tests) swallow human messages so that
    stdout stays machine-readable.
    """

    def __init__(self, console: Console | None = None, quiet: bool = False) -> None:
        self._console = console
        self.quiet = quiet

    @property
    def console(self) -> Console:
        """The console messages go to (stderr unless given); made on first use, like rich itself."""
        if self._console is None:
            self._console = _stderr()
        return self._console

    @console.setter
    def console(self, console: Console) -> None:
        self._console = console

    def info(self, message: str) -> None:
        if not self.quiet:
            self.console.print(message)

    def step(self, name: str) -> None:
        if not self.quiet:
            self.console.print(f"[bold cyan]==>[/] {name}")

    def warn(self, message: str) -> None:
        self.console.print(f"[yellow]warning:[/] {message}")


def print_json(data: Any) -> None:
    """Machine output: one JSON document on stdout."""
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")
    sys.stdout.flush()


#: C0 and C1 control characters and DEL, except newline: what a terminal would obey (ESC
#: sequences retitle or recolour it) rather than show; rich itself strips only a few of them
_CONTROLS = re.compile(r"[\x00-\x09\x0b-\x1f\x7f-\x9f]")


def cell(value: Any) -> Any:
    """A table cell shown literally: board and record text is never read as rich markup
    (``[/x]`` would end the program with a MarkupError, ``[link=...]`` would render) and its
    control characters never reach the terminal."""
    from rich.text import Text

    return Text("" if value is None else _CONTROLS.sub("", str(value)))


def table(title: str, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> Table:
    """A plain rich table; cells are converted with ``str`` and shown as plain text (:func:`cell`)."""
    from rich.table import Table

    t = Table(title=title, title_justify="left")
    for col in columns:
        t.add_column(col)
    for row in rows:
        t.add_row(*(cell(c) for c in row))
    return t
