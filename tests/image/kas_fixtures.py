"""Local git fixtures that mirror the QLI 2.0 repos kas resolves (no network).

meta-qcom carries the REAL ``ci/base.yml`` and ``ci/<machine>.yml`` of qualcomm-linux/meta-qcom @
ef0004df (read from ../shared/realworld), a fixture ``ci/base.lock.yml`` (kas ``overrides`` pins of
the fixture layers) and reduced ``ci/qcom-distro.yml`` / ``ci/qcom-distro-multimedia-image.yml``;
the other repos: meta-qcom-releases with ``lock.yml``; oe-core with an executable
``oe-init-build-env``; a bitbake stand-in; meta-lts-mixins; meta-qcom-distro with
``qcom-multimedia-image.bb``; meta-openembedded. Each repo has its own commits.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from tests.conftest import REALWORLD, need_realworld

# meta-qcom's ci/ kas fragments at the qli-2.0 tag (qualcomm-linux/meta-qcom @ ef0004df), real files in
# ../shared/realworld next to the repo root (CI has them there)
META_QCOM_CI = REALWORLD / "kas" / "meta-qcom-ef0004df" / "ci"


def meta_qcom_ci() -> Path:
    """META_QCOM_CI, or the one-line skip of :func:`tests.conftest.need_realworld` (a failure in CI)."""
    return need_realworld("kas", "meta-qcom-ef0004df", "ci")


GIT_ENV = {
    "GIT_AUTHOR_NAME": "fixture", "GIT_AUTHOR_EMAIL": "fixture@example.invalid",
    "GIT_COMMITTER_NAME": "fixture", "GIT_COMMITTER_EMAIL": "fixture@example.invalid",
    "GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z", "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z",
    "GIT_CONFIG_NOSYSTEM": "1",
}

# meta-qcom's own ci/base.yml and ci/<machine>.yml, verbatim (local_conf_header entries base, diskmon,
# clo-mirrors, cmdline, qcomflash, extra, os-release: the ones a render must add to, never replace).
REAL_CI_FILES = ("base.yml", "iq-8275-evk.yml", "iq-9075-evk.yml")

# Stand-ins for meta-qcom ci/qcom-distro.yml and ci/qcom-distro-multimedia-image.yml @ ef0004df, reduced
# to what the fixture repos provide (the real qcom-distro.yml also names meta-virtualization,
# meta-audioreach, meta-selinux, meta-updater, meta-security and a meta-oe patch): same distro, a subset
# of its repos, no local_conf_header entry of their own. test_render_kas.py checks this against the real files.
QCOM_DISTRO_YML = """\
header:
  version: 14

distro: qcom-distro

repos:
  meta-qcom-distro:
    url: https://github.com/qualcomm-linux/meta-qcom-distro
    branch: wrynose

  meta-openembedded:
    url: https://github.com/openembedded/meta-openembedded
    branch: wrynose
    layers:
      meta-oe:
      meta-python:
"""

MULTIMEDIA_YML = """\
header:
  version: 14
  includes:
    - ci/qcom-distro.yml

target:
  - qcom-multimedia-image
