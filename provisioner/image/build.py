"""`provisioner build`: render the kas config, run ``kas-container build``, collect a release.

The runner does not reinvent the container: it drives kas's own ``kas-container`` script (shipped
in the kas wheel) and only decides what kas-container cannot decide for us:

* which engine (docker/podman) and whether it is actually usable (binary + daemon);
* the persistent shared folders (KAS_WORK_DIR, KAS_BUILD_DIR, DL_DIR, SSTATE_DIR,
  KAS_REPO_REF_DIR): created, checked for free space, never overlapping;
* how the container reaches the shared caches: ``file://`` sstate mirrors and a ``unix://``
  hash server are bind-mounted at the same path, a hash server or mirror on this host's
  loopback needs the host network;
* live progress and a full log from bitbake's output, the sstate summary at the end;
* a failing task (shown with its log), Ctrl-C (bitbake is asked to stop, caches stay usable);
* the release directory (:mod:`provisioner.image.release`) from the deploy folder.

Everything is decided in :func:`prepare_build` (pure apart from checks) so ``--dry-run`` and
tests see the exact command and environment that :func:`run_build` executes.
"""

from __future__ import annotations

import json
import os
import queue
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import yaml
from rich.markup import escape

from provisioner.errors import BuildError
from provisioner.image.bitbake_log import BitbakeProgress
from provisioner.ui import Reporter

HOST_CONFIG_ENV = "PROVISIONER_BUILD_CONFIG"
DEFAULT_HOST_CONFIG = Path("~/.config/edge-llm/build.yaml")
WARN_FREE_GB = 250          # a QLI multimedia image build with sstate and downloads (notes)
MIN_FREE_GB = 30            # below this bitbake's diskmon (ci/base.yml) stops the build anyway
ENGINES = ("docker", "podman")
HOST_CONFIG_KEYS = {"engine", "work_dir", "build_dir", "dl_dir", "sstate_dir", "repo_ref_dir", "sstate_mirrors",
                    "hashserve", "threads", "parallel_make", "ssh_dir", "container_image", "min_free_gb",
                    "warn_free_gb", "http_proxy", "https_proxy", "no_proxy", "interrupt_grace_s"}
_LOOPBACK = {"localhost", "127.0.0.1", "::1", "ip6-localhost", "0.0.0.0"}


class BuildInterrupted(BuildError):
    """Ctrl-C during a build: the container was stopped, caches are intact (exit 130)."""

    exit_code = 130


@dataclass(frozen=True)
class Dirs:
    """The persistent folders a build uses on the host (absolute)."""

    work: Path
    build: Path
    dl: Path
    sstate: Path
    repo_ref: Path | None = None

    def items(self) -> list[tuple[str, Path]]:
        out = [("KAS_WORK_DIR", self.work), ("KAS_BUILD_DIR", self.build), ("DL_DIR", self.dl),
               ("SSTATE_DIR", self.sstate)]
        if self.repo_ref is not None:
            out.append(("KAS_REPO_REF_DIR", self.repo_ref))
        return out


@dataclass
class BuildPlan:
    """Everything ``run_build`` will do, decided up front (printed by ``--dry-run``)."""

    manifest: Any
    kas_file: Path
    kas_files: list[Path]
    image: str | None
    machine: str
    dirs: Dirs
    engine: str
    argv: list[str]
    env: dict[str, str]            # variables we set for kas-container (on top of the inherited environment)
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


@dataclass
class BuildResult:
    ok: bool
    release_dir: Path | None
    log_path: Path
    duration_s: float
    summary: dict[str, Any]


# -- configuration ----------------------------------------------------------------------------

