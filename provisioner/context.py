"""The run context: one object per command with its environment, its directories and its reporter.

It is what kas's ``Context`` is to a kas run (siemens/kas kas/context.py at 81bab52, ``class Context``
lines 78-103 and its ``build_dir``/``kas_work_dir`` properties, lines 164-183): taken once at the start
(:func:`current`, at the CLI edge) and handed to every stage that runs something - ``build``,
``flash_release``, ``run_fleet``, ``fetch_all``, ``publish``, ``start_cache`` - so no library call looks
the environment up again behind its caller's back.

Library code does not reach into ``os.environ``: it reads ``ctx.env`` (or settings resolved from it)
and reports through ``ctx.reporter``. A child process gets :meth:`RunContext.child_env` - a whitelist
in the manner of kas's own ``Context.setup_initial_environ`` (kas/context.py at 81bab52, lines 105-138:
locale, proxies, SSH_AUTH_SOCK, BB_NUMBER_THREADS, PARALLEL_MAKE) widened by what a program needs to be
found and to find its home - plus the variables the caller names for that one child. A secret is never
put into our own environment, so a child cannot inherit one it does not need.

The rule (held by tests/test_context.py): this module is the only one in ``provisioner/`` that
reads ``os.environ``/``os.getenv``, and only the edges (``cli/``, ``__main__``; ``ui`` for the process's
own consoles) call :func:`current`. Exempt are :data:`EXEMPT` - the simulator (``provisioner/sim/``: its knobs
configure virtual boards, not a user's run) - and the on-board service, which runs on the board, where
there is no CLI edge to resolve anything (it lives in the layer, ``recipes-ai/edge-llm-serve/files``;
were it moved into the package, it joins EXEMPT).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from provisioner.ui import Reporter

#: parts of provisioner/ that may read os.environ themselves (paths relative to the package)
EXEMPT = ("sim/",)

#: what any child may see: where programs and home are, locale/terminal, proxies (kas's list)
CHILD_ENV = ("PATH", "HOME", "USER", "LOGNAME", "SHELL", "TMPDIR", "TZ", "TERM", "LANG", "LANGUAGE", "LC_ALL",
             "XDG_CACHE_HOME", "XDG_CONFIG_HOME", "XDG_RUNTIME_DIR", "VIRTUAL_ENV",
             "http_proxy", "https_proxy", "ftp_proxy", "no_proxy", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY",
             "SSH_AUTH_SOCK", "BB_NUMBER_THREADS", "PARALLEL_MAKE")


def _quiet_reporter() -> Reporter:
    from provisioner.ui import Reporter  # ui imports this module: a module-level import would be a cycle

    return Reporter(quiet=True)


@dataclass(frozen=True)
class RunContext:
    """One run's environment, directories and reporter, frozen at the CLI edge (kas's ``Context``).

    ``env``: the environment the command was started with. ``work_dir``: the folder it was started in
    (where relative paths of the user's resolve; kas's ``KAS_WORK_DIR`` default, ``os.getcwd()``).
    ``reporter``: where library code sends what the user should see (a quiet one by default, as tests
    and ``--json`` want). Directories derived from ``env`` are properties (:attr:`cache_dir`,
    :attr:`state_dir`), so they follow the run's environment, not this process's.
    """

    env: Mapping[str, str] = field(default_factory=dict)
    work_dir: Path = field(default_factory=lambda: Path("."))
    reporter: Reporter = field(default_factory=_quiet_reporter)

    def get(self, key: str, default: str | None = None) -> str | None:
        return self.env.get(key, default)

    @property
    def cache_dir(self) -> Path:
        """``$XDG_CACHE_HOME/edge-llm`` (default ``~/.cache/edge-llm``): downloads, sstate, kas, LiteRT-LM work."""
        base = self.env.get("XDG_CACHE_HOME") or str(Path(self.env.get("HOME") or Path.home()) / ".cache")
        return Path(base).expanduser() / "edge-llm"

    @property
    def state_dir(self) -> Path:
        """``$XDG_STATE_HOME/edge-llm`` (default ``~/.local/state/edge-llm``): the hash server's database."""
        base = self.env.get("XDG_STATE_HOME") or str(Path(self.env.get("HOME") or Path.home()) / ".local" / "state")
        return Path(base).expanduser() / "edge-llm"

    def with_reporter(self, reporter: Reporter) -> RunContext:
        """The same run, reporting to ``reporter`` (a ``--json`` command swaps in a quiet one)."""
        return dataclasses.replace(self, reporter=reporter)

    def child_env(self, keep: Iterable[str] = (), extra: Mapping[str, str] | None = None) -> dict[str, str]:
        """The whitelisted environment for one child: :data:`CHILD_ENV`, ``keep`` (names or ``PREFIX*``), ``extra``."""
        names = (*CHILD_ENV, *keep)
        exact = {n for n in names if not n.endswith("*")}
        prefixes = tuple(n[:-1] for n in names if n.endswith("*"))
        out = {k: v for k, v in self.env.items() if k in exact or (prefixes and k.startswith(prefixes))}
        out.update(extra or {})
        return out


def current(reporter: Reporter | None = None) -> RunContext:
    """The context of this process, taken from ``os.environ`` and the working folder now (the only place that
    reads them); called once per command at the CLI edge."""
    ctx = RunContext(dict(os.environ), Path(os.getcwd()))
    return ctx if reporter is None else ctx.with_reporter(reporter)

