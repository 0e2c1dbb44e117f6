"""fleet stage: Ansible over booted boards (verify, deploy, launch, rollback, benchmark).

``run_fleet(action, inventory, ...) -> FleetReport`` is the one entry point the CLI and
``provisioner rehearse`` use (see :mod:`provisioner.fleet.api`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from provisioner.fleet.report import FleetReport


def run_fleet(action: str, inventory: Any, **kwargs: Any) -> FleetReport:
    """Lazy re-export of :func:`provisioner.fleet.api.run_fleet` (keeps plugin imports light)."""
    from provisioner.fleet.api import run_fleet as _run

    return _run(action, inventory, **kwargs)
