"""Manifest + catalog -> a resolved plan: every build decision made, nothing run.

``make_plan`` answers "what will be built, for which machine, with which versions" before any
container starts: the QLI release pins, the kas includes (checked against the pinned meta-qcom),
the QAIRT recipes (checked against the layer), the runtime, and one generated recipe per model
(checked against the image's QAIRT and SoC with the layer's own rule, so render refuses exactly
what the build would refuse, with the same words). ``provisioner/image/render.py`` turns a plan
into files; ``provisioner rehearse`` and ``build --dry-run`` print ``plan.lines()``.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

from provisioner import catalog, shipped
from provisioner.contracts import board as on_board
from provisioner.contracts import pins
from provisioner.contracts.pins import litert_tarball, model_recipe, qairt_recipe
from provisioner.errors import RenderError
from provisioner.hashing import LICENSE_MD5_SUFFIX, SHA256_SUFFIX, read_sidecar
from provisioner.manifest import Manifest, Model

REPO_ROOT = Path(__file__).resolve().parents[1]
LAYER_DIR = shipped.layer_dir()
MODELCHECK_PATH = LAYER_DIR / "lib" / "edgellm" / "modelcheck.py"
IMAGE_RECIPE = "edge-llm-image"
DISTRO_IMAGE_INCLUDE = "ci/qcom-distro-multimedia-image.yml"
# image.ota: ostree - chained after the image include the way meta-qcom's CI does (ef0004df
# ci/qcom-distro-sota.yml includes ci/qcom-distro.yml and sets `distro: qcom-distro-sota`), so the later
# include's distro wins and every other entry stays.
SOTA_INCLUDE = "ci/qcom-distro-sota.yml"
SOTA_DISTRO = "qcom-distro-sota"
DEBUG_LOGIN_FEATURES = ("allow-empty-password", "empty-root-password", "allow-root-login")

# (model path, board) -> the inspector's report (qairt_builds, soc_model, dsp_arch, truncated, size...) or None
Inspector = Callable[[Path, catalog.Board], Any]


@cache
def modelcheck() -> ModuleType:
    """The layer's ``lib/edgellm/modelcheck.py``, imported by path (one rule for render and build)."""
    name = "edgellm_modelcheck"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, MODELCHECK_PATH)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def qairt_recipe_file(version: str, layer: Path = LAYER_DIR) -> Path:
    return layer / "recipes-ai" / "qairt" / f"{qairt_recipe(version)}.bb"


@dataclass(frozen=True)
class ModelPlan:
    """One model as the build will see it: recipe, source, version directory, checked facts."""

    name: str
    kind: str
    recipe: str
    version: str
    qairt: str
    file: str
    uri: str
    sha256: str | None
    size: int | None
    soc_model: int | None
    dsp_arch: str | None
    facts_from: str            # "inspected" (file on disk) | "manifest" (declared values only)
    local_path: Path | None    # host path the build must see (path models)

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind, "recipe": self.recipe, "version": self.version,
                "qairt": self.qairt, "file": self.file, "uri": self.uri, "sha256": self.sha256, "size": self.size,
                "soc_model": self.soc_model, "dsp_arch": self.dsp_arch, "facts_from": self.facts_from,
                "local_path": str(self.local_path) if self.local_path else None,
                "install_dir": on_board.model_version_dir(self.name, self.version)}


