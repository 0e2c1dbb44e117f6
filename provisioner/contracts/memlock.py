"""The locked-memory limit on a board: one rule, from the manifest's ``image.memlock``, for sessions and services.

FastRPC pins a model's weights (~1.17 GB) in locked memory, and QLI's default limit is 8 MB (the runtime
then says "Could not allocate persistent weights buffer!"). A process gets its limit one of two ways:

- a login session from pam_limits(8), the PAM session module that reads ``limits.conf``/``limits.d``
  (limits.conf(5): the value is in KiB, or ``unlimited``; ``*`` never covers root, so root gets its own
  lines); a service runs no PAM session (no ``PAMName=``), so it never sees these files;
- a systemd service from ``LimitMEMLOCK=`` of its unit and drop-ins (systemd.exec(5) "Process Properties":
  bytes with the base-1024 suffixes K/M/G, or ``infinity``); "resource limits not configured explicitly
  for a unit default to the value configured in the various DefaultLimitCPU=, ... options available in
  systemd-system.conf(5)" (systemd.exec(5)), here ``DefaultLimitMEMLOCK=``.

:func:`limits` is the rule: both get the same amount, the policy's. Its writers take their values from it:
render hands :func:`layer_variables` to the layer, whose ``edge-llm-memlock.bb`` writes limits.d (sessions),
system.conf.d ``DefaultLimitMEMLOCK=`` (every service) and the serve unit's drop-in ``LimitMEMLOCK=``; the
virtual image (``sim/bundle.py``) writes the same three files from the same rule. The serve unit itself and
the fleet's per-model drop-in (which sorts after the image's, systemd.unit(5): drop-ins with different names
apply in lexicographic order whatever their directory) set no limit, so the image's policy is what a service
gets. tests/image/test_memlock.py shows the effective value for a session and for the service.
"""

from __future__ import annotations

from dataclasses import dataclass

UNLIMITED = "unlimited"
DEFAULT_POLICY = UNLIMITED          # the manifest's default image.memlock
#: the least a policy may give: FastRPC pins ~1.17 GB of weights (the manifest refuses less, verify fails less)
MIN_BYTES = 2 * 1024**3


@dataclass(frozen=True)
class MemlockLimits:
    """The limits one ``image.memlock`` policy (``unlimited`` or a KiB count) gives a board."""

    policy: str

    @property
    def session(self) -> str:
        """limits.conf(5) value for login sessions: ``unlimited`` or KiB."""
        return self.policy

    @property
    def service(self) -> str:
        """systemd ``LimitMEMLOCK=``/``DefaultLimitMEMLOCK=`` value: ``infinity`` or the same KiB with ``K``."""
        return "infinity" if self.policy == UNLIMITED else f"{self.policy}K"

    @property
    def bytes(self) -> int | None:
        """The limit in bytes (None: unlimited), what ``ulimit -l`` * 1024 and ``systemctl show`` report."""
        return None if self.policy == UNLIMITED else int(self.policy) * 1024


def limits(policy: str | int = DEFAULT_POLICY) -> MemlockLimits:
    """The rule: the session and service limits of ``policy``; anything but ``unlimited`` or a KiB count is a
    ValueError (the manifest check refuses it first, with the user's words)."""
    text = str(policy).strip()
    if text != UNLIMITED and not text.isdigit():
        raise ValueError(f"memlock {policy!r} is not 'unlimited' or a KiB count")
    return MemlockLimits(text if text == UNLIMITED else str(int(text)))


def layer_variables(policy: str | int = DEFAULT_POLICY) -> dict[str, str]:
    """The limits as the layer's variables (render puts them in the ``edge-llm`` entry; the layer's
    ``conf/edge-llm-board.conf`` holds :data:`DEFAULT_POLICY`'s as ``??=`` defaults)."""
    rule = limits(policy)
    return {"EDGE_LLM_MEMLOCK": rule.session, "EDGE_LLM_SERVICE_MEMLOCK": rule.service}
