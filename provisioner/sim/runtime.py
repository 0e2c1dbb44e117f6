"""Stand-ins for the NPU runtimes (``litert_lm_main``, ``genie-t2t-run``, ``qnn-platform-validator``).

Nothing here executes a model: there is no Hexagon NPU on the machines that run the tests. What
the stand-ins do is reproduce, line for line, what the real programs print on a board and *why*:
every speed figure and every failure is derived from what the calling process really sees inside
its virtual board's mount namespace (see :mod:`provisioner.sim.namespace`):

* the QAIRT build of the host libraries found through ``LD_LIBRARY_PATH`` (stub files carry the
  build id as text, like the real libraries) against the model's build id (read from the model);
* the skel directory in ``ADSP_LIBRARY_PATH`` against the board's Hexagon arch;
* the caller's ``RLIMIT_MEMLOCK`` (FastRPC must pin ~1.17 GB of weights);
* whether the caller may open ``/dev/fastrpc-cdsp`` (mode 0660, group ``fastrpc``) and whether
  ``libcdsprpc.so`` resolves and ``cdsprpcd`` is active;
* the model file's size against its declared size (truncated downloads);
* ``soc_model`` in a Genie bundle's HTP config against the board's;
* faults that are properties of the binary or the silicon (``no-burst``, ``soc-config-14001``,
  ``slow``), read live from the board's ``board.json`` bound read-only into the namespace.

The stand-ins find their board only through fixed paths inside the namespace
(``/run/edge-llm-sim/facts.json`` and ``/run/edge-llm-sim/board/board.json``), never through
host-side globals, so a process that escapes its board would fail instead of lying. This module
imports only the standard library at module level: it runs under the board's ``python3`` as
any user (``llm`` included), without the controller's site-packages.

This module is their entry point (the rootfs executables call :func:`main`), ``qnn-platform-validator``
and the rootfs files the bundle generator installs for them; the board view
(:mod:`provisioner.sim.board_view`), model files (:mod:`provisioner.sim.model_files`), the shared
NPU outcome (:mod:`provisioner.sim.npu_outcome`) and each runtime (:mod:`provisioner.sim.litert_main`,
:mod:`provisioner.sim.genie_run`) live in their own modules.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import TextIO

from provisioner.sim.board_view import FACTS_NAME as FACTS_NAME
from provisioner.sim.board_view import PYTHON_LINK, SIM_DIR, SRC_LINK, BoardView, probe_stack
from provisioner.sim.board_view import stub_library as stub_library
from provisioner.sim.genie_run import genie_t2t_run
from provisioner.sim.litert_main import litert_lm_main
from provisioner.sim.npu_outcome import RuntimeFailure

# the `x as x` imports above are re-exports: the simulator's other modules and tests name them through here
RUNTIMES = ("litert_lm_main", "genie-t2t-run", "qnn-platform-validator")


# --------------------------------------------------------------------------- rootfs helpers (D1, deploy)
def runtime_executable(name: str) -> str:
    """Text of the executable a board's rootfs carries for runtime ``name``.

    The bundle generator installs it as ``/opt/litert-lm/<rev>/bin/litert_lm_main`` or
    ``/opt/qairt/<ver>/bin/aarch64-oe-linux-gcc11.2/genie-t2t-run`` (mode 0755). It only works
    inside a virtual board's namespace, where ``/run/edge-llm-sim/python3`` and the sim sources
    exist; anywhere else it says so and exits 127, like a foreign-arch binary would fail.
    """
    if name not in RUNTIMES:
        raise ValueError(f"unknown runtime '{name}' (known: {', '.join(RUNTIMES)})")
    return (
        f"#!{SIM_DIR}/{PYTHON_LINK} -S\n"
        f"# SIMULATED {name} for edge-llm virtual boards (provisioner.sim.runtime) - not the real runtime.\n"
        "import sys\n"
        f"sys.path.insert(0, '{SIM_DIR}/{SRC_LINK}')\n"
        "from provisioner.sim.runtime import main\n"
        f"sys.exit(main({name!r}, sys.argv[1:]))\n"
    )


# --------------------------------------------------------------------------- qnn-platform-validator
def qnn_platform_validator(argv: list[str], out: TextIO, err: TextIO, view: BoardView) -> int:
    if "--backend" not in argv:
        raise RuntimeFailure(["Usage: qnn-platform-validator --backend <gpu|dsp|all> [--coreVersion] "
                              "[--libVersion] [--testBackend]"])
    stack = probe_stack(view)
    hw = stack.fastrpc_error is None and stack.cdsprpc is not None and stack.cdsprpcd_active
    libs = stack.host_lib is not None and stack.skel_lib is not None
    out.write("PF_VALIDATOR: DEBUG: Calling PlatformValidator->setBackend\n")
    out.write(f"Backend Hardware  : {'Supported' if hw else 'Not Supported'}\n")
    out.write(f"Backend Libraries : {'Found' if libs else 'Not Found'}\n")
    if "--coreVersion" in argv:
        out.write(f"Core Version      : Hexagon Architecture {view.arch.upper()}\n")
    if "--libVersion" in argv and stack.host_build:
        out.write(f"Library Version   : {stack.host_build}\n")
    if "--testBackend" in argv:
        ok = hw and libs and (stack.skel_build == stack.host_build)
        out.write(f"Unit Test         : {'Passed' if ok else 'Failed'}\n")
        out.write("Error in saving the results\n")
        return 0 if ok else 1
    return 0 if hw and libs else 1


_MAINS = {"litert_lm_main": litert_lm_main, "genie-t2t-run": genie_t2t_run,
          "qnn-platform-validator": qnn_platform_validator}


def _reboot_in_gate(view: BoardView, sim_dir: str | os.PathLike[str]) -> None:
    """Fault ``ota-reboot-in-gate``: the first runtime run on an updated deployment power-cycles the board
    (a power cut in the middle of update-os's health gate); once per board, marked in its sysroot."""
    ota = view.state.get("ostree") or {}
    booted = (ota.get("booted") or {}).get("checksum")
    marker = Path("/sysroot/.edge-llm-sim-gate-reboot")
    if "ota-reboot-in-gate" not in view.faults or not booted or booted == ota.get("factory") or marker.exists():
        return
    marker.touch()
    subprocess.Popen([str(Path(sim_dir) / "reboot")], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                     stderr=subprocess.DEVNULL, start_new_session=True)
    time.sleep(120)                        # the namespace goes down under this process


def main(name: str, argv: list[str], *, sim_dir: str | os.PathLike[str] = SIM_DIR,
         out: TextIO | None = None, err: TextIO | None = None) -> int:
    """Entry point of the rootfs executables: run stand-in ``name`` with ``argv``; returns the exit code."""
    out = out or sys.stdout
    err = err or sys.stderr
    try:
        view = BoardView.load(sim_dir)
    except (OSError, ValueError):
        print(f"{name}: cannot execute binary file: Exec format error (not on a virtual board)", file=err)
        return 126
    _reboot_in_gate(view, sim_dir)
    try:
        return _MAINS[name](argv, out, err, view)
    except RuntimeFailure as failure:
        out.flush()
        for line in failure.lines:
            print(line, file=err if failure.code else out)
        err.flush()
        return failure.code
