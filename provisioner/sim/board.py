"""A virtual EVK as a directory on disk: the one state every simulator process agrees on.

The qdl stand-in, the console supervisor, the per-board sshd and the CLI are separate processes
(and may be restarted), so a board's state cannot live in any one of them. It lives in
``<root>/boards/<serial>/board.json``, rewritten atomically (temp + rename) under an ``fcntl``
lock so concurrent read-modify-write cycles never lose an update, next to the board's UFS LUN
images, its partition table and (once booted) its extracted root filesystem.

States follow the real board: ``off`` (no power / fell off USB), ``edl`` (USB 05c6:9008, qdl can
flash), ``booting`` (reset after flashing, console prints the boot log), ``booted`` (login prompt,
sshd up) and ``ramdump`` (05c6:900e after a crash with download_mode=1; needs a power cycle).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from provisioner import catalog
from provisioner.errors import SimError
from provisioner.sim import sysfs

DEFAULT_ROOT = "/var/tmp/edge-llm-sim"
STATES = ("off", "edl", "booting", "booted", "ramdump")
FAULTS = ("no-burst", "memlock", "qairt-mismatch", "no-fastrpc-group", "truncated-model", "wrong-soc-model",
          "soc-config-14001", "unreachable", "slow", "edl-drop", "no-prompt",
          "ota-no-boot", "ota-bad-npu", "ota-disconnect", "ota-reboot-in-gate")   # sim.ostree_board
DEFAULT_LUN_MIB = 64
DEFAULT_LUN0_MIB = 256           # LUN0 holds efi + rootfs; bigger so a synthetic rootfs always fits
DEFAULT_ROOT_PASSWORD = "oelinux123"   # QLI 2.0's default (qcom-minimal-image); sim boards only
SERIAL_RE = re.compile(r"^[0-9A-F]{8}$")
PORT_RE = re.compile(r"^\d+-\d+(\.\d+)*$")


def sim_root(root: str | os.PathLike[str] | None = None) -> Path:
    """The sim root: ``root``, else ``$PROVISIONER_SIM_ROOT``, else /var/tmp/edge-llm-sim."""
    if root is not None:
        return Path(root).absolute()
    return Path(os.environ.get("PROVISIONER_SIM_ROOT") or DEFAULT_ROOT).absolute()


def env_number(name: str, default: float) -> float:
    """A simulator knob from the environment (a scale or a delay): a non-negative number, the
    default when unset or malformed, so a typo never stops the boards."""
    try:
        return max(0.0, float(os.environ.get(name, default)))
    except ValueError:
        return default


def boards_dir(root: Path) -> Path:
    return Path(root) / "boards"


def _atomic_write_json(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(data, fh, indent=2, sort_keys=True)
        fh.write("\n")
    os.replace(tmp, path)


class VirtualBoard:
    """Handle on one virtual board directory. Cheap to create; every read goes to disk.

    Attribute access (``board.state``, ``board.faults`` ...) reads the last loaded snapshot;
    call :meth:`reload` to see other processes' changes. Writes go through :meth:`update`,
    :meth:`set_state` or :meth:`transaction`, which lock, re-read, modify and write back.
    """

    def __init__(self, root: Path, serial: str, data: dict[str, Any] | None = None) -> None:
        self.root = Path(root)
        self.serial = serial
        self.dir = boards_dir(self.root) / serial
        self._data: dict[str, Any] = data if data is not None else {}

    # ------------------------------------------------------------------ creation / loading
    @classmethod
    def create(cls, root: str | os.PathLike[str], board_id: str, serial: str, slot: str, *,
               lun_mib: int = DEFAULT_LUN_MIB, lun0_mib: int = DEFAULT_LUN0_MIB, faults: tuple[str, ...] = (),
               state: str = "off", download_mode: int = 1,
               root_password: str = DEFAULT_ROOT_PASSWORD, hostname: str | None = None) -> VirtualBoard:
        """Create a new board directory with sparse LUN images and a board.json.

        Raises :class:`SimError` for a bad serial, slot, board type or fault name, or if a board
        with that serial or slot already exists (two boards in one USB port cannot happen).
        """
        root_p = sim_root(root)
        b = catalog.board(board_id)
        serial = serial.upper()
        if not SERIAL_RE.match(serial):
            raise SimError(f"bad board serial '{serial}'", "use 8 hex digits like 0AA94EFD")
        if not PORT_RE.match(slot):
            raise SimError(f"bad station slot '{slot}'", "use a USB port path like 1-4.2")
        check_faults(faults)
        if state not in STATES:
            raise SimError(f"unknown board state '{state}'", f"use one of: {', '.join(STATES)}")
        for other in list_boards(root_p):
            if other.serial == serial:
                raise SimError(f"virtual board {serial} already exists in {root_p}", "pick another serial")
            if other.slot == slot:
                raise SimError(f"station slot {slot} is already taken by board {other.serial}",
                               "pick another slot")
        board_dir = boards_dir(root_p) / serial
        board_dir.mkdir(parents=True, exist_ok=False)
        luns = {}
        for lun in b.luns:
            size = (lun0_mib if lun == 0 else lun_mib) * 1024 * 1024
            path = board_dir / f"lun{lun}.img"
            with open(path, "wb") as fh:
                fh.truncate(size)      # sparse: costs no disk until qdl writes into it
            luns[str(lun)] = size
        data = {
            "format": 1,
            "serial": serial,
            "board": b.id,
            "slot": slot,
            "state": "off",
            "faults": list(dict.fromkeys(faults)),
            "download_mode": int(download_mode),
            "root_password": root_password,
            "hostname": hostname or f"{b.id.removesuffix('-evk')}-{serial.lower()}",
            "ssh": None,
            "console": None,
            "build_id": None,
            "boot_lun": None,
            "luns": luns,
            "pids": {},
            "usb_devnum": 1,
            "seq": 0,
            "created": time.time(),
            "changed": time.time(),
        }
        _atomic_write_json(board_dir / "board.json", data)
        vb = cls(root_p, serial, data)
        if state != "off":
            vb.set_state(state)
        return vb

    @classmethod
    def load(cls, root: str | os.PathLike[str], serial: str) -> VirtualBoard:
        """Open an existing board; :class:`SimError` naming the known serials if absent."""
        root_p = sim_root(root)
        serial = serial.upper()
        vb = cls(root_p, serial)
        if not (vb.dir / "board.json").is_file():
            known = ", ".join(b.serial for b in list_boards(root_p)) or "none"
            raise SimError(f"no virtual board {serial} in {root_p} (known: {known})",
                           "create boards with `provisioner sim up`")
        vb.reload()
        return vb

    def reload(self) -> VirtualBoard:
        """Re-read board.json (another process may have changed it)."""
        for _ in range(5):
            try:
                self._data = json.loads((self.dir / "board.json").read_text(encoding="utf-8"))
                return self
            except json.JSONDecodeError:     # cannot happen with rename, but never crash a reader
                time.sleep(0.01)
        raise SimError(f"{self.dir / 'board.json'} is unreadable", "remove the board with `provisioner sim down`")

    # ------------------------------------------------------------------ writes
    @contextlib.contextmanager
    def lock(self) -> Iterator[None]:
        """Exclusive lock on this board (also used by qdl so two flashes never overlap)."""
        fd = os.open(self.dir / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    @contextlib.contextmanager
    def transaction(self) -> Iterator[dict[str, Any]]:
        """Lock, yield the fresh state dict for in-place edits, then write it back atomically."""
        with self.lock():
            self.reload()
            data = self._data
            yield data
            data["seq"] = int(data.get("seq", 0)) + 1
            data["changed"] = time.time()
            _atomic_write_json(self.dir / "board.json", data)
            self._data = data

    def update(self, **fields: Any) -> VirtualBoard:
        """Set top-level fields (``state`` must go through :meth:`set_state`)."""
        if "state" in fields:
            raise SimError("use set_state() to change a board's state")
        if "faults" in fields:
            check_faults(fields["faults"])
        with self.transaction() as data:
            data.update(fields)
        return self

    def set_state(self, state: str, **fields: Any) -> VirtualBoard:
        """Move to ``state`` and keep the fake sysfs entry in step with it.

        In ``edl`` the board enumerates as 05c6:9008 and in ``ramdump`` as 05c6:900e at its slot;
        in every other state it is absent from the USB bus. Each enumeration gets a new devnum,
        as the kernel assigns one per (re)connect.
        """
        if state not in STATES:
            raise SimError(f"unknown board state '{state}'", f"use one of: {', '.join(STATES)}")
        ids = catalog.usb_ids()
        with self.transaction() as data:
            previous = data["state"]
            data.update(fields)
            data["state"] = state
            if state != "booted":
                # A power event (reset, EDL entry, crash, unplug): the supervisor restarts its
                # boot sequence or console session whenever this counter moves.
                data["power_seq"] = int(data.get("power_seq", 0)) + 1
                data.setdefault("event", None)
                if "event" not in fields:
                    data["event"] = None
            if state in ("edl", "ramdump"):
                product = ids["edl_product"] if state == "edl" else ids["ramdump_product"]
                if previous != state:
                    data["usb_devnum"] = int(data.get("usb_devnum", 1)) % 127 + 1
                sysfs.add_usb_device(self.root, data["slot"], product_id=product, serial=data["serial"],
                                     devnum=data["usb_devnum"])
            else:
                sysfs.remove_usb_device(self.root, data["slot"])
        return self

    def add_fault(self, name: str) -> VirtualBoard:
        check_faults([name])
        with self.transaction() as data:
            if name not in data["faults"]:
                data["faults"].append(name)
        return self

    def clear_fault(self, name: str) -> VirtualBoard:
        with self.transaction() as data:
            data["faults"] = [f for f in data["faults"] if f != name]
        return self

    # ------------------------------------------------------------------ reads
    @property
    def data(self) -> dict[str, Any]:
        return dict(self._data)

    def __getattr__(self, name: str) -> Any:
        # Called only for names not found normally: expose board.json fields as attributes.
        data = self.__dict__.get("_data") or {}
        if name in data:
            return data[name]
        raise AttributeError(name)

    @property
    def board_id(self) -> str:
        return self._data["board"]

    @property
    def catalog_board(self) -> catalog.Board:
        return catalog.board(self._data["board"])

    @property
    def sector_size(self) -> int:
        return self.catalog_board.sector_size

    def has_fault(self, name: str) -> bool:
        return name in self._data.get("faults", [])

    def lun_path(self, lun: int) -> Path:
        return self.dir / f"lun{int(lun)}.img"

    def lun_size(self, lun: int) -> int:
        return self.lun_path(lun).stat().st_size

    @property
    def partitions_path(self) -> Path:
        return self.dir / "partitions.json"

    def partitions(self) -> dict[str, dict[str, int]]:
        """label -> {lun, start_sector, num_sectors} as written by the last flash ({} if never)."""
        try:
            return json.loads(self.partitions_path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}

    @property
    def rootfs_dir(self) -> Path:
        return self.dir / "rootfs"

    @property
    def console_link(self) -> Path:
        return self.dir / "console"

    @property
    def log_path(self) -> Path:
        """What the board printed on its console (boot logs; never passwords)."""
        return self.dir / "console.log"

    @property
    def usb_product(self) -> str:
        return f"{sysfs.EDL_PRODUCT_PREFIX}{self.serial}"

    def __repr__(self) -> str:
        return f"VirtualBoard({self.serial}, {self._data.get('board')}, slot={self._data.get('slot')}, " \
               f"state={self._data.get('state')})"


def host_dir(board: VirtualBoard) -> Path:
    """The board's host-side folder for its running namespace (sshd config, agent record, overlay uppers)."""
    return board.dir / "host"