def load_host_config(path: Path | None = None, env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Per-host build settings (paths, engine, mirrors) from a YAML file; empty when absent.

    Looked up at ``path``, else ``$PROVISIONER_BUILD_CONFIG``, else ``~/.config/edge-llm/build.yaml``.
    Host folders belong here rather than in a release manifest that several hosts share.
    """
    env = os.environ if env is None else env
    explicit = path is not None or bool(env.get(HOST_CONFIG_ENV))
    p = Path(path or env.get(HOST_CONFIG_ENV) or DEFAULT_HOST_CONFIG).expanduser()
    if not p.is_file():
        if explicit:
            raise BuildError(f"{p}: build config file not found", f"create it or unset {HOST_CONFIG_ENV}")
        return {}
    try:
        data = yaml.safe_load(p.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise BuildError(f"{p}: cannot read build config ({exc})", "fix the YAML") from exc
    if not isinstance(data, dict):
        raise BuildError(f"{p}: build config must be a mapping", "see `provisioner build --help`")
    data = data.get("build", data) if isinstance(data.get("build"), dict) else data
    unknown = sorted(set(data) - HOST_CONFIG_KEYS)
    if unknown:
        raise BuildError(f"{p}: unknown key(s) {', '.join(unknown)}", f"allowed: {', '.join(sorted(HOST_CONFIG_KEYS))}")
    base = p.parent
    for key in ("work_dir", "build_dir", "dl_dir", "sstate_dir", "repo_ref_dir", "ssh_dir"):
        if data.get(key):
            data[key] = (base / str(data[key])).expanduser().resolve()
    return data


def _setting(manifest: Any, host: Mapping[str, Any], key: str) -> Any:
    """Manifest value first (explicit for this release), then the host config."""
    value = getattr(manifest.build, key, None)
    if value not in (None, (), ""):
        return value
    return host.get(key)


def with_host_settings(manifest: Any, host: Mapping[str, Any]) -> Any:
    """The manifest with cache settings it leaves open filled from the host config.

    Render writes ``BB_HASHSERVE``/``SSTATE_MIRRORS`` into the ``edge-llm-cache`` snippet from
    the manifest, and kas does not forward ``BB_HASHSERVE`` from the environment, so a hash
    server known only to this host's config must reach render through the manifest. Those
    settings are not recipe inputs: sstate signatures do not change.
    """
    import dataclasses

    fill = {}
    for key in ("sstate_mirrors", "hashserve"):
        if not getattr(manifest.build, key, None) and host.get(key):
            value = host[key]
            fill[key] = tuple([value] if isinstance(value, str) else value) if key == "sstate_mirrors" else str(value)
    if not fill:
        return manifest
    return dataclasses.replace(manifest, build=dataclasses.replace(manifest.build, **fill))


def resolve_dirs(manifest: Any, host: Mapping[str, Any], env: Mapping[str, str]) -> Dirs:
    """Host folders: manifest, then host config, then ``$XDG_CACHE_HOME/edge-llm`` defaults."""
    cache = Path(env.get("XDG_CACHE_HOME") or Path(env.get("HOME", "~")) / ".cache").expanduser() / "edge-llm"
    work = Path(_setting(manifest, host, "work_dir") or cache / "kas").resolve()
    build = Path(_setting(manifest, host, "build_dir") or work / "build").resolve()
    dl = Path(_setting(manifest, host, "dl_dir") or cache / "downloads").resolve()
    sstate = Path(_setting(manifest, host, "sstate_dir") or cache / "sstate").resolve()
    ref = _setting(manifest, host, "repo_ref_dir")
    return Dirs(work, build, dl, sstate, Path(ref).resolve() if ref else None)


def check_dirs(dirs: Dirs) -> None:
    """Refuse overlapping cache folders (kas refuses them too, but only after the container starts).

    Any of the build/downloads/sstate/reference folders may live *inside* the work folder (kas
    maps them below /work), but none may equal or contain another, and none may contain the
    work folder: bitbake would hash or delete one cache while using it as another.
    """
    named = [(k, p) for k, p in dirs.items() if k != "KAS_WORK_DIR"]
    for i, (a, pa) in enumerate(named):
        for b, pb in named[i + 1:]:
            if pa == pb or pa in pb.parents or pb in pa.parents:
                raise BuildError(f"{a}={pa} and {b}={pb} overlap",
                                 "give downloads, sstate, build and repo-ref folders separate paths")
        if pa == dirs.work or pa in dirs.work.parents:
            raise BuildError(f"{a}={pa} contains KAS_WORK_DIR={dirs.work}",
                             "put the work folder beside the caches, not inside them")
    for k, p in dirs.items():
        if any(c.isspace() for c in str(p)):
            raise BuildError(f"{k}={p} contains whitespace",
                             "kas-container passes folders through a shell word list; use a path without spaces")


def _existing_parent(p: Path) -> Path:
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def check_space(dirs: Dirs, *, warn_gb: float, min_gb: float) -> list[str]:
    """Free space on each filesystem the build writes to; warnings below ``warn_gb``, error below ``min_gb``."""
    warnings = []
    seen: set[int] = set()
    for k, p in dirs.items():
        base = _existing_parent(p)
        dev = base.stat().st_dev
        if dev in seen:
            continue
        seen.add(dev)
        free_gb = shutil.disk_usage(base).free / 1e9
        if free_gb < min_gb:
            raise BuildError(f"{k}={p}: only {free_gb:.1f} GB free (a QLI build needs ~{WARN_FREE_GB} GB)",
                             "free space or point the build folders at a bigger disk (manifest build: or "
                             f"{DEFAULT_HOST_CONFIG})")
        if free_gb < warn_gb:
            warnings.append(f"{k}={p}: {free_gb:.0f} GB free, a cold QLI build wants ~{WARN_FREE_GB} GB "
                            "(fine for a warm sstate rebuild)")
    return warnings


def find_kas_container() -> Path:
    """The kas-container script that belongs to the installed kas (next to the ``kas`` entry point)."""
    candidates = [Path(sysconfig.get_path("scripts")) / "kas-container", Path(sys.executable).parent / "kas-container"]
    kas = shutil.which("kas")
    if kas:
        candidates.append(Path(os.path.realpath(kas)).parent / "kas-container")
    for c in candidates:
        if c.is_file() and os.access(c, os.X_OK):
            return c
    found = shutil.which("kas-container")
    if found:
        return Path(found)
    raise BuildError("kas-container not found next to kas", "pip install kas (it ships the kas-container script)")


def choose_engine(manifest: Any, host: Mapping[str, Any], env: Mapping[str, str]) -> str:
    """KAS_CONTAINER_ENGINE (this shell), host config, manifest, else the first installed of docker/podman."""
    engine = env.get("KAS_CONTAINER_ENGINE") or host.get("engine") or manifest.build.engine
    if engine:
        if engine not in ENGINES:
            raise BuildError(f"unknown container engine '{engine}'", "use docker or podman")
        return engine
    path = env.get("PATH")
    for e in ENGINES:
        if shutil.which(e, path=path):
            return e
    raise BuildError("no container engine found (neither docker nor podman is on PATH)",
                     "install docker (and start its daemon) or podman, or set build.engine")


def check_engine(engine: str, env: Mapping[str, str], timeout_s: float = 30.0) -> None:
    """The engine binary exists and answers ``info`` (for docker: the daemon is running and reachable)."""
    exe = shutil.which(engine, path=env.get("PATH"))
    if not exe:
        other = "podman" if engine == "docker" else "docker"
        raise BuildError(f"container engine '{engine}' is not installed (not on PATH)",
                         f"install {engine}, or use build.engine: {other} / KAS_CONTAINER_ENGINE={other}")
    try:
        r = subprocess.run([exe, "info"], capture_output=True, text=True, timeout=timeout_s, env=dict(env),
                           stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as exc:
        raise BuildError(f"'{engine} info' did not answer within {timeout_s:.0f} s",
                         f"check that the {engine} service is healthy") from exc
    if r.returncode != 0:
        msg = next((ln.strip() for ln in reversed((r.stderr or r.stdout).splitlines()) if ln.strip()), "no output")
        if engine == "docker":
            hint = "start it (sudo systemctl start docker) and make sure your user is in the 'docker' group"
            raise BuildError(f"docker is installed but its daemon is not usable ({msg})", hint)
        raise BuildError(f"podman is installed but 'podman info' fails ({msg})",
                         "check rootless podman setup (subuid/subgid, podman system migrate)")


def _host_of(spec: str) -> str | None:
    spec = spec.strip()
    if "://" in spec:
        return urlparse(spec).hostname
    host = spec.rsplit(":", 1)[0] if ":" in spec else spec
    return host.strip("[]") or None


def _is_loopback(host: str | None) -> bool:
    if not host:
        return False
    return host in _LOOPBACK or host.startswith("127.") or host == socket.gethostname()


def mirror_setting(mirrors: list[str]) -> str:
    """Manifest mirror URLs -> bitbake's SSTATE_MIRRORS (``file://.* <url>`` pairs, tried in order)."""
    out = []
    for m in mirrors:
        url = m if "PATH" in m else m.rstrip("/") + "/PATH"
        if url.startswith("http") and "downloadfilename" not in url:
            url += ";downloadfilename=PATH"
        out.append(f"file://.* {url}")
    return " ".join(out)


def _file_mirror_dir(url: str) -> Path | None:
    if not url.startswith("file://"):
        return None
    path = urlparse(url).path
    path = path.split("PATH", 1)[0] if "PATH" in path else path
    return Path(path.rstrip("/") or "/")


# -- plan -------------------------------------------------------------------------------------

def prepare_build(
    manifest: Any,
    out_dir: Path,
    *,
    host_config: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
    renderer: Callable[[Any, Path], Any] | None = None,
    dry_run: bool = False,
    check: bool = True,
) -> BuildPlan:
    """Render the kas config and decide the complete kas-container invocation.

    With ``dry_run`` nothing is created and the engine is not probed (so the plan can be shown
    on a machine without docker); otherwise missing folders are created and the engine checked.
    """
    env = dict(os.environ if env is None else env)
    host = dict(load_host_config(env=env) if host_config is None else host_config)
    manifest = with_host_settings(manifest, host)
    out_dir = Path(out_dir).resolve()
    dirs = resolve_dirs(manifest, host, env)
    check_dirs(dirs)
    if manifest.build.dl_dir != dirs.dl:
        # render/plan look for the LiteRT-LM runtime tarball (and its .sha256) in DL_DIR
        import dataclasses

        manifest = dataclasses.replace(manifest, build=dataclasses.replace(manifest.build, dl_dir=dirs.dl))

    if renderer is None:
        from provisioner.image.render import render as renderer  # helper B's renderer
    render_dir = out_dir / ".kas" / manifest.release   # rendered even for --dry-run: the plan names the file
    render_dir.mkdir(parents=True, exist_ok=True)
    rendered = renderer(manifest, render_dir)
    kas_file = Path(rendered.kas_file).resolve()
    kas_files = sorted({Path(f).resolve() for f in getattr(rendered, "files", []) if Path(f).is_file()} | {kas_file})
    plan_obj = getattr(rendered, "plan", None)
    image = getattr(plan_obj, "image", None) or getattr(plan_obj, "image_recipe", None)

    engine = choose_engine(manifest, host, env)
    warnings: list[str] = []
    if check and not dry_run:
        check_engine(engine, env)
    if check:
        warnings += check_space(dirs, warn_gb=float(host.get("warn_free_gb", WARN_FREE_GB)),
                                min_gb=float(host.get("min_free_gb", MIN_FREE_GB)))
    if os.geteuid() == 0 and env.get("KAS_ALLOW_ROOT") != "yes" and not dry_run:
        raise BuildError("running as root: kas-container refuses this (some recipes break as root)",
                         "run as a user in the docker group, or set KAS_ALLOW_ROOT=yes if you accept that")

    to_create = [p for _, p in dirs.items() if not p.exists()]
    if not dry_run:
        for p in to_create:
            p.mkdir(parents=True, exist_ok=True)

    kenv: dict[str, str] = {k: str(p) for k, p in dirs.items()}
    kenv["KAS_CONTAINER_ENGINE"] = engine
    image_ref = _setting(manifest, host, "container_image")
    if image_ref:
        kenv["KAS_CONTAINER_IMAGE"] = str(image_ref)
    threads = _setting(manifest, host, "threads")
    if threads:
        kenv["BB_NUMBER_THREADS"] = str(threads)
    pm = _setting(manifest, host, "parallel_make")
    if pm:
        kenv["PARALLEL_MAKE"] = f"-j {pm}"
    for var in ("http_proxy", "https_proxy", "no_proxy"):
        if host.get(var) and not env.get(var):
            kenv[var] = str(host[var])

    mirrors = list(_setting(manifest, host, "sstate_mirrors") or [])
    if mirrors:
        kenv["SSTATE_MIRRORS"] = mirror_setting(mirrors)
    hashserve = _setting(manifest, host, "hashserve")
    if hashserve:
        kenv["BB_HASHSERVE"] = str(hashserve)   # kas-container forwards it; render puts it in local.conf
    upstream = getattr(manifest.build, "hashserve_upstream", None)
    if upstream:
        kenv["BB_HASHSERVE_UPSTREAM"] = str(upstream)

    runtime_args: list[str] = []
    mounts: list[tuple[str, str, str]] = []
    for url in mirrors + list(getattr(manifest.build, "mirrors", ()) or ()):
        d = _file_mirror_dir(url)
        if d is None:
            continue
        if not d.is_dir():
            warnings.append(f"file mirror {url}: {d} does not exist on this host (bitbake will skip it)")
            continue
        if d == dirs.work or dirs.work in d.parents:
            continue
        mounts.append((str(d), str(d), "ro"))
    net_host = False
    for spec in ([str(hashserve)] if hashserve and hashserve != "auto" else []) + \
            [m for m in mirrors if m.startswith("http")]:
        if spec.startswith("unix://"):
            sock_dir = Path(spec[len("unix://"):]).parent
            mounts.append((str(sock_dir), str(sock_dir), "rw"))
        elif _is_loopback(_host_of(spec)):
            net_host = True
    if net_host:
        runtime_args.append("--network=host")
    # a known name lets an interrupted build stop the container itself if the engine client dies
    container_name = re.sub(r"[^a-zA-Z0-9_.-]", "-", f"edge-llm-{manifest.release}-{os.getpid()}")
    runtime_args += ["--name", container_name]
    for h, c, mode in mounts:
        if any(ch.isspace() for ch in h):
            raise BuildError(f"mirror folder '{h}' contains whitespace", "use a path without spaces")
        runtime_args += ["-v", f"{h}:{c}:{mode}"]
    if hashserve and hashserve not in ("auto",) and not str(hashserve).startswith("unix://") and check:
        host_, _, port = str(hashserve).rpartition(":")
        if host_ and port.isdigit() and not _reachable(host_.strip("[]"), int(port)):
            warnings.append(f"hash server {hashserve} does not answer from this host "
                            "(start it with `provisioner cache serve`); bitbake will fail to connect")

    argv = [str(find_kas_container())]
    ssh_dir = _setting(manifest, host, "ssh_dir")
    if ssh_dir:
        if not Path(ssh_dir).is_dir():
            raise BuildError(f"ssh_dir {ssh_dir} is not a folder", "point build.ssh_dir at a folder with keys "
                             "and known_hosts for private layer repos")
        argv += ["--ssh-dir", str(ssh_dir)]
    if runtime_args:
        argv += ["--runtime-args", " ".join(runtime_args)]
    argv += ["build", str(kas_file)]

    return BuildPlan(
        manifest=manifest, kas_file=kas_file, kas_files=kas_files, image=image,
        machine=manifest.board.kas_machine, dirs=dirs, engine=engine, argv=argv, env=kenv, mounts=mounts,
        out_dir=out_dir, log_path=out_dir / "logs" / f"{manifest.release}.build.log", to_create=to_create,
        warnings=warnings, interrupt_grace_s=float(host.get("interrupt_grace_s", 120)),
        container_name=container_name,
    )


def _reachable(host: str, port: int, timeout: float = 2.0) -> bool:
    """TCP connect within ``timeout`` including name resolution (which ignores socket timeouts)."""
    ok: list[bool] = []

    def probe() -> None:
        try:
            with socket.create_connection((host, port), timeout=timeout):
                ok.append(True)
        except OSError:
            ok.append(False)

    t = threading.Thread(target=probe, daemon=True)
    t.start()
    t.join(timeout + 0.5)
    return bool(ok and ok[0])


# -- run --------------------------------------------------------------------------------------

def _stream(argv: list[str], env: Mapping[str, str], on_line: Callable[[str], None], log_path: Path,
            grace_s: float, reporter: Reporter, stop_argv: list[str] | None = None) -> int:
    """Run ``argv`` in its own process group, feeding lines; on Ctrl-C stop it the way bitbake likes.

    Unlike :func:`provisioner.process.run_streaming` (SIGTERM, then SIGKILL after 5 s), a build
    first gets SIGINT - bitbake then finishes or cancels running tasks and writes its caches
    cleanly - and only after ``grace_s`` SIGTERM/SIGKILL. A second Ctrl-C skips the wait.
    """
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            env=dict(env), start_new_session=True, text=True, encoding="utf-8",
                            errors="replace", bufsize=1)
    pgid = proc.pid
    lines: queue.Queue[str | None] = queue.Queue(maxsize=10000)

    def reader() -> None:
        assert proc.stdout is not None
        for raw in proc.stdout:
            lines.put(raw)
        lines.put(None)

    t = threading.Thread(target=reader, daemon=True)
    t.start()
    with open(log_path, "a", encoding="utf-8", errors="replace") as log:
        def drain(deadline: float | None) -> bool:
            """Consume lines until EOF (True) or the deadline passes (False)."""
            while True:
                timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
                try:
                    raw = lines.get(timeout=timeout if deadline is not None else 0.5)
                except queue.Empty:
                    if deadline is not None and time.monotonic() >= deadline:
                        return False
                    continue
                if raw is None:
                    return True
                log.write(raw if raw.endswith("\n") else raw + "\n")
                if lines.empty():
                    log.flush()     # people `tail -f` the log; flush whenever we have caught up
                on_line(raw.rstrip("\n"))

        try:
            drain(None)
        except KeyboardInterrupt:
            log.write("### provisioner: Ctrl-C, asking bitbake to stop (SIGINT)\n")
            reporter.warn(f"interrupted: asking the build to stop (up to {grace_s:.0f} s; Ctrl-C again to kill)")
            _signal_group(pgid, signal.SIGINT)
            try:
                done = drain(time.monotonic() + grace_s)
            except KeyboardInterrupt:
                done = False
            if not done and stop_argv:
                log.write(f"### provisioner: {' '.join(stop_argv)}\n")
                try:
                    subprocess.run(stop_argv, capture_output=True, timeout=30, env=dict(env), stdin=subprocess.DEVNULL)
                except (OSError, subprocess.TimeoutExpired):
                    pass
                try:
                    done = drain(time.monotonic() + 10)
                except KeyboardInterrupt:
                    done = False
            if not done:
                _signal_group(pgid, signal.SIGTERM)
                try:
                    done = drain(time.monotonic() + 10)
                except KeyboardInterrupt:
                    done = False
                if not done:
                    _signal_group(pgid, signal.SIGKILL)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
            log.write("### provisioner: build stopped by the user\n")
            raise
    proc.wait()
    return proc.returncode


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass


