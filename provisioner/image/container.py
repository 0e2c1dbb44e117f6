"""The kas-container command line: engine, mounts, network and the container's name.

kas's own ``kas-container`` script (shipped in the kas wheel) runs the build; this module only
decides what it cannot decide for us: which engine (docker/podman) and whether it answers, and
how the container reaches the shared caches - ``file://`` sstate mirrors and a ``unix://`` hash
server are bind-mounted at the same path, a hash server or mirror on this host's loopback needs
the host network (kas-container's ``--runtime-args``).
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from provisioner import context, tools
from provisioner.errors import BuildError
from provisioner.image.host_config import Dirs
from provisioner.manifest import Manifest

ENGINES = ("docker", "podman")

#: what kas-container and the engine it calls may see of the run's environment, on top of
#: :data:`provisioner.context.CHILD_ENV` (PATH, HOME, locale, TERM, TZ, SHELL, proxies, SSH_AUTH_SOCK,
#: BB_NUMBER_THREADS, PARALLEL_MAKE). The variables the script itself reads or forwards into the
#: container, siemens/kas kas-container at 81bab52 (Release 5.4): ``KAS_*`` (folders, engine, image,
#: KAS_ALLOW_ROOT, KAS_PREMIRRORS, KAS_SUDO_CMD, ...), DL_DIR/SSTATE_DIR/SSTATE_MIRRORS, the
#: ``for var in TERM ... TZ`` forward list (DISTRO_APT_PREMIRRORS, GIT_CREDENTIAL_USEHTTPPATH), the
#: credential files it mounts (NETRC_FILE, GITCONFIG_FILE, REGISTRY_AUTH_FILE, NPMRC_FILE, the four
#: AWS_* names, GIT_CREDENTIAL_HELPER) and DOCKER_HOST. Plus what the engines' own clients read to
#: find their daemon and configuration (docker CLI: DOCKER_CONFIG/CONTEXT/CERT_PATH/TLS_VERIFY;
#: podman: CONTAINER_HOST, CONTAINERS_CONF, XDG_RUNTIME_DIR via CHILD_ENV). Nothing else of ours -
#: a download token such as PROVISIONER_HTTP_TOKEN never reaches the container.
KAS_CONTAINER_ENV = (
    "KAS_*", "DL_DIR", "SSTATE_DIR", "SSTATE_MIRRORS", "DISTRO_APT_PREMIRRORS", "GIT_CREDENTIAL_USEHTTPPATH",
    "GIT_CREDENTIAL_HELPER", "NETRC_FILE", "GITCONFIG_FILE", "REGISTRY_AUTH_FILE", "NPMRC_FILE",
    "AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE", "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_ROLE_ARN",
    "DOCKER_HOST", "DOCKER_CONFIG", "DOCKER_CONTEXT", "DOCKER_CERT_PATH", "DOCKER_TLS_VERIFY",
    "CONTAINER_HOST", "CONTAINERS_CONF",
)
_LOOPBACK = {"localhost", "127.0.0.1", "::1", "ip6-localhost", "0.0.0.0"}


def engine_env(env: Mapping[str, str]) -> dict[str, str]:
    """The run's environment cut down to :data:`KAS_CONTAINER_ENV`, for kas-container and ``<engine> info``."""
    return context.RunContext(env).child_env(keep=KAS_CONTAINER_ENV)


def find_kas_container() -> Path:
    """The kas-container script pip installed with kas, by the one lookup rule for our tools' executables
    (:func:`provisioner.tools.find`: beside the interpreter, then PATH); missing is a one-line BuildError."""
    return Path(tools.require("kas-container", error=BuildError))


def choose_engine(manifest: Manifest, host: Mapping[str, Any], env: Mapping[str, str]) -> str:
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
        r = subprocess.run([exe, "info"], capture_output=True, text=True, timeout=timeout_s, env=engine_env(env),
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



@dataclass
class ContainerArgs:
    """What kas-container gets beyond the kas file: extra mounts, runtime args and warnings."""

    mounts: list[tuple[str, str, str]] = field(default_factory=list)   # (host, container, mode)
    runtime_args: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    name: str = ""


def container_args(release: str, dirs: Dirs, mirrors: Sequence[str], file_mirrors: Sequence[str],
                   hashserve: str | None, *, probe: bool) -> ContainerArgs:
    """Mounts for file mirrors and a unix hash-server socket, host network for loopback services.

    ``probe``: try to connect to a TCP hash server and warn when it does not answer.
    """
    out = ContainerArgs()
    for url in [*mirrors, *file_mirrors]:
        d = _file_mirror_dir(url)
        if d is None:
            continue
        if not d.is_dir():
            out.warnings.append(f"file mirror {url}: {d} does not exist on this host (bitbake will skip it)")
            continue
        if d == dirs.work or dirs.work in d.parents:
            continue
        out.mounts.append((str(d), str(d), "ro"))
    net_host = False
    served = [hashserve] if hashserve and hashserve != "auto" else []
    for spec in served + [m for m in mirrors if m.startswith("http")]:
        if spec.startswith("unix://"):
            sock_dir = Path(spec[len("unix://"):]).parent
            out.mounts.append((str(sock_dir), str(sock_dir), "rw"))
        elif _is_loopback(_host_of(spec)):
            net_host = True
    if net_host:
        out.runtime_args.append("--network=host")
    # a known name lets an interrupted build stop the container itself if the engine client dies
    out.name = re.sub(r"[^a-zA-Z0-9_.-]", "-", f"edge-llm-{release}-{os.getpid()}")
    out.runtime_args += ["--name", out.name]
    for h, c, mode in out.mounts:
        if any(ch.isspace() for ch in h):
            raise BuildError(f"mirror folder '{h}' contains whitespace", "use a path without spaces")
        out.runtime_args += ["-v", f"{h}:{c}:{mode}"]
    if hashserve and hashserve != "auto" and not hashserve.startswith("unix://") and probe:
        host_, _, port = hashserve.rpartition(":")
        if host_ and port.isdigit() and not _reachable(host_.strip("[]"), int(port)):
            out.warnings.append(f"hash server {hashserve} does not answer from this host "
                                "(start it with `provisioner cache serve`); bitbake will fail to connect")
    return out


def kas_container_argv(kas_file: Path, ssh_dir: Any, runtime_args: list[str]) -> list[str]:
    """``kas-container [--ssh-dir D] [--runtime-args "..."] build <kas file>``."""
    argv = [str(find_kas_container())]
    if ssh_dir:
        if not Path(ssh_dir).is_dir():
            raise BuildError(f"ssh_dir {ssh_dir} is not a folder", "point build.ssh_dir at a folder with keys "
                             "and known_hosts for private layer repos")
        argv += ["--ssh-dir", str(ssh_dir)]
    if runtime_args:
        argv += ["--runtime-args", " ".join(runtime_args)]
    return [*argv, "build", str(kas_file)]


def host_path(container_path: str, dirs: Dirs) -> str:
    """A path bitbake printed inside the container (``/build/tmp/...``) as the same file on the host."""
    mapping = [("/build", dirs.build), ("/downloads", dirs.dl), ("/sstate", dirs.sstate), ("/work", dirs.work)]
    for prefix, host in mapping:
        if container_path == prefix or container_path.startswith(prefix + "/"):
            return str(host) + container_path[len(prefix):]
    return container_path


