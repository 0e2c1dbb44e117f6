"""The run's environment is read in one place (provisioner/context.py) and children get only what they need."""

import re
from pathlib import Path

from provisioner import context
from provisioner.fleet.runner import ansible_env

PKG = Path(__file__).resolve().parent.parent / "provisioner"
READ = re.compile(r"\bos\.(environ|getenv)\b|\bfrom os import [^\n]*\b(environ|getenv)\b")
#: reads still waiting for their owner's change (may only shrink), with the reason
PENDING: dict[str, str] = {}
#: where the run is taken from the process (``context.current()``): the edges, once per command
EDGES = ("cli/", "__main__.py", "sim/")
#: library modules that take the run from the process themselves (``context.current()``) though no edge;
#: may only shrink, with the reason
FALLBACKS: dict[str, str] = {
    "ui.py": "the process's own consoles, made once on first use: COLUMNS of the process, not of a run",
}
TAKES = re.compile(r"\bcontext\.(current|environ)\(")


def test_only_context_reads_the_environment():
    offenders = []
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(PKG).as_posix()
        if rel == "context.py" or rel.startswith(context.EXEMPT) or rel in PENDING:
            continue
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if READ.search(line.split("#", 1)[0]):
                offenders.append(f"provisioner/{rel}:{n}: {line.strip()}")
    assert not offenders, "read the environment through provisioner.context:\n" + "\n".join(offenders)


def test_library_code_gets_the_run_handed_in():
    """Only the edges take the run from the process; every stage is handed its RunContext (or its env) and
    never looks the environment up behind its caller's back (kas's Context, passed down the same way)."""
    offenders, used = [], set()
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(PKG).as_posix()
        if rel == "context.py" or rel.startswith(EDGES):
            continue
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if TAKES.search(line.split("#", 1)[0]):
                if rel in FALLBACKS:
                    used.add(rel)
                else:
                    offenders.append(f"provisioner/{rel}:{n}: {line.strip()}")
    assert not offenders, "pass the RunContext down instead:\n" + "\n".join(offenders)
    assert used == set(FALLBACKS), f"FALLBACKS lists modules that no longer fall back: {sorted(set(FALLBACKS) - used)}"


def test_the_run_context_holds_environment_directories_and_reporter(tmp_path):
    env = {"HOME": str(tmp_path), "XDG_STATE_HOME": str(tmp_path / "state"), "PATH": "/usr/bin"}
    ctx = context.RunContext(env, tmp_path)
    assert ctx.cache_dir == tmp_path / ".cache" / "edge-llm"
    assert ctx.state_dir == tmp_path / "state" / "edge-llm"
    assert ctx.work_dir == tmp_path and ctx.reporter.quiet
    loud = ctx.with_reporter(context.current().reporter.__class__(quiet=False))
    assert loud.env == env and not loud.reporter.quiet and ctx.reporter.quiet


def test_ansible_playbook_gets_no_secret_of_ours():
    run_env = {"PATH": "/usr/bin", "HOME": "/home/op", "LANG": "C.UTF-8", "SSH_AUTH_SOCK": "/run/agent",
               "ANSIBLE_VAULT_PASSWORD_FILE": "/home/op/.vault", "PROVISIONER_HTTP_TOKEN": "s3cret",
               "PROVISIONER_CONSOLE_PASSWORD": "root-pw", "AWS_SECRET_ACCESS_KEY": "x"}
    env = ansible_env(base=run_env)
    assert "PROVISIONER_HTTP_TOKEN" not in env and "PROVISIONER_CONSOLE_PASSWORD" not in env
    assert "AWS_SECRET_ACCESS_KEY" not in env
    assert (env["PATH"], env["HOME"], env["SSH_AUTH_SOCK"], env["ANSIBLE_VAULT_PASSWORD_FILE"]) == (
        "/usr/bin", "/home/op", "/run/agent", "/home/op/.vault")
    assert env["ANSIBLE_STDOUT_CALLBACK"]  # and our own settings on top
