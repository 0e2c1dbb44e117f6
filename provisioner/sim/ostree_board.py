"""A virtual sota board: a real OSTree sysroot and ESP, booted the way a QLI sota board boots.

The sysroot (``<board dir>/sysroot``) and the ESP (``<board dir>/esp``) are made and changed by the real
``ostree`` CLI only: here as IMAGE_CMD:ota builds them (uptane/meta-updater @ f0e1ccaf
classes/image_types_ota.bbclass:41-140), on the board by the update-os playbook through the booted sysroot.
The board runs *in* its booted deployment (:mod:`provisioner.sim.sota_root`): ``/`` is the deployment,
``/sysroot`` the physical root, ``/boot`` the ESP, so plain ``ostree admin status`` marks it booted.

What is simulated is the firmware side (:mod:`provisioner.sim.sota_boot`): systemd-boot picks an entry from
the ESP, counts a try in its file name, falls back when the tries run out; systemd-bless-boot marks the entry
good once the board came up. The booted entry's ``options`` line becomes ``/proc/cmdline``. "Reboot" stops the
board's namespace, boots again and serves the newly booted deployment; ``/proc/sys/kernel/random/boot_id``
changes.

Faults: ``ota-no-boot`` (a deployment other than the factory one never comes up), ``ota-bad-npu``
(it boots, but the NPU runs at the no-burst speed), ``ota-disconnect`` (the first ``ostree pull``
is cut mid-way; the staging directory it leaves lets the next pull resume).
This package reads the BLS entries itself; it shares no parser with production code.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from provisioner.errors import SimError
from provisioner.sim import sota_boot
from provisioner.sim.board import VirtualBoard

OSNAME = "nodistro"              # meta-updater classes/sota.bbclass:26: OSTREE_OSNAME ?= "nodistro"
REMOTE = "edge-llm"
OTA_FAULTS = ("ota-no-boot", "ota-bad-npu", "ota-disconnect", "ota-reboot-in-gate")
OSTREE = "/usr/bin/ostree"
#: sota.bbclass:30 OSTREE_KERNEL_ARGS_COMMON and sota_qcom.bbclass:12 OSTREE_KERNEL_ARGS (its console=); the
#: image's own KERNEL_CMDLINE_EXTRA (download_mode, ...) follows, from the flashed rootfs's command line
SOTA_KARGS = ("console=ttyMSM0,115200", "root=LABEL=otaroot", "rootfstype=ext4")
_NOT_EXTRA = ("root=", "rootfstype=", "console=", "rw", "ro", "rootwait")


def sysroot(board: VirtualBoard) -> Path:
    return board.dir / "sysroot"


def esp(board: VirtualBoard) -> Path:
    """The board's ESP (a folder here; ``ota-esp`` is a vfat image on a real board, sota_qcom.bbclass:7)."""
    return board.dir / "esp"


def _ostree(*args: str) -> str:
    res = subprocess.run([OSTREE, *args], capture_output=True, text=True, check=False)
    if res.returncode != 0:
        raise SimError(f"ostree {' '.join(args[:3])}: {res.stderr.strip()[:300]}", "see the ostree message")
    return res.stdout


def _image_kargs(board: VirtualBoard) -> list[str]:
    from provisioner.sim import namespace

    extra = [a for a in namespace.rootfs_cmdline(board.rootfs_dir).split()
             if not a.startswith(_NOT_EXTRA) and a not in _NOT_EXTRA]
    return [*SOTA_KARGS, *extra]


