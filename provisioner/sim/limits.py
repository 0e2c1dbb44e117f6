"""pam_limits for virtual boards: what ``ulimit -l`` a login session gets.

Real QLI sessions get their locked-memory limit from pam_limits reading
``/etc/security/limits.conf`` and ``/etc/security/limits.d/*.conf`` at login (8192 KiB when no file
raises it). The board's sshd runs with ``UsePAM no``, so each user's login shell in the namespace
is a tiny wrapper (:func:`login_shell`) that applies the same rules and then execs the real shell.
Because it re-reads the files at every login, a limits file deployed by Ansible takes effect on
the next connection, exactly like on hardware. Standard library only (runs under ``python3 -S``).
"""

from __future__ import annotations

import grp
import json
import os
import pwd
import resource
import sys
from pathlib import Path

LIMITS_CONF = "/etc/security/limits.conf"
LIMITS_D = "/etc/security/limits.d"
QLI_DEFAULT_MEMLOCK_KIB = 8192
SHELLS_MAP = "/run/edge-llm-sim/shells.json"    # user -> real shell (written by the host agent)

# pam_limits precedence: a user's own line beats a @group line beats the * wildcard; within the
# same kind the later line wins. Group and wildcard lines never apply to root (pam_limits(8)).
_USER, _GROUP, _ALL = 0, 1, 2


def _value(text: str) -> int:
    t = text.strip().lower()
    if t in ("unlimited", "infinity", "-1"):
        return resource.RLIM_INFINITY
    return int(t) * 1024          # memlock is in KiB


def memlock_for(user: str, groups: list[str], etc: str = "/etc") -> tuple[int, int]:
    """(soft, hard) RLIMIT_MEMLOCK in bytes that pam_limits would give ``user``."""
    default = QLI_DEFAULT_MEMLOCK_KIB * 1024
    best: dict[str, tuple[int, int]] = {}        # "soft"/"hard" -> (priority, value)
    files = [Path(etc) / "security/limits.conf"]
    d = Path(etc) / "security/limits.d"
    if d.is_dir():
        files += sorted(p for p in d.iterdir() if p.name.endswith(".conf"))
    for f in files:
        try:
            lines = f.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            continue
        for line in lines:
            parts = line.split("#", 1)[0].split()
            if len(parts) != 4 or parts[2].lower() != "memlock":
                continue
            domain, kind, _item, val = parts
            if domain == user:
                prio = _USER
            elif domain.startswith("@") and domain[1:] in groups and user != "root":
                prio = _GROUP
            elif domain == "*" and user != "root":
                prio = _ALL
            else:
                continue
            try:
                v = _value(val)
            except ValueError:
                continue
            for k in (("soft", "hard") if kind == "-" else (kind,)):
                if k in ("soft", "hard") and (k not in best or prio <= best[k][0]):
                    best[k] = (prio, v)
    inf = resource.RLIM_INFINITY

    def lt(a: int, b: int) -> bool:      # a < b with RLIM_INFINITY (-1 on Linux) as the largest value
        return a != inf and (b == inf or a < b)

    hard = best["hard"][1] if "hard" in best else default
    soft = best["soft"][1] if "soft" in best else (default if lt(default, hard) else hard)
    if lt(hard, soft):
        soft = hard
    return soft, hard


ENV_MEMLOCK = "EDGE_LLM_SIM_MEMLOCK"          # the limit the board would have set, when the host refused it
ENV_CLAMP = "EDGE_LLM_SIM_MEMLOCK_CLAMP"       # the host's ceiling at that moment


def set_memlock(soft: int, hard: int, env: dict[str, str] | None = None) -> None:
    """setrlimit(RLIMIT_MEMLOCK); where the host forbids raising it (no CAP_SYS_RESOURCE, e.g. in
    a container) set the highest allowed value and record the intended one in the environment, so
    the runtime stand-ins still judge the limit the board would have."""
    env = os.environ if env is None else env
    env.pop(ENV_MEMLOCK, None)
    env.pop(ENV_CLAMP, None)
    try:
        resource.setrlimit(resource.RLIMIT_MEMLOCK, (soft, hard))
        return
    except (ValueError, OSError):
        pass
    _cur_soft, cur_hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    allowed = min(x for x in (soft, cur_hard) if x != resource.RLIM_INFINITY) \
        if soft != resource.RLIM_INFINITY or cur_hard != resource.RLIM_INFINITY else resource.RLIM_INFINITY
    try:
        resource.setrlimit(resource.RLIMIT_MEMLOCK, (allowed, cur_hard))
    except (ValueError, OSError):
        pass
    env[ENV_MEMLOCK] = str(soft)
    env[ENV_CLAMP] = str(resource.getrlimit(resource.RLIMIT_MEMLOCK)[0])


def effective_memlock() -> int:
    """This process's locked-memory limit as the board would have it (see :func:`set_memlock`)."""
    real = resource.getrlimit(resource.RLIMIT_MEMLOCK)[0]
    wanted, clamp = os.environ.get(ENV_MEMLOCK), os.environ.get(ENV_CLAMP)
    if wanted is not None and clamp is not None and str(real) == clamp:
        try:
            return int(wanted)
        except ValueError:
            return real
    return real


def apply_session_limits() -> tuple[int, int]:
    """Set this process's RLIMIT_MEMLOCK as pam_limits would at login; returns (soft, hard)."""
    pw = pwd.getpwuid(os.getuid())
    groups = [g.gr_name for g in grp.getgrall() if pw.pw_name in g.gr_mem]
    try:
        groups.append(grp.getgrgid(pw.pw_gid).gr_name)
    except KeyError:
        pass
    soft, hard = memlock_for(pw.pw_name, groups)
    set_memlock(soft, hard)
    return soft, hard


def login_shell() -> None:
    """Entry of the login-shell wrapper: apply limits, then exec the user's real shell."""
    apply_session_limits()
    name = pwd.getpwuid(os.getuid()).pw_name
    shell = "/bin/sh"
    try:
        shell = json.loads(Path(SHELLS_MAP).read_text(encoding="utf-8")).get(name, shell)
    except (OSError, ValueError):
        pass
    argv0 = os.path.basename(shell)
    if sys.argv[0].startswith("-"):
        argv0 = "-" + argv0
    os.execv(shell, [argv0, *sys.argv[1:]])