@dataclass(frozen=True)
class Plan:
    """Everything decided for one manifest (see module docstring)."""

    release_id: str
    board: catalog.Board
    qli: catalog.Release
    machine: str
    distro: str
    image: str
    base_image: str
    includes: tuple[tuple[str, str], ...]          # (repo, file) kas includes, in order
    repos: dict[str, dict[str, str]]                 # release lock pins: name -> url/branch/commit
    qairt: tuple[str, ...]
    qairt_recipes: tuple[str, ...]
    qairt_checksums: dict[str, dict[str, str | None]]
    runtimes: tuple[str, ...]
    runtime_recipes: tuple[str, ...]
    litert: dict[str, str | None] | None
    models: tuple[ModelPlan, ...]
    variant: str
    download_mode: int
    login_policy: str
    ssh_keys: tuple[str, ...]
    memlock: str
    inference_user: str
    extra_packages: tuple[str, ...]
    cache: dict[str, Any]
    warnings: tuple[str, ...] = field(default=())
    ota: str | None = None                           # 'ostree': a sota build whose ostreecommit.tar.xz is collected

    def release_json(self) -> dict[str, Any]:
        """Content of the image's /etc/edge-llm/release.json (deterministic: no dates, no hosts)."""
        return {"format": 1, "release": self.release_id, "board": self.board.id, "machine": self.machine,
                "qli": self.qli.id, "image": self.image, "qairt": list(self.qairt), "runtimes": list(self.runtimes),
                "models": [{"name": m.name, "kind": m.kind, "qairt": m.qairt, "version": m.version,
                            "sha256": m.sha256, "size": m.size} for m in self.models],
                "variant": self.variant, "download_mode": self.download_mode}

    def lines(self) -> list[str]:
        """The short plan a user reads before a multi-hour build."""
        out = [
            f"release {self.release_id}: {self.image} for {self.board.name} (MACHINE={self.machine}, "
            f"Hexagon {self.board.hexagon_arch}, soc_model {self.board.qnn_soc_model})",
            f"QLI {self.qli.id} (Yocto {self.qli.yocto_series}, distro {self.distro}): "
            + ", ".join(f"{n} {p['commit'][:12]}" for n, p in self.repos.items()),
            "kas includes: " + ", ".join(f"{r}:{f}" for r, f in self.includes),
        ]
        for v in self.qairt:
            known = self.qairt_checksums[v]
            state = "checksums known" if known.get("sha256") and known.get("license_md5") else \
                "checksums missing (run `provisioner fetch` first)"
            out.append(f"QAIRT {v} -> {on_board.qairt_dir(v)} ({qairt_recipe(v)}, skel {self.board.hexagon_arch}; "
                       f"{state})")
        if self.litert:
            out.append(f"LiteRT-LM {self.litert['rev']} (QAIRT {self.litert['qairt']}) -> "
                       f"{on_board.litert_dir(self.litert['rev'] or on_board.LITERT_REV)} from {self.litert['tarball']}"
                       + ("" if self.litert.get("sha256") else " (sha256 unknown: run `provisioner litert build`)"))
        if "genie" in self.runtimes:
            out.append("Genie runtime: genie-t2t-run + libGenie.so from " + ", ".join(self.qairt))
        for m in self.models:
            out.append(f"model {m.name} ({m.kind}, QAIRT {m.qairt}, {m.facts_from}) -> "
                       f"{on_board.model_version_dir(m.name, m.version)} ({m.recipe})")
        login = {"disabled": "no root login", "keys-only": f"root with {len(self.ssh_keys)} SSH key(s) only",
                 "debug": "QLI debug login (empty/default root password)"}[self.login_policy]
        out.append(f"{self.variant} image: download_mode={self.download_mode}, memlock {self.memlock}, "
                   f"{login}, inference user {self.inference_user} in group {on_board.FASTRPC_GROUP}")
        cache_bits = [k for k in ("hashserve", "sstate_mirrors", "mirrors") if self.cache.get(k)]
        out.append("cache: " + (", ".join(cache_bits) if cache_bits else "local sstate only"))
        out += [f"warning: {w}" for w in self.warnings]
        return out

    def as_dict(self) -> dict[str, Any]:
        return {"release": self.release_id, "board": self.board.id, "machine": self.machine, "qli": self.qli.id,
                "distro": self.distro, "image": self.image, "base_image": self.base_image,
                "includes": [{"repo": r, "file": f} for r, f in self.includes], "repos": self.repos,
                "qairt": list(self.qairt), "qairt_recipes": list(self.qairt_recipes),
                "runtimes": list(self.runtimes), "runtime_recipes": list(self.runtime_recipes),
                "litert": self.litert, "models": [m.as_dict() for m in self.models], "variant": self.variant,
                "download_mode": self.download_mode, "login_policy": self.login_policy,
                "ssh_keys": len(self.ssh_keys), "memlock": self.memlock, "inference_user": self.inference_user,
                "cache": self.cache, "warnings": list(self.warnings), "ota": self.ota}


def image_facts(board: catalog.Board, qairt: tuple[str, ...]):
    """What the image provides, for the shared model rule."""
    return modelcheck().ImageFacts(machine=board.kas_machine, qairt_versions=tuple(qairt),
                                   soc_model=board.qnn_soc_model, hexagon_arch=board.hexagon_arch)