class ProgressView:
    """Shows bitbake progress: a rich progress bar on a terminal, throttled lines otherwise."""

    def __init__(self, reporter: Reporter, interval_s: float = 15.0) -> None:
        self.reporter = reporter
        self.interval_s = interval_s
        self._last = 0.0
        self._last_pct = -1
        self._phase = ""
        self._bar = None
        if not reporter.quiet and reporter.console.is_terminal:
            from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

            self._bar = Progress(TextColumn("[bold]{task.fields[phase]}"), BarColumn(),
                                 TextColumn("{task.description}"), TimeElapsedColumn(),
                                 console=reporter.console, transient=True)
            self._task = self._bar.add_task("starting", total=1.0, phase="build")
            self._bar.start()

    def update(self, progress: BitbakeProgress, kind: str) -> None:
        if self.reporter.quiet:
            return
        if kind == "failure":
            self.reporter.info(f"[red]{escape(progress.failures[-1].task)} failed[/]")
        phase = "tasks" if progress.task_total else "setscene" if progress.setscene_total else "build"
        if self._bar is not None:
            self._bar.update(self._task, completed=progress.fraction, description=escape(progress.status()),
                             phase=phase)
            return
        now = time.monotonic()
        pct = int(progress.fraction * 100)
        if phase != self._phase or now - self._last >= self.interval_s or pct >= self._last_pct + 10:
            self._last, self._last_pct, self._phase = now, pct, phase
            self.reporter.info(escape(progress.status()))

    def stop(self) -> None:
        if self._bar is not None:
            self._bar.stop()


