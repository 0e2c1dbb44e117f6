"""The fleet stage as one call: run a playbook with ansible-playbook over an inventory, get a report.

``provisioner fleet ...`` and ``provisioner rehearse`` both call :func:`run_fleet`; nothing here
prints - progress goes to ``on_event`` (the CLI renders it), the result is the report
(:class:`~provisioner.fleet.shared.report.FleetReport`).

ansible-playbook runs from an argv list through :func:`provisioner.process.run_streaming` with our
JSON-lines stdout callback (``edge_llm.fleet.events``), so every task result arrives as one
structured line: the runner turns them into live progress events and a :class:`FleetRun`. All
Ansible settings that matter for speed (pipelining, ControlPersist, forks) are passed through the
environment, so the same playbooks also run by hand from ``playbooks/`` with ``ansible.cfg``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from provisioner import context, tools
from provisioner.errors import FleetError
from provisioner.fleet.shared.inventory import PLAYBOOK_DIR, list_hosts
from provisioner.process import run_streaming

if TYPE_CHECKING:
    from provisioner.fleet.shared.report import FleetReport

ACTIONS = {
    "verify": "verify.yml",
    "deploy": "deploy.yml",
    "launch": "launch.yml",
    "rollback": "rollback.yml",
    "benchmark": "benchmark.yml",
    "update-os": "update-os.yml",
    "eval": "eval.yml",
}
#: forks per controller core: a fork mostly waits on its board's SSH channel, yet each task still
#: costs ~0.5 s of controller CPU, so more forks than this only queue on the CPU.
FORKS_PER_CORE = 25
DEFAULT_FORKS = min(256, max(10, FORKS_PER_CORE * (os.cpu_count() or 2)))
#: the SSH multiplexing Ansible's ssh connection plugin is given unless ANSIBLE_SSH_ARGS says otherwise
#: (the same line as playbooks/ansible.cfg, for runs by hand)
SSH_ARGS = "-o ControlMaster=auto -o ControlPersist=300s -o ServerAliveInterval=15 -o ServerAliveCountMax=4"
CALLBACK = "edge_llm.fleet.events"


def payloads_of(event: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The ``edge_llm`` payloads of one task result: a dict, or a list when one task did two things
    (the update-os gate judges the board and commits the deployment in the same task)."""
    raw = event.get("edge_llm")
    return [p for p in (raw if isinstance(raw, list) else [raw]) if isinstance(p, dict)]


@dataclass
class HostOutcome:
    """What happened to one board in one playbook run."""

    name: str
    status: str = "ok"                 # ok | failed | unreachable | skipped (never reached a task)
    msg: str = ""
    failed_task: str | None = None
    failed_action: str | None = None
    changed: int = 0
    tasks: int = 0
    bytes_downloaded: int = 0
    payloads: list[dict[str, Any]] = field(default_factory=list)   # edge_llm payloads (verify, deploy, bench)

    def payload(self, kind: str) -> dict[str, Any] | None:
        for p in reversed(self.payloads):
            if p.get("kind") == kind:
                return p
        return None


@dataclass
class FleetRun:
    action: str
    inventory: str
    argv: list[str]
    returncode: int
    duration_s: float
    hosts: dict[str, HostOutcome]
    stats: dict[str, dict[str, int]]
    log_path: str | None
    other_lines: list[str] = field(default_factory=list)

    @property
    def failed(self) -> list[str]:
        return [h for h, o in self.hosts.items() if o.status == "failed"]

    @property
    def unreachable(self) -> list[str]:
        return [h for h, o in self.hosts.items() if o.status == "unreachable"]


#: what ansible-playbook sees of the run's environment beyond context.CHILD_ENV (PATH, HOME, locale,
#: proxies, SSH_AUTH_SOCK): its own ANSIBLE_* settings and a PYTHONPATH for strategy plugins.
#: Nothing else - a download token or the console password has no business on the controller.
ANSIBLE_KEEP = ("ANSIBLE_*", "PYTHONPATH")


def fleet_forks(hosts: int, requested: int | None, env: Mapping[str, str]) -> int:
    """Parallel boards: ``--forks``, else the user's ``ANSIBLE_FORKS`` (in the run's ``env``), else one per
    board up to :data:`DEFAULT_FORKS` (sized to this controller's cores)."""
    if requested:
        return requested
    if (env.get("ANSIBLE_FORKS") or "").isdigit() and int(env["ANSIBLE_FORKS"]) > 0:
        return int(env["ANSIBLE_FORKS"])
    return max(1, min(hosts, DEFAULT_FORKS))


