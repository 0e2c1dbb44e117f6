"""A small service manager standing in for systemd inside a virtual board's namespace.

Installed as ``/usr/bin/systemctl`` in the namespace (see :mod:`provisioner.sim.host`). It is
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

``cdsprpcd.service`` (QLI's FastRPC daemon) is built in: there is no DSP to serve, so it is a
unit without a process that is active from boot unless stopped. Only the standard library is
imported: this runs under the board's python as root.
"""

from __future__ import annotations

import contextlib
import fcntl
import grp
import json
import os
import pwd
import re
import resource
import shlex
import signal
import sys
import time
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
                    if p.name.endswith(".service") and (p.is_file() or p.is_symlink()):
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
    def start(self, name: str) -> None:
        name = self.canonical(name)
        if self.masked(name):
            raise UnitError(f"Failed to start {name}: Unit {name} is masked.", 1)
        unit = self.load(name)
        if unit is None:
            raise UnitError(f"Failed to start {name}: Unit {name} not found.", 5)
        st = self.state(name)
        if st.get("active") == "active":
            return
        if unit.builtin:
            self.write_state(name, active="active", sub="running", result="success", main_pid=0,
                             since=time.time())
            return
        if name.endswith(".timer"):
            # Timers are recorded as armed, never fired: a test triggers the timer's service itself.
            self.write_state(name, active="active", sub="waiting", result="success", main_pid=0, since=time.time())
            return
        exec_start = unit.get("Service", "ExecStart")
        if not exec_start:
            raise UnitError(f"Failed to start {name}: Unit {name} has no ExecStart= setting.", 1)
        self.write_state(name, active="activating", sub="start", result="success", main_pid=0, n_restarts=0,
                         since=time.time(), runner_pid=0, starts=[])
        _spawn_runner(self, unit)
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
        """What systemd does at boot for this board: read system.conf, start enabled units."""
        self.reexec()
        for name in self.all_unit_names():
            if name.endswith("@.service"):
                continue
            if self.unit_file_state(name) == "enabled":
                with contextlib.suppress(UnitError):
                    self.start(name)
        wants = Path(self.unit_dirs[0]) / "multi-user.target.wants"
        if wants.is_dir():
            for link in sorted(wants.iterdir()):
                if "@" in link.name and self.active_state(link.name) != "active":
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
        memlock = self.memlock_for(unit)
        env = " ".join(_env_assignments(unit))
        since = st.get("since")
        stamp = time.strftime("%a %Y-%m-%d %H:%M:%S UTC", time.gmtime(since)) if since else ""
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


def _spawn_runner(mgr: Manager, unit: Unit) -> None:
    """Double-fork a detached runner that supervises the unit's main process."""
    pid = os.fork()
    if pid:
        os.waitpid(pid, 0)
        return
    try:
        os.setsid()
        if os.fork():
            os._exit(0)
        devnull = os.open(os.devnull, os.O_RDWR)
        jp = journal_path(mgr, unit.name)
        jp.parent.mkdir(parents=True, exist_ok=True)
        log = os.open(jp, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o640)
        os.dup2(devnull, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.closerange(3, 65536)
        _run_unit(mgr, unit)
    except BaseException:   # noqa: BLE001 - a runner must never return into the caller's code
        os._exit(1)
    os._exit(0)


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
    mark = runners_dir(mgr) / str(os.getpid())
    mark.parent.mkdir(parents=True, exist_ok=True)
    mark.write_text(name + "\n", encoding="utf-8")
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
    pid = os.fork()
    if pid:
        return pid
    try:
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
    lines.append(f"     Active: {active} ({info['SubState']}){' since ' + since if since else ''}")
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
        elif a in ("-l", "--full", "--no-pager", "--no-block", "--system", "--all", "-a", "--plain", "--quiet",
                   "-q", "--no-legend", "--force", "--now", "--no-ask-password") or a.startswith("--type"):
            if a == "--now":
                positional.append("--now")
            if a == "--type":
                i += 1
        elif a == "--user":
            sys.stderr.write("Failed to connect to bus: No medium found\n")
            return 1
        else:
            positional.append(a)
        i += 1
    now = "--now" in positional
    positional = [p for p in positional if p != "--now"]
    if not positional:
        return _cmd_list_units(Manager(), [])
    cmd, names = positional[0], positional[1:]
    mgr = Manager()
    try:
        return _dispatch(mgr, cmd, names, props, value_only, now)
    except UnitError as exc:
        sys.stderr.write(str(exc) + "\n")
        return exc.code
    except PermissionError as exc:
        sys.stderr.write(f"Failed to {cmd}: Access denied ({exc})\n")
        return 1


def _dispatch(mgr: Manager, cmd: str, names: list[str], props: list[str], value_only: bool, now: bool) -> int:
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
        return _cmd_list_units(mgr, names)
    if cmd == "list-unit-files":
        return _cmd_list_unit_files(mgr, names)
    if cmd in ("reboot", "poweroff", "halt"):
        raise UnitError(f"Failed to {cmd}: use `provisioner sim` to power-cycle a virtual board.", 1)
    raise UnitError(f"Unknown command verb '{cmd}'.", 1)


def _matches(name: str, patterns: list[str]) -> bool:
    import fnmatch
    return not patterns or any(fnmatch.fnmatch(name, p) or fnmatch.fnmatch(name, Manager.canonical(p))
                               for p in patterns)


def _cmd_list_units(mgr: Manager, patterns: list[str]) -> int:
    sys.stdout.write("UNIT LOAD ACTIVE SUB DESCRIPTION\n")
    for n in mgr.all_unit_names():
        if n.endswith("@.service") or not _matches(n, patterns):
            continue
        info = mgr.show(n)
        sys.stdout.write(f"{n} {info['LoadState']} {info['ActiveState']} {info['SubState']} "
                         f"{info.get('Description', n)}\n")
    return 0


def _cmd_list_unit_files(mgr: Manager, patterns: list[str]) -> int:
    sys.stdout.write("UNIT FILE STATE PRESET\n")
    found = 0
    for n in mgr.all_unit_names():
        if not _matches(n, patterns):
            continue
        state = "static" if n.endswith("@.service") else mgr.unit_file_state(n)
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
