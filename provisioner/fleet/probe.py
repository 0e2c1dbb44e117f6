"""Verify's probe spec: what the board-side gatherer must read, stat and run, built on the controller.

The board side is a dumb gatherer (the edge_llm.fleet collection's ``verify`` module): it reads the
files, stats the paths, asks systemctl and runs the smoke inference named in the spec, and returns
raw JSON in ONE module call. Everything that knows about boards - the on-board paths
(:mod:`provisioner.contracts.board`), what to look at - is here; what the answers mean is
:mod:`provisioner.fleet.verdict`. That keeps a 50-board verify at one SSH round trip per board and
keeps the rules testable without a board.
"""

from __future__ import annotations

from typing import Any

from provisioner.contracts import board as on_board
from provisioner.contracts.inventory import HostVars
from provisioner.fleet.serve_config import smoke_run

DT_BASE = "/sys/firmware/devicetree/base"    # /proc/device-tree is a symlink to it on DT kernels
LIMITS_CONF = "/etc/security/limits.conf"
LIMITS_D = "/etc/security/limits.d"


def probe_spec(expect: HostVars, *, only_model: str | None = None, smoke_only: bool = False,
               model_dir_override: dict[str, str] | None = None, repeat: int = 1) -> dict[str, Any]:
    """Everything the board-side gatherer must read/stat/run for ``expect``, as plain JSON; each smoke run
    ``repeat`` times (a benchmark takes medians of them)."""
    b = expect.board
    overrides = model_dir_override or {}
    models = [m for m in expect.models if only_model in (None, m.name)]
    spec: dict[str, Any] = {"read": {}, "stat": {}, "exists": {}, "units_active": {}, "units_show": {},
                            "rlimit_memlock": True, "models": {}, "runs": {}, "qairt": {},
                            "rehash": expect.rehash}
    if not smoke_only:
        spec["read"] = {
            "soc0_machine": on_board.SOC0_MACHINE, "soc_id": on_board.SOC0_SOC_ID,
            "dt_compatible": [on_board.DT_COMPATIBLE, DT_BASE + "/compatible"],
            "dt_model": [on_board.DT_MODEL, DT_BASE + "/model"], "os_release": on_board.OS_RELEASE,
            "download_mode": on_board.DOWNLOAD_MODE_PARAM,
            "limits_conf": LIMITS_CONF,
        }
        spec["read_dir"] = {"limits_d": LIMITS_D}
        spec["stat"] = {"fastrpc_device": on_board.FASTRPC_DEVICE, "fastrpc_lib": on_board.FASTRPC_LIB}
        spec["units_active"] = {"cdsprpcd": on_board.FASTRPC_SERVICE}
        spec["group_members"] = [on_board.FASTRPC_GROUP]
        for m in models:
            genie = m.runtime == "genie"
            spec["exists"][f"qairt:{m.name}"] = [on_board.qairt_dir(m.qairt)] + on_board.qairt_files(b, m.qairt, genie)
            if m.runtime == "litert_lm":
                spec["exists"][f"runtime:{m.name}"] = [f"{on_board.litert_dir()}/{f}" for f in on_board.LITERT_FILES]
            host = on_board.qairt_host_lib_dir(b, m.qairt)
            skel = f"{on_board.qairt_skel_dir(b, m.qairt)}/{b.skel_lib}"
            spec["qairt"][m.name] = {"root": on_board.QAIRT_ROOT, "marker": f"{on_board.qairt_dir(m.qairt)}/sdk.yaml",
                                     "libs": [f"{host}/libQnnHtp.so", skel]}
            unit = on_board.SERVE_UNIT.replace("@.", f"@{m.name}.")
            spec["units_show"][f"memlock:{m.name}"] = [unit, "LimitMEMLOCK"]
    for m in models:
        mdir = overrides.get(m.name, on_board.model_current(m.name))
        if not smoke_only:
            spec["models"][m.name] = {"dir": mdir, "meta": on_board.MODEL_META,
                                      "json": ["htp_backend_ext_config.json"] if m.runtime == "genie" else [],
                                      "hash": True}
        if expect.smoke:
            spec["runs"][m.name] = {**smoke_run(b, m, expect.prompt, expect.max_tokens, model_dir=mdir),
                                    "repeat": repeat}
    return spec