def describe_tuning(env: Mapping[str, str]) -> str:
    """One line with the controller settings a run uses, as ansible-playbook will see them."""
    persist = re.search(r"ControlPersist=(\S+)", env.get("ANSIBLE_SSH_ARGS", ""))
    pipelining = env.get("ANSIBLE_PIPELINING", "").lower() in ("1", "true", "yes", "on")
    return (f"forks {env.get('ANSIBLE_FORKS', '?')}, pipelining {'on' if pipelining else 'off'}, "
            f"ControlPersist {persist[1] if persist else 'off'}, strategy {env.get('ANSIBLE_STRATEGY') or 'linear'}")


def ansible_env(*, base: Mapping[str, str], forks: int | None = None,
                playbook_dir: Path = PLAYBOOK_DIR) -> dict[str, str]:
    """Environment for ansible-playbook: our collection, roles, callback and the speed settings.

    ``base`` is the run's environment (:mod:`provisioner.context`); only what Ansible needs of it
    (:data:`ANSIBLE_KEEP`) is passed on. The speed settings are defaults: a user's
    ``ANSIBLE_PIPELINING``, ``ANSIBLE_SSH_ARGS`` (ControlPersist) or ``ANSIBLE_STRATEGY`` wins, as
    environment variables win over ansible.cfg in Ansible's own precedence; ``forks`` (the CLI's
    ``--forks``, see :func:`fleet_forks`) wins over ``ANSIBLE_FORKS``.
    """
    env = context.RunContext(base).child_env(keep=ANSIBLE_KEEP)
    coll = [str(playbook_dir / "collections")]
    if env.get("ANSIBLE_COLLECTIONS_PATH"):
        coll.append(env["ANSIBLE_COLLECTIONS_PATH"])
    cp_dir = Path(tempfile.gettempdir()) / f"elcp-{os.getuid()}"   # short: ControlPath sockets max ~104 chars
    cp_dir.mkdir(mode=0o700, exist_ok=True)
    env.update({
        "ANSIBLE_CONFIG": str(playbook_dir / "ansible.cfg"),
        "ANSIBLE_COLLECTIONS_PATH": ":".join(coll),
        "ANSIBLE_ROLES_PATH": str(playbook_dir / "roles"),
        "ANSIBLE_STDOUT_CALLBACK": CALLBACK,
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_FORCE_COLOR": "0",
        "ANSIBLE_RETRY_FILES_ENABLED": "0",
        "ANSIBLE_PIPELINING": env.get("ANSIBLE_PIPELINING") or "1",
        "ANSIBLE_SSH_ARGS": env.get("ANSIBLE_SSH_ARGS") or SSH_ARGS,
        "ANSIBLE_SSH_CONTROL_PATH_DIR": str(cp_dir),
        "ANSIBLE_GATHERING": "explicit",
        "ANSIBLE_PYTHON_INTERPRETER": env.get("ANSIBLE_PYTHON_INTERPRETER", "auto_silent"),
        "ANSIBLE_FORKS": str(forks or fleet_forks(DEFAULT_FORKS, None, env)),
        "ANSIBLE_DEPRECATION_WARNINGS": "0",
        "ANSIBLE_SYSTEM_WARNINGS": "0",
    })
    return env


