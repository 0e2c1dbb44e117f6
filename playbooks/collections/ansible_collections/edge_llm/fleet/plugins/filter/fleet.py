"""Filters that compute per-board deploy data on the controller from provisioner's board contract and catalog.

board_install: what a board must pull (QAIRT/runtime trees, model versions) and where it goes.
model_paths: one model's on-board current/previous links, commit-mark suffix and service unit.
serve_units: per model the edge-llm-serve config, unit name and systemd drop-in (run env).
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

# The rules live in the provisioner package, which this collection declares (requirements.txt)
# instead of reaching into a checkout: the built collection runs on any controller that has it.
try:
    from provisioner.contracts import inventory
    from provisioner.fleet import launch
    from provisioner.fleet.shared import deploy_index
except ImportError as exc:
    _MISSING = f"{exc}"
else:
    _MISSING = ""


def _need_provisioner():
    if _MISSING:
        raise AnsibleFilterError("edge_llm.fleet needs the Python package edge-llm-provisioner in the "
                                 f"controller's Python ({_MISSING}): pip install edge-llm-provisioner")


def board_install(index, models, board_id, staging="/opt/edge-llm/.staging"):
    _need_provisioner()
    if not index:
        raise AnsibleFilterError("edge_llm_deploy is empty: pass the artifact index (provisioner fleet deploy "
                                 "--artifacts DIR --artifact-url URL)")
    try:
        return deploy_index.board_install(dict(index), list(models or []), str(board_id), staging)
    except Exception as exc:  # UserError from the catalog
        raise AnsibleFilterError(f"board_install: {exc}") from exc


def model_paths(name):
    _need_provisioner()
    return deploy_index.model_paths(str(name))


def serve_units(expect_vars, bind="127.0.0.1", port_base=8080):
    _need_provisioner()
    try:
        expect = inventory.HostVars.from_vars(dict(expect_vars))
    except Exception as exc:
        raise AnsibleFilterError(f"serve_units: {exc}") from exc
    try:
        return launch.units(expect, bind=bind, port_base=int(port_base))
    except ValueError as exc:     # a LAN bind without a token
        raise AnsibleFilterError(f"serve_units: {exc}") from exc


class FilterModule:
    def filters(self):
        return {"board_install": board_install, "model_paths": model_paths, "serve_units": serve_units}
