"""Per-host build settings: the folders a build uses, where they live, and whether they fit.

Host folders (work, build, downloads, sstate, repo reference) belong to the machine, not to a
release manifest that several hosts share, so they come from the manifest's ``build:`` when it
names them, else from ``~/.config/edge-llm/build.yaml``, else from ``$XDG_CACHE_HOME/edge-llm``.
"""

from __future__ import annotations

import dataclasses
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from provisioner.errors import BuildError
from provisioner.manifest import Manifest

HOST_CONFIG_ENV = "PROVISIONER_BUILD_CONFIG"
DEFAULT_HOST_CONFIG = Path("~/.config/edge-llm/build.yaml")
WARN_FREE_GB = 250          # a cold QLI multimedia image build with sstate and downloads
MIN_FREE_GB = 30            # below this bitbake's diskmon (meta-qcom ci/base.yml) stops the build anyway
HOST_CONFIG_KEYS = {"engine", "work_dir", "build_dir", "dl_dir", "sstate_dir", "repo_ref_dir", "sstate_mirrors",
                    "hashserve", "threads", "parallel_make", "ssh_dir", "container_image", "min_free_gb",
                    "warn_free_gb", "http_proxy", "https_proxy", "no_proxy", "interrupt_grace_s"}


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


def load_host_config(path: Path | None = None, *, env: Mapping[str, str]) -> dict[str, Any]:
    """Per-host build settings (paths, engine, mirrors) from a YAML file; empty when absent.

    Looked up at ``path``, else ``$PROVISIONER_BUILD_CONFIG`` (in ``env``, the run's environment
    as the CLI read it), else ``~/.config/edge-llm/build.yaml``.
    """
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


def setting(manifest: Manifest, host: Mapping[str, Any], key: str) -> Any:
    """Manifest value first (explicit for this release), then the host config."""
    value = getattr(manifest.build, key, None)
    if value not in (None, (), ""):
        return value
    return host.get(key)


def with_host_settings(manifest: Manifest, host: Mapping[str, Any]) -> Manifest:
    """The manifest with cache settings it leaves open filled from the host config.

    Render writes ``BB_HASHSERVE``/``SSTATE_MIRRORS`` into the ``edge-llm-cache`` snippet from
    the manifest, and kas does not forward ``BB_HASHSERVE`` from the environment, so a hash
    server known only to this host's config must reach render through the manifest. Those
    settings are not recipe inputs: sstate signatures do not change.
    """
    fill = {}
    for key in ("sstate_mirrors", "hashserve"):
        if not getattr(manifest.build, key, None) and host.get(key):
            value = host[key]
            fill[key] = tuple([value] if isinstance(value, str) else value) if key == "sstate_mirrors" else str(value)
    if not fill:
        return manifest
    return dataclasses.replace(manifest, build=dataclasses.replace(manifest.build, **fill))


def with_dl_dir(manifest: Manifest, dl: Path) -> Manifest:
    """The manifest with DL_DIR as resolved: render/plan look for the LiteRT-LM tarball (and .sha256) there."""
    if manifest.build.dl_dir == dl:
        return manifest
    return dataclasses.replace(manifest, build=dataclasses.replace(manifest.build, dl_dir=dl))


def resolve_dirs(manifest: Manifest, host: Mapping[str, Any], env: Mapping[str, str]) -> Dirs:
    """Host folders: manifest, then host config, then ``$XDG_CACHE_HOME/edge-llm`` defaults."""
    cache = Path(env.get("XDG_CACHE_HOME") or Path(env.get("HOME", "~")) / ".cache").expanduser() / "edge-llm"
    work = Path(setting(manifest, host, "work_dir") or cache / "kas").resolve()
    build = Path(setting(manifest, host, "build_dir") or work / "build").resolve()
    dl = Path(setting(manifest, host, "dl_dir") or cache / "downloads").resolve()
    sstate = Path(setting(manifest, host, "sstate_dir") or cache / "sstate").resolve()
    ref = setting(manifest, host, "repo_ref_dir")
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