def _untrusted(value: Any) -> Any:  # noqa: ANN401 - any JSON-like value
    """``value`` with every string (not the keys, which are ours) in Ansible's JSON form for unsafe text."""
    if isinstance(value, str):
        return {"__ansible_unsafe": value}
    if isinstance(value, Mapping):
        return {str(k): _untrusted(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_untrusted(v) for v in value]
    return value


def write_extra_vars(path: Path, extra_vars: Mapping[str, Any]) -> None:
    """Write the run's variables as an extra-vars file in which no value can ever be templated.

    Ansible treats an ``-e @file`` as trusted input and templates any ``{{ ... }}`` in its values, with
    lookups that run commands on the controller (``lookup('pipe', ...)``). Every value the tool passes this
    way came from a release, an artifact index or a board, so every string is written as
    ``{"__ansible_unsafe": "..."}``: the JSON spelling of Ansible's unsafe text ("Unsafe or raw strings",
    Ansible docs), which its JSON decoder turns back into the same string, never trusted as a template.
    (YAML's ``!unsafe`` tag is not used: ansible-core 2.19 resolves the tagged scalar's type, so a quoted
    ``'0000...'`` checksum came back as the integer 0.) Validation by type happens before
    (provisioner.ota.commit, provisioner.fleet.shared.deploy_index); this is the second wall.
    """
    path.write_text(json.dumps(_untrusted(extra_vars), sort_keys=True), encoding="utf-8")


def build_argv(action: str, inventory: Path | str, *, limit: str | None = None, extra_vars_file: Path | None = None,
               extra_args: Iterable[str] = (), dry_run: bool = False, tags: str | None = None,
               playbook_dir: Path = PLAYBOOK_DIR) -> list[str]:
    if action not in ACTIONS:
        raise FleetError(f"unknown fleet action '{action}'", f"use one of: {', '.join(ACTIONS)}")
    exe = tools.require("ansible-playbook", error=FleetError)
    argv = [exe, "-i", str(inventory), str(playbook_dir / ACTIONS[action])]
    if limit:
        argv += ["--limit", limit]
    if extra_vars_file:
        argv += ["-e", f"@{extra_vars_file}"]
    for e in extra_args:
        argv += ["-e", e]
    if dry_run:                     # Ansible's check mode: report what would change, change nothing
        argv.append("--check")
    if tags:
        argv += ["--tags", tags]
    return argv


class EventCollector:
    """Folds the callback's JSON lines into per-host outcomes; forwards each event to ``on_event``."""

    def __init__(self, on_event: Callable[[dict[str, Any]], None] | None = None) -> None:
        self.hosts: dict[str, HostOutcome] = {}
        self.stats: dict[str, dict[str, int]] = {}
        self.other: list[str] = []
        self.on_event = on_event

    def line(self, text: str) -> None:
        event = None
        if text.startswith("{"):
            try:
                event = json.loads(text)
            except ValueError:
                event = None
        if not isinstance(event, dict) or "event" not in event:
            if text.strip():
                self.other.append(text)
                if len(self.other) > 200:
                    del self.other[0]
                if self.on_event:
                    self.on_event({"event": "output", "line": text})
            return
        self.feed(event)

    def feed(self, event: dict[str, Any]) -> None:
        kind = event["event"]
        if kind == "host":
            o = self.hosts.setdefault(event["host"], HostOutcome(event["host"]))
            status = event.get("status")
            o.tasks += 1
            if event.get("changed"):
                o.changed += 1
            o.bytes_downloaded += int(event.get("bytes_downloaded") or 0)
            o.payloads.extend(payloads_of(event))
            if status == "unreachable" and not event.get("ignored"):
                o.status = "unreachable"
                o.msg = event.get("msg") or "unreachable"
                o.failed_task = event.get("task")
            elif status == "failed" and not event.get("ignored") and o.status != "unreachable":
                o.status = "failed"
                o.msg = event.get("msg") or event.get("stderr") or "failed"
                o.failed_task = event.get("task")
                o.failed_action = event.get("action")
        elif kind == "stats":
            self.stats = event.get("hosts") or {}
            for h, s in self.stats.items():
                o = self.hosts.setdefault(h, HostOutcome(h))
                if s.get("unreachable"):
                    o.status = "unreachable"
                elif s.get("failures") and o.status == "ok":
                    o.status = "failed"
        if self.on_event:
            self.on_event(event)


@dataclass(frozen=True)
class FleetOptions:
    """What the operator chose for one fleet run, resolved once at the CLI edge (as
    :class:`provisioner.station.strategy.FlashOptions` is for a flash run).

    The defaults live here only. ``extra_args`` are the user's ``-e`` arguments, passed to
    ansible-playbook unchanged once :func:`parse_extra` accepted them; ``extra_vars`` are the tool's own
    (written untrusted, :func:`write_extra_vars`). ``forks`` None: one per board (:func:`fleet_forks`).
    """

    limit: str | None = None
    extra_vars: Mapping[str, Any] | None = None
    extra_args: tuple[str, ...] = ()
    report_path: Path | None = None
    dry_run: bool = False             # Ansible's check mode (``--check``)
    tags: str | None = None
    forks: int | None = None
    log_path: Path | None = None
    timeout_s: float | None = None


def run_playbook(action: str, inventory: Path | str, ctx: context.RunContext, options: FleetOptions | None = None,
                 *, on_event: Callable[[dict[str, Any]], None] | None = None,
                 playbook_dir: Path = PLAYBOOK_DIR) -> FleetRun:
    """Run one fleet playbook over ``inventory``; never raises for failing boards (see FleetRun).

    ``ctx`` is the run (its environment, of which ansible-playbook gets :func:`ansible_env`); ``options``
    the operator's choices (``report_path`` is :func:`run_fleet`'s)."""
    opts = options or FleetOptions()
    limit, extra_vars, dry_run, tags = opts.limit, opts.extra_vars, opts.dry_run, opts.tags
    log_path, timeout_s = opts.log_path, opts.timeout_s
    inv = Path(inventory)
    if not inv.exists():
        raise FleetError(f"inventory {inv}: no such file or directory",
                         "pass -i with an Ansible inventory (see inventory/example.yml)")
    collector = EventCollector(on_event)
    with tempfile.TemporaryDirectory(prefix="edge-llm-fleet-") as tmp:
        ev_file = None
        if extra_vars:
            ev_file = Path(tmp) / "extra_vars.json"
            write_extra_vars(ev_file, extra_vars)
        argv = build_argv(action, inv, limit=limit, extra_vars_file=ev_file, extra_args=opts.extra_args,
                          dry_run=dry_run, tags=tags, playbook_dir=playbook_dir)
        child_env = ansible_env(forks=opts.forks, base=ctx.env, playbook_dir=playbook_dir)
        if on_event:
            on_event({"event": "tuning", "line": describe_tuning(child_env)})
        started = time.monotonic()
        # a controller killed with -9 takes ansible-playbook with it: no task starts after that, so a rerun is
        # the only run touching the boards. A task already running on a board (its worker, a session of its
        # own) finishes what it does there and exits, as it can report to no one: a board is never left
        # halfway through a module by the kill
        res = run_streaming(argv, on_line=collector.line, log_path=log_path, env=child_env, timeout_s=timeout_s,
                            die_with_parent=True)
    run = FleetRun(action=action, inventory=str(inv), argv=argv, returncode=res.returncode,
                   duration_s=round(time.monotonic() - started, 2), hosts=collector.hosts, stats=collector.stats,
                   log_path=str(log_path) if log_path else None, other_lines=collector.other)
    if res.timed_out:
        raise FleetError(f"ansible-playbook {ACTIONS[action]} timed out after {timeout_s:.0f} s",
                         "raise --timeout or check the boards that did not answer")
    if not collector.stats and res.returncode != 0:
        # ansible failed before any board ran: syntax error, bad inventory, missing collection...
        tail = [ln for ln in collector.other if ln.strip()][-3:] or list(res.tail[-3:])
        raise FleetError(f"ansible-playbook {ACTIONS[action]} failed before reaching the boards: "
                         f"{' | '.join(t.strip() for t in tail)[:400]}",
                         "fix the inventory/extra vars named above (ansible-playbook --syntax-check helps)")
    return run


def parse_extra(pairs: Iterable[str]) -> list[str]:
    """Validate ``-e key=val`` / ``-e @file`` arguments (passed to ansible-playbook unchanged)."""
    out = []
    for p in pairs:
        if not p.startswith("@") and not p.lstrip().startswith("{") and "=" not in p:
            raise FleetError(f"-e {p!r} is not key=value", "e.g. -e edge_llm_expected_build_id=gemma4-2026.11")
        if p.startswith("@") and not Path(p[1:]).is_file():
            raise FleetError(f"-e {p}: no such file", "pass an existing YAML/JSON vars file")
        out.append(p)
    return out


def check_report_path(path: Path | str) -> None:
    """One line, before the run, when the report could not be written where the user asked."""
    path = Path(path)
    folder = path.parent if str(path.parent) else Path(".")
    if path.is_dir():
        raise FleetError(f"--report {path}: is a folder", "name a file, e.g. --report fleet.json")
    if not folder.is_dir():
        raise FleetError(f"--report {path}: folder {folder} does not exist", "create it or name another file")
    if not os.access(folder, os.W_OK | os.X_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise FleetError(f"--report {path}: not writable by this user", "name a file in a folder you can write")


def run_fleet(action: str, inventory: Path | str, ctx: context.RunContext, options: FleetOptions | None = None,
              *, on_event: Callable[[dict[str, Any]], None] | None = None) -> FleetReport:
    """Run ``action`` (verify|deploy|launch|rollback|benchmark|...) and return the per-board report.

    ``ctx`` is the run (environment, directories, reporter), ``options`` the operator's choices.
    Boards that fail or cannot be reached are rows in the report (``verdict`` fail/unreachable);
    only problems that stop the whole run (bad inventory, missing ansible) raise FleetError.
    """
    opts = options or FleetOptions()
    limit, report_path = opts.limit, opts.report_path
    if action not in ACTIONS:
        raise FleetError(f"unknown fleet action '{action}'", f"use one of: {', '.join(ACTIONS)}")
    if report_path:
        check_report_path(report_path)        # before any board is touched, not after the whole run
    from provisioner.fleet.shared.report import build_report  # the report is built from this module's FleetRun

    hosts = list_hosts(inventory, limit, env=dict(ctx.env))
    if not hosts:
        raise FleetError(f"inventory {inventory}: no hosts" + (f" match --limit {limit}" if limit else ""),
                         "check the inventory and --limit")
    opts = dataclasses.replace(opts, extra_args=tuple(parse_extra(opts.extra_args)),
                               forks=fleet_forks(len(hosts), opts.forks, ctx.env))
    run = run_playbook(action, inventory, ctx, opts, on_event=on_event)
    report = build_report(run, hosts)
    if report_path:
        report.write(report_path)
    return report