def run_build(plan: BuildPlan, *, reporter: Reporter | None = None,
              env: Mapping[str, str] | None = None) -> BuildResult:
    """Execute a prepared plan: stream kas-container, then collect the release directory.

    Raises :class:`BuildError` naming the failed task (log kept) and :class:`BuildInterrupted`
    on Ctrl-C; both leave DL_DIR and SSTATE_DIR usable for the next run.
    """
    from provisioner.image.release import layers_from_lock, write_release

    reporter = reporter or Reporter()
    full_env = dict(os.environ if env is None else env)
    full_env.update(plan.env)
    plan.log_path.parent.mkdir(parents=True, exist_ok=True)
    plan.log_path.write_text(f"### provisioner build {plan.manifest.release}\n### {plan.command_line()}\n",
                             encoding="utf-8")
    progress = BitbakeProgress()
    view = ProgressView(reporter)

    def on_line(line: str) -> None:
        ev = progress.feed(line)
        if ev is not None:
            view.update(progress, ev.kind)

    started = time.time()
    t0 = time.monotonic()
    reporter.step(f"kas-container build ({plan.engine}) -> log {plan.log_path}")
    try:
        stop = [plan.engine, "stop", "-t", "30", plan.container_name] if plan.container_name else None
        rc = _stream(plan.argv, full_env, on_line, plan.log_path, plan.interrupt_grace_s, reporter, stop)
    except KeyboardInterrupt:
        view.stop()
        _write_summary(plan, progress, "interrupted", time.monotonic() - t0)
        raise BuildInterrupted(
            f"build interrupted at {progress.status()}; downloads and sstate in {plan.dirs.dl} and "
            f"{plan.dirs.sstate} are intact (log: {plan.log_path})",
            "run the same `provisioner build` command again: sstate makes finished tasks instant") from None
    except OSError as exc:
        view.stop()
        raise BuildError(f"cannot run kas-container: {exc}", "check the kas installation") from exc
    view.stop()
    duration = time.monotonic() - t0
    summary = _write_summary(plan, progress, "ok" if rc == 0 else "failed", duration)
    if progress.sstate:
        reporter.info(escape(progress.sstate.line()))
    if rc != 0:
        raise BuildError(_failure_message(progress, rc, plan.log_path, plan.dirs),
                         f"fix it and rerun; full log: {plan.log_path}")

    reporter.step("collecting the release")
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
        "versions": _versions(progress),
    }
    release_dir = write_release(plan.manifest, tarball, plan.out_dir, kas_files=kas_files, build_info=build_info,
                                log_file=plan.log_path, layers=dict(sorted(layers.items())))
    reporter.info(f"release: {release_dir}")
    return BuildResult(True, release_dir, plan.log_path, duration, summary)


