"""Deciding a build up front: render the kas config, pick folders and engine, compose the command.

Everything is decided in :func:`prepare_build` (pure apart from checks and the rendered files)
so ``--dry-run`` and tests see the exact command and environment that
the ``kas-container`` step of :func:`provisioner.image.build.build` executes.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from provisioner.errors import BuildError
from provisioner.image import host_config as hc
from provisioner.image.container import check_engine, choose_engine, container_args, kas_container_argv, mirror_setting
from provisioner.image.host_config import Dirs
from provisioner.image.render import RenderResult
from provisioner.manifest import Manifest

Renderer = Callable[[Manifest, Path], RenderResult]


@dataclass
class BuildSetup:
    """Everything the build job will do, decided up front (printed by ``--dry-run``)."""

    manifest: Manifest
    kas_file: Path
    kas_files: list[Path]
    image: str | None
    machine: str
    dirs: Dirs
    engine: str
    argv: list[str]
    env: dict[str, str]            # variables we set for kas-container (on top of the run's child environment)
    mounts: list[tuple[str, str, str]]   # (host, container, mode) beyond kas-container's own
    out_dir: Path
    log_path: Path
    to_create: list[Path] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    interrupt_grace_s: float = 120.0
    container_name: str | None = None

    def command_line(self) -> str:
        """The exact invocation, as a shell line a person can copy."""
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(self.env.items()))
        return f"{env} {shlex.join(self.argv)}"

    def as_dict(self) -> dict[str, Any]:
        return {
            "release": self.manifest.release, "board": self.manifest.board.id, "machine": self.machine,
            "image": self.image, "kas_file": str(self.kas_file), "engine": self.engine, "argv": self.argv,
            "env": dict(sorted(self.env.items())), "dirs": {k: str(v) for k, v in self.dirs.items()},
            "extra_mounts": [list(m) for m in self.mounts], "log": str(self.log_path),
            "out": str(self.out_dir), "create": [str(p) for p in self.to_create], "warnings": self.warnings,
        }


def kas_env(manifest: Manifest, host: Mapping[str, Any], env: Mapping[str, str], dirs: Dirs,
            engine: str) -> dict[str, str]:
    """The variables kas-container reads (folders, engine, image, threads, proxies, caches)."""
    kenv: dict[str, str] = {k: str(p) for k, p in dirs.items()}
    kenv["KAS_CONTAINER_ENGINE"] = engine
    image_ref = hc.setting(manifest, host, "container_image")
    if image_ref:
        kenv["KAS_CONTAINER_IMAGE"] = str(image_ref)
    threads = hc.setting(manifest, host, "threads")
    if threads:
        kenv["BB_NUMBER_THREADS"] = str(threads)
    pm = hc.setting(manifest, host, "parallel_make")
    if pm:
        kenv["PARALLEL_MAKE"] = f"-j {pm}"
    for var in ("http_proxy", "https_proxy", "no_proxy"):
        if host.get(var) and not env.get(var):
            kenv[var] = str(host[var])
    mirrors = list(hc.setting(manifest, host, "sstate_mirrors") or [])
    if mirrors:
        kenv["SSTATE_MIRRORS"] = mirror_setting(mirrors)
    hashserve = hc.setting(manifest, host, "hashserve")
    if hashserve:
        kenv["BB_HASHSERVE"] = str(hashserve)   # kas-container forwards it; render puts it in local.conf
    if manifest.build.hashserve_upstream:
        kenv["BB_HASHSERVE_UPSTREAM"] = str(manifest.build.hashserve_upstream)
    return kenv


def _render(manifest: Manifest, out_dir: Path, renderer: Renderer | None) -> RenderResult:
    """Rendered even for ``--dry-run``: the setup names the kas file."""
    if renderer is None:
        from provisioner.image.render import render as renderer
    render_dir = out_dir / ".kas" / manifest.release
    render_dir.mkdir(parents=True, exist_ok=True)
    return renderer(manifest, render_dir)


def _check_host(dirs: Dirs, host: Mapping[str, Any], env: Mapping[str, str], engine: str, *,
                dry_run: bool, check: bool) -> list[str]:
    """Engine answers, space suffices, not root; returns the space warnings."""
    warnings: list[str] = []
    if check and not dry_run:
        check_engine(engine, env)
    if check:
        warnings += hc.check_space(dirs, warn_gb=float(host.get("warn_free_gb", hc.WARN_FREE_GB)),
                                   min_gb=float(host.get("min_free_gb", hc.MIN_FREE_GB)))
    if os.geteuid() == 0 and env.get("KAS_ALLOW_ROOT") != "yes" and not dry_run:
        raise BuildError("running as root: kas-container refuses this (some recipes break as root)",
                         "run as a user in the docker group, or set KAS_ALLOW_ROOT=yes if you accept that")
    return warnings


def prepare_build(
    manifest: Manifest,
    out_dir: Path,
    *,
    env: Mapping[str, str],
    host_config: Mapping[str, Any] | None = None,
    renderer: Renderer | None = None,
    dry_run: bool = False,
    check: bool = True,
) -> BuildSetup:
    """Render the kas config and decide the complete kas-container invocation.

    ``env`` is the run's environment as the CLI read it (see :mod:`provisioner.context`). With
    ``dry_run`` nothing is created and the engine is not probed (so the command can be shown on a
    machine without docker); otherwise missing folders are created and the engine checked.
    """
    env = dict(env)
    host = dict(hc.load_host_config(env=env) if host_config is None else host_config)
    manifest = hc.with_host_settings(manifest, host)
    out_dir = Path(out_dir).resolve()
    dirs = hc.resolve_dirs(manifest, host, env)
    hc.check_dirs(dirs)
    manifest = hc.with_dl_dir(manifest, dirs.dl)

    rendered = _render(manifest, out_dir, renderer)
    kas_file = Path(rendered.kas_file).resolve()
    kas_files = sorted({Path(f).resolve() for f in rendered.kas_files if Path(f).is_file()} | {kas_file})

    engine = choose_engine(manifest, host, env)
    warnings = _check_host(dirs, host, env, engine, dry_run=dry_run, check=check)
    to_create = [p for _, p in dirs.items() if not p.exists()]
    if not dry_run:
        for p in to_create:
            p.mkdir(parents=True, exist_ok=True)

    kenv = kas_env(manifest, host, env, dirs, engine)
    hashserve = hc.setting(manifest, host, "hashserve")
    extra = container_args(manifest.release, dirs, list(hc.setting(manifest, host, "sstate_mirrors") or []),
                           list(manifest.build.mirrors or ()), str(hashserve) if hashserve else None, probe=check)
    argv = kas_container_argv(kas_file, hc.setting(manifest, host, "ssh_dir"), extra.runtime_args)
    return BuildSetup(
        manifest=manifest, kas_file=kas_file, kas_files=kas_files, image=rendered.plan.image,
        machine=manifest.board.kas_machine, dirs=dirs, engine=engine, argv=argv, env=kenv, mounts=extra.mounts,
        out_dir=out_dir, log_path=out_dir / "logs" / f"{manifest.release}.build.log", to_create=to_create,
        warnings=warnings + extra.warnings, interrupt_grace_s=float(host.get("interrupt_grace_s", 120)),
        container_name=extra.name,
    )
