"""`provisioner build`: render the kas config, run ``kas-container build``, collect a release.

The runner does not reinvent the container: it drives kas's own ``kas-container`` script
(shipped in the kas wheel). The work is split by responsibility:

* :mod:`provisioner.image.host_config` - the host's folders (KAS_WORK_DIR, KAS_BUILD_DIR, DL_DIR,
  SSTATE_DIR, KAS_REPO_REF_DIR): where they are, never overlapping, enough free space;
* :mod:`provisioner.image.container` - engine (docker/podman) and the container's mounts/network;
* :mod:`provisioner.image.build_setup` - the whole invocation decided up front (``--dry-run``);
* :mod:`provisioner.image.build_progress` - live progress, failure line, summary beside the log;
* :mod:`provisioner.image.collect` - bundle, layer commits and versions for the release directory.

This module runs a plan through :func:`provisioner.process.run_streaming` (the one process
runner) with a graceful Ctrl-C: bitbake gets SIGINT, finishes or cancels its tasks and writes
its caches cleanly, and only after the grace period is the container stopped.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.markup import escape

from provisioner import context
from provisioner.errors import BuildError, UserError
from provisioner.image.bitbake_log import BitbakeProgress
from provisioner.image.build_progress import ProgressView, failure_message, failure_report, write_summary
from provisioner.image.build_setup import BuildSetup, Renderer, prepare_build
from provisioner.image.collect import find_bundle, layer_commits, versions, write_actual_lock
from provisioner.image.host_config import Dirs, load_host_config, resolve_dirs
from provisioner.process import GracefulStop, run_streaming
from provisioner.ui import Reporter


class BuildInterrupted(BuildError):
    """Ctrl-C during a build: the container was stopped, caches are intact (exit 130)."""

    exit_code = 130


@dataclass
class BuildResult:
    ok: bool
    release_dir: Path | None
    log_path: Path
    duration_s: float
    summary: dict[str, Any]


def run_build(plan: BuildSetup, *, reporter: Reporter | None = None,
              env: Mapping[str, str] | None = None) -> BuildResult:
    """Execute a prepared plan: stream kas-container, then collect the release directory.

    ``env`` is the environment kas-container starts from (the run's child environment); the
    plan's own variables go on top. Raises :class:`BuildError` naming the failed task (log
    kept) and :class:`BuildInterrupted` on Ctrl-C; both leave DL_DIR and SSTATE_DIR usable.
    """
    reporter = reporter or Reporter()
    full_env = {**(context.environ() if env is None else env), **plan.env}
    plan.log_path.parent.mkdir(parents=True, exist_ok=True)
    plan.log_path.write_text(f"### provisioner build {plan.manifest.release}\n### {plan.command_line()}\n",
                             encoding="utf-8")
    progress = BitbakeProgress()
    view = ProgressView(reporter)

    def on_line(line: str) -> None:
        ev = progress.feed(line)
        if ev is not None:
            view.update(progress, ev.kind)

    graceful = GracefulStop(
        grace_s=plan.interrupt_grace_s, label="bitbake",
        stop_argv=[plan.engine, "stop", "-t", "30", plan.container_name] if plan.container_name else None,
        notice=lambda: reporter.warn(f"interrupted: asking the build to stop (up to {plan.interrupt_grace_s:.0f} s; "
                                     "Ctrl-C again to kill)"))
    started = time.time()
    t0 = time.monotonic()
    reporter.step(f"kas-container build ({plan.engine}) -> log {plan.log_path}")
    try:
        res = run_streaming(plan.argv, on_line=on_line, log_path=plan.log_path, env=full_env, graceful=graceful)
    except KeyboardInterrupt:
        view.stop()
        write_summary(plan.log_path, plan.manifest.release, progress, "interrupted", time.monotonic() - t0)
        raise BuildInterrupted(
            f"build interrupted at {progress.status()}; downloads and sstate in {plan.dirs.dl} and "
            f"{plan.dirs.sstate} are intact (log: {plan.log_path})",
            "run the same `provisioner build` command again: sstate makes finished tasks instant") from None
    except UserError as exc:
        view.stop()
        raise BuildError(f"cannot run kas-container: {exc.message}", "check the kas installation") from exc
    view.stop()
    rc = res.returncode
    duration = time.monotonic() - t0
    summary = write_summary(plan.log_path, plan.manifest.release, progress, "ok" if rc == 0 else "failed", duration)
    if progress.sstate:
        reporter.info(escape(progress.sstate.line()))
    if rc != 0:
        raise BuildError(failure_message(progress, rc, plan.log_path, plan.dirs),
                         f"fix it and rerun; full log: {plan.log_path}")
    reporter.step("collecting the release")
    release_dir = collect_release(plan, progress, started, duration, summary)
    reporter.info(f"release: {release_dir}")
    return BuildResult(True, release_dir, plan.log_path, duration, summary)


def collect_release(plan: BuildSetup, progress: BitbakeProgress, started: float, duration: float,
                    summary: dict[str, Any]) -> Path:
    """The release directory from the deploy folder, with what kas and bitbake really used."""
    from provisioner.image.release import layers_from_lock, write_release

    tarball = find_bundle(plan.dirs.build, plan.machine, plan.image)
    lock = write_actual_lock(plan.dirs.work, plan.out_dir / ".kas" / plan.manifest.release, plan.kas_file)
    kas_files = list(plan.kas_files) + ([lock] if lock else [])
    # layer commits: what kas checked out, else what bitbake reported, else the rendered pins
    layers = layers_from_lock([plan.kas_file])
    layers.update(progress.layer_commits())
    layers.update(layer_commits(plan.dirs.work))
    build_info = {
        "host": socket.gethostname(),
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
        "duration_s": round(duration, 1),
        "sstate": progress.sstate.as_dict() if progress.sstate else None,
        "tasks": summary["tasks"],
        "engine": plan.engine,
        "container_image": plan.env.get("KAS_CONTAINER_IMAGE"),
        "versions": versions(progress),
    }
    return write_release(plan.manifest, tarball, plan.out_dir, kas_files=kas_files, build_info=build_info,
                         log_file=plan.log_path, layers=dict(sorted(layers.items())))


def build(manifest_path: Path, out_dir: Path, *, dry_run: bool = False, reporter: Reporter | None = None,
          host_config: Mapping[str, Any] | None = None, renderer: Renderer | None = None,
          env: Mapping[str, str] | None = None) -> BuildSetup | BuildResult:
    """The whole command: load the manifest, plan, then (unless ``dry_run``) run and collect.

    ``env``: the run's environment (:attr:`provisioner.context.RunContext.env`); settings such as
    ``$PROVISIONER_BUILD_CONFIG`` and ``$KAS_CONTAINER_ENGINE`` are read from it, not from ours.
    """
    from provisioner.manifest import load_manifest

    reporter = reporter or Reporter()
    env = context.environ() if env is None else env
    manifest = load_manifest(manifest_path)
    reporter.step(f"render kas configuration for {manifest.release} ({manifest.board.id})")
    plan = prepare_build(manifest, out_dir, host_config=host_config, env=env, renderer=renderer, dry_run=dry_run)
    for w in plan.warnings:
        reporter.warn(w)
    if dry_run:
        return plan
    try:
        return run_build(plan, reporter=reporter, env=env)
    except BuildError as err:
        if not isinstance(err, BuildInterrupted) and plan.log_path.exists():
            for line in failure_report(plan.log_path):
                reporter.info(escape(line))
        raise


__all__ = [
    "BuildInterrupted", "BuildSetup", "BuildResult", "Dirs", "build", "collect_release", "failure_report",
    "load_host_config", "prepare_build", "resolve_dirs", "run_build",
]
