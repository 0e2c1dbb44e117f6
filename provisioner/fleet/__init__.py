"""fleet stage: Ansible over booted boards, one module per operation.

``verify``, ``deploy``, ``rollback``, ``launch``, ``update_os``, ``benchmark``, ``eval`` and ``pull`` each hold the
controller's rules of the playbook of that name (``playbooks/<op>.yml``, its role and its edge_llm.fleet
action plugin); :mod:`~provisioner.fleet.runner` runs any of them (``run_fleet(action, inventory, ...) ->
FleetReport``, the one entry point the CLI and ``provisioner rehearse`` use). What several operations share
- the inventory, the deploy index, the report, the diagnosis catalogue, the on-board service, its config -
lives in :mod:`provisioner.fleet.shared`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from provisioner.fleet.shared.report import FleetReport


def run_fleet(action: str, inventory: Any, **kwargs: Any) -> FleetReport:
    """Lazy re-export of :func:`provisioner.fleet.runner.run_fleet` (keeps plugin imports light)."""
    from provisioner.fleet.runner import run_fleet as _run

    return _run(action, inventory, **kwargs)
