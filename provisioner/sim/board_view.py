"""What a runtime stand-in sees of its virtual board from inside the board's namespace.

The stand-ins (:mod:`provisioner.sim.runtime`) and the stand-in C libraries' model
(:mod:`provisioner.sim.npu`) judge a run by what the calling process really sees: the board's
facts (``/run/edge-llm-sim/facts.json``) and state (``board.json``, bound read-only), the QAIRT
build of the libraries found through ``LD_LIBRARY_PATH`` and ``ADSP_LIBRARY_PATH`` (stub libraries
carry their build id as text, like the real ones), whether it may open ``/dev/fastrpc-cdsp``, its
``RLIMIT_MEMLOCK`` and whether ``cdsprpcd`` is active. The stand-ins find their board only through
these fixed paths, never through host-side globals, so a process that escapes its board fails
instead of lying.
Only the standard library is imported at module level: it runs under the board's ``python3`` as any
user.
"""

from __future__ import annotations

import errno
import json
import os
import re
import resource
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SIM_DIR = "/run/edge-llm-sim"              # inside a board's namespace (tmpfs)
FACTS_NAME = "facts.json"                  # written by host.start_host (board_state.facts): catalog facts of this board
BOARD_LINK = "board"                       # read-only bind of boards/<serial>/
SRC_LINK = "src"                           # read-only bind of the directory holding the provisioner package
PYTHON_LINK = "python3"                    # interpreter every board user may execute

SIM_STUB_MAGIC = "EDGE-LLM-SIM STUB LIBRARY"
QAIRT_RE = re.compile(rb"v?(2\.\d{1,2}\.\d{1,2}\.\d{6})\d*")


def stub_library(name: str, qairt: str) -> bytes:
    """Content of a stand-in shared library (``libQnnHtp.so``, skels, ``libGenie.so``...).

    Carries the QAIRT build id as text, as the real libraries do, so the runtimes (and any
    ``strings | grep`` check on the board) can tell which release a library came from.
    """
    return f"{SIM_STUB_MAGIC}\nname={name}\nqairt=v{qairt}\n".encode()


def library_build(path: str | os.PathLike[str]) -> str | None:
    """QAIRT build id carried by a library file (first 64 KiB), or None."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(65536)
    except OSError:
        return None
    m = QAIRT_RE.search(head)
    return m.group(1).decode() if m else None


def genie_version(qairt: str | None) -> str:
    """libGenie.so version for a QAIRT build (2.45 ships Genie 1.17.0, 2.42 ships 1.14.0)."""
    try:
        minor = int(str(qairt).split(".")[1])
    except (IndexError, ValueError):
        return "1.17.0"
    return f"1.{minor - 28}.0"


# --------------------------------------------------------------------------- what the process sees
@dataclass
class BoardView:
    """This board as seen from inside its namespace."""

    facts: dict[str, Any]
    state: dict[str, Any]
    sim_dir: Path

    @classmethod
    def load(cls, sim_dir: str | os.PathLike[str] = SIM_DIR) -> BoardView:
        d = Path(sim_dir)
        facts = json.loads((d / FACTS_NAME).read_text(encoding="utf-8"))
        try:
            state = json.loads((d / BOARD_LINK / "board.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            state = {}
        return cls(facts, state, d)

    @property
    def board(self) -> dict[str, Any]:
        return self.facts["board"]

    @property
    def faults(self) -> set[str]:
        return set(self.state.get("faults") or [])

    @property
    def arch(self) -> str:
        return self.board["hexagon_arch"]

    @property
    def skel_name(self) -> str:
        return f"libQnnHtp{self.arch.upper()}Skel.so"

    def expected(self, model_id: str | None) -> dict[str, Any]:
        """Reference speed for ``model_id`` on this board and OS (catalog performance table)."""
        perf = self.board.get("performance") or []
        os_name = self.facts.get("os", "qli")
        for want_os in (os_name, None):
            for p in perf:
                if p["model"] == model_id and (want_os is None or p["os"] == want_os):
                    return p
        for p in perf:
            if p["os"] == os_name:
                return p
        return perf[0] if perf else {"decode_tok_s": 10.0, "ttft_s": 0.2, "prefill_tok_s": 150.0}

    @property
    def time_scale(self) -> float:
        return float(self.facts.get("time_scale", 0.0))


def path_dirs(var: str) -> list[str]:
    return [d for d in os.environ.get(var, "").split(":") if d]


def find_lib(name: str, dirs: list[str]) -> str | None:
    for d in dirs:
        p = os.path.join(d, name)
        if os.path.isfile(p):
            return p
    return None


@dataclass
class Stack:
    """The NPU software stack the calling process would load (host libs, skel, FastRPC)."""

    host_lib: str | None
    host_build: str | None
    skel_lib: str | None
    skel_build: str | None
    other_skels: list[str]
    cdsprpc: str | None
    fastrpc_error: str | None
    memlock: int
    cdsprpcd_active: bool


def probe_stack(view: BoardView, host_lib_name: str = "libQnnHtp.so") -> Stack:
    ld = path_dirs("LD_LIBRARY_PATH")
    adsp = path_dirs("ADSP_LIBRARY_PATH")
    host = find_lib(host_lib_name, ld)
    skel = find_lib(view.skel_name, adsp)
    others = []
    for d in adsp:
        try:
            others += [f for f in os.listdir(d) if f.startswith("libQnnHtpV") and f.endswith("Skel.so")]
        except OSError:
            continue
    cdsp = find_lib("libcdsprpc.so", ld + ["/usr/lib", "/lib", "/usr/lib64"])
    try:
        from provisioner.sim.limits import effective_memlock
        soft = effective_memlock()
    except Exception:   # noqa: BLE001
        soft = resource.getrlimit(resource.RLIMIT_MEMLOCK)[0]
    return Stack(
        host_lib=host, host_build=library_build(host) if host else None,
        skel_lib=skel, skel_build=library_build(skel) if skel else None, other_skels=sorted(set(others)),
        cdsprpc=cdsp, fastrpc_error=fastrpc_access(), memlock=soft,
        cdsprpcd_active=_unit_active(view, "cdsprpcd.service"),
    )


def fastrpc_access(device: str = "/dev/fastrpc-cdsp") -> str | None:
    """None if this process may open the FastRPC device, else why not (as a short reason)."""
    try:
        fd = os.open(device, os.O_RDWR | os.O_NONBLOCK)
        os.close(fd)
    except FileNotFoundError:
        return f"{device}: No such file or directory"
    except PermissionError:
        return f"{device}: Permission denied"
    except OSError as exc:
        if exc.errno in (errno.ENXIO, errno.ENODEV):
            return None        # the node is there and we may open it; no kernel driver behind it here
        return f"{device}: {exc.strerror}"
    return None


def _unit_active(view: BoardView, unit: str) -> bool:
    """Ask the board's service manager (the systemctl stand-in's state) whether ``unit`` runs."""
    try:
        from provisioner.sim import service_manager
    except Exception:   # noqa: BLE001 - without the manager there is no daemon either
        return False
    try:
        return service_manager.Manager().active_state(unit) == "active"
    except Exception:   # noqa: BLE001
        return False
