"""The board state the runtime stand-ins judge: ``facts.json`` and what stateful faults leave behind.

A real board's failures come from its state (a missing limits file, a user outside the fastrpc
group, libraries from another QAIRT release...), not from a flag. This module writes that state
before a board's namespace starts: the facts file the stand-ins read (board, models, time scale)
and, once per flash, the rootfs changes each stateful fault stands for. Kept apart from the mounts
(:mod:`provisioner.sim.namespace`) because it changes the board's disk, not its view.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

from provisioner import catalog
from provisioner.contracts import board as on_board
from provisioner.sim import real_litert, runtime
from provisioner.sim.board import VirtualBoard, host_dir

SIM_DIR = runtime.SIM_DIR
STATEFUL_FAULTS = ("memlock", "no-fastrpc-group", "qairt-mismatch", "truncated-model", "wrong-soc-model")


def facts(board: VirtualBoard, time_scale: float) -> dict[str, Any]:
    b = catalog.board(board.board_id)
    models = {}
    for mid, m in catalog.models().items():
        models[mid] = {"kind": m.kind, "file": m.file, "size": m.size, "qairt": m.qairt, "npu_only": m.npu_only,
                       "boards": list(m.boards), "runtime": m.runtime}
    return {"serial": board.serial, "board": b.as_dict(), "models": models, "os": "qli",
            "time_scale": time_scale, "system_qairt": system_qairt(),
            "real_litert": real_litert.board_facts(real_litert.locate(), SIM_DIR)}


def system_qairt() -> str:
    try:
        return catalog.release("qli-2.0").system_qairt
    except Exception:  # noqa: BLE001 - only used for the qairt-mismatch fault
        return "2.47.0.260601"



# --------------------------------------------------------------------------- faults as board state
def apply_faults(board: VirtualBoard) -> list[str]:
    """Turn stateful faults into the board state that causes them in reality (once per fault).

    ``memlock``: the limits.d file and the systemd memlock drop-in are missing (and the serve unit
    sets no LimitMEMLOCK). ``no-fastrpc-group``: ``llm`` is not in group ``fastrpc``.
    ``qairt-mismatch``: the QNN libraries and skels under /opt/qairt/<ver> come from another
    QAIRT release (the system's).
    ``truncated-model``: model files are cut short. ``wrong-soc-model``: Genie HTP configs carry
    ``soc_model: 0``. Runtime faults (no-burst, soc-config-14001, slow) are read live by the
    stand-ins. Returns the faults applied now.
    """
    board.reload()
    hd = host_dir(board)
    hd.mkdir(parents=True, exist_ok=True)
    done_path = hd / "faults-applied.json"
    r = board.rootfs_dir
    ident = _rootfs_identity(r)
    try:
        saved = json.loads(done_path.read_text())
        done = set(saved["faults"]) if saved.get("rootfs") == ident else set()   # a reflash starts clean
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        done = set()
    applied = []
    for fault in board.faults:
        if fault not in STATEFUL_FAULTS or fault in done:
            continue
        if fault == "memlock":
            for rel in (on_board.LIMITS_FILE, on_board.SYSTEMD_MEMLOCK_DROPIN):
                _rootfs_path(r, rel).unlink(missing_ok=True)
            unit_dir = _rootfs_path(r, on_board.SERVE_UNIT_DIR)
            for f in [unit_dir / on_board.SERVE_UNIT, *unit_dir.glob(on_board.SERVE_UNIT + ".d/*.conf")]:
                if f.is_file():
                    text = f.read_text()
                    f.write_text("".join(ln for ln in text.splitlines(True) if not ln.startswith("LimitMEMLOCK")))
        elif fault == "no-fastrpc-group":
            g = r / "etc/group"
            if g.is_file():
                out = []
                for ln in g.read_text().splitlines():
                    parts = ln.split(":")
                    if len(parts) == 4 and parts[0] == on_board.FASTRPC_GROUP:
                        parts[3] = ""
                    out.append(":".join(parts))
                g.write_text("\n".join(out) + "\n")
        elif fault == "qairt-mismatch":
            system = system_qairt()
            qroot = _rootfs_path(r, on_board.QAIRT_ROOT)
            libs = [*qroot.glob("*/lib/aarch64-*/*.so"), *qroot.glob("*/lib/hexagon-*/unsigned/*.so")] \
                if qroot.is_dir() else []
            for lib in libs:
                if lib.is_file() and lib.name.startswith(("libQnn", "libGenie")):
                    lib.write_bytes(runtime.stub_library(lib.name, system))
        elif fault == "truncated-model":
            mroot = _rootfs_path(r, on_board.MODELS_ROOT)
            for f in mroot.glob("*/*/*") if mroot.is_dir() else []:
                if f.parent.is_symlink():          # `current` points at a version dir already handled
                    continue
                if f.is_file() and (f.suffix == ".litertlm" or (f.suffix == ".bin" and "part_1_of" in f.name)):
                    size = f.stat().st_size
                    with open(f, "r+b") as fh:
                        fh.truncate(max(1, size * 6 // 10))
        elif fault == "wrong-soc-model":
            mroot = _rootfs_path(r, on_board.MODELS_ROOT)
            for f in mroot.glob("*/*/htp_backend_ext_config.json") if mroot.is_dir() else []:
                if f.parent.is_symlink():
                    continue
                with contextlib.suppress(ValueError, OSError):
                    cfg = json.loads(f.read_text())
                    for dev in cfg.get("devices", []):
                        dev["soc_model"] = 0
                    f.write_text(json.dumps(cfg, indent=2) + "\n")
        applied.append(fault)
        done.add(fault)
    done_path.write_text(json.dumps({"rootfs": ident, "faults": sorted(done)}))
    return applied


def _rootfs_identity(rootfs: Path) -> list[int]:
    """Changes when the rootfs is extracted anew (a flash), not when files inside it change."""
    try:
        st = rootfs.stat()
        return [st.st_ino, st.st_dev]
    except OSError:
        return [0, 0]


def _rootfs_path(rootfs: Path, abs_path: str) -> Path:
    return rootfs / abs_path.lstrip("/")

