"""A board's identity as read on the line: serials and SSH host keys, validated, and what is made of them.

Everything here comes from the board over its console, so it is untrusted: a board (or whatever is
on the other end of the UART) may print anything. Each value is checked by type and length before
it is recorded, and anything else is dropped with a note, never stored or written into a file the
fleet later trusts (``known_hosts``, the inventory).

- soc0 ``serial_number``: the kernel's socinfo driver prints the SoC serial as an unsigned decimal
  (``"%u"``, drivers/soc/qcom/socinfo.c); Documentation/ABI/testing/sysfs-devices-soc names the file.
  The station shows it as 8 upper-case hex digits, the form qdl and the EDL USB descriptor use.
- UFS serial: the device descriptor's serial number string, which the UFS driver exposes as
  ``string_descriptors/serial_number`` under the host controller's platform device
  (Documentation/ABI/testing/sysfs-driver-ufs, torvalds/linux 06aea266:
  ``/sys/bus/platform/drivers/ufshcd/*/string_descriptors/serial_number``; on Qualcomm the
  driver is ufshcd-qcom, so :data:`provisioner.contracts.board.UFS_SERIAL_GLOB` globs the platform device).
- SSH host keys: the ``.pub`` files sshd_check_keys writes at first boot (oe-core 06dd66e6
  meta/recipes-connectivity/openssh/openssh/sshd_check_keys lines 60-78, run by sshdgenkeys.service,
  which sshd.socket wants). The fingerprint is computed here, the way ``ssh-keygen -l`` prints it:
  ``SHA256:`` and the unpadded base64 of the SHA-256 of the key blob (OpenSSH sshkey.c
  ``sshkey_fingerprint``), so no fingerprint the board prints is ever trusted.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from provisioner.contracts import board as on_board

#: a serial as the station stores it: hex or alphanumeric, bounded (soc0 gives 8 hex digits)
SERIAL_RE = re.compile(r"^[0-9A-Za-z]{4,32}$")
#: a UFS serial number string: printable ASCII without spaces, bounded (JEDEC allows up to 126 chars)
UFS_SERIAL_RE = re.compile(r"^[0-9A-Za-z._:-]{1,64}$")
#: what ``ssh-keygen -l`` prints for a SHA-256 fingerprint: 32 bytes as unpadded base64 = 43 chars
FINGERPRINT_RE = re.compile(r"^SHA256:[A-Za-z0-9+/]{43}$")
#: host key types OpenSSH's sshd_check_keys generates (rsa, ecdsa, ed25519), by their wire names
HOST_KEY_TYPES = ("ssh-ed25519", "ecdsa-sha2-nistp256", "ecdsa-sha2-nistp384", "ecdsa-sha2-nistp521",
                  "ssh-rsa")
MAX_KEY_BLOB = 2048          # an RSA-8192 public key blob is ~1 KiB; anything bigger is not a host key
MAX_HOST_KEYS = 4


@dataclass(frozen=True)
class HostKey:
    """One SSH host public key: its type, base64 blob and SHA-256 fingerprint (computed here)."""

    type: str
    key: str
    fingerprint: str

    def as_dict(self) -> dict[str, str]:
        return {"type": self.type, "key": self.key, "fingerprint": self.fingerprint}


def fingerprint(blob: bytes) -> str:
    """``SHA256:<unpadded base64>`` of a key blob, as ``ssh-keygen -l`` prints it."""
    return "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")


def host_key(key_type: str, b64: str) -> HostKey | None:
    """A validated host key, or None when ``key_type``/``b64`` is not a well-formed public key.

    The blob must decode, stay under :data:`MAX_KEY_BLOB`, and start with its own type name as an
    SSH ``string`` (uint32 length + bytes, RFC 4253 section 6.6) equal to ``key_type``.
    """
    if key_type not in HOST_KEY_TYPES or not 16 <= len(b64) <= MAX_KEY_BLOB * 4 // 3 + 4:
        return None
    try:
        blob = base64.b64decode(b64, validate=True)
    except (binascii.Error, ValueError):
        return None
    if len(blob) < 4 or len(blob) > MAX_KEY_BLOB:
        return None
    (n,) = struct.unpack(">I", blob[:4])
    if blob[4:4 + n] != key_type.encode():
        return None
    return HostKey(key_type, b64, fingerprint(blob))


def host_keys_from_text(text: str) -> list[HostKey]:
    """Host keys from ``.pub`` lines (``<type> <base64> [comment]``); malformed lines are skipped."""
    keys: dict[str, HostKey] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 2:
            k = host_key(parts[0], parts[1])
            if k is not None and k.type not in keys:
                keys[k.type] = k
    return list(keys.values())[:MAX_HOST_KEYS]


def soc_serial(raw: str | None) -> str | None:
    """The soc0 serial as 8 hex digits (the kernel prints it in decimal); None if it is no serial."""
    if not raw:
        return None
    raw = raw.strip()
    if raw.isdigit() and len(raw) <= 10 and int(raw) < 2**32:
        return f"{int(raw):08X}"
    return raw.upper() if SERIAL_RE.match(raw) else None


def ufs_serial(raw: str | None) -> str | None:
    """The UFS serial number string when it is one (printable, bounded), else None."""
    if not raw:
        return None
    first = raw.strip().splitlines()[0].strip() if raw.strip() else ""
    return first if UFS_SERIAL_RE.match(first) else None


def parse_banner(text: str) -> dict[str, Any]:
    """What the identity lines of a getty banner (``edge-llm id ...``) say, validated.

    The layer's edge-llm-identity service writes them at boot: ``serial <soc0 decimal>``,
    ``ufs-serial <string>`` and one ``hostkey <type> <base64>`` per host key. Unknown or
    malformed lines are ignored; the last banner wins for each field.
    """
    out: dict[str, Any] = {}
    keys: list[str] = []
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith(on_board.BANNER_IDENTITY_PREFIX):
            continue
        field, _, value = line[len(on_board.BANNER_IDENTITY_PREFIX):].partition(" ")
        value = value.strip()
        if field == "serial" and soc_serial(value):
            out["serial"] = soc_serial(value)
        elif field == "ufs-serial" and ufs_serial(value):
            out["ufs_serial"] = ufs_serial(value)
        elif field == "hostkey":
            keys.append(value)
    found = host_keys_from_text("\n".join(keys))
    if found:
        out["host_keys"] = [k.as_dict() for k in found]
    return out


def recorded_keys(identity: Mapping[str, Any] | None) -> list[HostKey]:
    """The host keys of a recorded identity, validated again (records are only as good as what wrote them)."""
    out = []
    for k in (identity or {}).get("host_keys") or []:
        if isinstance(k, Mapping):
            hk = host_key(str(k.get("type") or ""), str(k.get("key") or ""))
            if hk is not None:
                out.append(hk)
    return out


def known_hosts_lines(hosts: Iterable[tuple[str, Iterable[HostKey]]]) -> list[str]:
    """``known_hosts`` lines, one per (host name, key): the fleet's ssh looks keys up by the
    inventory name (``HostKeyAlias``), so an address that changes (DHCP) does not matter."""
    lines = []
    for name, keys in hosts:
        for k in keys:
            lines.append(f"{name} {k.type} {k.key}")
    return lines


def ssh_args(known_hosts: str, alias: str) -> str:
    """The ssh options of one board: strict checking against the keys recorded on the line.

    ``StrictHostKeyChecking=yes`` never adds or accepts an unknown or changed key; ``HostKeyAlias``
    makes ssh look the key up under the inventory name instead of ``[address]:port``
    (ssh_config(5)). ``UserKnownHostsFile`` is the file written beside the inventory;
    ``GlobalKnownHostsFile=/dev/null`` keeps a host-wide file from vouching for a board.
    """
    return (f"-o StrictHostKeyChecking=yes -o UserKnownHostsFile={known_hosts} "
            f"-o GlobalKnownHostsFile=/dev/null -o HostKeyAlias={alias}")