"""

OE_INIT = """\
#!/bin/sh
# oe-core stand-in: what kas needs from oe-init-build-env (a build dir with conf/)
BUILDDIR="${1:-build}"
mkdir -p "$BUILDDIR/conf"
cd "$BUILDDIR"
export BUILDDIR
"""

BITBAKE = """\
#!/bin/sh
# bitbake stand-in: records its argv
echo "bitbake stand-in: $*"
"""


def layer_conf(collection: str, series: str = "wrynose", depends: str = "") -> str:
    return (f'BBPATH .= ":${{LAYERDIR}}"\nBBFILES += "${{LAYERDIR}}/recipes-*/*/*.bb"\n'
            f'BBFILE_COLLECTIONS += "{collection}"\nBBFILE_PATTERN_{collection} = "^${{LAYERDIR}}/"\n'
            f'LAYERSERIES_COMPAT_{collection} = "{series}"\n'
            + (f'LAYERDEPENDS_{collection} = "{depends}"\n' if depends else ""))


def git(cwd: Path, *args: str) -> str:
    env = {**os.environ, **GIT_ENV, "HOME": str(cwd)}
    out = subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True)
    return out.stdout.strip()


def make_repo(path: Path, files: dict[str, str], branch: str = "wrynose", executable: tuple[str, ...] = (),
              extra_commits: int = 0) -> list[str]:
    """Create a git repo with ``files`` in one commit (+ ``extra_commits``); return commits, oldest first."""
    path.mkdir(parents=True, exist_ok=True)
    git(path, "init", "-q", "-b", branch)
    for rel, text in files.items():
        f = path / rel
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(text)
        if rel in executable:
            f.chmod(0o755)
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "fixture: initial")
    commits = [git(path, "rev-parse", "HEAD")]
    for i in range(extra_commits):
        (path / f"CHANGES.{i}").write_text(f"change {i}\n")
        git(path, "add", "-A")
        git(path, "commit", "-q", "-m", f"fixture: change {i}")
        commits.append(git(path, "rev-parse", "HEAD"))
    return commits


@dataclass
class QliFixture:
    """The fixture repos: name -> path and commits; helpers for catalog entries and overrides."""

    root: Path
    commits: dict[str, list[str]] = field(default_factory=dict)
    branches: dict[str, str] = field(default_factory=dict)
    ci_files: tuple[str, ...] = ()

    def url(self, name: str) -> str:
        return f"file://{self.root / name}"

    def head(self, name: str) -> str:
        return self.commits[name][-1]

    def overrides(self, names: tuple[str, ...] | None = None, with_commit: bool = True) -> dict[str, dict[str, str]]:
        """repo_overrides redirecting every repo (or ``names``) to the fixtures."""
        out = {}
        for n in names or tuple(self.commits):
            o = {"url": self.url(n)}
            if with_commit:
                o["commit"] = self.head(n)
            out[n] = o
        return out

    def release_entry(self, machines: tuple[str, ...] = ("iq-8275-evk", "iq-9075-evk")) -> dict:
        """A releases.yaml entry pinning the fixture commits (adding a release is this one entry)."""
        return {
            "yocto_series": "wrynose", "kas_header_version": 14, "distro": "qcom-distro",
            "base_image": "qcom-multimedia-image", "system_qairt": "2.47.0.260601", "machines": list(machines),
            "meta_qcom_releases": {"url": self.url("meta-qcom-releases"), "tag": "qli-fixture",
                                   "commit": self.head("meta-qcom-releases")},
            "lock": {n: {"url": self.url(n), "branch": self.branches[n], "commit": self.head(n)}
                     for n in ("bitbake", "meta-qcom", "oe-core", "meta-lts-mixins")},
            "meta_qcom_ci_files": list(self.ci_files),
        }


def build_qli_fixture(root: Path, *, with_618: bool = False) -> QliFixture:
    """Create all fixture repos under ``root``. ``with_618`` adds ci/linux-qcom-6.18.yml (like qli-2.0-rc3)."""
    fx = QliFixture(root=root)
    fx.branches = {"bitbake": "2.18", "meta-qcom": "wrynose", "oe-core": "wrynose",
                   "meta-lts-mixins": "wrynose/linux-firmware", "meta-qcom-distro": "wrynose",
                   "meta-openembedded": "wrynose", "meta-qcom-releases": "wrynose"}
    fx.commits["bitbake"] = make_repo(root / "bitbake", {"bin/bitbake": BITBAKE, "lib/bb/__init__.py": ""},
                                      branch="2.18", executable=("bin/bitbake",))
    fx.commits["oe-core"] = make_repo(root / "oe-core", {"oe-init-build-env": OE_INIT,
                                                         "meta/conf/layer.conf": layer_conf("core")},
                                      executable=("oe-init-build-env",), extra_commits=1)
    fx.commits["meta-lts-mixins"] = make_repo(root / "meta-lts-mixins",
                                              {"conf/layer.conf": layer_conf("lts-linux-firmware-mixin")},
                                              branch="wrynose/linux-firmware")
    fx.commits["meta-qcom-distro"] = make_repo(root / "meta-qcom-distro", {
        "conf/layer.conf": layer_conf("qcom-distro", depends="core qcom"),
        "conf/distro/qcom-distro.conf": 'DISTRO = "qcom-distro"\nDISTRO_VERSION = "2.0"\n',
        "recipes-products/images/qcom-multimedia-image.bb": 'SUMMARY = "QLI multimedia image"\n'
                                                            'LICENSE = "MIT"\ninherit core-image\n'},
        extra_commits=1)
    fx.commits["meta-openembedded"] = make_repo(root / "meta-openembedded", {
        "meta-oe/conf/layer.conf": layer_conf("openembedded-layer"),
        "meta-python/conf/layer.conf": layer_conf("meta-python")})
    ci = {
        "conf/layer.conf": layer_conf("qcom", depends="core lts-linux-firmware-mixin"),
        **{f"ci/{name}": (meta_qcom_ci() / name).read_text(encoding="utf-8") for name in REAL_CI_FILES},
        "ci/qcom-distro.yml": QCOM_DISTRO_YML,
        "ci/qcom-distro-multimedia-image.yml": MULTIMEDIA_YML,
        # base.lock.yml pins the other layers; it also pins oe-core to an OLDER commit than the
        # release lock, to prove the release pins win.
        "ci/base.lock.yml": ("header:\n  version: 14\noverrides:\n  repos:\n"
                             f"    meta-qcom-distro:\n      commit: {fx.commits['meta-qcom-distro'][0]}\n"
                             f"    meta-openembedded:\n      commit: {fx.commits['meta-openembedded'][0]}\n"
                             f"    oe-core:\n      commit: {fx.commits['oe-core'][0]}\n"),
    }
    if with_618:
        ci["ci/linux-qcom-6.18.yml"] = 'header:\n  version: 14\nlocal_conf_header:\n  kernel: |\n' \
                                       '    PREFERRED_PROVIDER_virtual/kernel = "linux-qcom-6.18"\n'
    fx.commits["meta-qcom"] = make_repo(root / "meta-qcom", ci)
    fx.ci_files = tuple(sorted(k for k in ci if k.startswith("ci/")))
    lock = "header:\n  version: 14\nrepos:\n" + "".join(
        f"  {n}:\n    branch: '{fx.branches[n]}'\n    commit: {fx.head(n)}\n    url: {fx.url(n)}\n"
        for n in ("bitbake", "meta-qcom", "oe-core", "meta-lts-mixins"))
    fx.commits["meta-qcom-releases"] = make_repo(root / "meta-qcom-releases", {"lock.yml": lock})
    return fx


def write_manifest(path: Path, *, board: str = "iq-8275-evk", qli: str = "qli-2.0", release: str = "rel-1",
                   qairt: tuple[str, ...] = ("2.44.0.260225",), runtimes: tuple[str, ...] | None = None,
                   models: list[dict] | None = None, image: dict | None = None, build: dict | None = None) -> Path:
    """A release manifest file for render tests (defaults: Gemma-4 E2B by URL on the IQ-8275 EVK)."""
    import yaml

    if models is None:
        models = [{"name": "gemma-4-e2b", "kind": "litertlm", "qairt": "2.44.0.260225", "size": 3294593024,
                   "sha256": "ab" * 32,
                   "url": "https://models.example.invalid/gemma-4-E2B-it_qualcomm_qcs8275.litertlm"}]
    data: dict = {"manifest": 1, "release": release, "board": board, "qli": qli, "qairt": list(qairt),
                  "models": models,
                  "image": image if image is not None else {
                      "variant": "production", "root_login": "keys-only",
                      "ssh_authorized_keys": ["ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAITestKeyOnly0000 ops@test"]},
                  "build": build or {}}
    if runtimes is not None:
        data["runtimes"] = list(runtimes)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path