def init_sysroot(board: VirtualBoard, repo: Path, branch: str, commit: str) -> str:
    """Make the board an OSTree board running ``commit``: what flashing a sota image gives, built as
    IMAGE_CMD:ota builds it (image_types_ota.bbclass line numbers beside each step).

    The commit is imported as the remote ref ``edge-llm:<branch>``, so a later pull from the
    published repository finds the static delta from it.
    """
    s, e = sysroot(board), esp(board)
    unfreeze(board.dir)
    for d in (s, e):
        shutil.rmtree(d, ignore_errors=True)
    s.mkdir(parents=True)
    _ostree("admin", f"--sysroot={s}", "init-fs", "--modern", str(s))                          # :42
    _ostree("admin", f"--sysroot={s}", "os-init", OSNAME)                                       # :43
    (s / "boot/loader.0").mkdir(parents=True)                                                   # :46-47
    os.symlink("loader.0", s / "boot/loader")
    (s / "boot/loader/loader.conf").touch()                                                     # :55-56
    r = f"--repo={s}/ostree/repo"
    _ostree(r, "config", "set", "sysroot.boot-counting-tries",                                  # :69-75
            str(sota_boot.DEFAULT_TRIES))                                    # sota_qcom.bbclass:29
    _ostree(r, "pull-local", str(repo), commit)                                                 # :81
    _ostree(r, "refs", f"--create={REMOTE}:{branch}", commit)                                   # :94
    before = sota_boot.counters(s / "boot", s)
    _ostree("admin", f"--sysroot={s}", "deploy", *(f"--karg-append={a}" for a in _image_kargs(board)),
            f"--os={OSNAME}", commit)                                                           # :82-95
    sota_boot.name_entries(s / "boot", s, before, sota_boot.tries_configured(s / "ostree/repo"))
    var = s / "ostree/deploy" / OSNAME / "var"
    home = board.rootfs_dir / "home"
    if home.is_dir():                                                                           # :109-110
        (var / "rootdirs").mkdir(parents=True, exist_ok=True)
        shutil.copytree(home, var / "rootdirs/home", symlinks=True, dirs_exist_ok=True)
    (var / "local").mkdir(parents=True, exist_ok=True)                                          # :112-113
    # :124-136 moves boot/ onto the ESP and leaves sysroot/boot empty; the loader stays a link here
    # (provisioner.sim.sota_boot says why)
    e.mkdir(parents=True)
    for child in list((s / "boot").iterdir()):
        shutil.move(str(child), str(e / child.name))
    with board.transaction() as data:
        data["ostree"] = {"factory": commit, "booted": None, "boot_log": []}
    choose_boot(board)
    return commit


def deployment_of(board: VirtualBoard, entry: sota_boot.Entry) -> Path | None:
    key = sota_boot.deployment_key(entry, sysroot(board))
    p = Path(key) if key else None
    return p if p is not None and p.is_dir() and p.is_relative_to(sysroot(board)) else None


def _checksum(deployment: Path) -> str:
    return deployment.name.split(".")[0]


def choose_boot(board: VirtualBoard) -> dict[str, Any] | None:
    """Power on through the simulated firmware; record and return the booted entry (None: nothing boots)."""
    board.reload()
    state = board.data.get("ostree") or {}
    factory = state.get("factory")
    log: list[dict[str, Any]] = list(state.get("boot_log") or [])[-20:]

    def comes_up(entry: sota_boot.Entry) -> bool:
        dep = deployment_of(board, entry)
        if dep is None:
            return False
        return not (board.has_fault("ota-no-boot") and _checksum(dep) != factory)

    entry = sota_boot.boot(esp(board), comes_up, log)
    booted = None
    if entry is not None:
        dep = deployment_of(board, entry)
        assert dep is not None
        entry = sota_boot.bless(entry)           # boot-complete.target reached: systemd-bless-boot
        booted = {"checksum": _checksum(dep), "deployment": str(dep), "cmdline": entry.options,
                  "entry": entry.path.name, "boot_id": str(uuid.uuid4())}
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


def unfreeze(path: Path) -> None:
    """Clear ostree's immutable bit on every deployment under ``path`` (``ostree admin deploy`` sets it on the
    deployment's root directory), so the folder can be removed with ``rm -rf`` again."""
    deployments = "sysroot/ostree/deploy/*/deploy/*"          # under a board dir, a boards dir or a sim root
    for dep in (d for depth in ("", "*/", "*/*/") for d in Path(path).glob(depth + deployments)):
        if dep.is_dir() and not dep.is_symlink():
            subprocess.run(["chattr", "-i", str(dep)], capture_output=True, check=False)


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


def cut_pull(board: VirtualBoard) -> str:
    """Shell code for the board's ostree wrapper with ``ota-disconnect``: the first pull is killed as soon as
    its staging directory holds an object (a link cut mid-transfer); once only, so the next pull resumes from
    what the staging directory kept. Empty without the fault."""
    if not board.has_fault("ota-disconnect"):
        return ""
    marker = sysroot(board) / ".edge-llm-sim-disconnected"
    return (
        "# SIMULATED cut link on the first pull (fault ota-disconnect)\n"
        f"case \" $* \" in *\" pull \"*) [ -e /sysroot/{marker.name} ] || {{\n"
        f"  touch /sysroot/{marker.name}\n"
        "  \"$real\" \"$@\" & pid=$!\n"
        "  while kill -0 $pid 2>/dev/null; do\n"
        "    if find /sysroot/ostree/repo/tmp -path '*staging*' -type f 2>/dev/null | grep -q .; then\n"
        "      kill -9 $pid; echo 'error: Connection reset by peer (simulated: ota-disconnect)' >&2; exit 1\n"
        "    fi\n"
        "  done\n"
        "  wait $pid; exit $?; } ;;\n"
        "esac\n")


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
