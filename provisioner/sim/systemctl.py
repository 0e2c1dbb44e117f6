"""A small service manager standing in for systemd inside a virtual board's namespace: its CLI.

Installed as ``/usr/bin/systemctl`` in the namespace (see :mod:`provisioner.sim.namespace`). It is
good enough for Ansible's ``ansible.builtin.systemd``/``systemd_service`` and ``service_facts``
modules and for people typing ``systemctl status``: ``show`` (with the properties Ansible reads
plus LimitMEMLOCK, MainPID, NRestarts...), ``start/stop/restart/reload/try-restart``,
``enable/disable``, ``daemon-reload``, ``daemon-reexec``, ``is-active``, ``is-enabled``,
``is-failed``, ``status``, ``cat``, ``list-units``, ``list-unit-files``, ``mask/unmask``.

This module is the command line (verbs, options, what systemctl(1) prints) and the board's init
hooks (:func:`lifecycle`). Unit files are read by :mod:`provisioner.sim.unit_files`, the units'
state is kept by :mod:`provisioner.sim.service_manager`, and the processes a start leaves behind
are :mod:`provisioner.sim.service_runner`'s. Only the standard library is imported: this runs under
the board's python as root.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from provisioner.sim.service_manager import Manager
from provisioner.sim.service_runner import journal, journal_path
from provisioner.sim.unit_files import UnitError, fmt_limit, paired_unit


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
