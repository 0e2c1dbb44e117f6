"""A small service manager standing in for systemd inside a virtual board's namespace.

Installed as ``/usr/bin/systemctl`` in the namespace (see :mod:`provisioner.sim.namespace`). It is
good enough for Ansible's ``ansible.builtin.systemd``/``systemd_service`` and ``service_facts``
modules and for people typing ``systemctl status``: ``show`` (with the properties Ansible reads
plus LimitMEMLOCK, MainPID, NRestarts...), ``start/stop/restart/reload/try-restart``,
``enable/disable`` (real ``*.wants`` symlinks in the board's ``/etc/systemd/system``, so they
survive a reboot), ``daemon-reload``, ``daemon-reexec``, ``is-active``, ``is-enabled``,
``is-failed``, ``status``, ``cat``, ``list-units``, ``list-unit-files``, ``mask/unmask``.

Services really run: ``start`` forks a detached runner that applies the unit's ``User=``,
``Group=``, ``SupplementaryGroups=``, ``Environment=``/``EnvironmentFile=``, ``WorkingDirectory=``
and ``LimitMEMLOCK=`` (else ``DefaultLimitMEMLOCK=`` from ``/etc/systemd/system.conf[.d]`` as read at
boot or ``daemon-reexec``, else systemd's 8M) and execs ``ExecStart=``; it records the main pid
and restarts per ``Restart=``/``RestartSec=`` with systemd's start-rate limit. Output goes to a
per-unit journal file (``journalctl -u`` is not emulated; ``status`` shows the tail).

Socket units (``X.socket``, Accept=no, ``ListenStream=`` on IP addresses) work as systemd.socket(5) says:
``start`` binds and listens as root, and a detached *socket holder* process keeps the listening sockets
until ``stop``, so the port stays the manager's while the service stops, restarts or fails. The
same-named ``X.service`` gets them as fds 3, 4, ... with ``LISTEN_FDS``/``LISTEN_PID``/``LISTEN_FDNAMES``
(sd_listen_fds(3)) each time it is started: the service's runner fetches them from the holder over a
root-only unix socket (SCM_RIGHTS), so they are the very sockets the holder listens on. A connection
while the service is not running makes the holder start it (systemd.socket(5) Accept=no).

``cdsprpcd.service`` (QLI's FastRPC daemon) is built in: there is no DSP to serve, so it is a
unit without a process that is active from boot unless stopped. Only the standard library is
imported: this runs under the board's python as root.
"""

from __future__ import annotations

import contextlib
import fcntl
import grp
import hashlib
import ipaddress
import json
import os
import pwd
import re
import resource
import select
import shlex
import signal
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

STATE_DIR = "/run/edge-llm-sim/systemd"
# The board rootfs's vendor units are read through the read-only board bind (the namespace's /usr/lib is
# the host's plus overlays, so its systemd units would be the host's, not the board's).
UNIT_DIRS = ("/etc/systemd/system", "/run/systemd/system", "/run/edge-llm-sim/board/rootfs/usr/lib/systemd/system")
SYSTEM_CONF = "/etc/systemd/system.conf"
SYSTEM_CONF_D = "/etc/systemd/system.conf.d"
SYSTEMD_DEFAULT_MEMLOCK = 8 * 1024 * 1024
INFINITY = resource.RLIM_INFINITY
BUILTIN_UNITS = {
    "cdsprpcd.service": {"Description": "CDSP RPC daemon (FastRPC)", "WantedBy": "multi-user.target"},
}
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
START_LIMIT_BURST = 5
START_LIMIT_INTERVAL_S = 10.0
MAXFD = 65536
# systemd.socket(5) Backlog=: "Defaults to SOMAXCONN" in old releases; socket.c now passes INT_MAX
# (SOMAXCONN_DELUXE), which the kernel caps at net.core.somaxconn: the same queue either way.
SOMAXCONN_DELUXE = 2**31 - 1
SD_LISTEN_FDS_START = 3     # sd_listen_fds(3): the first passed descriptor


class UnitError(Exception):
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


def open_listener(addr: ListenAddress, unit: Unit, backlog: int) -> socket.socket:
    """socket + bind + listen as systemd's socket_address_listen() does: SO_REUSEADDR always (a port
    in TIME_WAIT can be taken again, a listening one cannot), IPV6_V6ONLY only if BindIPv6Only= asks
    (else the kernel's default), TCP_NODELAY if NoDelay= (systemd.socket(5))."""
    sock = socket.socket(addr.family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        only = unit.get("Socket", "BindIPv6Only", "default")
        if addr.family == socket.AF_INET6 and only in ("ipv6-only", "both"):
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1 if only == "ipv6-only" else 0)
        if parse_boolean(unit.get("Socket", "NoDelay", "no")):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.bind((addr.host, addr.port))
        sock.listen(backlog)
    except OSError:
        sock.close()
        raise
    return sock


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


