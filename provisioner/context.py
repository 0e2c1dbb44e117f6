"""The run context: the environment this run was started with, read in one place.

Library code does not reach into ``os.environ``: the CLI edge takes a :class:`RunContext` once
(:func:`current`) and passes ``ctx.env`` (or settings resolved from it) down. A child process
gets :meth:`RunContext.child_env` - a whitelist in the manner of kas's own
``Context.setup_initial_environ`` (siemens/kas kas/context.py at 81bab52: locale, proxies,
SSH_AUTH_SOCK, BB_NUMBER_THREADS, PARALLEL_MAKE) widened by what a program needs to be found
and to find its home - plus the variables the caller names for that one child. A secret is
never put into our own environment, so a child cannot inherit one it does not need.

The rule (held by tests/test_context.py): this module is the only one in ``provisioner/`` that
reads ``os.environ``/``os.getenv``. Exempt are :data:`EXEMPT` - the simulator
(``provisioner/sim/``: its knobs configure virtual boards, not a user's run) - and the on-board
service, which runs on the board, where there is no CLI edge to resolve anything (it lives in
the layer, ``recipes-ai/edge-llm-serve/files``; were it moved into the package, it joins EXEMPT).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

#: parts of provisioner/ that may read os.environ themselves (paths relative to the package)
EXEMPT = ("sim/",)

#: what any child may see: where programs and home are, locale/terminal, proxies (kas's list)
CHILD_ENV = ("PATH", "HOME", "USER", "LOGNAME", "SHELL", "TMPDIR", "TZ", "TERM", "LANG", "LANGUAGE", "LC_ALL",
             "XDG_CACHE_HOME", "XDG_CONFIG_HOME", "XDG_RUNTIME_DIR", "VIRTUAL_ENV",
             "http_proxy", "https_proxy", "ftp_proxy", "no_proxy", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY",
             "SSH_AUTH_SOCK", "BB_NUMBER_THREADS", "PARALLEL_MAKE")


@dataclass(frozen=True)
class RunContext:
    """One run's view of its environment, frozen at the CLI edge."""

    env: Mapping[str, str] = field(default_factory=dict)

    def get(self, key: str, default: str | None = None) -> str | None:
        return self.env.get(key, default)

    @property
    def cache_dir(self) -> Path:
        """``$XDG_CACHE_HOME/edge-llm`` (default ``~/.cache/edge-llm``): downloads, sstate, kas, LiteRT-LM work."""
        base = self.env.get("XDG_CACHE_HOME") or str(Path(self.env.get("HOME") or Path.home()) / ".cache")
        return Path(base).expanduser() / "edge-llm"

    def child_env(self, keep: Iterable[str] = (), extra: Mapping[str, str] | None = None) -> dict[str, str]:
        """The whitelisted environment for one child: :data:`CHILD_ENV`, ``keep`` (names or ``PREFIX*``), ``extra``."""
        names = (*CHILD_ENV, *keep)
        exact = {n for n in names if not n.endswith("*")}
        prefixes = tuple(n[:-1] for n in names if n.endswith("*"))
        out = {k: v for k, v in self.env.items() if k in exact or (prefixes and k.startswith(prefixes))}
        out.update(extra or {})
        return out


def current() -> RunContext:
    """The context of this process, taken from ``os.environ`` now (the only place that reads it)."""
    return RunContext(dict(os.environ))


def environ() -> dict[str, str]:
    """A copy of this process's environment, for a library default when no context was passed."""
    return dict(current().env)