def _versions(progress: BitbakeProgress) -> dict[str, str | None]:
    """Tool and distro versions of this build (provisioner, kas, bitbake, distro) for release.json."""
    from provisioner import __version__

    try:
        from kas import __version__ as kas_version
    except ImportError:  # pragma: no cover - kas is a dependency
        kas_version = None
    c = progress.config
    return {"provisioner": __version__, "kas": kas_version, "bitbake": c.get("BB_VERSION"),
            "distro": c.get("DISTRO"), "distro_version": c.get("DISTRO_VERSION"), "target_sys": c.get("TARGET_SYS")}


def host_path(container_path: str, dirs: Dirs) -> str:
    """A path bitbake printed inside the container (``/build/tmp/...``) as the same file on the host."""
    mapping = [("/build", dirs.build), ("/downloads", dirs.dl), ("/sstate", dirs.sstate), ("/work", dirs.work)]
    for prefix, host in mapping:
        if container_path == prefix or container_path.startswith(prefix + "/"):
            return str(host) + container_path[len(prefix):]
    return container_path


def _failure_message(progress: BitbakeProgress, rc: int, log: Path, dirs: Dirs | None = None) -> str:
    if progress.failures:
        f = progress.failures[0]
        more = f" (+{len(progress.failures) - 1} more)" if len(progress.failures) > 1 else ""
        where = f"; task log: {host_path(f.logfile, dirs) if dirs else f.logfile}" if f.logfile else ""
        return f"bitbake task {f.task} failed with exit code {f.exit_code}{more}{where}"
    last = next((e for e in reversed(progress.errors)), None) or next(
        (ln for ln in reversed(progress.tail()) if ln.strip()), "no output")
    return f"kas-container exited with status {rc}: {last}"


