"""The fleet stage as one call: run a playbook over an inventory and get a :class:`FleetReport`.

``provisioner fleet ...`` and ``provisioner rehearse`` both call :func:`run_fleet`; nothing here
prints - progress goes to ``on_event`` (the CLI renders it), the result is the report.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from provisioner.errors import FleetError
from provisioner.fleet.inventory import list_hosts
from provisioner.fleet.report import FleetReport, build_report
from provisioner.fleet.runner import ACTIONS, fleet_forks, run_playbook


def parse_extra(pairs: Iterable[str]) -> list[str]:
    """Validate ``-e key=val`` / ``-e @file`` arguments (passed to ansible-playbook unchanged)."""
    out = []
    for p in pairs:
        if not p.startswith("@") and not p.lstrip().startswith("{") and "=" not in p:
            raise FleetError(f"-e {p!r} is not key=value", "e.g. -e edge_llm_expected_build_id=gemma4-2026.11")
        if p.startswith("@") and not Path(p[1:]).is_file():
            raise FleetError(f"-e {p}: no such file", "pass an existing YAML/JSON vars file")
        out.append(p)
    return out


def check_report_path(path: Path | str) -> None:
    """One line, before the run, when the report could not be written where the user asked."""
    path = Path(path)
    folder = path.parent if str(path.parent) else Path(".")
    if path.is_dir():
        raise FleetError(f"--report {path}: is a folder", "name a file, e.g. --report fleet.json")
    if not folder.is_dir():
        raise FleetError(f"--report {path}: folder {folder} does not exist", "create it or name another file")
    if not os.access(folder, os.W_OK | os.X_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise FleetError(f"--report {path}: not writable by this user", "name a file in a folder you can write")


def run_fleet(action: str, inventory: Path | str, *, limit: str | None = None,
              extra_vars: Mapping[str, Any] | None = None, extra_args: Iterable[str] = (),
              report_path: Path | None = None, dry_run: bool = False, tags: str | None = None,
              forks: int | None = None, on_event: Callable[[dict[str, Any]], None] | None = None,
              log_path: Path | None = None, timeout_s: float | None = None,
              env: Mapping[str, str] | None = None) -> FleetReport:
    """Run ``action`` (verify|deploy|launch|rollback|benchmark) and return the per-board report.

    Boards that fail or cannot be reached are rows in the report (``verdict`` fail/unreachable);
    only problems that stop the whole run (bad inventory, missing ansible) raise FleetError.
    """
    if action not in ACTIONS:
        raise FleetError(f"unknown fleet action '{action}'", f"use one of: {', '.join(ACTIONS)}")
    if report_path:
        check_report_path(report_path)        # before any board is touched, not after the whole run
    hosts = list_hosts(inventory, limit, env=dict(env) if env is not None else None)
    if not hosts:
        raise FleetError(f"inventory {inventory}: no hosts" + (f" match --limit {limit}" if limit else ""),
                         "check the inventory and --limit")
    run = run_playbook(action, inventory, limit=limit, extra_vars=extra_vars, extra_args=parse_extra(extra_args),
                       dry_run=dry_run, tags=tags, forks=fleet_forks(len(hosts), forks, env), on_event=on_event,
                       log_path=log_path, timeout_s=timeout_s, env=env)
    report = build_report(run, hosts)
    if report_path:
        report.write(report_path)
    return report
