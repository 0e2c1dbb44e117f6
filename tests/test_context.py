"""The run's environment is read in one place (provisioner/context.py) and children get only what they need."""

import re
from pathlib import Path

from provisioner import context
from provisioner.fleet.runner import ansible_env

PKG = Path(__file__).resolve().parent.parent / "provisioner"
READ = re.compile(r"\bos\.(environ|getenv)\b|\bfrom os import [^\n]*\b(environ|getenv)\b")
#: reads still waiting for their owner's change (may only shrink), with the reason
PENDING: dict[str, str] = {}


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