def failure_report(log: Path, lines: int = 15) -> list[str]:
    """The lines to show under a failure: the ERROR lines and the task log excerpt bitbake printed."""
    from provisioner.image.bitbake_log import parse_log

    with open(log, encoding="utf-8", errors="replace") as f:
        p = parse_log(f)
    out: list[str] = []
    for fail in p.failures[:3]:
        ctx = [ln for ln in fail.context if ln.startswith(("ERROR:", "| "))]
        out += ctx[-lines:]
    return out


def _write_summary(plan: BuildPlan, progress: BitbakeProgress, status: str, duration: float) -> dict[str, Any]:
    """Store the run's figures beside the log (``<release>.build.json``), atomically."""
    summary = progress.summary()
    summary.update({"status": status, "duration_s": round(duration, 1), "release": plan.manifest.release,
                    "log": str(plan.log_path)})
    path = plan.log_path.with_suffix(".json")
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return summary


def find_bundle(build_dir: Path, machine: str, image: str | None) -> Path:
    """The ``.qcomflash.tar.gz`` bitbake wrote for ``machine`` (the newest if several images were built)."""
    found: list[Path] = []
    for tmp in sorted(build_dir.glob("tmp*")):
        deploy = tmp / "deploy" / "images" / machine
        found += [p for p in deploy.glob("*.qcomflash.tar.gz") if p.is_file() or p.is_symlink()]
    if image:
        mine = [p for p in found if p.name.startswith(f"{image}-{machine}")]
        found = mine or found
    if not found:
        raise BuildError(f"no .qcomflash.tar.gz in {build_dir}/tmp/deploy/images/{machine}/",
                         "the image must inherit image_types_qcom with IMAGE_FSTYPES += \"qcomflash\"")
    return max(found, key=lambda p: p.stat().st_mtime).resolve()


