"""`provisioner render`: a manifest becomes a kas configuration and a release layer, byte for byte.

``render(manifest, out_dir)`` writes, under ``out_dir``:

* ``edge-llm.yml`` - the top-level kas file (templates in ``kas/`` at the repo root): QLI release pins,
  repo-qualified includes of meta-qcom's ``ci/<machine>.yml`` and ``ci/qcom-distro-multimedia-image.yml``,
  our layers, and ``local_conf_header`` entries of our own that add to meta-qcom's (never replace
  them): ``edge-llm-cmdline`` download_mode, ``edge-llm-login`` (non-debug login), ``edge-llm-os-release``
  BUILD_ID, ``edge-llm``, ``edge-llm-release``, ``edge-llm-cache``;
* ``layers/meta-edge-llm/`` - a copy of this checkout's layer (the build mounts the render directory);
* ``layers/meta-edge-llm-release/`` - generated: one recipe per model;
* ``edge-llm-local.yml`` - only with ``repo_overrides`` (mirrors/tests): includes edge-llm.yml and
  redirects repos, so the production pins are never rewritten.

Pure function of its inputs: no dates, hosts or absolute paths of the render directory, sorted
everything, so two renders of one manifest are byte-identical and sstate is reused.
Files are written to a temp directory and swapped in, so a failed render leaves nothing half-written.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jinja2
import yaml

from provisioner import shipped, tools
from provisioner.contracts import board as on_board
from provisioner.contracts import memlock, pins
from provisioner.errors import RenderError
from provisioner.manifest import Manifest
from provisioner.plan import (
    DEBUG_LOGIN_FEATURES,
    LAYER_DIR,
    Plan,
    make_plan,
    release_json_text,
)

TEMPLATES = shipped.kas_dir()
MAIN_FILE = "edge-llm.yml"
LOCAL_FILE = "edge-llm-local.yml"
LAYER_NAME = "meta-edge-llm"
RELEASE_LAYER = "meta-edge-llm-release"
# Our own local_conf_header keys. kas merges local_conf_header by key (a same-named entry REPLACES
# meta-qcom's) and writes the entries sorted by key (kas/config.py _get_conf_header, kas 5.4/5.5), so
# none of these may be named like an entry of meta-qcom's ci/*.yml (base.yml: base, diskmon,
# clo-mirrors, cmdline, qcomflash, extra, os-release). Listed in the order kas writes them.
SNIPPET_ORDER = ("edge-llm", "edge-llm-cache", "edge-llm-cmdline", "edge-llm-login", "edge-llm-os-release",
                 "edge-llm-release")
# meta-qcom ci/base.yml @ ef0004df, entry 'cmdline': KERNEL_CMDLINE_EXTRA:append = " qcom_scm.download_mode=1"
META_QCOM_DOWNLOAD_MODE = 1
_COPY_IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc", ".*")


@dataclass(frozen=True)
class RenderResult:
    """What render wrote. ``kas_file`` is the one file to hand to ``kas``/``kas-container build``.

    ``kas_files`` are the kas YAML files (what a release directory keeps under ``kas/``); ``layer_files``
    are the copied and generated layers under ``<out_dir>/layers/`` (the build mounts them).
    """

    kas_file: Path
    kas_files: list[Path]
    plan: Plan
    out_dir: Path
    layer_files: list[Path] = field(default_factory=list)
    snippets: dict[str, str] = field(default_factory=dict)
    repo_overrides: dict[str, dict[str, str]] = field(default_factory=dict)

    def lines(self) -> list[str]:
        return render_lines(self)

    def as_dict(self) -> dict[str, Any]:
        return {"kas_file": str(self.kas_file), "kas_files": [str(p) for p in self.kas_files],
                "layer_files": len(self.layer_files),
                "out_dir": str(self.out_dir), "plan": self.plan.as_dict(),
                "local_conf_header": sorted(self.snippets), "repo_overrides": self.repo_overrides}


def _env() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)), undefined=jinja2.StrictUndefined,
                             keep_trailing_newline=True, autoescape=False)
    env.filters["tojson"] = lambda v: json.dumps(v)
    return env


def _q(value: str) -> str:
    """A bitbake double-quoted value; refuse characters that would change its meaning."""
    if '"' in value or "${" in value or "\\" in value or "\n" in value:
        raise RenderError(f"value {value!r} cannot go into local.conf (quotes, backslashes or '${{')",
                          "fix the manifest value")
    return f'"{value}"'


def local_conf_snippets(plan: Plan) -> dict[str, str]:
    """The ``local_conf_header`` snippets, by name: entries of our own that ADD to meta-qcom's.

    Nothing here replaces a meta-qcom entry: meta-qcom's ``ci/base.yml`` ``os-release`` entry is
    the only place ``BUILD_ID`` joins ``OS_RELEASE_FIELDS`` and its ``extra`` entry also sets
    DISTRO_FEATURES, IMAGE_ROOTFS_EXTRA_SPACE and the systemd watchdog; we change its values only
    with ``:remove``/``:append`` and one ``=`` that beats its ``?=``.

    Split by who reads them, for sstate: ``edge-llm`` (QAIRT/runtime/policy choices: read by the
    QAIRT, runtime and policy recipes), ``edge-llm-release`` (model package list and release.json:
    read only by the image), ``edge-llm-cache`` (bitbake's own cache settings, no recipe reads them).
    """
    s: dict[str, str] = {}
    mode = plan.download_mode
    if mode == META_QCOM_DOWNLOAD_MODE:
        s["edge-llm-cmdline"] = (f"# edge-llm: {plan.variant} image -> download_mode={mode} (1: EDL ramdump, USB "
                                 "05c6:900e);\n# meta-qcom's own 'cmdline' entry already appends "
                                 f"qcom_scm.download_mode={mode}\n")
    else:
        # :remove/:append are applied after every assignment, so this holds wherever kas sorts the entry
        s["edge-llm-cmdline"] = (f"# edge-llm: {plan.variant} image -> download_mode={mode} (0: a crash reboots); "
                                 "meta-qcom's 'cmdline' entry appends =1\n"
                                 f'KERNEL_CMDLINE_EXTRA:remove = "qcom_scm.download_mode={META_QCOM_DOWNLOAD_MODE}"\n'
                                 f'KERNEL_CMDLINE_EXTRA:append = " qcom_scm.download_mode={mode}"\n')
    if plan.login_policy != "debug":  # debug images keep meta-qcom's 'extra' debug login features
        features = " ".join(DEBUG_LOGIN_FEATURES)
        s["edge-llm-login"] = (
            f"# edge-llm: {plan.variant} image, root login {plan.login_policy}: meta-qcom's 'extra' entry adds the\n"
            "# debug login features (empty root password, root login); the rest of that entry stays.\n"
            "# IMAGE_FEATURES too: an image recipe may add allow-root-login itself (qcom-minimal-image does).\n"
            f'EXTRA_IMAGE_FEATURES:remove = "{features}"\n'
            f'IMAGE_FEATURES:remove = "{features}"\n')
    # A plain '=' wins over meta-qcom's 'BUILD_ID ?=' whichever of the two kas writes first. The field
    # itself comes from meta-qcom's 'os-release' entry (OS_RELEASE_FIELDS:append = " BUILD_ID"; oe-core's
    # os-release.bb does not list it), which must therefore never be replaced: validate_with_kas checks.
    s["edge-llm-os-release"] = ("# edge-llm: BUILD_ID is the release id (meta-qcom's local-${DATETIME} defeats "
                                "sstate)\n"
                                f"BUILD_ID = {_q(plan.release_id)}\n")
    lines = [
        "# edge-llm: QAIRT builds, runtimes and board policy (provisioner render)",
        f"EDGE_LLM_QAIRT_VERSIONS = {_q(' '.join(plan.qairt))}",
        f"EDGE_LLM_RUNTIMES = {_q(' '.join(plan.runtimes))}",
        f"EDGE_LLM_HEXAGON_ARCH = {_q(plan.board.hexagon_arch)}",
        f"EDGE_LLM_SOC_MODEL = {_q(str(plan.board.qnn_soc_model))}",
        f"EDGE_LLM_DOWNLOAD_MODE = {_q(str(plan.download_mode))}",
        f"EDGE_LLM_INFERENCE_USER = {_q(plan.inference_user)}",
        f"EDGE_LLM_LOGIN_POLICY = {_q(plan.login_policy)}",
    ]
    # the board paths (contracts.board) and the image.memlock rule's limits (contracts.memlock): the recipes
    # read these, they do not restate them
    lines += [f"{k} = {_q(v)}" for k, v in {**on_board.layer_variables(),
                                            **memlock.layer_variables(plan.memlock)}.items()]
    if plan.ssh_keys:
        # Keys are joined with a literal backslash-n, which edge-llm-login splits on.
        lines.append('EDGE_LLM_SSH_AUTHORIZED_KEYS = "' + "\\n".join(plan.ssh_keys) + '"')
    for v in plan.qairt:
        c = plan.qairt_checksums[v]
        if c.get("sha256"):
            lines.append(f"QAIRT_SHA256:pn-qairt-runtime-{v} = {_q(str(c['sha256']))}")
        if c.get("license_md5"):
            lines.append(f"QAIRT_LICENSE_MD5:pn-qairt-runtime-{v} = {_q(str(c['license_md5']))}")
    if plan.litert:
        # the LiteRT-LM pins from contracts.pins: litert-lm-runtime.bb reads them, it does not restate them
        lines += [f"{k} = {_q(v)}" for k, v in pins.layer_variables().items()]
        if plan.litert.get("sha256"):
            lines.append(f"LITERT_LM_RUNTIME_SHA256 = {_q(str(plan.litert['sha256']))}")
    s["edge-llm"] = "\n".join(lines) + "\n"
    rel = [
        "# edge-llm: per-release data, read only by edge-llm-image (a model change rebuilds the model and the image)",
        f"EDGE_LLM_MODEL_PACKAGES = {_q(' '.join(m.recipe for m in plan.models))}",
        f"EDGE_LLM_EXTRA_PACKAGES = {_q(' '.join(plan.extra_packages))}",
        f"EDGE_LLM_RELEASE_JSON = '{release_json_text(plan)}'",
    ]
    s["edge-llm-release"] = "\n".join(rel) + "\n"
    cache = ["# edge-llm-cache: shared state (DL_DIR/SSTATE_DIR come from the build environment)"]
    if plan.cache.get("hashserve"):
        cache.append('BB_SIGNATURE_HANDLER = "OEEquivHash"')
        cache.append(f"BB_HASHSERVE = {_q(str(plan.cache['hashserve']))}")
        if plan.cache.get("hashserve_upstream"):
            cache.append(f"BB_HASHSERVE_UPSTREAM = {_q(str(plan.cache['hashserve_upstream']))}")
    mirrors = plan.cache.get("sstate_mirrors") or []
    if mirrors:
        entries = []
        for m in mirrors:
            url = m if "PATH" in m else m.rstrip("/") + "/PATH"
            if url.startswith(("http://", "https://")) and "downloadfilename" not in url:
                url += ";downloadfilename=PATH"
            entries.append(f"file://.* {url}")
        cache.append(f"SSTATE_MIRRORS ?= {_q(' '.join(entries))}")
    src = plan.cache.get("mirrors") or []
    if src:
        pre = " ".join(f"{scheme}://.*/.* {m.rstrip('/')}/" for m in src for scheme in ("https", "http"))
        cache.append(f"PREMIRRORS:prepend = {_q(pre + ' ')}")
    if len(cache) == 1:
        cache.append("# (no hash equivalence server or mirrors in the manifest: local sstate only)")
    s["edge-llm-cache"] = "\n".join(cache) + "\n"
    return {k: s[k] for k in SNIPPET_ORDER if k in s}


def kas_root(path: Path) -> Path:
    """The directory kas treats as the config's repo (git top level, else the directory itself)."""
    try:
        out = subprocess.run(["git", "rev-parse", "--show-toplevel"], cwd=path, capture_output=True, text=True,
                             check=False)
    except OSError:
        return path
    if out.returncode == 0 and out.stdout.strip():
        return Path(out.stdout.strip()).resolve()
    return path


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def _local_overrides_text(version: int, main_include: str, overrides: dict[str, dict[str, str]]) -> str:
    return _env().get_template("edge-llm-local.yml.j2").render(
        version=version, main_file=MAIN_FILE, main_include=main_include,
        overrides={k: overrides[k] for k in sorted(overrides)})


def parse_repo_override(text: str) -> tuple[str, dict[str, str]]:
    """``NAME=URL[@COMMIT]`` or ``NAME=@COMMIT`` -> (name, {url, commit}) for ``--repo-override``."""
    name, sep, rest = text.partition("=")
    if not sep or not name or not rest:
        raise RenderError(f"bad --repo-override {text!r}", "use NAME=URL, NAME=URL@COMMIT or NAME=@COMMIT")
    url, _, commit = rest.rpartition("@") if "@" in rest.split("://")[-1] else (rest, "", "")
    out = {}
    if url:
        out["url"] = url
    if commit:
        out["commit"] = commit
    return name, out


def render(manifest: Manifest, out_dir: Path, *, repo_overrides: dict[str, dict[str, str]] | None = None,
           extra_includes: tuple[str, ...] = (), inspect: bool = True, plan: Plan | None = None) -> RenderResult:
    """Write the kas configuration and release layer for ``manifest`` into ``out_dir`` (see module doc)."""
    if plan is None:
        from provisioner.artifacts.inspect import inspect_path  # the earlier stage's reader, handed to the plan

        plan = make_plan(manifest, extra_includes=extra_includes, inspect=inspect, inspector=inspect_path)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    out_dir = out_dir.resolve()
    root = kas_root(out_dir)
    prefix = out_dir.relative_to(root).as_posix() if out_dir != root else ""

    def rel(*parts: str) -> str:
        return "/".join(p for p in (prefix, *parts) if p)

    snippets = local_conf_snippets(plan)
    env = _env()
    main = env.get_template("edge-llm.yml.j2").render(
        plan=plan, snippets=snippets, layer_path=rel("layers", LAYER_NAME),
        release_layer_path=rel("layers", RELEASE_LAYER))
    try:
        yaml.safe_load(main)
    except yaml.YAMLError as exc:  # a template bug, not a user error
        raise RuntimeError(f"rendered kas file is not YAML: {exc}") from exc

    staging = Path(tempfile.mkdtemp(prefix=".render-", dir=out_dir))
    try:
        _write(staging / MAIN_FILE, main)
        shutil.copytree(LAYER_DIR, staging / "layers" / LAYER_NAME, ignore=_COPY_IGNORE)
        rl = staging / "layers" / RELEASE_LAYER
        _write(rl / "conf" / "layer.conf",
               env.get_template("release-layer/layer.conf.j2").render(series=plan.qli.yocto_series))
        for m in plan.models:
            for value in (m.uri, m.file):
                _q(value)
            _write(rl / "recipes-models" / m.recipe / f"{m.recipe}.bb",
                   env.get_template("release-layer/model.bb.j2").render(m=m))
        overrides = {k: dict(v) for k, v in (repo_overrides or {}).items()}
        if overrides:
            _write(staging / LOCAL_FILE, _local_overrides_text(plan.qli.kas_header_version, rel(MAIN_FILE),
                                                               overrides))
        # Swap in: replace only what render owns; anything else in out_dir stays.
        for name in (MAIN_FILE, LOCAL_FILE, "layers"):
            target = out_dir / name
            if target.is_dir():
                shutil.rmtree(target)
            elif target.exists():
                target.unlink()
        for entry in sorted(staging.iterdir()):
            os.replace(entry, out_dir / entry.name)
    finally:
        shutil.rmtree(staging, ignore_errors=True)

    layer_files = sorted(p for p in (out_dir / "layers").rglob("*") if p.is_file())
    kas_files = [out_dir / MAIN_FILE] + ([out_dir / LOCAL_FILE] if overrides else [])
    return RenderResult(kas_file=kas_files[-1], kas_files=kas_files, plan=plan, out_dir=out_dir,
                        layer_files=layer_files, snippets=snippets, repo_overrides=overrides)


def render_lines(result: RenderResult) -> list[str]:
    """Plan lines plus where the files went (for the CLI and `provisioner rehearse`)."""
    out = list(result.plan.lines())
    out.append(f"kas file: {result.kas_file}")
    if result.repo_overrides:
        out.append("LOCAL repo overrides (not production pins): " + ", ".join(sorted(result.repo_overrides)))
    return out


def validate_with_kas(result: RenderResult, repo_overrides: dict[str, dict[str, str]] | None = None, *,
                      env: Mapping[str, str], work_dir: Path | None = None, timeout_s: float = 300) -> dict[str, Any]:
    """Resolve the rendered configuration with the real ``kas dump`` (clones/checks out the repos).

    Proves before any build that every include exists in the pinned meta-qcom and that the pins
    resolve; also refuses a configuration that replaces a local_conf_header entry of meta-qcom's
    ``ci/*.yml`` or in which nothing adds BUILD_ID to OS_RELEASE_FIELDS. Returns the resolved
    configuration (a dict).
    ``repo_overrides`` (tests, mirrors) writes ``edge-llm-local.yml`` next to the main file first.
    ``env`` is the run's environment (:attr:`provisioner.context.RunContext.env`): kas gets its PATH, home,
    locale, mirrors and certificates, nothing else.
    """
    kas_file = result.kas_file
    if repo_overrides:
        root = kas_root(result.out_dir)
        prefix = result.out_dir.relative_to(root).as_posix() if result.out_dir != root else ""
        main_include = "/".join(p for p in (prefix, MAIN_FILE) if p)
        kas_file = result.out_dir / LOCAL_FILE
        _write(kas_file, _local_overrides_text(result.plan.qli.kas_header_version, main_include, repo_overrides))
    wd = Path(work_dir) if work_dir else Path(tempfile.mkdtemp(prefix="kas-validate-"))
    wd.mkdir(parents=True, exist_ok=True)
    kas_env = {k: v for k, v in env.items() if k in ("PATH", "HOME", "LANG", "LC_ALL", "KAS_PREMIRRORS",
                                                     "KAS_REPO_REF_DIR", "SSL_CERT_FILE", "GIT_SSL_CAINFO")}
    kas_env["KAS_WORK_DIR"] = str(wd)
    kas_env.setdefault("HOME", str(wd))
    kas = tools.require("kas", error=RenderError)
    proc = subprocess.run([kas, "dump", "--resolve-refs", str(kas_file)], cwd=wd, env=kas_env, capture_output=True,
                          text=True, timeout=timeout_s, check=False)
    if proc.returncode != 0:
        err = [ln for ln in proc.stderr.splitlines() if ln.strip()]
        reason = next((ln for ln in reversed(err) if "ERROR" in ln or "not found" in ln), err[-1] if err else "")
        raise RenderError(f"kas cannot resolve {kas_file.name}: {reason.strip()}",
                          "check the includes and pins against the release (catalog releases.yaml)")
    config = yaml.safe_load(proc.stdout)
    check_meta_qcom_entries_kept(config, list(result.kas_files), wd / "meta-qcom" / "ci")
    return config


def check_meta_qcom_entries_kept(config: dict[str, Any], ours: list[Path], ci_dir: Path) -> None:
    """Refuse a rendered configuration that replaces a local_conf_header entry of meta-qcom's ``ci/*.yml``.

    kas replaces a same-named entry wholesale, silently: replacing ``os-release`` loses BUILD_ID in
    /etc/os-release, replacing ``extra`` loses DISTRO_FEATURES efi/pam/pni-names and more. Also
    refuses a merged configuration in which no entry adds BUILD_ID to OS_RELEASE_FIELDS (oe-core's
    os-release.bb at 06dd66e6 does not list it; meta-qcom's ci/base.yml ``os-release`` entry adds it).
    """
    def keys(f: Path) -> set[str]:
        try:
            data = yaml.safe_load(f.read_text(encoding="utf-8")) or {}
        except (OSError, yaml.YAMLError):
            return set()
        lch = data.get("local_conf_header") if isinstance(data, dict) else None
        return set(lch) if isinstance(lch, dict) else set()

    theirs = {k: f.name for f in sorted(ci_dir.glob("*.yml")) for k in keys(f)}
    for f in ours:
        clash = sorted(keys(f) & theirs.keys())
        if clash:
            raise RenderError(f"{f.name}: local_conf_header entry {clash[0]!r} replaces meta-qcom "
                              f"ci/{theirs[clash[0]]}'s entry of that name",
                              "name it edge-llm-...: kas replaces same-named entries")
    merged = config.get("local_conf_header") or {}
    fields = [ln for text in merged.values() for ln in str(text).splitlines()
              if ln.strip().startswith(("OS_RELEASE_FIELDS:append", "OS_RELEASE_FIELDS +="))
              and "BUILD_ID" in ln]
    if not fields:
        raise RenderError(f"no local_conf_header entry adds BUILD_ID to OS_RELEASE_FIELDS: {on_board.OS_RELEASE} "
                          "would have no BUILD_ID (boot check, getty banner and fleet verify read it)",
                          "keep meta-qcom ci/base.yml's 'os-release' entry (do not replace it)")
