"""`provisioner build`: render the kas config, run ``kas-container build``, collect a release.

The runner does not reinvent the container: it drives kas's own ``kas-container`` script
(shipped in the kas wheel). The work is split by responsibility:

* :mod:`provisioner.image.host_config` - the host's folders (KAS_WORK_DIR, KAS_BUILD_DIR, DL_DIR,
  SSTATE_DIR, KAS_REPO_REF_DIR): where they are, never overlapping, enough free space;
* :mod:`provisioner.image.container` - engine (docker/podman) and the container's mounts/network;
* :mod:`provisioner.image.build_setup` - the whole invocation decided up front (``--dry-run``);
* :mod:`provisioner.image.build_progress` - live progress, failure line, summary beside the log;
* :mod:`provisioner.image.collect` - bundle, layer commits and versions for the release directory.

This module runs the build as a job of named steps through :class:`provisioner.steps.StepRunner`
(the one step machinery, the same events as ``litert build`` and the station): ``prepare``
(render and decide, :func:`prepare_build`), ``kas-container`` (streamed through
:func:`provisioner.process.run_streaming`, the one process runner) and ``collect`` (the release
directory). Ctrl-C is graceful: bitbake gets SIGINT, finishes or cancels its tasks and writes its
caches cleanly, and only after the grace period is the container stopped.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.markup import escape

from provisioner.context import RunContext
from provisioner.errors import BuildError, UserError
from provisioner.image.bitbake_log import BitbakeProgress
from provisioner.image.build_progress import ProgressView, failure_message, failure_report, write_summary
from provisioner.image.build_setup import BuildSetup, Renderer, prepare_build
from provisioner.image.collect import find_bundle, find_ostree_commit, layer_commits, versions, write_actual_lock
from provisioner.image.container import engine_env
from provisioner.image.host_config import Dirs, load_host_config, resolve_dirs
from provisioner.manifest import Manifest
from provisioner.plan import IMAGE_RECIPE
from provisioner.process import GracefulStop, run_streaming
from provisioner.steps import Listener, Step, StepEvent, StepRunner, emit_to
from provisioner.ui import Reporter

if TYPE_CHECKING:
    from provisioner.image.release import OtaCollector


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


class _BuildJob:
    """One build's state between its steps: the setup ``prepare`` decided, the bitbake progress, the result."""

    def __init__(self, manifest: Manifest, out_dir: Path, *, reporter: Reporter, env: Mapping[str, str],
                 host_config: Mapping[str, Any] | None, renderer: Renderer | None, dry_run: bool,
                 ota_collector: OtaCollector | None = None) -> None:
        self.manifest, self.out_dir, self.reporter, self.env = manifest, out_dir, reporter, env
        self.ota_collector = ota_collector
        self.host_config, self.renderer, self.dry_run = host_config, renderer, dry_run
        self.setup: BuildSetup | None = None
        self.progress = BitbakeProgress()
        self.started = 0.0
        self.duration = 0.0
        self.summary: dict[str, Any] = {}
        self.release_dir: Path | None = None

    def steps(self) -> list[Step]:
        m = self.manifest
        steps = [Step("prepare", self.prepare, what=f"render kas configuration for {m.release} ({m.board.id})")]
        if not self.dry_run:
            steps += [Step("kas-container", self.kas_container, what="kas-container build"),
                      Step("collect", self.collect, what="collecting the release")]
        return steps

    def title(self, step: Step) -> str:
        """The progress line of a step; kas-container's names the engine and log ``prepare`` chose."""
        if step.name == "kas-container" and self.setup is not None:
            return f"kas-container build ({self.setup.engine}) -> log {escape(str(self.setup.log_path))}"
        return step.what

    def prepare(self) -> str:
        self.setup = s = prepare_build(self.manifest, self.out_dir, host_config=self.host_config, env=self.env,
                                       renderer=self.renderer, dry_run=self.dry_run)
        for w in s.warnings:
            self.reporter.warn(w)
        return ""

    def kas_container(self) -> str:
        """Stream kas-container; the environment it starts from is the run's, cut to :data:`KAS_CONTAINER_ENV`.

        Raises :class:`BuildError` naming the failed task (log kept) and :class:`BuildInterrupted` on
        Ctrl-C; both leave DL_DIR and SSTATE_DIR usable.
        """
        s, reporter, progress = self.setup, self.reporter, self.progress
        assert s is not None
        full_env = {**engine_env(self.env), **s.env}
        s.log_path.parent.mkdir(parents=True, exist_ok=True)
        s.log_path.write_text(f"### provisioner build {s.manifest.release}\n### {s.command_line()}\n",
                              encoding="utf-8")
        view = ProgressView(reporter)

        def on_line(line: str) -> None:
            ev = progress.feed(line)
            if ev is not None:
                view.update(progress, ev.kind)

        graceful = GracefulStop(
            grace_s=s.interrupt_grace_s, label="bitbake",
            stop_argv=[s.engine, "stop", "-t", "30", s.container_name] if s.container_name else None,
            notice=lambda: reporter.warn(f"interrupted: asking the build to stop (up to {s.interrupt_grace_s:.0f} s; "
                                         "Ctrl-C again to kill)"))
        self.started = time.time()
        t0 = time.monotonic()
        try:
            res = run_streaming(s.argv, on_line=on_line, log_path=s.log_path, env=full_env, graceful=graceful)
        except KeyboardInterrupt:
            view.stop()
            write_summary(s.log_path, s.manifest.release, progress, "interrupted", time.monotonic() - t0)
            raise BuildInterrupted(
                f"build interrupted at {progress.status()}; downloads and sstate in {s.dirs.dl} and "
                f"{s.dirs.sstate} are intact (log: {s.log_path})",
                "run the same `provisioner build` command again: sstate makes finished tasks instant") from None
        except UserError as exc:
            view.stop()
            raise BuildError(f"cannot run kas-container: {exc.message}", "check the kas installation") from exc
        view.stop()
        rc = res.returncode
        self.duration = time.monotonic() - t0
        self.summary = write_summary(s.log_path, s.manifest.release, progress, "ok" if rc == 0 else "failed",
                                     self.duration)
        if progress.sstate:
            reporter.info(escape(progress.sstate.line()))
        if rc != 0:
            raise BuildError(failure_message(progress, rc, s.log_path, s.dirs),
                             f"fix it and rerun; full log: {s.log_path}")
        return ""

    def collect(self) -> str:
        assert self.setup is not None
        self.release_dir = collect_release(self.setup, self.progress, self.started, self.duration, self.summary,
                                           ota_collector=self.ota_collector)
        return f"release: {self.release_dir}"