def _model_plan(m: Model, board: catalog.Board, qairt: tuple[str, ...], *, inspect: bool,
                inspector: Inspector | None) -> ModelPlan:
    mc = modelcheck()
    facts = mc.ModelFacts(name=m.name, kind=m.kind, qairt=m.qairt)
    facts_from = "manifest"
    size = m.size
    if m.path is not None and m.path.exists() and inspect:
        found = inspector(m.path, board) if inspector is not None else None
        if found is not None:
            builds = [catalog.normalize_qairt(b) for b in found.qairt_builds]
            # A file compiled for several builds is unusual; prefer the declared one when present.
            q = m.qairt if m.qairt in builds else (builds[0] if builds else m.qairt)
            facts = mc.ModelFacts(name=m.name, kind=m.kind, qairt=q, soc_model=found.soc_model,
                                  dsp_arch=found.dsp_arch)
            facts_from = "inspected"
            if found.truncated:
                raise RenderError(f"model {m.name}: {m.path} is truncated ({found.size} of "
                                  f"{found.declared_size} bytes)", "delete it and run `provisioner fetch` again")
            size = size or (found.size if m.kind == "litertlm" else None)
        elif m.kind == "genie" and m.path.is_dir():
            facts = mc.genie_bundle_facts(m.name, str(m.path))
            facts = mc.ModelFacts(name=m.name, kind="genie", qairt=facts.qairt or m.qairt,
                                  soc_model=facts.soc_model, dsp_arch=facts.dsp_arch)
            facts_from = "inspected"
    msg = mc.check_message(facts, image_facts(board, qairt))
    if msg:
        what, fix = mc.split_message(msg)
        raise RenderError(what, fix)
    if m.path is not None:
        uri = f"file://{m.path}"
        local = m.path
    else:
        assert m.url is not None
        uri = f"{m.url};downloadfilename={m.filename}"
        local = None
    uri += ";name=model;subdir=model"
    if m.kind == "litertlm":
        uri += ";unpack=0"
    version = on_board.model_version_id(m.sha256, _fallback_version(m, size))
    return ModelPlan(name=m.name, kind=m.kind, recipe=model_recipe(m.name), version=version,
                     qairt=catalog.normalize_qairt(facts.qairt), file=m.filename, uri=uri, sha256=m.sha256,
                     size=size, soc_model=facts.soc_model, dsp_arch=facts.dsp_arch, facts_from=facts_from,
                     local_path=local)


def _fallback_version(m: Model, size: int | None) -> str:
    """Version directory name when the manifest gives no sha256 (deterministic, cheap).

    A local bundle folder: digest of its file names and sizes (no 5 GB hash at render time); a file:
    its size; otherwise "unpinned". bitbake still checksums local files, so content changes rebuild.
    """
    if m.path is not None and m.path.is_dir():
        listing = "".join(f"{p.relative_to(m.path).as_posix()} {p.stat().st_size}\n"
                          for p in sorted(m.path.rglob("*")) if p.is_file())
        return "files-" + hashlib.sha256(listing.encode()).hexdigest()[:12]
    return f"size{size}" if size else "unpinned"


def _qairt_checksums(version: str, dl_dir: Path | None) -> dict[str, str | None]:
    """The zip's sha256 and LICENSE.pdf md5: catalog values, else what `provisioner fetch` recorded.

    The plan reads facts, it hashes nothing: ``fetch`` writes ``<zip>.sha256`` and
    ``<zip>.license.md5`` beside the zip (:func:`provisioner.hashing.read_sidecar`). Never
    guessed: unknown values stay None and the recipe stops at do_fetch with the fix.
    """
    entry = catalog.qairt_catalog()["versions"].get(version, {})
    zip_name = catalog.qairt_url(version).rsplit("/", 1)[-1]
    zpath = dl_dir / zip_name if dl_dir else None
    sha = entry.get("sha256") or (read_sidecar(zpath, SHA256_SUFFIX) if zpath else None)
    md5 = entry.get("license_md5") or (read_sidecar(zpath, LICENSE_MD5_SUFFIX) if zpath else None)
    return {"sha256": sha, "license_md5": md5, "zip": zip_name}