def layer_commits(work_dir: Path) -> dict[str, str]:
    """``{repo: HEAD commit}`` of every git checkout kas made in the work folder."""
    out: dict[str, str] = {}
    if not work_dir.is_dir():
        return out
    for d in sorted(work_dir.iterdir()):
        if not (d / ".git").exists():
            continue
        r = subprocess.run(["git", "-C", str(d), "rev-parse", "HEAD"], capture_output=True, text=True,
                           stdin=subprocess.DEVNULL)
        if r.returncode == 0 and r.stdout.strip():
            out[d.name] = r.stdout.strip()
    return out


def write_actual_lock(work_dir: Path, dest_dir: Path, kas_file: Path) -> Path | None:
    """A kas lock (``overrides: repos: X: commit:``) of what was really checked out, or None."""
    commits = layer_commits(work_dir)
    if not commits:
        return None
    dest_dir.mkdir(parents=True, exist_ok=True)
    path = dest_dir / f"{kas_file.stem}.lock.yml"
    data = {"header": {"version": 14}, "overrides": {"repos": {k: {"commit": v} for k, v in commits.items()}}}
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text("# written by provisioner build: the layer commits this release was built from\n"
                   + yaml.safe_dump(data, sort_keys=True), encoding="utf-8")
    os.replace(tmp, path)
    return path


def build(manifest_path: Path, out_dir: Path, *, dry_run: bool = False, reporter: Reporter | None = None,
          host_config: Mapping[str, Any] | None = None, renderer: Callable[[Any, Path], Any] | None = None,
          env: Mapping[str, str] | None = None) -> BuildPlan | BuildResult:
    """The whole command: load the manifest, plan, then (unless ``dry_run``) run and collect."""
    from provisioner.manifest import load_manifest

    reporter = reporter or Reporter()
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
    "BuildInterrupted", "BuildPlan", "BuildResult", "Dirs", "build", "check_dirs", "check_engine", "check_space",
    "choose_engine", "find_bundle", "find_kas_container", "layer_commits", "load_host_config", "mirror_setting",
    "prepare_build", "resolve_dirs", "run_build", "write_actual_lock",
]