class Manager:
    """The board's service manager state: unit files on disk + runtime state in /run."""

    def __init__(self, state_dir: str = STATE_DIR, unit_dirs: tuple[str, ...] = UNIT_DIRS,
                 etc_dir: str = "/etc/systemd") -> None:
        self.state_dir = Path(state_dir)
        self.unit_dirs = unit_dirs
        self.etc_dir = Path(etc_dir)

    # ------------------------------------------------------------------ unit files
    @staticmethod
    def canonical(name: str) -> str:
        return name if re.search(r"\.(service|target|socket|timer|mount|path)$", name) else f"{name}.service"

    def load(self, name: str) -> Unit | None:
        name = self.canonical(name)
        base = name.rsplit(".", 1)[0]
        template = None
        if "@" in base:
            template = base.split("@", 1)[0] + "@." + name.rsplit(".", 1)[1]
        fragment = None
        for d in self.unit_dirs:
            for cand in ((name, template) if template else (name,)):
                p = Path(d) / cand
                if p.is_file():
                    fragment = str(p)
                    break
            if fragment:
                break
        dropins: list[str] = []
        for d in self.unit_dirs:
            for cand in ((template, name) if template else (name,)):
                dd = Path(d) / f"{cand}.d"
                if dd.is_dir():
                    dropins += sorted(str(p) for p in dd.glob("*.conf"))
        if name in BUILTIN_UNITS and not self.masked(name) and (fragment is None or not _unit_has_binary(fragment)):
            b = BUILTIN_UNITS[name]
            return Unit(name, fragment, dropins, {"Unit": [("Description", b["Description"])],
                                                  "Install": [("WantedBy", b["WantedBy"])]}, builtin=True)
        if fragment is None:
            return None
        sections: dict[str, list[tuple[str, str]]] = {}
        for f in [fragment, *dropins]:
            try:
                text = Path(f).read_text(encoding="utf-8")
            except OSError:
                continue
            for sec, items in parse_ini(text).items():
                sections.setdefault(sec, []).extend(items)
        return Unit(name, fragment, dropins, sections)

    def masked(self, name: str) -> bool:
        p = Path(self.unit_dirs[0]) / self.canonical(name)
        return p.is_symlink() and os.readlink(p) == "/dev/null"

    def all_unit_names(self) -> list[str]:
        names = set(BUILTIN_UNITS)
        for d in self.unit_dirs:
            try:
                for p in Path(d).iterdir():
                    if p.name.endswith((".service", ".socket")) and (p.is_file() or p.is_symlink()):
                        names.add(p.name)
            except OSError:
                continue
        for f in self.state_dir.glob("*.json") if self.state_dir.is_dir() else []:
            names.add(f.stem)
        return sorted(names)

    def wanted_by(self, unit: Unit) -> list[str]:
        if unit.builtin:
            return [BUILTIN_UNITS[unit.name]["WantedBy"]]
        out = []
        for v in unit.values("Install", "WantedBy") + unit.values("Install", "RequiredBy"):
            out += v.split()
        return out

    def wants_links(self, unit: Unit) -> list[Path]:
        return [Path(self.unit_dirs[0]) / f"{t}.wants" / unit.name for t in self.wanted_by(unit)]

    def unit_file_state(self, name: str) -> str:
        name = self.canonical(name)
        if self.masked(name):
            return "masked"
        unit = self.load(name)
        if unit is None:
            return ""
        if unit.builtin:
            return "disabled" if self._builtin_disabled(name) else "enabled"
        if any(link.is_symlink() or link.exists() for link in self.wants_links(unit)):
            return "enabled"
        if not unit.has_install:
            return "static"
        return "disabled"

    def _builtin_disabled(self, name: str) -> bool:
        return (self.state_dir / f"{name}.disabled").exists()

    # ------------------------------------------------------------------ runtime state
    def _state_path(self, name: str) -> Path:
        return self.state_dir / f"{name}.json"

    def state(self, name: str) -> dict[str, Any]:
        try:
            st = json.loads(self._state_path(self.canonical(name)).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {"active": "inactive", "sub": "dead", "result": "success"}
        runner = st.get("runner_pid")
        if st.get("active") in ("active", "activating", "deactivating") and runner and not _alive(runner):
            st.update(active="failed", sub="failed", result="signal", main_pid=0)
        return st

    def write_state(self, name: str, **fields: Any) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        path = self._state_path(name)
        with locked(self.state_dir / ".lock"):
            try:
                st = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                st = {}
            st.update(fields)
            tmp = path.with_name(f".{path.name}.{os.getpid()}")
            tmp.write_text(json.dumps(st), encoding="utf-8")
            os.chmod(tmp, 0o644)
            os.replace(tmp, path)

    def active_state(self, name: str) -> str:
        return self.state(name).get("active", "inactive")

    def default_memlock(self) -> int:
        """DefaultLimitMEMLOCK as the manager read it at boot / daemon-reexec."""
        try:
            boot = json.loads((self.state_dir / "manager.json").read_text(encoding="utf-8"))
            return int(boot["default_memlock"])
        except (OSError, ValueError, KeyError):
            return read_default_memlock(self.etc_dir)

    def reexec(self) -> None:
        """Re-read system.conf(.d) like ``systemctl daemon-reexec`` (or a boot) does."""
        self.state_dir.mkdir(parents=True, exist_ok=True)
        path = self.state_dir / "manager.json"
        path.write_text(json.dumps({"default_memlock": read_default_memlock(self.etc_dir),
                                    "loaded": time.time()}), encoding="utf-8")
        os.chmod(path, 0o644)

    def memlock_for(self, unit: Unit) -> int:
        v = unit.get("Service", "LimitMEMLOCK")
        if v:
            return parse_size(v.split(":")[0])
        return self.default_memlock()

    # ------------------------------------------------------------------ actions
    def start(self, name: str, *, wait: bool = True) -> None:
        """Start a unit; ``wait=False`` returns once its runner is spawned (a socket holder starting the
        service it activates must go on handing out fds, which that start waits for)."""
        name = self.canonical(name)
        if self.masked(name):
            raise UnitError(f"Failed to start {name}: Unit {name} is masked.", 1)
        unit = self.load(name)
        if unit is None:
            raise UnitError(f"Failed to start {name}: Unit {name} not found.", 5)
        if name.endswith(".socket"):
            self._start_socket(unit)
            return
        # One start at a time: a socket's holder and `systemctl start/restart` may start the same service
        # at once, and a second start of an activating unit joins the first (systemd merges the jobs).
        with locked(self.state_dir / "locks" / name):
            st = self.state(name)
            if st.get("active") == "active":
                return
            if not _starting(st):
                if unit.builtin:
                    self.write_state(name, active="active", sub="running", result="success", main_pid=0,
                                     since=time.time())
                    return
                if name.endswith(".timer"):
                    # Timers are recorded as armed, never fired: a test triggers the timer's service itself.
                    self.write_state(name, active="active", sub="waiting", result="success", main_pid=0,
                                     since=time.time())
                    return
                exec_start = unit.get("Service", "ExecStart")
                if not exec_start:
                    raise UnitError(f"Failed to start {name}: Unit {name} has no ExecStart= setting.", 1)
                self.write_state(name, active="activating", sub="start", result="success", main_pid=0,
                                 n_restarts=0, since=time.time(), runner_pid=0, starts=[])
                _spawn_runner(self, unit)
        if not wait:
            return
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            st = self.state(name)
            if st.get("active") != "activating" or st.get("main_pid"):
                break
            time.sleep(0.02)

    def stop(self, name: str, timeout_s: float = 10.0) -> None:
        name = self.canonical(name)
        unit = self.load(name)
        st = self.state(name)
        if unit is not None and unit.builtin:
            self.write_state(name, active="inactive", sub="dead", result="success", since=time.time())
            return
        runner = st.get("runner_pid")
        if runner and _alive(runner):
            self.write_state(name, stopping=True)
            with contextlib.suppress(ProcessLookupError):
                os.kill(runner, signal.SIGTERM)
            deadline = time.monotonic() + timeout_s
            while time.monotonic() < deadline and _alive(runner):
                time.sleep(0.02)
            if _alive(runner):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(runner, signal.SIGKILL)
        main = st.get("main_pid")
        if main and _alive(main):
            with contextlib.suppress(ProcessLookupError):
                os.kill(main, signal.SIGKILL)
        if st.get("active") != "failed" or unit is None:
            self.write_state(name, active="inactive", sub="dead", main_pid=0, runner_pid=0, stopping=False,
                             since=time.time())
        else:
            self.write_state(name, main_pid=0, runner_pid=0, stopping=False)
        if name.endswith(".socket"):
            self.fd_store(name).unlink(missing_ok=True)

    # ------------------------------------------------------------------ socket units
    def fd_store(self, name: str) -> Path:
        """Where a socket unit's holder hands its listening sockets to the service's runner: a unix socket
        in a root-only folder (whoever connects gets the listening fds), named by a hash of the unit name so
        the path fits sun_path's 108 bytes whatever the unit is called."""
        return self.state_dir / "fds" / hashlib.sha256(name.encode()).hexdigest()[:16]

    def _start_socket(self, unit: Unit) -> None:
        """``systemctl start X.socket`` (systemd.socket(5)): bind and listen on every ``ListenStream=`` here,
        as root and before the service runs, then leave the sockets to a detached holder until ``stop``.

        Refused like socket.c's socket_start() while ``X.service`` is active ("Socket service X.service
        already active, refusing."): the service would not get the sockets. A port that cannot be bound
        fails the socket with Result=resources, as systemd's "Failed to listen on sockets" does."""
        name = unit.name
        if self.state(name).get("active") == "active":
            return
        service = paired_unit(name, ".service")
        try:
            if parse_boolean(unit.get("Socket", "Accept", "no")):
                raise ValueError("Accept=yes (one service instance per connection) is not emulated")
            if unit.get("Socket", "Service", service) != service:
                raise ValueError("Service= naming another unit than the same-named service is not emulated")
            addrs = [parse_listen_stream(v) for v in unit.values("Socket", "ListenStream")]
            if not addrs:
                raise ValueError("Unit has no Listen setting (ListenStream=, ListenDatagram=, ListenFIFO=, ...). "
                                 "Refusing.")
            backlog = int(unit.get("Socket", "Backlog") or SOMAXCONN_DELUXE)
        except ValueError as exc:
            journal(self, name, f"{name}: {exc}")
            raise UnitError(f"Failed to start {name}: Unit {name} has a bad unit file setting.", 1) from None
        svc = self.state(service)
        if svc.get("active") in ("active", "activating", "deactivating") and svc.get("sub") != "auto-restart":
            journal(self, name, f"{name}: Socket service {service} already active, refusing.")
            raise UnitError(_job_failed(name), 1)
        socks: list[socket.socket] = []
        try:
            for addr in addrs:
                try:
                    socks.append(open_listener(addr, unit, backlog))
                except OSError as exc:
                    journal(self, name, f"{name}: Failed to create listening socket ({addr.text}): {exc.strerror}")
                    raise
            store = self._open_fd_store(name)
        except OSError as exc:
            for sock in socks:
                sock.close()
            journal(self, name, f"{name}: Failed to listen on sockets: {exc.strerror}",
                    f"{name}: Failed with result 'resources'.",
                    f"Failed to listen on {name} - {unit.get('Unit', 'Description', name)}.")
            self.write_state(name, active="failed", sub="failed", result="resources", main_pid=0, runner_pid=0,
                             since=time.time())
            raise UnitError(_job_failed(name), 1) from None
        self.write_state(name, active="active", sub="listening", result="success", main_pid=0, runner_pid=0,
                         stopping=False, since=time.time())
        try:
            _detached(self, name, lambda: _hold_sockets(self, unit, socks, store),
                      keep=(*(s.fileno() for s in socks), store.fileno()))
        finally:
            for sock in (*socks, store):
                sock.close()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not self.state(name).get("runner_pid"):
            time.sleep(0.02)
        if not self.state(name).get("runner_pid"):
            self.write_state(name, active="failed", sub="failed", result="resources", since=time.time())
            raise UnitError(_job_failed(name), 1)

    def _open_fd_store(self, name: str) -> socket.socket:
        path = self.fd_store(name)
        path.parent.mkdir(parents=True, exist_ok=True)
        os.chmod(path.parent, 0o700)
        path.unlink(missing_ok=True)
        store = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            store.bind(str(path))
            os.chmod(path, 0o600)
            store.listen(16)
        except OSError:
            store.close()
            raise
        return store

    def enable(self, name: str) -> list[str]:
        name = self.canonical(name)
        unit = self.load(name)
        if unit is None:
            raise UnitError(f"Failed to enable unit: Unit file {name} does not exist.", 1)
        if unit.builtin:
            (self.state_dir / f"{name}.disabled").unlink(missing_ok=True)
            return []
        if "@" in name and name.split("@", 1)[1].startswith("."):
            raise UnitError(f"Failed to enable unit: Unit {name} is a template, give an instance name.", 1)
        msgs = []
        for link in self.wants_links(unit):
            if not link.is_symlink():
                link.parent.mkdir(parents=True, exist_ok=True)
                target = unit.fragment or ""
                os.symlink(target, link)
                msgs.append(f"Created symlink {link} → {target}.")
        if not unit.has_install:
            msgs.append(f"The unit files have no installation config (WantedBy=, RequiredBy=...) for {name}.")
        return msgs

    def disable(self, name: str) -> list[str]:
        name = self.canonical(name)
        unit = self.load(name)
        if unit is None:
            raise UnitError(f"Failed to disable unit: Unit file {name} does not exist.", 1)
        if unit.builtin:
            self.state_dir.mkdir(parents=True, exist_ok=True)
            (self.state_dir / f"{name}.disabled").write_text("", encoding="utf-8")
            return []
        msgs = []
        for link in self.wants_links(unit):
            if link.is_symlink() or link.exists():
                link.unlink()
                msgs.append(f"Removed \"{link}\".")
        return msgs

    def boot(self) -> None:
        """What systemd does at boot for this board: read system.conf, start enabled units, sockets first.

        Sockets come first: sockets.target is ordered before basic.target (bootup(7)), and a service is
        After=basic.target by default (systemd.service(5), "Implicit Dependencies"), so a socket-activated
        service finds its socket listening and gets its fds."""
        self.reexec()
        for suffix, target in ((".socket", "sockets.target"), (".service", "multi-user.target")):
            for name in self.all_unit_names():
                if name.endswith(suffix) and not name.endswith("@" + suffix) and \
                        self.unit_file_state(name) == "enabled":
                    with contextlib.suppress(UnitError):
                        self.start(name)
            wants = Path(self.unit_dirs[0]) / f"{target}.wants"
            if wants.is_dir():
                for link in sorted(wants.iterdir()):
                    if "@" in link.name and link.name.endswith(suffix) and self.active_state(link.name) != "active":
                        with contextlib.suppress(UnitError):
                            self.start(link.name)

    def stop_all(self) -> None:
        for f in sorted(self.state_dir.glob("*.json")) if self.state_dir.is_dir() else []:
            if f.stem == "manager":
                continue
            with contextlib.suppress(Exception):
                self.stop(f.stem, timeout_s=3)

    # ------------------------------------------------------------------ show
    def show(self, name: str) -> dict[str, str]:
        name = self.canonical(name)
        unit = self.load(name)
        st = self.state(name)
        if unit is None:
            return {"Id": name, "Names": name, "LoadState": "masked" if self.masked(name) else "not-found",
                    "ActiveState": st.get("active", "inactive"), "SubState": st.get("sub", "dead"),
                    "UnitFileState": "masked" if self.masked(name) else "", "MainPID": "0",
                    "LimitMEMLOCK": fmt_limit(self.default_memlock()),
                    "LimitMEMLOCKSoft": fmt_limit(self.default_memlock())}
        since = st.get("since")
        stamp = time.strftime("%a %Y-%m-%d %H:%M:%S UTC", time.gmtime(since)) if since else ""
        if name.endswith(".socket"):
            return self._show_socket(unit, st, stamp)
        memlock = self.memlock_for(unit)
        env = " ".join(_env_assignments(unit))
        sock = paired_unit(name, ".socket")
        return {
            "Type": unit.get("Service", "Type", "simple"),
            "Restart": unit.get("Service", "Restart", "no"),
            "MainPID": str(st.get("main_pid") or 0),
            "ExecMainPID": str(st.get("main_pid") or st.get("last_main_pid") or 0),
            "ExecMainStatus": str(st.get("exit_status", 0)),
            "ExecStart": _exec_start_prop(unit),
            "Result": st.get("result", "success"),
            "NRestarts": str(st.get("n_restarts", 0)),
            "User": unit.get("Service", "User"),
            "Group": unit.get("Service", "Group"),
            "SupplementaryGroups": " ".join(unit.values("Service", "SupplementaryGroups")),
            "Environment": env,
            "WorkingDirectory": unit.get("Service", "WorkingDirectory"),
            "LimitMEMLOCK": fmt_limit(memlock),
            "LimitMEMLOCKSoft": fmt_limit(memlock),
            **self._loaded_props(unit, st),
            "ActiveEnterTimestamp": stamp if st.get("active") == "active" else "",
            "StateChangeTimestamp": stamp,
            "NeedDaemonReload": "no",
            "CanStart": "yes",
            "CanStop": "yes",
            "TriggeredBy": sock if name.endswith(".service") and self.load(sock) is not None else "",
        }

    def _loaded_props(self, unit: Unit, st: dict[str, Any]) -> dict[str, str]:
        """What ``systemctl show`` prints for any loaded unit, service or socket alike."""
        name = unit.name
        return {
            "Id": name,
            "Names": name,
            "Description": unit.get("Unit", "Description", name),
            "LoadState": "loaded",
            "ActiveState": st.get("active", "inactive"),
            "SubState": st.get("sub", "dead"),
            "FragmentPath": unit.fragment or "",
            "DropInPaths": " ".join(unit.dropins),
            "UnitFileState": self.unit_file_state(name),
            "UnitFilePreset": "disabled",
        }

    def _show_socket(self, unit: Unit, st: dict[str, Any], stamp: str) -> dict[str, str]:
        """``systemctl show X.socket``: the properties systemd's socket units have (a socket has no main
        process: MainPID=0; Listen= is the loaded configuration, as systemd shows it after a reload too)."""
        name = unit.name
        return {
            **self._loaded_props(unit, st),
            "Result": st.get("result", "success"),
            "MainPID": "0",
            "ControlPID": "0",
            "Listen": " ".join(f"{v} (Stream)" for v in unit.values("Socket", "ListenStream")),
            "Accept": "yes" if parse_boolean(unit.get("Socket", "Accept", "no")) else "no",
            "NoDelay": "yes" if parse_boolean(unit.get("Socket", "NoDelay", "no")) else "no",
            "Backlog": unit.get("Socket", "Backlog") or str(SOMAXCONN_DELUXE),
            "BindIPv6Only": unit.get("Socket", "BindIPv6Only", "default"),
            "FileDescriptorName": unit.get("Socket", "FileDescriptorName") or name,
            "Triggers": paired_unit(name, ".service"),
            "NAccepted": "0",
            "NConnections": "0",
            "ActiveEnterTimestamp": stamp if st.get("active") == "active" else "",
            "StateChangeTimestamp": stamp,
            "NeedDaemonReload": "no",
            "CanStart": "yes",
            "CanStop": "yes",
        }


def _unit_has_binary(fragment: str) -> bool:
    """Whether a unit's ExecStart= program exists here (the FastRPC daemon has no DSP to serve)."""
    try:
        for k, v in parse_ini(Path(fragment).read_text(encoding="utf-8")).get("Service", []):
            if k == "ExecStart" and v:
                return os.path.exists(shlex.split(v.lstrip("-@:+!"))[0])
    except (OSError, ValueError, IndexError):
        pass
    return False


def _exec_start_prop(unit: Unit) -> str:
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


def _env_assignments(unit: Unit) -> list[str]:
    out = []
    for v in unit.values("Service", "Environment"):
        out += shlex.split(v)
    return out


def _unit_env(unit: Unit, user: pwd.struct_passwd | None) -> dict[str, str]:
    env = {"PATH": DEFAULT_PATH, "LANG": "C.UTF-8", "INVOCATION_ID": os.urandom(16).hex()}
    if user:
        env.update(USER=user.pw_name, LOGNAME=user.pw_name, HOME=user.pw_dir, SHELL=user.pw_shell)
    for f in unit.values("Service", "EnvironmentFile"):
        optional = f.startswith("-")
        path = f.lstrip("-")
        try:
            for line in Path(path).read_text(encoding="utf-8").splitlines():
                line = line.strip()
                if line and not line.startswith("#") and "=" in line:
                    k, v = line.split("=", 1)
                    env[k.strip()] = v.strip().strip('"').strip("'")
        except OSError:
            if not optional:
                raise
    for a in _env_assignments(unit):
        if "=" in a:
            k, v = a.split("=", 1)
            env[k] = v
    return env


def _alive(pid: int) -> bool:
    try:
        os.kill(int(pid), 0)
    except (ProcessLookupError, ValueError):
        return False
    except PermissionError:
        return True
    try:   # a zombie is not running
        with open(f"/proc/{int(pid)}/stat", encoding="ascii") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@contextlib.contextmanager
def locked(path: Path):
    """An exclusive flock on ``path`` (created with its folder) for the block: the one lock helper of the
    simulator, on the boards (stdlib only) and on the host."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def journal_path(mgr: Manager, name: str) -> Path:
    return mgr.state_dir / "journal" / f"{name}.log"


def journal(mgr: Manager, name: str, *lines: str) -> None:
    """Append lines to a unit's journal file from a process whose stderr is not that journal (the CLI)."""
    jp = journal_path(mgr, name)
    jp.parent.mkdir(parents=True, exist_ok=True)
    with open(jp, "a", encoding="utf-8") as fh:
        fh.writelines(time.strftime("%b %d %H:%M:%S ") + line + "\n" for line in lines)


def _job_failed(name: str) -> str:
    """What systemctl(1) prints when a start job fails."""
    return (f"Job for {name} failed.\n"
            f'See "systemctl status {name}" and "journalctl -xeu {name}" for details.')


def _starting(st: dict[str, Any]) -> bool:
    """Whether a start is under way (its runner is up, or was spawned moments ago and has not written yet)."""
    return st.get("active") == "activating" and bool(
        st.get("runner_pid") or time.time() - float(st.get("since") or 0) < 10)


def _close_fds_except(keep: tuple[int, ...]) -> None:
    low = 3
    for fd in sorted(keep):
        os.closerange(low, fd)
        low = fd + 1
    os.closerange(low, MAXFD)


def _detached(mgr: Manager, name: str, body: Callable[[], None], keep: tuple[int, ...] = ()) -> None:
    """Run ``body`` in a double-forked process of its own session (reparented to the board's subreaper, so
    it outlives the systemctl that started it), stdout/stderr on the unit's journal, no fds open but stdio
    and ``keep``. Returns in the caller once the intermediate child has exited."""
    pid = os.fork()
    if pid:
        os.waitpid(pid, 0)
        return
    try:
        os.setsid()
        if os.fork():
            os._exit(0)
        devnull = os.open(os.devnull, os.O_RDWR)
        jp = journal_path(mgr, name)
        jp.parent.mkdir(parents=True, exist_ok=True)
        log = os.open(jp, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o640)
        os.dup2(devnull, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        _close_fds_except(keep)
        signal.set_wakeup_fd(-1)           # a socket holder's, when it starts a service's runner
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        body()
    except BaseException:   # noqa: BLE001 - a detached process must never return into the caller's code
        os._exit(1)
    os._exit(0)


def _spawn_runner(mgr: Manager, unit: Unit) -> None:
    """Double-fork a detached runner that supervises the unit's main process."""
    _detached(mgr, unit.name, lambda: _run_unit(mgr, unit))


def _mark_runner(mgr: Manager, name: str) -> Path:
    mark = runners_dir(mgr) / str(os.getpid())
    mark.parent.mkdir(parents=True, exist_ok=True)
    mark.write_text(name + "\n", encoding="utf-8")
    return mark


def _hold_sockets(mgr: Manager, unit: Unit, socks: list[socket.socket], store: socket.socket) -> None:
    """The socket holder: keep the listening sockets open until SIGTERM, hand them to the service's runner
    on request, and start the service when a connection arrives while it is not running.

    systemd.socket(5): with Accept=no "only one service unit is spawned for all connections", started on
    incoming traffic; socket.c triggers it only while the service is inactive or failed, not while its
    start is pending (the service's auto-restart wait counts as pending), and puts the socket in failed
    state with Result=service-start-limit-hit once the service hits its start limit. The connection
    waits in the listen backlog meanwhile and is accepted by the service. The holder sleeps in poll():
    on the listening sockets only while the service is down, else on a pidfd of the service's runner,
    which exits exactly when the service is down for good (stopped, failed without restart). SIGTERM
    (``systemctl stop X.socket``, the board's shutdown) only sets a flag and wakes poll() through the
    signal wakeup fd, so it never interrupts a state write or a service start half-way."""
    name = unit.name
    service = paired_unit(name, ".service")
    fdname = unit.get("Socket", "FileDescriptorName") or name
    names = ":".join([fdname] * len(socks)).encode()
    stop = {"flag": False}
    wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGTERM, lambda signum, frame: stop.update(flag=True))
    mark = _mark_runner(mgr, name)
    started = time.time()
    triggers: list[float] = []
    watched: tuple[int, int] | None = None        # (runner pid, its pidfd)
    sub = "listening"
    mgr.write_state(name, runner_pid=os.getpid())
    _log(f"Listening on {name} - {unit.get('Unit', 'Description', name)}.")
    failure = ""
    try:
        while not failure and not stop["flag"]:
            svc = mgr.state(service)
            down = svc.get("active") in ("inactive", "failed")
            if down and svc.get("result") == "start-limit-hit" and float(svc.get("since") or 0) >= started:
                failure = "service-start-limit-hit"
                break
            if ("listening" if down else "running") != sub:
                sub = "listening" if down else "running"
                mgr.write_state(name, sub=sub)
            poller = select.poll()
            poller.register(store, select.POLLIN)
            poller.register(wake_r, select.POLLIN)
            timeout: int | None = None
            if down:
                for sock in socks:
                    poller.register(sock, select.POLLIN)
            else:
                runner = int(svc.get("runner_pid") or 0)
                if watched and watched[0] != runner:
                    os.close(watched[1])
                    watched = None
                if runner and not watched:
                    with contextlib.suppress(OSError):
                        watched = (runner, os.pidfd_open(runner))
                if watched:
                    poller.register(watched[1], select.POLLIN)
                else:
                    timeout = 100     # ms: a start was requested and its runner has not written its pid yet
            ready = {fd for fd, _ev in poller.poll(timeout)}
            if stop["flag"]:
                break
            if store.fileno() in ready:
                _hand_out(store, socks, names)
            if down and any(sock.fileno() in ready for sock in socks):
                now = time.monotonic()
                triggers = [t for t in triggers if now - t < START_LIMIT_INTERVAL_S]
                if len(triggers) >= START_LIMIT_BURST:    # the service's start limit, over the starts we asked for
                    journal(mgr, service, f"{service}: Start request repeated too quickly.")
                    mgr.write_state(service, active="failed", sub="failed", result="start-limit-hit",
                                    since=time.time())
                    failure = "service-start-limit-hit"
                    break
                triggers.append(now)
                _log(f"{name}: Incoming traffic, starting {service}.")
                try:
                    mgr.start(service, wait=False)
                except UnitError as exc:      # socket.c: "Failed to queue service startup job"
                    _log(f"{name}: Failed to queue service startup job: {exc}")
                    failure = "resources"
    finally:
        for sock in (*socks, store):
            sock.close()
        for fd in (wake_r, wake_w, *(watched[1:] if watched else ())):
            os.close(fd)
        mark.unlink(missing_ok=True)
    if failure:
        _log(f"{name}: Failed with result '{failure}'.")
        mgr.write_state(name, active="failed", sub="failed", result=failure, runner_pid=0, since=time.time())
        mgr.fd_store(name).unlink(missing_ok=True)
    else:
        _log(f"Closed {name} - {unit.get('Unit', 'Description', name)}.")


def _hand_out(store: socket.socket, socks: list[socket.socket], names: bytes) -> None:
    """Give one runner the listening sockets (SCM_RIGHTS: the same open sockets, not copies of the address),
    with their LISTEN_FDNAMES as the message."""
    try:
        conn, _addr = store.accept()
    except OSError:
        return
    with conn:
        conn.settimeout(2)
        with contextlib.suppress(OSError):
            socket.send_fds(conn, [names], [s.fileno() for s in socks])


def _listen_fds(mgr: Manager, unit: Unit) -> tuple[list[int], str]:
    """The listening sockets of the service's same-named socket unit, if it is active (systemd passes the
    fds of the sockets that trigger the service, systemd.service(5) Sockets=), and their LISTEN_FDNAMES."""
    sock_name = paired_unit(unit.name, ".socket")
    if any(s != sock_name for v in unit.values("Service", "Sockets") for s in v.split()):
        _log(f"{unit.name}: Sockets= other than {sock_name} is not emulated; those sockets are not passed")
    if not unit.name.endswith(".service") or mgr.state(sock_name).get("active") != "active":
        return [], ""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(5)
            conn.connect(str(mgr.fd_store(sock_name)))
            msg, fds, _flags, _addr = socket.recv_fds(conn, 4096, 64)
    except OSError as exc:
        _log(f"{unit.name}: Failed to get the sockets of {sock_name}: {exc}")
        return [], ""
    return fds, msg.decode()


def _install_listen_fds(fds: list[int]) -> None:
    """In the service's child: the passed sockets become fds 3, 4, ... (SD_LISTEN_FDS_START, sd_listen_fds(3))
    and nothing else stays open past stderr, as systemd execs services. Each fd is first duplicated above
    the target range, so that one received as, say, fd 4 is not overwritten before it is moved."""
    n = len(fds)
    high = [fcntl.fcntl(fd, fcntl.F_DUPFD, SD_LISTEN_FDS_START + n) for fd in fds]
    for i, fd in enumerate(high):
        os.dup2(fd, SD_LISTEN_FDS_START + i)
    os.closerange(SD_LISTEN_FDS_START + n, MAXFD)


def _run_unit(mgr: Manager, unit: Unit) -> None:
    name = unit.name
    stopping = {"flag": False}
    child = {"pid": 0}

    def on_term(signum: int, frame: Any) -> None:
        stopping["flag"] = True
        if child["pid"]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(child["pid"], signal.SIGTERM)

    signal.signal(signal.SIGTERM, on_term)
    restart = unit.get("Service", "Restart", "no")
    try:
        restart_sec = float(re.sub(r"[^0-9.]", "", unit.get("Service", "RestartSec", "0.1")) or 0.1)
    except ValueError:
        restart_sec = 0.1
    mgr.write_state(name, runner_pid=os.getpid())
    mark = _mark_runner(mgr, name)
    try:
        _supervise(mgr, unit, restart, restart_sec, stopping, child)
    finally:
        mark.unlink(missing_ok=True)


def runners_dir(mgr: Manager) -> Path:
    """One file per live runner (named by its pid): lets the namespace holder, a shell script, see
    without starting Python whether any service needs stopping when the board shuts down."""
    return mgr.state_dir / "runners"


def _supervise(mgr: Manager, unit: Unit, restart: str, restart_sec: float, stopping: dict[str, bool],
               child: dict[str, int]) -> None:
    name = unit.name
    starts: list[float] = []
    n_restarts = 0
    while True:
        now = time.monotonic()
        starts = [s for s in starts if now - s < START_LIMIT_INTERVAL_S] + [now]
        if len(starts) > START_LIMIT_BURST:
            mgr.write_state(name, active="failed", sub="failed", result="start-limit-hit", main_pid=0,
                            runner_pid=0, since=time.time())
            _log(f"{name}: Start request repeated too quickly.")
            return
        try:
            pid = _exec_main(mgr, unit)
        except Exception as exc:   # noqa: BLE001 - report like systemd's "Failed at step EXEC"
            _log(f"{name}: Failed to start: {exc}")
            mgr.write_state(name, active="failed", sub="failed", result="exit-code", main_pid=0, runner_pid=0,
                            exit_status=203, since=time.time())
            return
        child["pid"] = pid
        mgr.write_state(name, active="active", sub="running", main_pid=pid, last_main_pid=pid,
                        n_restarts=n_restarts, since=time.time())
        _pid, status = os.waitpid(pid, 0)
        child["pid"] = 0
        code = os.waitstatus_to_exitcode(status)
        if stopping["flag"] or mgr.state(name).get("stopping"):
            mgr.write_state(name, active="inactive", sub="dead", main_pid=0, runner_pid=0, exit_status=code,
                            result="success", since=time.time())
            return
        failed = code != 0
        _log(f"{name}: Main process exited, code={'exited' if code >= 0 else 'killed'}, status={code}")
        # systemd.service(5) RestartPreventExitStatus=: listed exit codes prevent the restart whatever Restart= says
        prevent = {int(v) for v in " ".join(unit.values("Service", "RestartPreventExitStatus")).split() if v.isdigit()}
        if code not in prevent and (restart == "always"
                                    or (restart in ("on-failure", "on-abnormal", "on-abort") and failed)):
            n_restarts += 1
            mgr.write_state(name, active="activating", sub="auto-restart", main_pid=0, exit_status=code,
                            result="exit-code" if failed else "success", n_restarts=n_restarts)
            time.sleep(min(restart_sec, 5.0))
            if stopping["flag"]:
                mgr.write_state(name, active="inactive", sub="dead", runner_pid=0, since=time.time())
                return
            continue
        mgr.write_state(name, active="failed" if failed else "inactive", sub="failed" if failed else "dead",
                        main_pid=0, runner_pid=0, exit_status=code, result="exit-code" if failed else "success",
                        since=time.time())
        return


def _log(msg: str) -> None:
    sys.stderr.write(time.strftime("%b %d %H:%M:%S ") + msg + "\n")
    sys.stderr.flush()


def _exec_main(mgr: Manager, unit: Unit) -> int:
    argv = shlex.split(unit.get("Service", "ExecStart"))
    while argv and argv[0][:1] in "-@:+!":
        argv[0] = argv[0][1:]
    user_name = unit.get("Service", "User")
    user = pwd.getpwnam(user_name) if user_name else None
    group_name = unit.get("Service", "Group")
    gid = grp.getgrnam(group_name).gr_gid if group_name else (user.pw_gid if user else 0)
    extra = []
    for g in unit.values("Service", "SupplementaryGroups"):
        extra += [grp.getgrnam(x).gr_gid for x in g.split()]
    env = _unit_env(unit, user)
    memlock = mgr.memlock_for(unit)
    wd = unit.get("Service", "WorkingDirectory") or (user.pw_dir if user else "/")
    fds, fdnames = _listen_fds(mgr, unit)
    pid = os.fork()
    if pid:
        for fd in fds:
            os.close(fd)
        return pid
    try:
        if fds:
            # sd_listen_fds(3): LISTEN_PID is the pid of the process that is to take the fds, set after fork
            env.update(LISTEN_FDS=str(len(fds)), LISTEN_PID=str(os.getpid()), LISTEN_FDNAMES=fdnames)
        os.setsid()
        from provisioner.sim.limits import set_memlock
        set_memlock(memlock, memlock, env)
        if user:
            os.initgroups(user.pw_name, gid)
            if extra:
                os.setgroups(sorted(set(os.getgroups()) | set(extra)))
            os.setgid(gid)
            os.setuid(user.pw_uid)
        elif group_name or extra:
            os.setgroups(extra)
            os.setgid(gid)
        with contextlib.suppress(OSError):
            os.chdir(wd.lstrip("-") or "/")
        _install_listen_fds(fds)
        os.execvpe(argv[0], argv, env)
    except BaseException as exc:   # noqa: BLE001
        sys.stderr.write(f"{unit.name}: Failed at step EXEC spawning {argv[0] if argv else '?'}: {exc}\n")
        os._exit(203)
    return 0


# --------------------------------------------------------------------------- CLI
def _status_text(mgr: Manager, name: str) -> tuple[str, int]:
    name = mgr.canonical(name)
    unit = mgr.load(name)
    if unit is None:
        return f"Unit {name} could not be found.", 4
    info = mgr.show(name)
    active = info["ActiveState"]
    dot = "●" if active == "active" else ("×" if active == "failed" else "○")
    lines = [
        f"{dot} {name} - {info['Description']}",
        f"     Loaded: loaded ({unit.fragment or '(builtin)'}; {info['UnitFileState']}; preset: disabled)",
    ]
    if unit.dropins:
        lines.append(f"    Drop-In: {' '.join(unit.dropins)}")
    since = info.get("StateChangeTimestamp") or ""
    if info.get("TriggeredBy"):
        lines.append(f"TriggeredBy: {info['TriggeredBy']}")
    lines.append(f"     Active: {active} ({info['SubState']}){' since ' + since if since else ''}")
    if info.get("Triggers"):
        lines.append(f"   Triggers: {info['Triggers']}")
    lines += [f"     Listen: {v} (Stream)" for v in unit.values("Socket", "ListenStream")]
    if info["MainPID"] != "0":
        lines.append(f"   Main PID: {info['MainPID']}")
    jp = journal_path(mgr, name)
    if jp.is_file():
        tail = jp.read_text(encoding="utf-8", errors="replace").splitlines()[-10:]
        if tail:
            lines.append("")
            lines += tail
    code = 0 if active == "active" else 3
    return "\n".join(lines), code


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    props: list[str] = []
    types: list[str] = []
    value_only = False
    positional: list[str] = []
    i = 0
    while i < len(args):
        a = args[i]
        if a in ("-p", "--property"):
            i += 1
            props += args[i].split(",") if i < len(args) else []
        elif a.startswith("--property="):
            props += a.split("=", 1)[1].split(",")
        elif a.startswith("-p") and len(a) > 2:
            props += a[2:].split(",")
        elif a == "--value":
            value_only = True
        elif a in ("-t", "--type"):
            i += 1
            types += args[i].split(",") if i < len(args) else []
        elif a.startswith("--type="):
            types += a.split("=", 1)[1].split(",")
        elif a in ("-l", "--full", "--no-pager", "--no-block", "--system", "--all", "-a", "--plain", "--quiet",
                   "-q", "--no-legend", "--force", "--now", "--no-ask-password"):
            if a == "--now":
                positional.append("--now")
        elif a == "--user":
            sys.stderr.write("Failed to connect to bus: No medium found\n")
            return 1
        else:
            positional.append(a)
        i += 1
    now = "--now" in positional
    positional = [p for p in positional if p != "--now"]
    if not positional:
        return _cmd_list_units(Manager(), [], types)
    cmd, names = positional[0], positional[1:]
    mgr = Manager()
    try:
        return _dispatch(mgr, cmd, names, props, value_only, now, types)
    except UnitError as exc:
        sys.stderr.write(str(exc) + "\n")
        return exc.code
    except PermissionError as exc:
        sys.stderr.write(f"Failed to {cmd}: Access denied ({exc})\n")
        return 1


def _dispatch(mgr: Manager, cmd: str, names: list[str], props: list[str], value_only: bool, now: bool,
              types: list[str] | None = None) -> int:
    if cmd in ("daemon-reload",):
        return 0
    if cmd == "daemon-reexec":
        mgr.reexec()
        return 0
    if cmd == "show":
        for idx, n in enumerate(names or ["edge-llm-sim-manager"]):
            info = mgr.show(n) if names else {"Version": "252-sim", "DefaultLimitMEMLOCK":
                                              fmt_limit(mgr.default_memlock()), "SystemState": "running"}
            if idx:
                sys.stdout.write("\n")
            for k, v in info.items():
                if props and k not in props:
                    continue
                sys.stdout.write(f"{v}\n" if value_only else f"{k}={v}\n")
        return 0
    if cmd in ("start", "stop", "restart", "reload", "try-restart", "reload-or-restart"):
        if not names:
            raise UnitError("Too few arguments.", 1)
        for n in names:
            if cmd == "stop":
                _warn_stop(mgr, mgr.canonical(n))
                mgr.stop(n)
            elif cmd in ("restart", "reload-or-restart", "reload"):
                mgr.stop(n)
                mgr.start(n)
            elif cmd == "try-restart":
                if mgr.active_state(n) == "active":
                    mgr.stop(n)
                    mgr.start(n)
            else:
                mgr.start(n)
        return 0
    if cmd in ("enable", "disable"):
        for n in names:
            msgs = mgr.enable(n) if cmd == "enable" else mgr.disable(n)
            for m in msgs:
                sys.stderr.write(m + "\n")
            if now:
                (mgr.start if cmd == "enable" else mgr.stop)(n)
        return 0
    if cmd in ("mask", "unmask"):
        for n in names:
            p = Path(mgr.unit_dirs[0]) / mgr.canonical(n)
            if cmd == "mask":
                if p.is_file() and not p.is_symlink():
                    raise UnitError(f"Failed to mask unit: File {p} already exists.", 1)
                p.unlink(missing_ok=True)
                os.symlink("/dev/null", p)
            elif p.is_symlink() and os.readlink(p) == "/dev/null":
                p.unlink()
        return 0
    if cmd == "is-active":
        states = [mgr.active_state(n) for n in names]
        for s in states:
            sys.stdout.write(s + "\n")
        return 0 if states and all(s == "active" for s in states) else 3
    if cmd == "is-failed":
        states = [mgr.active_state(n) for n in names]
        for s in states:
            sys.stdout.write(s + "\n")
        return 0 if any(s == "failed" for s in states) else 1
    if cmd == "is-enabled":
        rc = 0
        for n in names:
            s = mgr.unit_file_state(n)
            if not s:
                sys.stderr.write(f"Failed to get unit file state for {mgr.canonical(n)}: No such file or directory\n")
                return 1
            sys.stdout.write(s + "\n")
            if s not in ("enabled", "static", "enabled-runtime", "alias", "indirect", "generated"):
                rc = 1
        return rc
    if cmd == "status":
        rc = 0
        for n in names:
            text, code = _status_text(mgr, n)
            sys.stdout.write(text + "\n")
            rc = rc or code
        return rc
    if cmd == "cat":
        for n in names:
            unit = mgr.load(n)
            if unit is None or unit.fragment is None:
                raise UnitError(f"No files found for {mgr.canonical(n)}.", 1)
            for f in [unit.fragment, *unit.dropins]:
                sys.stdout.write(f"# {f}\n{Path(f).read_text(encoding='utf-8')}\n")
        return 0
    if cmd == "list-units":
        return _cmd_list_units(mgr, names, types or [])
    if cmd == "list-unit-files":
        return _cmd_list_unit_files(mgr, names, types or [])
    if cmd in ("reboot", "poweroff", "halt"):
        raise UnitError(f"Failed to {cmd}: use `provisioner sim` to power-cycle a virtual board.", 1)
    raise UnitError(f"Unknown command verb '{cmd}'.", 1)


def _warn_stop(mgr: Manager, name: str) -> None:
    """Stopping one of a socket/service pair leaves the other as it is. systemctl warns on stderr when
    the stopped service can still be activated ("Stopping 'X.service', but its triggering units are still
    active:"); a socket stopped under a running service leaves it the fds it has, noted in the journal."""
    if name.endswith(".service") and mgr.active_state(paired_unit(name, ".socket")) == "active":
        sys.stderr.write(f"Stopping '{name}', but its triggering units are still active:\n"
                         f"{paired_unit(name, '.socket')}\n")
    if name.endswith(".socket") and mgr.active_state(paired_unit(name, ".service")) == "active":
        journal(mgr, name, f"{name}: Stopping, {paired_unit(name, '.service')} keeps running on the sockets it has.")


def _matches(name: str, patterns: list[str], types: list[str] | None = None) -> bool:
    import fnmatch
    if types and name.rsplit(".", 1)[-1] not in types:
        return False
    return not patterns or any(fnmatch.fnmatch(name, p) or fnmatch.fnmatch(name, Manager.canonical(p))
                               for p in patterns)


def _cmd_list_units(mgr: Manager, patterns: list[str], types: list[str]) -> int:
    sys.stdout.write("UNIT LOAD ACTIVE SUB DESCRIPTION\n")
    for n in mgr.all_unit_names():
        if n.endswith(("@.service", "@.socket")) or not _matches(n, patterns, types):
            continue
        info = mgr.show(n)
        sys.stdout.write(f"{n} {info['LoadState']} {info['ActiveState']} {info['SubState']} "
                         f"{info.get('Description', n)}\n")
    return 0


def _cmd_list_unit_files(mgr: Manager, patterns: list[str], types: list[str]) -> int:
    sys.stdout.write("UNIT FILE STATE PRESET\n")
    found = 0
    for n in mgr.all_unit_names():
        if not _matches(n, patterns, types):
            continue
        state = "static" if n.endswith(("@.service", "@.socket")) else mgr.unit_file_state(n)
        if not state:
            continue
        found += 1
        sys.stdout.write(f"{n} {state} disabled\n")
    sys.stdout.write(f"\n{found} unit files listed.\n")
    return 0 if found or not patterns else 1


def executable_text() -> str:
    """The ``/usr/bin/systemctl`` script a virtual board's namespace carries."""
    return (
        "#!/run/edge-llm-sim/python3 -S\n"
        "# SIMULATED systemctl for edge-llm virtual boards (provisioner.sim.systemctl) - not systemd.\n"
        "import sys\n"
        "sys.path.insert(0, '/run/edge-llm-sim/src')\n"
        "from provisioner.sim.systemctl import main\n"
        "sys.exit(main())\n"
    )


def lifecycle(action: str) -> None:
    """What the board's init does around the service manager: ``boot`` (read system.conf, start
    the enabled units) or ``shutdown`` (stop every unit). The namespace agent runs this in a fresh
    ``python -S`` that imports nothing but this module, so the runners it forks stay small."""
    mgr = Manager()
    if action == "boot":
        mgr.boot()
    elif action == "shutdown":
        mgr.stop_all()
    else:
        raise ValueError(f"unknown lifecycle action {action!r}")
