"""The station's hand-over to the fleet: an Ansible inventory of the boards that passed, and the
``known_hosts`` file that pins each board's SSH host keys as recorded on the line.

The key file is named after the inventory (``inventory/line1.yml`` -> ``inventory/line1.known_hosts``),
in the inventory's folder: two inventories exported into one folder (two stations, two lines)
keep their own pinned keys instead of one replacing the other's.

Why pinned keys instead of trust on first use: the fleet then connects with
``StrictHostKeyChecking=yes`` (ssh_config(5)) against keys the board showed the station over its
serial console at first boot, so an impostor on the network, or a board whose keys were replaced,
is refused by ssh itself and reported by ``fleet verify`` with both fingerprints.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from provisioner import catalog
from provisioner.contracts import inventory
from provisioner.errors import StationError
from provisioner.station import identity as board_identity
from provisioner.station.records import Records


def known_hosts_for(out: Path | str) -> Path:
    """The pinned-keys file written beside inventory ``out``: its name with ``.known_hosts``."""
    return Path(out).absolute().with_suffix(".known_hosts")


def parse_address(serial: str, value: str) -> tuple[str, int | None]:
    """``host``, ``host:port``, ``[v6]``, ``[v6]:port`` or a bare IPv6 address, as (host, port);
    a bad one is a StationError naming the board."""
    text = str(value).strip()
    host, port, has_port = text, "", False
    if text.startswith("["):
        host, sep, rest = text[1:].partition("]")
        if not sep or (rest and not rest.startswith(":")):
            host = ""
        port, has_port = rest[1:], bool(rest)
    elif text.count(":") == 1:
        host, _, port = text.partition(":")
        has_port = True
    ok = bool(host) and not any(c.isspace() or c in "[]/" for c in host)
    if has_port:
        ok = ok and port.isascii() and port.isdigit() and 1 <= int(port) <= 65535
    if not ok:
        raise StationError(f"address {value!r} of board {serial} is not host[:port] (port 1-65535)",
                           "e.g. --address 0AA94EFD=10.0.0.7:22, or [fe80::1]:22 for IPv6 "
                           "(--address, or addresses: in station.yaml)")
    return host, int(port) if port else None


#: the attempt event that holds a board's factory baseline (written by provisioner.fleet.benchmark)
BASELINE_STEP = "baseline"


def factory_baseline(records: Records, attempt_id: int) -> dict[str, Any] | None:
    """The latest baseline recorded for an attempt (``edge_llm_factory_baseline``), validated again."""
    for ev in reversed(records.events(attempt_id)):
        if ev["step"] == BASELINE_STEP and ev["kind"] == "stop":
            base = inventory.FactoryBaseline.from_vars(ev.get("detail"))
            return base.as_vars() if base else None
    return None


def _inventory_hosts(records: Records, addresses: dict[str, str] | None,
                     known_hosts: Path | None) -> list[tuple[str, dict[str, Any], list[board_identity.HostKey]]]:
    """(host name, host vars, recorded host keys) of every board whose latest attempt passed."""
    addresses = {k.upper(): v for k, v in (addresses or {}).items()}
    hosts = []
    for row in records.passed_boards():
        board_id = row.get("board") or "unknown"
        if board_id not in catalog.boards():
            continue   # a board type the catalog does not know has no group_vars: fleet could not verify it
        ident = row.get("identity") or {}
        serial = row["serial"]
        hostname = ident.get("fleet_hostname") or inventory.hostname_for(None, board_id, serial)
        addr = addresses.get(serial) or row.get("address") or ident.get("address")
        host, port = parse_address(serial, str(addr)) if addr else ("", None)
        keys = board_identity.recorded_keys(ident)
        conn = {"ansible_ssh_common_args": board_identity.ssh_args(str(known_hosts), hostname)} if known_hosts else None
        hosts.append((hostname, inventory.host_vars(
            board=board_id, address=host or None, port=port, user="root",
            serial=serial, build_id=row.get("release_id"), slot=row.get("slot"), connection=conn,
            host_keys=[k.fingerprint for k in keys] or None,
            factory_baseline=factory_baseline(records, row["id"])), keys))
    return hosts


def build_inventory(records: Records, addresses: dict[str, str] | None = None,
                    known_hosts: Path | None = None) -> dict[str, Any]:
    """Ansible YAML inventory of boards that passed, grouped per board type (the inventory contract's writer).

    ``addresses`` (serial -> ``host[:port]``) overrides what was read back on the console. A board
    flashed with release ``r`` is expected to report ``BUILD_ID=r`` (``edge_llm_expected_build_id``).
    Host names follow the release's rule as recorded at the boot check. With ``known_hosts`` (the
    file :func:`write_inventory` writes) each board is reached with strict host key checking
    against the keys recorded on the line (:func:`provisioner.station.identity.ssh_args`).
    """
    return inventory.build_inventory((name, hv) for name, hv, _ in _inventory_hosts(records, addresses, known_hosts))


def write_inventory(records: Records, out: Path | str, addresses: dict[str, str] | None = None) -> dict[str, Any]:
    """Write :func:`build_inventory` atomically to ``out`` and the boards' recorded host keys to
    :func:`known_hosts_for` beside it; returns the inventory."""
    out = Path(out)
    known_hosts = known_hosts_for(out)
    if out.is_dir() or out.suffix == ".known_hosts" or not out.name:
        raise StationError(f"--out {out} is a folder or a key file name", "name the inventory file, e.g. "
                           "--out inventory/station.yml")
    if any(c.isspace() for c in str(known_hosts)):
        # ssh_config(5): UserKnownHostsFile takes a whitespace-separated list of files
        raise StationError(f"--out {out}: the known_hosts beside it ({known_hosts}) would have a space in its path, "
                           "which ssh reads as two files", "write the inventory to a folder without spaces")
    hosts = _inventory_hosts(records, addresses, known_hosts)
    lines = board_identity.known_hosts_lines((name, keys) for name, _, keys in hosts)
    inv = inventory.build_inventory((name, hv) for name, hv, _ in hosts)
    try:
        inventory.atomic_write(known_hosts, "".join(line + "\n" for line in lines))
        inventory.write_inventory(out, inv, "generated by `provisioner station export-inventory`")
    except OSError as exc:
        raise StationError(f"--out {out}: cannot write {exc.filename or out} ({exc.strerror})",
                           "pass a writable folder's file, e.g. --out inventory/station.yml") from None
    return inv


def pin_inventory(inv: dict[str, Any], records: Records, folder: Path, *, serial_var: str = "edge_llm_serial") -> int:
    """Make another inventory's hosts connect pinned to the keys recorded on the line: writes this station's
    inventory and its ``station.known_hosts`` into ``folder`` and gives every host of ``inv`` whose
    ``serial_var`` names a board with recorded keys the strict ssh arguments. Returns how many hosts were pinned."""
    station = write_inventory(records, folder / "station.yml")
    known_hosts = str(known_hosts_for(folder / "station.yml"))
    pinned = {hv.get("edge_llm_serial"): name for g in station["all"]["children"].values()
              for name, hv in g["hosts"].items() if hv.get("edge_llm_host_keys")}
    n = 0
    for group in inv["all"]["children"].values():
        for hv in group["hosts"].values():
            name = pinned.get(hv.get(serial_var))
            if name:
                hv["ansible_ssh_common_args"] = board_identity.ssh_args(known_hosts, name)
                n += 1
    return n
