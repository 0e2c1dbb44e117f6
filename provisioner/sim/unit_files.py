"""systemd unit files as the service manager stand-in reads them: syntax, sizes, addresses, ``Unit``.

The stand-in systemd (:mod:`provisioner.sim.systemctl`, :mod:`provisioner.sim.service_manager`) reads
the board's real unit files, drop-ins and ``system.conf``; the rules for reading them (systemd.syntax(7)
sections and continuations, systemd resource sizes, ``ListenStream=`` addresses per systemd.socket(5),
``%i``-style specifiers, which unit a socket activates) live here, apart from what the manager does
with a unit. Only the standard library is imported: this runs under the board's python as root.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import re
import resource
import shlex
import socket
from dataclasses import dataclass, field
from pathlib import Path

# The board rootfs's vendor units are read through the read-only board bind (the namespace's /usr/lib is
# the host's plus overlays, so its systemd units would be the host's, not the board's).
UNIT_DIRS = ("/etc/systemd/system", "/run/systemd/system", "/run/edge-llm-sim/board/rootfs/usr/lib/systemd/system")
SYSTEM_CONF = "/etc/systemd/system.conf"
SYSTEM_CONF_D = "/etc/systemd/system.conf.d"
SYSTEMD_DEFAULT_MEMLOCK = 8 * 1024 * 1024
INFINITY = resource.RLIM_INFINITY


class UnitError(Exception):
    """A unit that cannot be loaded, started or changed, with the exit code systemctl(1) gives."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


def parse_size(text: str) -> int:
    """systemd resource value: ``infinity``, ``8M``, ``8388608``, ``64K``... -> bytes."""
    t = text.strip().lower()
    if t in ("infinity", "unlimited", "-1"):
        return INFINITY
    m = re.match(r"^(\d+)\s*([kmgt]?)(i?b?)?$", t)
    if not m:
        raise ValueError(f"bad size '{text}'")
    mult = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}[m.group(2)]
    return int(m.group(1)) * mult


def fmt_limit(value: int) -> str:
    return "infinity" if value == INFINITY else str(value)


def parse_ini(text: str) -> dict[str, list[tuple[str, str]]]:
    """systemd unit syntax: sections of ``Key=Value`` (repeatable, line continuations, comments)."""
    out: dict[str, list[tuple[str, str]]] = {}
    section = ""
    pending = ""
    for raw in text.splitlines():
        line = pending + raw.strip() if pending else raw.strip()
        if line.endswith("\\"):
            pending = line[:-1] + " "
            continue
        pending = ""
        if not line or line[0] in "#;":
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1]
            out.setdefault(section, [])
            continue
        if "=" in line:
            k, v = line.split("=", 1)
            out.setdefault(section, []).append((k.strip(), v.strip()))
    return out


def parse_boolean(text: str) -> bool:
    """systemd's boolean words (systemd.syntax(7)): 1/yes/y/true/t/on, else false."""
    return text.strip().lower() in ("1", "yes", "y", "true", "t", "on")


@dataclass(frozen=True)
class ListenAddress:
    """One ``ListenStream=`` entry of a socket unit, as the socket(2)/bind(2) arguments it stands for."""

    text: str
    family: int
    host: str
    port: int


def ipv6_supported() -> bool:
    """Whether the kernel has IPv6 (systemd's socket_ipv6_is_supported() looks at the same procfs file)."""
    return os.path.exists("/proc/net/if_inet6")


def parse_listen_stream(value: str) -> ListenAddress:
    """A ``ListenStream=`` IP address as systemd.socket(5) reads it: ``port`` alone ("read as port number to
    listen on via IPv6 ... available via both IPv6 and IPv4" by default; IPv4 when the kernel has no IPv6),
    ``a.b.c.d:port``, ``[ipv6]:port``. Unix, netlink and vsock addresses are not emulated (ValueError)."""
    text = value.strip()
    port_text, host, family = text, "", 0
    if text.isdigit():
        family = socket.AF_INET6 if ipv6_supported() else socket.AF_INET
        host = "::" if family == socket.AF_INET6 else "0.0.0.0"
    elif m := re.fullmatch(r"\[([0-9A-Fa-f:.]+)\]:(\d+)", text):
        host, port_text, family = m.group(1), m.group(2), socket.AF_INET6
    elif m := re.fullmatch(r"([0-9.]+):(\d+)", text):
        host, port_text, family = m.group(1), m.group(2), socket.AF_INET
    else:
        raise ValueError(f"ListenStream={text}: only IP addresses (port, a.b.c.d:port, [ipv6]:port) are emulated")
    (ipaddress.IPv6Address if family == socket.AF_INET6 else ipaddress.IPv4Address)(host)   # ValueError if malformed
    port = int(port_text)
    if not 0 < port < 65536:
        raise ValueError(f"ListenStream={text}: port out of range")
    return ListenAddress(text, family, host, port)



