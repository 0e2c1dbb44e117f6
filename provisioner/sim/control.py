"""Bring virtual boards up and down: the library behind ``provisioner sim`` and rehearsals.

``up`` creates boards (each with its own serial, station slot and sparse LUN images), makes sure
the supervisor runs, and either leaves them in EDL for a station to flash or factory-installs a
synthetic image of a manifest (built-in example per board type by default) so they boot straight
to a usable system. ``down`` removes everything a sim root started - supervisor, sshd, mounts,
fake USB devices, board directories - and also works after any of those processes was killed -9.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from provisioner import catalog
from provisioner.contracts import inventory
from provisioner.errors import SimError
from provisioner.sim import supervisor, sysfs
from provisioner.sim.board import FAULTS, VirtualBoard, list_boards, new_serial, next_free_slot, sim_root

BUILTIN_MODELS = {"iq-8275-evk": "gemma-4-e2b", "iq-9075-evk": "nemotron-nano-8b"}


@dataclass
class UpResult:
    boards: list[VirtualBoard]
    inventory: Path | None
    bundle: Path | None

    def as_dict(self) -> dict[str, Any]:
        return {"boards": [_public(b) for b in self.boards],
                "inventory": str(self.inventory) if self.inventory else None,
                "bundle": str(self.bundle) if self.bundle else None}


def _public(b: VirtualBoard) -> dict[str, Any]:
    d = b.reload().data
    return {"serial": d["serial"], "board": d["board"], "slot": d["slot"], "state": d["state"],
            "faults": d["faults"], "ssh": d.get("ssh"), "console": str(b.console_link) if d.get("console") else None,
            "build_id": d.get("build_id"), "download_mode": d.get("download_mode")}


# ---------------------------------------------------------------------------------------------- images
def builtin_manifest(root: Path, board_id: str) -> Path:
    """Write (once) the example manifest a sim root uses for ``board_id`` and its synthetic model.

    Gemma-4 E2B (.litertlm, QAIRT 2.44.0.260225) for IQ-8275 and Nemotron Nano (Genie, 2.45.0.260326)
    for IQ-9075, the two reference deployments; model files are tiny real-format stand-ins.
    """
    from provisioner.sim import synthetic_models

    b = catalog.board(board_id)
    model_id = BUILTIN_MODELS.get(b.id)
    info = catalog.models().get(model_id) if model_id else None
    if info is None:
        raise SimError(f"no built-in example for {b.id}", "pass --manifest")
    cache = root / "cache" / b.id
    cache.mkdir(parents=True, exist_ok=True)
    qairt = catalog.normalize_qairt(info.qairt)
    if info.kind == "litertlm":
        model = cache / (info.file or f"{model_id}.litertlm")
        if not model.exists():
            synthetic_models.make_litertlm(model, qairt)
    else:
        model = cache / f"{model_id}-genie"
        if not model.exists():
            synthetic_models.make_genie_bundle(cache / ".genie.tmp", soc_model=b.qnn_soc_model,
                                               dsp_arch=b.hexagon_arch, qairt_full=info.qairt)
            os.replace(cache / ".genie.tmp", model)
    data = {
        "manifest": 1, "release": f"sim-{b.id}-example", "board": b.id, "qli": "qli-2.0", "qairt": [qairt],
        "runtimes": [info.runtime], "models": [{"name": model_id, "kind": info.kind, "path": str(model),
                                                 "qairt": qairt}],
        # A factory image: QLI's default console login (root / the board's password), crash dumps off.
        "image": {"variant": "debug", "memlock": "unlimited", "download_mode": 0, "root_login": "debug",
                  "inference_user": "llm"},
    }
    path = cache / "manifest.yaml"
    tmp = cache / ".manifest.yaml.tmp"
    tmp.write_text("# built-in example for virtual boards (provisioner.sim.control)\n" + yaml.safe_dump(data),
                   encoding="utf-8")
    os.replace(tmp, path)
    return path


def bundle_for(root: Path, manifest_path: Path) -> Path:
    """Synthetic bundle for a manifest, cached in the sim root (rebuilt if the manifest changed)."""
    from provisioner.manifest import load_manifest
    from provisioner.sim.bundle import make_bundle

    manifest = load_manifest(manifest_path)
    out = root / "cache" / "bundles" / manifest.release
    stamp = out / ".manifest"
    text = manifest_path.read_text(encoding="utf-8")
    bundles = [p for p in out.glob("*-*") if p.is_dir()] if out.is_dir() else []
    if bundles and stamp.is_file() and stamp.read_text(encoding="utf-8") == text:
        return bundles[0]
    files = {m.name: m.path for m in manifest.models if m.path is not None and Path(m.path).exists()}
    bundle = make_bundle(manifest, out, model_files=files)
    stamp.write_text(text, encoding="utf-8")
    return bundle


# ---------------------------------------------------------------------------------------------- up / down
def up(count: int, board_id: str, *, root: str | os.PathLike[str] | None = None, faults: tuple[str, ...] = (),
       state: str = "booted", manifest: Path | None = None, inventory: Path | None = None,
       timeout_s: float | None = None, lun_mib: int | None = None) -> UpResult:
    """Add ``count`` boards of type ``board_id`` to the sim root and bring them to ``state``.

    ``timeout_s`` bounds the whole boot (default :func:`boot_timeout` of ``count``).

    ``booted``: factory-install the synthetic image of ``manifest`` (built-in example if None), boot,
    wait for every board to reach ``booted`` and (re)write the Ansible inventory of all booted
    boards. ``edl``: boards wait in EDL (05c6:9008) for a station to flash them. ``off``: unpowered.
    """
    if count < 1:
        raise SimError(f"cannot bring up {count} boards", "give a positive number")
    if state not in ("booted", "edl", "off"):
        raise SimError(f"unsupported start state '{state}'", "use booted, edl or off")
    for f in faults:
        if f not in FAULTS:
            raise SimError(f"unknown fault '{f}'", f"use one of: {', '.join(FAULTS)}")
    b = catalog.board(board_id)
    root_p = sim_root(root)
    root_p.mkdir(parents=True, exist_ok=True)
    from provisioner.sim.qdl import flash_bundle, install_wrappers

    install_wrappers(root_p)
    bundle = None
    if state == "booted":
        mpath = Path(manifest) if manifest else builtin_manifest(root_p, b.id)
        bundle = bundle_for(root_p, mpath)
        if not bundle.name.endswith(b.kas_machine):
            raise SimError(f"{mpath} is for another board than {b.id}", "pass a manifest for this board type")
    created: list[VirtualBoard] = []
    kwargs: dict[str, Any] = {"faults": tuple(faults)}
    if lun_mib:
        kwargs["lun_mib"] = lun_mib
    with _root_lock(root_p):             # two `sim up` at once must not pick the same serial or slot
        for _ in range(count):
            created.append(VirtualBoard.create(root_p, b.id, new_serial(root_p), next_free_slot(root_p), **kwargs))
    supervisor.ensure_running(root_p)
    for vb in created:
        if state == "booted":
            flash_bundle(vb, bundle)          # sets the board booting; the supervisor boots it
        elif state == "edl":
            vb.set_state("edl")
    inv = None
    if state == "booted":
        deadline = time.monotonic() + (boot_timeout(count) if timeout_s is None else timeout_s)
        for vb in created:
            supervisor.wait_for_state(vb, "booted", max(1.0, deadline - time.monotonic()))
        inv = write_inventory(root_p, inventory)
    return UpResult(boards=created, inventory=inv, bundle=bundle)


BOOT_S_PER_BOARD = 1.0          # generous: one board's namespace takes ~0.3-0.6 s of a busy 2-core host


def boot_timeout(count: int) -> float:
    """Seconds to wait for ``count`` boards to boot: the boards start a few at a time, so the bound
    grows with the fleet (256 boards must not time out where 4 would be given 120 s)."""
    return max(120.0, BOOT_S_PER_BOARD * count)


@contextlib.contextmanager
def _root_lock(root: Path):
    import fcntl

    fd = os.open(root / ".create.lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def write_inventory(root: str | os.PathLike[str] | None, path: Path | None = None) -> Path:
    """Ansible inventory of every booted board with an SSH address (``<root>/inventory.yml``).

    Each board's ``edge_llm_serve_port_base`` is its own block (:mod:`provisioner.sim.ports`), so
    boards and concurrent rehearsals never share a service port. Written by the inventory
    contract's writer, so a virtual board's inventory has the keys a station export has; host
    connection variables (address, port, controller key, known_hosts, the board's python)
    come from :func:`provisioner.sim.sshd.inventory_hosts`.
    """
    from provisioner.sim import ports, sshd

    root_p = sim_root(root)
    by_serial = {b.serial: b for b in list_boards(root_p) if b.state == "booted"}
    booted = set(by_serial)
    hosts = []
    for name, hv in sorted(sshd.inventory_hosts(root_p).items()):
        if hv.get("board_serial") not in booted:
            continue
        connection = {k: v for k, v in hv.items()
                      if k.startswith("ansible_") and k not in ("ansible_host", "ansible_port", "ansible_user")}
        hosts.append((name, inventory.host_vars(
            board=hv["board_type"], address=hv["ansible_host"], port=hv["ansible_port"], user=hv["ansible_user"],
            serial=hv["board_serial"], connection=connection,
            # its own service ports: boards share the loopback, real boards have their own address
            serve_port_base=ports.serve_port_base(by_serial[hv["board_serial"]]))))
    inv = inventory.build_inventory(hosts)
    out = inventory.write_inventory(Path(path) if path else root_p / "inventory.yml", inv)
    if out != root_p / "inventory.yml":
        inventory.write_inventory(root_p / "inventory.yml", inv)
    return out


def _ancestors() -> set[int]:
    out, pid = set(), os.getpid()
    while pid > 1:
        out.add(pid)
        try:
            pid = int(Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[1])
        except (OSError, ValueError, IndexError):
            break
    return out


def _pids_mentioning(root: Path) -> list[int]:
    """Sim processes (sshd, supervisor, qdl stand-in) whose command line names this sim root."""
    skip = _ancestors()
    needle = str(root).rstrip("/").encode()
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) in skip:
            continue
        try:
            cmd = (d / "cmdline").read_bytes()
        except OSError:
            continue
        if not any(needle + end in cmd + b"\0" for end in (b"/", b"\0", b"'")):
            continue
        if b"sshd" in cmd or b"provisioner.sim." in cmd:
            out.append(int(d.name))
    return out


def _mounts_under(root: Path) -> list[str]:
    out = []
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return out
    prefix = str(root).rstrip("/") + "/"
    for line in lines:
        mnt = line.split()[4].replace("\\040", " ")
        if mnt.startswith(prefix) or mnt == str(root):
            out.append(mnt)
    return sorted(out, key=len, reverse=True)


def down(root: str | os.PathLike[str] | None = None, *, keep_cache: bool = True) -> dict[str, Any]:
    """Stop and remove everything of a sim root; safe to run twice and after kill -9 of anything."""
    root_p = sim_root(root)
    report: dict[str, Any] = {"root": str(root_p), "supervisor": None, "boards": 0, "killed": [], "unmounted": []}
    if not root_p.exists():
        return report
    report["supervisor"] = supervisor.running_pid(root_p)
    supervisor.stop(root_p)
    boards = list_boards(root_p)
    report["boards"] = len(boards)
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=16) as pool:     # idempotent; cleans up after a supervisor killed -9
        list(pool.map(supervisor._stop_host, boards))
    # Safety net: any process still naming this root was started by it (sshd -f <root>/..., a
    # supervisor whose pidfile was lost, a qdl waiting forever): end each one by its pid.
    pids = _pids_mentioning(root_p)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 5
    while pids and time.monotonic() < deadline:
        pids = [p for p in pids if Path(f"/proc/{p}").exists() and _not_zombie(p)]
        time.sleep(0.05)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    report["killed"] = pids
    for mnt in _mounts_under(root_p):
        subprocess.run(["umount", "-l", mnt], capture_output=True, check=False)
        report["unmounted"].append(mnt)
    for vb in boards:
        sysfs.remove_usb_device(root_p, vb.slot)
    # ostree sets the immutable bit on each deployment it writes: cleared, or nobody could remove them
    from provisioner.sim import ostree_board

    ostree_board.unfreeze(root_p / "boards")
    for name in ("boards", "sysfs", "bin", "ssh", "run"):
        shutil.rmtree(root_p / name, ignore_errors=True)
    for name in ("inventory.yml", supervisor.PIDFILE):
        with contextlib.suppress(FileNotFoundError):
            (root_p / name).unlink()
    if not keep_cache:
        shutil.rmtree(root_p / "cache", ignore_errors=True)
    return report


def _not_zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


# ---------------------------------------------------------------------------------------------- actions
def find_board(root: str | os.PathLike[str] | None, ident: str) -> VirtualBoard:
    """A board by serial (any case) or station slot."""
    root_p = sim_root(root)
    for vb in list_boards(root_p):
        if vb.serial == ident.upper() or vb.slot == ident:
            return vb
    known = ", ".join(f"{b.serial}@{b.slot}" for b in list_boards(root_p)) or "none"
    raise SimError(f"no virtual board '{ident}' in {root_p} (known: {known})", "use a serial or slot from `sim status`")


def enter_edl(vb: VirtualBoard) -> VirtualBoard:
    """Power-cycle with the EDL button held: the board enumerates as 05c6:9008."""
    return vb.set_state("edl", event="edl-button")


def power_cycle(vb: VirtualBoard) -> VirtualBoard:
    """Power-cycle: the board boots whatever is flashed (leaves EDL/ramdump)."""
    return vb.set_state("booting", event="power-cycle")


def power_off(vb: VirtualBoard) -> VirtualBoard:
    return vb.set_state("off", event="power-off")


def cdsp_crash(vb: VirtualBoard) -> VirtualBoard:
    """A cDSP fatal error: ramdump (05c6:900e) with download_mode=1, reboot with 0."""
    vb.reload()
    if vb.state != "booted":
        raise SimError(f"board {vb.serial} is {vb.state}, not booted", "boot it first (`provisioner sim boot`)")
    target = "ramdump" if int(vb.data.get("download_mode") or 0) else "booting"
    return vb.set_state(target, event="cdsp-crash")
