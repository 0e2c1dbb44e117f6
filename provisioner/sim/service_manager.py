"""The board's service manager stand-in: units on disk and their state in /run, started and stopped.

What ``systemctl`` (:mod:`provisioner.sim.systemctl`) asks of systemd: load a unit with its drop-ins
(:mod:`provisioner.sim.unit_files`), keep its runtime state (active, sub state, main pid, restarts) in
``/run/edge-llm-sim/systemd``, enable/disable with real ``*.wants`` symlinks in the board's
``/etc/systemd/system`` (so they survive a reboot), start and stop it, boot, and answer ``show``.
The processes a start leaves behind (service runners, socket holders) are
:mod:`provisioner.sim.service_runner`'s.

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
import hashlib
import json
import os
import re
import signal
import socket
import time
from pathlib import Path
from typing import Any

from provisioner.sim.filelock import locked
from provisioner.sim.service_runner import detached, hold_sockets, journal, spawn_runner
from provisioner.sim.unit_files import (
    UNIT_DIRS,
    ListenAddress,
    Unit,
    UnitError,
    env_assignments,
    exec_start_prop,
    fmt_limit,
    paired_unit,
    parse_boolean,
    parse_ini,
    parse_listen_stream,
    parse_size,
    read_default_memlock,
    unit_has_binary,
)

STATE_DIR = "/run/edge-llm-sim/systemd"
BUILTIN_UNITS = {
    "cdsprpcd.service": {"Description": "CDSP RPC daemon (FastRPC)", "WantedBy": "multi-user.target"},
}
# systemd.socket(5) Backlog=: "Defaults to SOMAXCONN" in old releases; socket.c now passes INT_MAX
# (SOMAXCONN_DELUXE), which the kernel caps at net.core.somaxconn: the same queue either way.
SOMAXCONN_DELUXE = 2**31 - 1


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
        dropins = self.dropin_paths(name, template)
        if name in BUILTIN_UNITS and not self.masked(name) and (fragment is None or not unit_has_binary(fragment)):
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

    def dropin_paths(self, name: str, template: str | None = None) -> list[str]:
        """The drop-ins of ``name`` in the order systemd applies them (systemd.unit(5), DESCRIPTION, the
        drop-in paragraphs; systemd/systemd man/systemd.unit.xml @ 5dcd46dd): the instance's ``.d/`` and
        the template's, in every unit directory; a file masks one of the same name in a directory of lower
        precedence (/etc over /run over /usr/lib; the instance's before the template's), and "multiple
        drop-in files with different names are applied in lexicographic order, regardless of which of the
        directories they reside in". So a later name wins whatever directory it sits in."""
        by_name: dict[str, str] = {}
        for d in self.unit_dirs:
            for cand in ((name, template) if template else (name,)):
                dd = Path(d) / f"{cand}.d"
                if dd.is_dir():
                    for p in sorted(dd.glob("*.conf")):
                        by_name.setdefault(p.name, str(p))
        return [by_name[n] for n in sorted(by_name)]

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
                spawn_runner(self, unit)
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
            detached(self, name, lambda: hold_sockets(self, unit, socks, store),
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
        env = " ".join(env_assignments(unit))
        sock = paired_unit(name, ".socket")
        return {
            "Type": unit.get("Service", "Type", "simple"),
            "Restart": unit.get("Service", "Restart", "no"),
            "MainPID": str(st.get("main_pid") or 0),
            "ExecMainPID": str(st.get("main_pid") or st.get("last_main_pid") or 0),
            "ExecMainStatus": str(st.get("exit_status", 0)),
            "ExecStart": exec_start_prop(unit),
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



def _job_failed(name: str) -> str:
    """What systemctl(1) prints when a start job fails."""
    return (f"Job for {name} failed.\n"
            f'See "systemctl status {name}" and "journalctl -xeu {name}" for details.')


def _starting(st: dict[str, Any]) -> bool:
    """Whether a start is under way (its runner is up, or was spawned moments ago and has not written yet)."""
    return st.get("active") == "activating" and bool(
        st.get("runner_pid") or time.time() - float(st.get("since") or 0) < 10)