def paired_unit(name: str, suffix: str) -> str:
    """The unit of the same name with another suffix: ``X.socket`` activates ``X.service`` (systemd.socket(5):
    "a socket unit foo.socket ... activates ... foo.service"), and ``X.service`` gets the fds of ``X.socket``
    (systemd.service(5) Sockets=: "all socket file descriptors whose unit shares the same name as the
    service (subject to the different unit name suffix of course) are passed to the spawned process")."""
    return name.rsplit(".", 1)[0] + suffix


@dataclass
class Unit:
    name: str
    fragment: str | None
    dropins: list[str] = field(default_factory=list)
    sections: dict[str, list[tuple[str, str]]] = field(default_factory=dict)
    builtin: bool = False

    @property
    def instance(self) -> str:
        base = self.name.rsplit(".", 1)[0]
        return base.split("@", 1)[1] if "@" in base else ""

    @property
    def prefix(self) -> str:
        return self.name.rsplit(".", 1)[0].split("@", 1)[0]

    def expand(self, value: str) -> str:
        rep = {"i": self.instance, "I": self.instance, "n": self.name, "N": self.name.rsplit(".", 1)[0],
               "p": self.prefix, "P": self.prefix, "%": "%"}
        return re.sub(r"%(.)", lambda m: rep.get(m.group(1), m.group(0)), value)

    def values(self, section: str, key: str) -> list[str]:
        """All values of ``key`` (an empty assignment resets the list, as in systemd)."""
        vals: list[str] = []
        for k, v in self.sections.get(section, []):
            if k == key:
                if v == "":
                    vals = []
                else:
                    vals.append(self.expand(v))
        return vals

    def get(self, section: str, key: str, default: str = "") -> str:
        vals = self.values(section, key)
        return vals[-1] if vals else default

    @property
    def has_install(self) -> bool:
        return bool(self.sections.get("Install")) or self.builtin



def unit_has_binary(fragment: str) -> bool:
    """Whether a unit's ExecStart= program exists here (the FastRPC daemon has no DSP to serve)."""
    try:
        for k, v in parse_ini(Path(fragment).read_text(encoding="utf-8")).get("Service", []):
            if k == "ExecStart" and v:
                return os.path.exists(shlex.split(v.lstrip("-@:+!"))[0])
    except (OSError, ValueError, IndexError):
        pass
    return False


def exec_start_prop(unit: Unit) -> str:
    cmd = unit.get("Service", "ExecStart")
    if not cmd:
        return ""
    argv = shlex.split(cmd)
    return f"{{ path={argv[0] if argv else ''} ; argv[]={cmd} }}"


def read_default_memlock(etc_dir: Path) -> int:
    """DefaultLimitMEMLOCK= from system.conf then system.conf.d/*.conf (later files win)."""
    value = SYSTEMD_DEFAULT_MEMLOCK
    files = [etc_dir / "system.conf", *sorted((etc_dir / "system.conf.d").glob("*.conf"))] \
        if (etc_dir / "system.conf.d").is_dir() else [etc_dir / "system.conf"]
    for f in files:
        try:
            sections = parse_ini(f.read_text(encoding="utf-8"))
        except OSError:
            continue
        for k, v in sections.get("Manager", []):
            if k == "DefaultLimitMEMLOCK" and v:
                with contextlib.suppress(ValueError):
                    value = parse_size(v.split(":")[0])
    return value


def env_assignments(unit: Unit) -> list[str]:
    out = []
    for v in unit.values("Service", "Environment"):
        out += shlex.split(v)
    return out