def ufs_serial(board: VirtualBoard) -> str:
    """The virtual board's UFS device serial string (what its UFS device descriptor would say)."""
    return f"SIMUFS{board.serial}"


#: where the virtual board's UFS host controller shows that string (1d84000 is the UFS controller's
#: address in the Qualcomm SoCs' device trees; the node is named ufs@ or ufshc@ depending on the SoC)
UFS_SERIAL_PATH = "/sys/bus/platform/devices/1d84000.ufs/string_descriptors/serial_number"


def check_faults(faults: Any) -> None:
    """SimError naming the known faults if any of ``faults`` is unknown."""
    for f in faults:
        if f not in FAULTS:
            raise SimError(f"unknown fault '{f}'", f"use one of: {', '.join(FAULTS)}")


def list_boards(root: str | os.PathLike[str] | None = None) -> list[VirtualBoard]:
    """Every board under ``root``, sorted by slot then serial."""
    root_p = sim_root(root)
    out = []
    bdir = boards_dir(root_p)
    if not bdir.is_dir():
        return []
    for d in bdir.iterdir():
        if (d / "board.json").is_file():
            try:
                out.append(VirtualBoard(root_p, d.name).reload())
            except SimError:
                continue
    return sorted(out, key=lambda b: (_slot_key(b.slot), b.serial))


def _slot_key(slot: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.split(r"[-.]", slot) if x.isdigit())


def next_free_slot(root: str | os.PathLike[str] | None, bus: int = 1) -> str:
    """A station slot not used yet: 1-1.1 .. 1-1.7, 1-2.1 ... (a hub of 7 ports per root port)."""
    used = {b.slot for b in list_boards(root)}
    for hub in range(1, 128):
        for port in range(1, 8):
            slot = f"{bus}-{hub}.{port}"
            if slot not in used:
                return slot
    raise SimError("no free station slot left", "run `provisioner sim down` first")


def new_serial(root: str | os.PathLike[str] | None, seed: int | None = None) -> str:
    """An 8-hex-digit serial not used under ``root`` (deterministic when ``seed`` is given)."""
    used = {b.serial for b in list_boards(root)}
    n = seed if seed is not None else int.from_bytes(os.urandom(4), "big")
    for i in range(1 << 16):
        serial = f"{(0x0AA94E00 + n + i * 0x1F3) & 0xFFFFFFFF:08X}"
        if serial not in used:
            return serial
    raise SimError("could not pick a free serial")
