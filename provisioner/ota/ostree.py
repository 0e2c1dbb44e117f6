"""The real ``ostree`` CLI, run from argv lists: one place that finds it and turns a failure into one line.

Nothing goes through a shell, and children get a small environment (PATH, locale, HOME) cut
from the run's environment the caller passes in (``env``, :attr:`provisioner.context.RunContext.env`),
so no credential of ours reaches them. Output is parsed
only where ostree prints a stable, documented form (``rev-parse``, ``show --print-metadata-key``,
``ls -R``).
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path

from provisioner.errors import UserError

Env = Mapping[str, str]

OSTREE_HINT = "install ostree (Debian/Ubuntu: apt-get install ostree)"


class OstreeError(UserError):
    """ostree refused or failed; the message carries its own last line."""


def ostree_bin(env: Env) -> str:
    """The ostree program on the run's PATH, or a one-line error naming the package."""
    found = shutil.which("ostree", path=child_env(env).get("PATH"))
    if not found:
        raise OstreeError("ostree is not installed (publishing and reading OSTree commits need the real CLI)",
                          OSTREE_HINT)
    return found


def child_env(env: Env) -> dict[str, str]:
    """PATH, locale and HOME of the run's ``env`` only: ostree needs nothing else and must not see our secrets."""
    keep = ("PATH", "LANG", "LC_ALL", "HOME", "TMPDIR")
    return {k: v for k, v in env.items() if k in keep}


def run(repo: Path | None, *args: str, what: str, env: Env, hint: str = "") -> str:
    """Run ``ostree [--repo=REPO] ARGS`` and return stdout; a failure is an :class:`OstreeError`."""
    argv = [ostree_bin(env), *args]
    if repo is not None:
        argv.insert(2, f"--repo={repo}")
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, env=child_env(env), check=False)
    except OSError as exc:
        raise OstreeError(f"{what}: cannot run ostree ({exc})", OSTREE_HINT) from exc
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or proc.stdout.strip().splitlines() or ["no output"])[-1]
        raise OstreeError(f"{what}: {last}", hint)
    return proc.stdout


def rev_parse(repo: Path, rev: str, env: Env) -> str | None:
    """The commit ``rev`` names in ``repo``, or None when it names nothing there."""
    try:
        return run(repo, "rev-parse", rev, what=f"rev-parse {rev}", env=env).strip() or None
    except OstreeError:
        return None


def has_commit(repo: Path, rev: str, env: Env) -> str | None:
    """The commit ``rev`` names when its commit object is in ``repo`` (rev-parse accepts any 64-hex id)."""
    commit = rev_parse(repo, rev, env)
    if commit is None:
        return None
    try:
        run(repo, "show", commit, what=f"show {commit[:12]}", env=env)
    except OstreeError:
        return None
    return commit


def repo_mode(repo: Path) -> str | None:
    """``core.mode`` of an existing repository (``archive``/``archive-z2``/``bare``...), None if not one."""
    config = repo / "config"
    if not config.is_file():
        return None
    for line in config.read_text(errors="replace").splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "mode":
            return value.strip()
    return None


def commit_subject(repo: Path, commit: str, env: Env) -> str:
    """The commit's subject line: the first indented line ``ostree show`` prints after the header."""
    out = run(repo, "show", commit, what=f"show {commit[:12]}", env=env)
    for line in out.splitlines():
        if line.startswith("    "):
            return line.strip()
    return ""


def commit_version(repo: Path, commit: str, env: Env) -> str | None:
    """The commit's ``version`` metadata string (what meta-updater sets to DISTRO_VERSION)."""
    try:
        out = run(repo, "show", "--print-metadata-key=version", commit, what="version", env=env).strip()
    except OstreeError:
        return None
    # GVariant text form of a string: 'value'
    return out[1:-1] if len(out) >= 2 and out[0] == out[-1] == "'" else out or None


def content_size(repo: Path, commit: str, env: Env) -> int:
    """Bytes of the commit's regular files, uncompressed (``ostree ls -R``: mode uid gid size path)."""
    total = 0
    for line in run(repo, "ls", "-R", commit, what=f"ls {commit[:12]}", env=env).splitlines():
        fields = line.split(None, 4)
        if len(fields) == 5 and fields[0].startswith("-"):
            total += int(fields[3])
    return total


def help_mentions(subcommand: tuple[str, ...], option: str, env: Env) -> bool:
    """Whether ``ostree SUBCOMMAND --help`` lists ``option`` (features differ between ostree builds)."""
    try:
        out = subprocess.run([ostree_bin(env), *subcommand, "--help"], capture_output=True, text=True,
                             env=child_env(env), check=False)
    except OSError:
        return False
    return option in out.stdout