def make_plan(manifest: Manifest, *, extra_includes: tuple[str, ...] = (), inspect: bool = True,
              inspector: Inspector | None = None, layer: Path = LAYER_DIR) -> Plan:
    """Decide everything for ``manifest``; raise RenderError for anything the build would refuse.

    ``inspector`` reads a local model file's facts (the image stage hands in the artifacts stage's
    ``inspect_path``, so the plan never imports a later stage); without it a Genie folder is read
    with the layer's own rule and a file's declared manifest values are used. ``inspect=False`` reads
    no model file at all (declared values only; the build's own check still runs).
    """
    rel = catalog.release(manifest.qli)
    board = manifest.board
    if board.id not in rel.machines:
        raise RenderError(f"{board.id} is not supported by {rel.id}",
                          f"{rel.id} supports: {', '.join(rel.machines)} (catalog releases.yaml)")
    includes = [("meta-qcom", f"ci/{board.kas_machine}.yml"), ("meta-qcom", DISTRO_IMAGE_INCLUDE)]
    if manifest.image.ota == "ostree":
        includes.append(("meta-qcom", SOTA_INCLUDE))
    includes += [("meta-qcom", f) for f in extra_includes]
    for _, f in includes:
        if f not in rel.meta_qcom_ci_files:
            raise RenderError(f"kas include meta-qcom/{f} does not exist in meta-qcom at {rel.id} "
                              f"({rel.lock['meta-qcom']['commit'][:12]})",
                              f"drop it; {rel.id} has: {', '.join(rel.meta_qcom_ci_files)}")

    qairt = tuple(manifest.qairt)
    for v in qairt:
        if not qairt_recipe_file(v, layer).is_file():
            raise RenderError(f"QAIRT {v} has no recipe ({qairt_recipe_file(v, layer).relative_to(layer.parent)})",
                              f"add it: a file {qairt_recipe(v)}.bb containing `require qairt-runtime.inc`, "
                              "or pin a build that has one")
    runtimes = tuple(manifest.runtimes)
    runtime_recipes: list[str] = []
    litert = None
    warnings = [str(w) for w in manifest.warnings]
    dl_dir = manifest.build.dl_dir
    if "litert_lm" in runtimes:
        if pins.LITERT_LM_QAIRT not in qairt:
            raise RenderError(f"LiteRT-LM {pins.LITERT_LM_REV} is built against QAIRT {pins.LITERT_LM_QAIRT}, "
                              f"which the manifest does not pin ({', '.join(qairt)})",
                              f"add {pins.LITERT_LM_QAIRT} to qairt, or rebuild the runtime for your build")
        tarball = litert_tarball()
        sha = read_sidecar(dl_dir / tarball, SHA256_SUFFIX) if dl_dir else None   # `litert build` wrote it
        litert = {"rev": pins.LITERT_LM_REV, "qairt": pins.LITERT_LM_QAIRT, "tarball": tarball, "sha256": sha}
        runtime_recipes.append(pins.LITERT_LM_RECIPE)
    if "genie" in runtimes:
        runtime_recipes += [f"{qairt_recipe(v)}-genie" for v in qairt]

    models = tuple(_model_plan(m, board, qairt, inspect=inspect, inspector=inspector) for m in manifest.models)
    checksums = {v: _qairt_checksums(v, dl_dir) for v in qairt}
    for v, c in checksums.items():
        if not (c["sha256"] and c["license_md5"]):
            warnings.append(f"QAIRT {v}: zip sha256/LICENSE.pdf md5 unknown -> run `provisioner fetch` before "
                            "building (the recipe stops at do_fetch until they are set)")
    for m in models:
        if m.local_path is not None:
            warnings.append(f"model {m.name} is a local path ({m.local_path}): the build container must see it "
                            "at the same path")

    img = manifest.image   # user name and ssh keys were checked by manifest.py's validation
    b = manifest.build
    cache_cfg = {"hashserve": b.hashserve, "hashserve_upstream": b.hashserve_upstream,
                 "sstate_mirrors": list(b.sstate_mirrors), "mirrors": list(b.mirrors)}
    return Plan(
        release_id=manifest.release, board=board, qli=rel, machine=board.kas_machine,
        distro=SOTA_DISTRO if manifest.image.ota == "ostree" else rel.distro,
        image=IMAGE_RECIPE, base_image=rel.base_image, includes=tuple(includes),
        repos={k: dict(v) for k, v in rel.lock.items()}, qairt=qairt,
        qairt_recipes=tuple(qairt_recipe(v) for v in qairt), qairt_checksums=checksums, runtimes=runtimes,
        runtime_recipes=tuple(runtime_recipes), litert=litert, models=models, variant=img.variant,
        download_mode=img.download_mode, login_policy=img.root_login, ssh_keys=tuple(img.ssh_authorized_keys),
        memlock=img.memlock, inference_user=img.inference_user, extra_packages=tuple(img.extra_packages),
        cache=cache_cfg, warnings=tuple(warnings), ota=manifest.image.ota,
    )


def release_json_text(plan: Plan) -> str:
    """One-line JSON for the EDGE_LLM_RELEASE_JSON variable (bitbake single-quoted value)."""
    return json.dumps(plan.release_json(), sort_keys=True, separators=(",", ":"))
