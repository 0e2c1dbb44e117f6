"""A virtual board with a real OSTree sysroot; only the bootloader is simulated.

The sysroot (``<board dir>/sysroot``) is made and changed by the real ``ostree`` CLI only:
``ostree admin init-fs``/``os-init``/``deploy`` here, ``ostree pull``/``admin deploy``/``undeploy``
by the update-os playbook from inside the board (the namespace binds it at ``/sysroot`` and its
``ostree`` directory at ``/ostree``, as on an OSTree-booted system).

What is simulated is the boot side, the part meta-updater's board classes give a real board:

- the *bootloader* reads the Boot Loader Specification entries ``ostree admin deploy`` wrote under
  ``sysroot/boot/loader/entries`` and boots the one with the highest ``version`` (the default);
  its ``options`` line carries ``ostree=/ostree/boot.N/...``, which becomes the board's
  ``/proc/cmdline`` and names the booted deployment (ostree-prepare-root follows that link);
- *boot counting* (on the QCOM boards systemd-boot counts tries in the BLS entry's file name:
  uptane/meta-updater @ f0e1ccaf classes/sota_qcom.bbclass, ``sysroot.boot-counting-tries:3``): while
  ``sysroot/boot/edge-llm-ota-trial`` names a deployment, booting it counts one try; a deployment
  that does not come up (fault ``ota-no-boot``) exhausts its tries and the bootloader boots the
  next entry in the same reboot cycle. Removing the file is the "commit" (the entry marked good);
- "reboot" swaps the board's root: the namespace serves the booted deployment's ``/etc``, ``/usr``
  and ``/opt`` instead of the flashed rootfs; ``/proc/sys/kernel/random/boot_id`` changes.

Faults: ``ota-no-boot`` (a deployment other than the factory one never comes up), ``ota-bad-npu``
(it boots, but the NPU runs at the no-burst speed), ``ota-disconnect`` (the first ``ostree pull``
is cut mid-way; the staging directory it leaves lets the next pull resume).
This module reads the BLS entries itself; it shares no parser with production code.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from provisioner.errors import SimError
from provisioner.sim.board import VirtualBoard

OSNAME = "nodistro"              # meta-updater classes/sota.bbclass: OSTREE_OSNAME ?= "nodistro"
REMOTE = "edge-llm"
TRIAL_FILE = "boot/edge-llm-ota-trial"
OTA_FAULTS = ("ota-no-boot", "ota-bad-npu", "ota-disconnect")
OSTREE = "/usr/bin/ostree"


def sysroot(board: VirtualBoard) -> Path:
    return board.dir / "sysroot"


def _ostree(*args: str) -> str:
    res = subprocess.run([OSTREE, *args], capture_output=True, text=True, check=False)
    if res.returncode != 0:
        raise SimError(f"ostree {' '.join(args[:3])}: {res.stderr.strip()[:300]}", "see the ostree message")
    return res.stdout


def init_sysroot(board: VirtualBoard, repo: Path, branch: str, commit: str) -> str:
    """Make the board an OSTree board running ``commit`` (what flashing a sota image gives).

    The commit is imported as the remote ref ``edge-llm:<branch>``, so a later pull from the
    published repository finds the static delta from it.
    """
    s = sysroot(board)
    s.mkdir(parents=True, exist_ok=True)
    _ostree("admin", "init-fs", str(s))
    _ostree("admin", f"--sysroot={s}", "os-init", OSNAME)
    r = f"--repo={s}/ostree/repo"
    _ostree(r, "pull-local", str(repo), commit)
    _ostree(r, "refs", f"--create={REMOTE}:{branch}", commit)
    _ostree("admin", f"--sysroot={s}", "deploy", f"--os={OSNAME}", commit)
    with board.transaction() as data:
        data["ostree"] = {"factory": commit, "booted": None, "boot_log": []}
    choose_boot(board)
    return commit


def entries(board: VirtualBoard) -> list[dict[str, str]]:
    """BLS entries, default first (highest version), as the simulated bootloader sees them."""
    out = []
    d = sysroot(board) / "boot/loader/entries"
    for f in sorted(d.glob("*.conf")) if d.is_dir() else []:
        e: dict[str, str] = {"file": f.name}
        for line in f.read_text(encoding="utf-8").splitlines():
            key, _, val = line.strip().partition(" ")
            if key:
                e[key] = val.strip()
        out.append(e)
    return sorted(out, key=lambda e: int(e.get("version", "0") or 0), reverse=True)


def _ostree_arg(entry: dict[str, str]) -> str:
    for opt in entry.get("options", "").split():
        if opt.startswith("ostree="):
            return opt[len("ostree="):]
    return ""


def deployment_of(board: VirtualBoard, entry: dict[str, str]) -> Path | None:
    arg = _ostree_arg(entry)
    if not arg:
        return None
    p = (sysroot(board) / arg.lstrip("/")).resolve()
    return p if p.is_dir() else None


def _checksum(deployment: Path) -> str:
    return deployment.name.split(".")[0]


def choose_boot(board: VirtualBoard) -> dict[str, Any] | None:
    """Run the simulated bootloader once; record and return the booted entry (None: nothing boots)."""
    board.reload()
    state = board.data.get("ostree") or {}
    factory = state.get("factory")
    trial_path = sysroot(board) / TRIAL_FILE
    trial = trial_path.read_text().strip() if trial_path.is_file() else ""
    log = list(state.get("boot_log") or [])[-20:]
    booted = None
    for entry in entries(board):
        dep = deployment_of(board, entry)
        if dep is None:
            continue
        csum = _checksum(dep)
        if board.has_fault("ota-no-boot") and csum != factory:
            log.append({"tried": csum, "came_up": False, "counted": csum == trial})
            continue                      # bootcount > bootlimit: the bootloader boots the next entry
        booted = {"checksum": csum, "deployment": str(dep), "cmdline": entry.get("options", ""),
                  "boot_id": str(uuid.uuid4())}
        log.append({"tried": csum, "came_up": True})
        break
    faults = [f for f in board.faults if f != "no-burst" or not state.get("ota_no_burst")]
    ota_no_burst = bool(booted and board.has_fault("ota-bad-npu") and booted["checksum"] != factory
                        and "no-burst" not in faults)
    if ota_no_burst:
        faults.append("no-burst")         # the runtime stand-ins read no-burst live
    with board.transaction() as data:
        st = data.setdefault("ostree", {})
        st.update(booted=booted, boot_log=log, ota_no_burst=ota_no_burst)
        data["faults"] = faults
    return booted


def booted_root(board: VirtualBoard) -> Path | None:
    """The deployment the board serves as its root, or None for a board without OSTree."""
    st = board.data.get("ostree") or {}
    b = st.get("booted")
    if not b:
        return None
    p = Path(b["deployment"])
    return p if p.is_dir() else None


def booted_cmdline(board: VirtualBoard) -> str:
    st = board.data.get("ostree") or {}
    return ((st.get("booted") or {}).get("cmdline")) or ""


def boot_id(board: VirtualBoard) -> str:
    st = board.data.get("ostree") or {}
    return ((st.get("booted") or {}).get("boot_id")) or ""


def reboot(board: VirtualBoard) -> None:
    """Power-cycle through the simulated bootloader: stop the board, pick a deployment, start it.

    A board whose entries all fail stays down (no sshd): the fleet sees a board that never came back.
    """
    from provisioner.sim import host

    host.stop_host(board)
    time.sleep(float(os.environ.get("EDGE_LLM_SIM_OTA_REBOOT_S", "0.3")))
    if choose_boot(board) is None:
        board.update(ssh=None)
        return
    host.start_host(board)


def reboot_script(board: VirtualBoard) -> str:
    """``/usr/bin/reboot`` in the board's namespace: asks the host side to power-cycle this board.

    It leaves the namespace (``nsenter`` into the mount namespace the board was started from, named
    by its inode) and runs :func:`reboot` detached, so the ssh session that asked ends first.
    """
    src = Path(__file__).resolve().parents[2]
    return (
        "#!/bin/sh\n# SIMULATED reboot for edge-llm virtual boards (provisioner.sim.ostree_board)\n"
        f"ns={os.environ.get('EDGE_LLM_SIM_PARENT_MNTNS', '')}\n"
        "pid=1\n"
        "for p in /proc/[0-9]*; do\n"
        "  [ \"$(stat -L -c %i $p/ns/mnt 2>/dev/null)\" = \"$ns\" ] && { pid=${p#/proc/}; break; }\n"
        "done\n"
        "# the child must outlive this session: with a pty (Ansible's reboot module uses ssh -tt) its\n"
        "# close sends SIGHUP to this process group, possibly before setsid has run\n"
        "trap '' HUP\n"
        f"PYTHONPATH={src} setsid nsenter --mount=/proc/$pid/ns/mnt {sys.executable} -m "
        f"provisioner.sim.ostree_board reboot {board.root} {board.serial} </dev/null >/dev/null 2>&1 &\n"
        "exit 0\n")


def ostree_wrapper(board: VirtualBoard, real: str, sysroot_path: str) -> str:
    """``/usr/bin/ostree`` in a board with ``ota-disconnect``: the real ostree (copied to ``real``),
    but the first pull is killed as soon as its staging directory holds an object (a link cut
    mid-transfer); once only, so the next pull resumes from what the staging directory kept."""
    marker = sysroot(board) / ".edge-llm-sim-disconnected"
    return (
        "#!/bin/sh\n# real ostree; SIMULATED cut link on the first pull (fault ota-disconnect)\n"
        f"case \" $* \" in *\" pull \"*) [ -e {marker} ] || {{\n"
        f"  touch {marker}\n"
        f"  {real} \"$@\" & pid=$!\n"
        "  while kill -0 $pid 2>/dev/null; do\n"
        f"    if find {sysroot_path}/ostree/repo/tmp -path '*staging*' -type f 2>/dev/null | grep -q .; then\n"
        "      kill -9 $pid; echo 'error: Connection reset by peer (simulated: ota-disconnect)' >&2; exit 1\n"
        "    fi\n"
        "  done\n"
        "  wait $pid; exit $?; } ;;\n"
        "esac\n"
        f"exec {real} \"$@\"\n")


def main(argv: list[str]) -> int:
    if len(argv) == 3 and argv[0] == "reboot":
        signal.signal(signal.SIGHUP, signal.SIG_DFL)     # ignored by reboot_script; the board must not inherit that
        board = VirtualBoard.load(argv[1], argv[2])
        try:
            reboot(board)
        except SimError as exc:        # the board stays down; say why where `sim` users look
            with contextlib.suppress(OSError), open(board.dir / "host" / "reboot.log", "a") as log:
                print(f"reboot failed: {exc}", file=log)
            return 1
        return 0
    print("usage: python -m provisioner.sim.ostree_board reboot ROOT SERIAL", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