def collect_release(setup: BuildSetup, progress: BitbakeProgress, started: float, duration: float,
                    summary: dict[str, Any], *, ota_collector: OtaCollector | None = None) -> Path:
    """The release directory from the deploy folder, with what kas and bitbake really used.

    A sota build (manifest ``image.ota: ostree``) also carries its ostreecommit tarball into
    ``<release>/ostree/`` and release.json ``ota`` through ``ota_collector``.
    """
    from provisioner.image.release import layers_from_lock, write_release

    tarball = find_bundle(setup.dirs.build, setup.machine, setup.image)
    ota = None
    if setup.manifest.image.ota == "ostree":
        if ota_collector is None:
            raise BuildError("image.ota is ostree but this build was started without the OTA collector",
                             "run `provisioner build` (it collects the ostreecommit tarball)")
        ota = (find_ostree_commit(setup.dirs.build, setup.machine, setup.image or IMAGE_RECIPE), ota_collector)
    lock = write_actual_lock(setup.dirs.work, setup.out_dir / ".kas" / setup.manifest.release, setup.kas_file)
    kas_files = list(setup.kas_files) + ([lock] if lock else [])
    # layer commits: what kas checked out, else what bitbake reported, else the rendered pins
    layers = layers_from_lock([setup.kas_file])
    layers.update(progress.layer_commits())
    layers.update(layer_commits(setup.dirs.work))
    build_info = {
        "host": socket.gethostname(),
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
        "duration_s": round(duration, 1),
        "sstate": progress.sstate.as_dict() if progress.sstate else None,
        "tasks": summary["tasks"],
        "engine": setup.engine,
        "container_image": setup.env.get("KAS_CONTAINER_IMAGE"),
        "versions": versions(progress),
    }
    return write_release(setup.manifest, tarball, setup.out_dir, kas_files=kas_files, build_info=build_info,
                         log_file=setup.log_path, layers=dict(sorted(layers.items())), ota=ota)


def build(manifest_path: Path, out_dir: Path, ctx: RunContext, *, dry_run: bool = False,
          host_config: Mapping[str, Any] | None = None, renderer: Renderer | None = None,
          on_event: Listener | None = None, ota_collector: OtaCollector | None = None) -> BuildSetup | BuildResult:
    """The whole command as steps: ``prepare``, then (unless ``dry_run``) ``kas-container`` and ``collect``.

    ``ctx``: the run (:class:`provisioner.context.RunContext`); settings such as ``$PROVISIONER_BUILD_CONFIG``
    and ``$KAS_CONTAINER_ENGINE`` are read from its environment, not from ours, and progress goes to its
    reporter.
    ``on_event`` also gets every :class:`~provisioner.steps.StepEvent` (the progress lines are one listener).
    ``ota_collector``: :func:`provisioner.ota.commit.collect`, handed in by the CLI (the image stage never
    imports the OTA stage); needed when the manifest has ``image.ota: ostree``.
    Raises the step's error: :class:`BuildError` (after the failure report) or :class:`BuildInterrupted`.
    """
    from provisioner.manifest import load_manifest

    reporter, env = ctx.reporter, ctx.env
    job = _BuildJob(load_manifest(manifest_path), out_dir, reporter=reporter, env=env, host_config=host_config,
                    renderer=renderer, dry_run=dry_run, ota_collector=ota_collector)
    steps = job.steps()
    by_name = {st.name: st for st in steps}
    number = {st.name: i for i, st in enumerate(steps, 1)}

    def show(ev: StepEvent) -> None:
        if ev.kind == "start":
            reporter.step(f"[{number[ev.step]}/{len(steps)}] {job.title(by_name[ev.step])}")
        elif ev.kind == "stop" and ev.detail.get("result"):
            reporter.info(escape(ev.detail["result"]))

    runner = StepRunner(on_event=lambda ev: emit_to([show, *([on_event] if on_event else [])], ev))
    runner.run(steps)
    err = runner.error
    if err is not None:
        setup = job.setup
        if isinstance(err, BuildError) and not isinstance(err, BuildInterrupted) and setup is not None \
                and setup.log_path.exists():
            for line in failure_report(setup.log_path):
                reporter.info(escape(line))
        raise err
    assert job.setup is not None
    if dry_run:
        return job.setup
    assert job.release_dir is not None
    return BuildResult(True, job.release_dir, job.setup.log_path, job.duration, job.summary)


__all__ = [
    "BuildInterrupted", "BuildSetup", "BuildResult", "Dirs", "build", "collect_release", "failure_report",
    "load_host_config", "prepare_build", "resolve_dirs",
]
