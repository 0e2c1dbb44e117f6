"""The update-os health gate's controller rules: what the board is asked, and how the answers are judged.

The gate runs on the new deployment after the reboot: the board's OSTree state (did the new
deployment come up), the checks of ``fleet verify`` (identity, BUILD_ID, FastRPC, memlock, a smoke
inference at the board type's speed) and, on a board where ``fleet launch`` enabled the serving
instances, a streamed chat completion through edge-llm-serve on the board's loopback judged by the
same floor (:func:`provisioner.fleet.verify.api_checks`). A board nobody launched has no enabled
instance after the reboot (only an enabled instance starts at boot), so the API step is skipped
and the report says so.
"""

from __future__ import annotations

from typing import Any

from provisioner import catalog
from provisioner.contracts import board as on_board
from provisioner.contracts.inventory import HostVars
from provisioner.fleet import launch, verify

#: systemctl show's property that says whether the instance starts at boot (systemctl(1) is-enabled)
ENABLED_PROPERTY = "UnitFileState"
ENABLED_STATES = ("enabled", "enabled-runtime")
API_RAN = "ran"
API_SKIPPED = "skipped: no serving instance enabled on the board (fleet launch not run)"


def release_mismatch(host_board: str, release_board: str, branch: str) -> str | None:
    """Why a board of type ``host_board`` must not take a release built for ``release_board`` on ``branch``
    (None when it may). Checked on the controller before the board pulls anything: another board type's
    image boots another device tree and another NPU's libraries, and the board loses its service.

    The branch must be the board type's own: meta-updater's sota.bbclass (uptane/meta-updater @ f0e1ccaf)
    names it ``OSTREE_BRANCHNAME ?= "${SOTA_HARDWARE_ID}"`` (line 25) and ``SOTA_HARDWARE_ID ??= "${MACHINE}"``
    (line 5), so each machine's commits live on its own ref.
    An empty ``release_board`` (a commit given by hand) checks the branch only.
    """
    try:
        machine = catalog.board(host_board).kas_machine
    except Exception:  # noqa: BLE001 - a UserError naming the known boards; the message below says enough
        return f"the host's board type {host_board!r} is not one this tool knows"
    if release_board and release_board != catalog.board(host_board).id:
        return (f"the release was built for {release_board}, this board is {catalog.board(host_board).id}: "
                "refused before pulling anything")
    if branch != machine:
        return (f"the release's OSTree branch {branch!r} is not this board type's ({machine!r}, "
                "meta-updater OSTREE_BRANCHNAME): refused before pulling anything")
    return None


def _enabled_key(model: str) -> str:
    return f"enabled:{model}"


def _config_key(model: str) -> str:
    return f"serve_config:{model}"


def gate_spec(expect: HostVars) -> dict[str, Any]:
    """verify's probe spec plus, per model, whether its service instance is enabled and the config it
    runs with (same board call)."""
    spec = verify.probe_spec(expect)
    for inst_model in (m.name for m in expect.models):
        spec["units_show"][_enabled_key(inst_model)] = [launch.instance_unit(inst_model), ENABLED_PROPERTY]
        spec["read"][_config_key(inst_model)] = f"{on_board.SERVE_CONFIG_DIR}/{inst_model}.json"
    return spec


def enabled_instances(expect: HostVars, probe: dict[str, Any], *, bind: str,
                      port_base: int) -> dict[str, Any]:
    """The serving plan (edge_llm.fleet.serve_units) reduced to the instances enabled on the board, at the
    port and bind of the config the board runs: the service a client reaches is the one `fleet launch` set
    up there, even when that launch used other port settings than this run's inventory."""
    plan = launch.units(expect, bind=bind, port_base=port_base)
    shows = probe.get("units_show") or {}
    on = [i for i in plan["instances"] if shows.get(_enabled_key(i["model"])) in ENABLED_STATES]
    reads = probe.get("read") or {}
    # a config fleet launch wrote, without an enabled unit to run it: the update took the service away
    lost = [{"model": i["model"], "unit": i["unit"], "state": str(shows.get(_enabled_key(i["model"])) or "absent")}
            for i in plan["instances"] if i not in on and (reads.get(_config_key(i["model"])) or {}).get("content")]
    on = [launch.keep_board_endpoint(i, (reads.get(_config_key(i["model"])) or {}).get("content")) for i in on]
    return {"instances": [{k: i[k] for k in ("model", "unit", "port", "bind")} for i in on],
            "lost": lost, "token_file": plan["token_file"]}


def lost_step(lost: list[dict[str, Any]]) -> str:
    """The API step's line for a board whose launched instances are no longer enabled after the update."""
    units = ", ".join(f"{x['unit']} ({x['state'][:40]})" for x in lost)
    return f"failed: fleet launch set up {units}, but the updated image does not enable it"


def judge(expect: HostVars, probe: dict[str, Any], api: dict[str, Any] | None,
          api_step: str) -> dict[str, Any]:
    """verify's verdict with the API checks added: the gate's report row (kind verify) and its api step."""
    result = verify.evaluate(expect, probe)
    if api_step.startswith("failed:"):
        result["checks"].append(verify.Check("serving API", False, api_step).as_dict())
        result["failures"].append(f"serving API: {api_step}")
        result["ok"] = False
        result["reason"] = "; ".join(x for x in (result["reason"], f"serving API: {api_step}") if x)
    if api is not None:
        extra = verify.api_checks(expect, api)
        result["checks"] += [c.as_dict() for c in extra]
        failed = [c for c in extra if not c.ok]
        result["failures"] += [f"{c.name}: {c.detail}" for c in failed]
        if failed:
            result["ok"] = False
            result["reason"] = "; ".join(x for x in (result["reason"], *(f"{c.name}: {c.detail}" for c in failed))
                                         if x)
        result["api"] = api
    result["api_step"] = api_step
    return result
