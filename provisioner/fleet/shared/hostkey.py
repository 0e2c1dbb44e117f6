"""A board whose SSH host key is not the one recorded on the line: one line naming both fingerprints.

The fleet's ssh runs with ``StrictHostKeyChecking=yes`` against the ``known_hosts`` the station
exported (:mod:`provisioner.station.inventory_export`), so ssh itself refuses such a board and
Ansible reports it unreachable with ssh's own words. OpenSSH prints the key it was offered in
warn_changed_key() (openssh-portable V_9_2_P1, Debian 12's, sshconnect.c:1629-1645): "The fingerprint for
the <TYPE> key sent by the remote host is\\n<fingerprint>." and, for a key type nothing is recorded for,
check_host_key() (sshconnect.c:1140-1141): "No <TYPE> host key is known for <host> and you have requested
strict checking.". This turns that into a verdict: the board is not
the one the factory flashed (an impostor, a swapped board), or it was re-imaged outside the station.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from provisioner.station.identity import FINGERPRINT_RE

CHANGED = "REMOTE HOST IDENTIFICATION HAS CHANGED"
_OFFERED = re.compile(r"fingerprint for the (\S+) key sent by the remote host is\s+(SHA256:[A-Za-z0-9+/]{43})")
_UNKNOWN = re.compile(r"No (\S+) host key is known for (\S+) and you have requested strict checking")


def mismatch_reason(msg: str, recorded: Iterable[str] | None) -> str | None:
    """The one-line reason for a board refused over its host key, or None if ``msg`` is another failure.

    ``recorded`` are the fingerprints the station recorded (inventory ``edge_llm_host_keys``); values
    that are not fingerprints are ignored (an inventory is edited by hand).
    """
    factory = [f for f in (recorded or []) if isinstance(f, str) and FINGERPRINT_RE.match(f)]
    was = ", ".join(factory) if factory else "no key"
    hint = ("it is not the board flashed on the line, or it was re-imaged since: check it, then re-flash it "
            "at the station (which records its new key)")
    text = " ".join(str(msg).split())
    m = _OFFERED.search(text)
    if CHANGED in text and m:
        return (f"host key mismatch: the board presents {m.group(2)} ({m.group(1)}), the factory recorded {was}; "
                f"{hint}")
    m = _UNKNOWN.search(text)
    if m:
        return (f"host key mismatch: the board offers a {m.group(1)} key, the factory recorded {was} and no "
                f"{m.group(1)} key; {hint}")
    if "Host key verification failed" in text:
        return f"host key verification failed against the factory record ({was}); {hint}"
    return None
