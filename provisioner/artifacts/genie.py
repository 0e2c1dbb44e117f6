"""Read a Genie bundle folder (Qualcomm AI Hub export) and say whether it is complete.

A bundle is only usable as a whole: every file ``genie_config.json`` names - the context
binaries of every engine, LoRA adapter bins, an embedding LUT, a CPU model-bin, the tokenizer
and the HTP extension config - must be inside the folder, and the extension config's
``soc_model``/``dsp_arch`` must name the board's NPU. A generic ``soc_model: 0`` compile loads
without any error and prints garbage after the first tokens, so it is the one thing this reader
refuses loudest.

The config schema followed here is Genie's own validator and the QAIRT SDK example configs
(public copy: github.com/kyungraekim/qnn @ be158f55, ``examples/Genie/Genie/src/Dialog.cpp`` and
``examples/Genie/configs/``): ``dialog.engine`` is one object, or a list of two engines with a
``role`` for ``kv-share`` (primary/secondary), ``spd`` and ``eaglet`` (target/draft); a backend
``type`` is ``QnnHtp``, ``QnnGpu`` or ``QnnGenAiTransformer`` (Genie's CPU backend); a model is
``binary`` (``ctx-bins``) or ``library`` (``model-bin``), either with ``lora.adapters[].bin-sections``
(or a v1 ``path``); ``dialog.embedding.lut-path`` names an embedding LUT.

Every name in the config is resolved inside the bundle without following anything out of it:
an absolute path, ``..`` or a symlink leaving the folder is reported and never stat-ed or read.
"""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePath
from typing import Any

from provisioner import catalog
from provisioner.artifacts.litertlm import BUILD_ID_RE, CountingReader
from provisioner.errors import ArtifactError, UserError

CONFIG = "genie_config.json"
EXT_CONFIG = "htp_backend_ext_config.json"
TOOL_VERSIONS = "tool-versions.yaml"
PART_RE = re.compile(r"_part_(\d+)_of_(\d+)\.bin$")
CTX_WINDOW = 64 * 1024
MAX_JSON = 4 << 20  # a Genie config with 10 LoRA adapters is ~6 KB; anything near this is not a config
MAX_TOOL_VERSIONS = 64 << 10
MAX_LINKS = 40  # symlinks followed while resolving one name (the kernel's own limit)

# Genie backend type -> what it runs on (Dialog.cpp translateEngineConfig: QnnHtp -> qnn-htp,
# QnnGenAiTransformer -> qnn-cpu, QnnGpu -> qnn-gpu).
PROCESSORS = {"QnnHtp": "NPU", "QnnGpu": "GPU", "QnnGenAiTransformer": "CPU"}
# Dialog.cpp validateDialogConfig; these three need a list of engines (validateMultiEngineConfig).
DIALOG_TYPES = ("basic", "kv-share", "ssd-q1", "lade", "spd", "multistream", "eaglet")
MULTI_ENGINE = ("kv-share", "spd", "eaglet")


@dataclass
class GenieFile:
    name: str
    role: str  # ctx-bin | model-bin | lora-adapter | embedding-lut | draft-token-map | tokenizer | extensions
    #            | config | other
    size: int | None  # None = missing
    referenced: bool
    qairt_build: str | None = None
    named_at: str | None = None  # where genie_config.json names it, e.g. dialog.engine[1].model.binary.ctx-bins[0]


@dataclass
class GenieEngine:
    """One ``dialog.engine`` entry: what it runs on and which files it needs."""

    where: str
    role: str | None
    backend: str | None
    processor: str | None  # NPU | GPU | CPU | None (unknown backend type)
    model_type: str | None
    extensions: str | None = None  # the HTP extension config it names (backend.extensions)
    files: list[str] = field(default_factory=list)


@dataclass
class GenieInfo:
    path: Path
    files: list[GenieFile]
    ctx_bins: list[str]
    context_size: int | None
    soc_model: int | None
    dsp_arch: str | None
    perf_profile: str | None
    qairt_raw: str | None
    qairt: str | None
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    bytes_read: int = 0
    dialog_type: str | None = None
    n_vocab: int | None = None
    sampler: dict[str, Any] = field(default_factory=dict)
    engines: list[GenieEngine] = field(default_factory=list)
    qairt_flavour: str | None = None

    @property
    def size(self) -> int:
        return sum(f.size or 0 for f in self.files)

    @property
    def qairt_builds(self) -> list[str]:
        builds = {f.qairt_build for f in self.files if f.qairt_build}
        if self.qairt:
            builds.add(self.qairt)
        return sorted(builds)

    @property
    def npu_only(self) -> bool | None:
        """True when every engine runs on the HTP; None when the config names no readable engine."""
        if not self.engines:
            return None
        return all(e.processor == "NPU" for e in self.engines)

    @property
    def backend(self) -> str:
        """``QnnHtp (NPU)``, or ``QnnHtp (NPU) + QnnGenAiTransformer (CPU)`` for a kv-share pair."""
        seen: list[str] = []
        for e in self.engines:
            text = f"{e.backend or '?'} ({e.processor or 'unknown'})"
            if text not in seen:
                seen.append(text)
        return " + ".join(seen)

    def as_dict(self) -> dict[str, Any]:
        return {
            "files": [f.__dict__ for f in self.files],
            "ctx_bins": self.ctx_bins,
            "perf_profile": self.perf_profile,
            "tool_versions_qairt": self.qairt_raw,
            "qairt_flavour": self.qairt_flavour,
            "dialog_type": self.dialog_type,
            "n_vocab": self.n_vocab,
            "sampler": self.sampler,
            "backend": self.backend,
            "engines": [e.__dict__ for e in self.engines],
            "bytes_read": self.bytes_read,
        }


def confined(root: Path, name: str) -> Path | None:
    """``root/name`` with symlinks resolved, or None when it leaves ``root`` (which must be resolved).

    Resolution walks one component at a time and only ever ``lstat``s paths inside ``root``: an
    absolute name, a ``..`` above the root or a symlink whose target is outside is refused before
    anything outside is touched (``Path.resolve`` would lstat the outside target).
    """
    if not name or "\x00" in name or PurePath(name).is_absolute():
        return None
    pending = list(PurePath(name).parts)
    done: list[str] = []
    links = 0
    while pending:
        part = pending.pop(0)
        if part in ("", "."):
            continue
        if part == "..":
            if not done:
                return None
            done.pop()
            continue
        here = root.joinpath(*done, part)
        try:
            st = os.lstat(here)
        except OSError:  # does not exist: the rest is lexical (the caller reports it missing)
            done.append(part)
            continue
        if not stat.S_ISLNK(st.st_mode):
            done.append(part)
            continue
        links += 1
        if links > MAX_LINKS:
            return None
        target = os.readlink(here)
        if os.path.isabs(target):
            rel = os.path.relpath(os.path.normpath(target), root)
            if rel == ".." or rel.startswith(".." + os.sep):
                return None
            done = []
            pending = list(PurePath(rel).parts) + pending
        else:
            pending = list(PurePath(target).parts) + pending
    return root.joinpath(*done)


def bundle_files(root: Path) -> Iterator[tuple[str, Path | None]]:
    """Every file of the bundle as ``(relative name, path)``; path is None for a symlink leaving it.

    Symlinked folders are not entered (no loops, nothing outside); nothing here follows a link
    before :func:`confined` has said where it ends.
    """
    stack = [""]
    while stack:
        rel_dir = stack.pop()
        try:
            entries = sorted(os.scandir(root / rel_dir), key=lambda e: e.name)
        except OSError:
            continue
        for e in entries:
            rel = f"{rel_dir}/{e.name}" if rel_dir else e.name
            if e.is_dir(follow_symlinks=False):
                stack.append(rel)
            elif e.is_symlink():
                target = confined(root, rel)
                if target is None:
                    yield rel, None
                elif target.is_file():
                    yield rel, target
            elif e.is_file(follow_symlinks=False):
                yield rel, Path(e.path)


def _read_text(path: Path, shown: str, limit: int) -> str:
    try:
        with open(path, "rb") as fh:
            data = fh.read(limit + 1)
    except OSError as exc:
        raise ArtifactError(f"{shown}: unreadable ({exc.strerror})", "re-copy the bundle") from exc
    if len(data) > limit:
        raise ArtifactError(f"{shown}: larger than {limit:,} bytes, not a Genie bundle file",
                            "re-copy the bundle from the export")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ArtifactError(f"{shown}: not UTF-8 text", "re-export or re-copy the bundle") from exc


def _load_json(path: Path, shown: str) -> Any:  # noqa: ANN401 - any JSON value
    text = _read_text(path, shown, MAX_JSON)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ArtifactError(f"{shown}: unreadable JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})",
                            "re-export or re-copy the bundle") from exc


def _get(data: Any, *keys: str) -> Any:  # noqa: ANN401 - any JSON value
    for k in keys:
        if not isinstance(data, dict):
            return None
        data = data.get(k)
    return data


def _engines(dialog: dict[str, Any], problems: list[str]) -> list[tuple[str, dict[str, Any]]]:
    """``dialog.engine`` as ``(location, engine)`` pairs: one object, or a list (kv-share, spd, eaglet)."""
    raw = dialog.get("engine")
    kind = dialog.get("type", "basic")
    if isinstance(raw, dict):
        if kind in MULTI_ENGINE:
            problems.append(f"{CONFIG}: dialog.type '{kind}' needs a list of two engines in dialog.engine "
                            "(Genie refuses one) -> re-export the bundle")
        return [("dialog.engine", raw)]
    if isinstance(raw, list) and raw:
        pairs = [(f"dialog.engine[{i}]", e) for i, e in enumerate(raw)]
        for where, e in pairs:
            if not isinstance(e, dict):
                problems.append(f"{CONFIG}: {where} is not an object -> re-export the bundle")
        return [(w, e) for w, e in pairs if isinstance(e, dict)]
    problems.append(f"{CONFIG}: dialog.engine is missing or empty -> re-export the bundle")
    return []


def _lora_refs(lora: Any, where: str) -> Iterator[tuple[Any, str]]:  # noqa: ANN401 - any JSON value
    """LoRA adapter files: ``adapters[].bin-sections`` (v2/v3; "" = no section for that ctx-bin),
    a v1 ``adapters[].path``, and ``groups[].quant-bin-sections``."""
    if not isinstance(lora, dict):
        return
    for j, a in enumerate(lora.get("adapters") or []):
        if not isinstance(a, dict):
            continue
        for k, name in enumerate(a.get("bin-sections") or []):
            if name != "":
                yield name, f"{where}.lora.adapters[{j}].bin-sections[{k}]"
        if "path" in a:
            yield a["path"], f"{where}.lora.adapters[{j}].path"
    for j, g in enumerate(lora.get("groups") or []):
        if isinstance(g, dict):
            for k, name in enumerate(g.get("quant-bin-sections") or []):
                if name != "":
                    yield name, f"{where}.lora.groups[{j}].quant-bin-sections[{k}]"


def _engine_refs(where: str, e: dict[str, Any], problems: list[str]) -> tuple[GenieEngine, list[tuple[Any, str, str]]]:
    """Read one engine: backend, model type and every file it names as ``(name, role, location)``."""
    backend = e.get("backend") if isinstance(e.get("backend"), dict) else {}
    btype = backend.get("type")
    processor = PROCESSORS.get(btype) if isinstance(btype, str) else None
    if processor is None:
        problems.append(f"{CONFIG}: {where}.backend.type {json.dumps(btype)} is not a Genie backend "
                        f"({', '.join(PROCESSORS)}) -> fix the config or re-export the bundle")
    model = e.get("model") if isinstance(e.get("model"), dict) else {}
    mtype = model.get("type")
    refs: list[tuple[Any, str, str]] = []
    if "extensions" in backend:
        refs.append((backend["extensions"], "extensions", f"{where}.backend.extensions"))
    if mtype == "binary":
        binary = model.get("binary")
        bins = _get(model, "binary", "ctx-bins")
        if not isinstance(bins, list) or not bins:
            problems.append(f"{CONFIG}: {where}.model.binary.ctx-bins is empty -> re-export the bundle")
            bins = []
        refs += [(n, "ctx-bin", f"{where}.model.binary.ctx-bins[{i}]") for i, n in enumerate(bins)]
        refs += [(n, "lora-adapter", w) for n, w in _lora_refs(_get(binary, "lora"), f"{where}.model.binary")]
    elif mtype == "library":
        refs.append((_get(model, "library", "model-bin"), "model-bin", f"{where}.model.library.model-bin"))
        refs += [(n, "lora-adapter", w) for n, w in _lora_refs(_get(model, "library", "lora"),
                                                                f"{where}.model.library")]
    else:
        problems.append(f"{CONFIG}: {where}.model.type {json.dumps(mtype)} is neither 'binary' nor 'library' "
                        "-> re-export the bundle")
    if "draft-token-map" in model:
        refs.append((model["draft-token-map"], "draft-token-map", f"{where}.model.draft-token-map"))
    role = e.get("role")
    engine = GenieEngine(where=where, role=str(role) if role is not None else None,
                         backend=btype if isinstance(btype, str) else None, processor=processor,
                         model_type=mtype if isinstance(mtype, str) else None,
                         extensions=backend["extensions"] if isinstance(backend.get("extensions"), str) else None)
    return engine, refs


def _tool_versions(path: Path, shown: str) -> str | None:
    """The ``qairt`` entry of tool-versions.yaml, read with anchors and aliases refused (an alias
    bomb of a few KB would otherwise expand to 10^9 nodes)."""
    from provisioner.yamlsafe import load_yaml  # only bundles need YAML: keeps it out of `inspect FILE.litertlm`

    text = _read_text(path, shown, MAX_TOOL_VERSIONS)
    try:
        data = load_yaml(text, shown)
    except UserError as exc:
        raise ArtifactError(exc.message, exc.hint or "re-copy the bundle") from None
    if isinstance(data, dict) and data.get("qairt") is not None:
        return str(data["qairt"])
    return None


def read_genie(path: str | Path) -> GenieInfo:
    """Inventory a Genie bundle folder; problems that stop it from running go in ``problems``.

    Raises :class:`ArtifactError` only when the folder is not a Genie bundle at all (or one of its
    small text files cannot be parsed).
    """
    d = Path(path)
    root = d.resolve()
    cfg_path = confined(root, CONFIG)
    if cfg_path is None:
        raise ArtifactError(f"{d / CONFIG}: a symlink out of the bundle; not read",
                            "copy the real genie_config.json into the bundle folder")
    if not cfg_path.is_file():
        raise ArtifactError(f"{d}: not a Genie bundle ({CONFIG} missing)",
                            "pass the whole exported folder (<model>-genie-w4a16-<chipset>/), not single files")
    cfg = _load_json(cfg_path, str(d / CONFIG))
    dialog = cfg.get("dialog") if isinstance(cfg, dict) else None
    if not isinstance(dialog, dict):
        raise ArtifactError(f"{d / CONFIG}: no 'dialog' object", "this is not a genie-t2t-run dialog config")

    problems: list[str] = []
    warnings: list[str] = []
    files: dict[str, GenieFile] = {}
    where_is: dict[str, Path] = {}  # name -> confined path, for every referenced file inside the bundle

    dialog_type = dialog.get("type", "basic")
    if dialog_type not in DIALOG_TYPES:
        problems.append(f"{CONFIG}: dialog.type {json.dumps(dialog_type)} is not a Genie dialog type "
                        f"({', '.join(DIALOG_TYPES)}) -> fix the config")

    refs: list[tuple[Any, str, str]] = [(_get(dialog, "tokenizer", "path"), "tokenizer", "dialog.tokenizer.path")]
    embedding = dialog.get("embedding")
    if isinstance(embedding, dict) and ("lut-path" in embedding or embedding.get("type") == "lut"):
        refs.append((embedding.get("lut-path"), "embedding-lut", "dialog.embedding.lut-path"))
    engines: list[GenieEngine] = []
    for where, e in _engines(dialog, problems):
        engine, engine_refs = _engine_refs(where, e, problems)
        engines.append(engine)
        refs += engine_refs
        engine.files = [str(n) for n, _, _ in engine_refs if isinstance(n, str)]

    for name, role, where in refs:
        if name is None:
            problems.append(f"{CONFIG}: {where} is missing -> re-export the bundle")
            continue
        if not isinstance(name, str) or not name:
            problems.append(f"{CONFIG}: {where} {json.dumps(name)} is not a file name -> re-export the bundle")
            continue
        p = confined(root, name)
        if p is None:
            problems.append(f"{CONFIG}: {where} '{name}' points outside the bundle (absolute path, '..' or a "
                            "symlink leaving the folder); it was not read -> name files relative to the bundle "
                            "and copy them into it")
            continue
        if name not in files:
            where_is[name] = p
            files[name] = GenieFile(name=name, role=role, size=p.stat().st_size if p.is_file() else None,
                                    referenced=True, named_at=where)
    files[CONFIG] = GenieFile(CONFIG, "config", cfg_path.stat().st_size, True)

    for rel, p in bundle_files(root):
        if rel in files:
            continue
        if p is None:
            warnings.append(f"'{rel}' is a symlink out of the bundle; not read -> copy the file into the bundle")
            continue
        files[rel] = GenieFile(rel, "ctx-bin" if PART_RE.search(rel) else "other", p.stat().st_size, False)

    for f in files.values():
        if f.referenced and f.size is None and f.role != "extensions":  # reported below with its diagnosis
            problems.append(f"missing {f.role} '{f.name}' (named at {f.named_at} in {CONFIG}) -> copy the whole "
                            "exported folder; never copy only some parts")
        elif f.role in ("ctx-bin", "model-bin", "lora-adapter") and f.size == 0:
            problems.append(f"'{f.name}' is empty -> re-copy the bundle")
    # part numbering, per engine: _part_i_of_N must cover 1..N
    for engine in engines:
        bins = [n for n in engine.files if (f := files.get(n)) is not None and f.role == "ctx-bin"]
        numbered = [m for n in bins if (m := PART_RE.search(n))]
        totals = {int(m.group(2)) for m in numbered}
        if len(totals) == 1:
            n = totals.pop()
            gaps = sorted(set(range(1, n + 1)) - {int(m.group(1)) for m in numbered})
            if gaps:
                problems.append(f"{CONFIG} {engine.where} lists {n - len(gaps)} of {n} parts (missing part "
                                f"{', '.join(map(str, gaps))}) -> re-export the bundle")
    for f in files.values():
        if f.role == "ctx-bin" and not f.referenced:
            warnings.append(f"'{f.name}' is in the folder but not in {CONFIG} ctx-bins")

    soc_model, dsp_arch, perf = _htp_device(root, d, engines, files, problems, warnings)

    qairt_raw = qairt = flavour = None
    tv = confined(root, TOOL_VERSIONS)
    if tv is not None and tv.is_file():
        qairt_raw = _tool_versions(tv, str(d / TOOL_VERSIONS))
        if qairt_raw is not None:
            qairt, flavour = catalog.split_qairt(qairt_raw)
    else:
        warnings.append(f"no {TOOL_VERSIONS}: QAIRT build taken from the context binaries")

    # the build id inside each HTP context binary (first bytes only): catches mixed exports
    bytes_read = 0
    htp_bins = [n for e in engines if e.processor == "NPU" for n in e.files]
    for name in dict.fromkeys(htp_bins):
        f = files.get(name)
        if f is not None and f.role == "ctx-bin" and f.size:
            with CountingReader(where_is[name]) as r:
                m = BUILD_ID_RE.search(r.read_at(0, CTX_WINDOW))
                bytes_read += r.bytes_read
            if m:
                f.qairt_build = catalog.normalize_qairt(m.group(1).decode())
    inner = {f.qairt_build for f in files.values() if f.qairt_build}
    if len(inner) > 1:
        problems.append(f"context binaries come from different QAIRT builds ({', '.join(sorted(inner))}) "
                        "-> re-export the whole bundle with one QAIRT")
    elif inner and qairt and inner != {qairt}:
        problems.append(f"{TOOL_VERSIONS} says QAIRT {qairt} but the context binaries were built with "
                        f"{inner.pop()} -> re-export the bundle")
    if qairt is None and inner:
        qairt = next(iter(inner))

    context = _get(dialog, "context", "size")
    n_vocab = _get(dialog, "context", "n-vocab")
    sampler = dialog.get("sampler") if isinstance(dialog.get("sampler"), dict) else {}
    ctx_bins = [n for e in engines for n in e.files if files.get(n) and files[n].role == "ctx-bin"]
    return GenieInfo(path=d, files=list(files.values()), ctx_bins=list(dict.fromkeys(ctx_bins)),
                     context_size=context if isinstance(context, int) else None, soc_model=soc_model,
                     dsp_arch=str(dsp_arch) if dsp_arch else None, perf_profile=perf, qairt_raw=qairt_raw,
                     qairt=qairt, problems=problems, warnings=warnings, bytes_read=bytes_read,
                     dialog_type=str(dialog_type), n_vocab=n_vocab if isinstance(n_vocab, int) else None,
                     sampler={k: v for k, v in sampler.items() if k != "version"}, engines=engines,
                     qairt_flavour=flavour)


def _htp_device(root: Path, d: Path, engines: list[GenieEngine], files: dict[str, GenieFile],
                problems: list[str], warnings: list[str]) -> tuple[int | None, str | None, str | None]:
    """soc_model, dsp_arch and perf_profile from the HTP extension config(s) of the NPU engines.

    Only HTP engines need one; a CPU or GPU engine has no Hexagon device to configure.
    """
    htp = [e for e in engines if e.processor == "NPU"]
    if not htp:
        return None, None, None
    names: list[str] = []
    for e in htp:
        ext = e.extensions
        if ext is None:
            problems.append(f"{CONFIG}: {e.where} names no HTP extensions config -> add "
                            f"\"extensions\": \"{EXT_CONFIG}\" to {e.where}.backend")
            ext = EXT_CONFIG if EXT_CONFIG in files else None  # still read what the export wrote
        if ext is not None and ext not in names:
            names.append(ext)
    devices: list[tuple[int | None, str | None, str | None]] = []
    for name in names:
        p = confined(root, name)
        if p is None:  # already reported where the config names it
            continue
        if not p.is_file():
            problems.append(f"missing {name}: the HTP device (soc_model/dsp_arch) is not configured, "
                            "the context binaries may run generic and print garbage -> re-export with AI Hub "
                            "device attributes, or write it with the board's soc_model and dsp_arch")
            continue
        text = _read_text(p, str(d / name), MAX_JSON)
        if "<TODO>" in text:  # ai-hub-apps tutorials/llm_on_genie/configs/htp/htp_backend_ext_config.json.template
            problems.append(f"{name}: still the ai-hub-apps template (<TODO> for soc_model/dsp_arch) -> fill in "
                            "the board's soc_model and dsp_arch")
            continue
        ext = _load_json(p, str(d / name))
        devs = ext.get("devices") if isinstance(ext, dict) else None
        dev = devs[0] if isinstance(devs, list) and devs and isinstance(devs[0], dict) else {}
        soc_model = dev["soc_model"] if isinstance(dev.get("soc_model"), int) else None
        dsp_arch = str(dev["dsp_arch"]) if dev.get("dsp_arch") else None
        cores = dev.get("cores") or []
        perf = cores[0].get("perf_profile") if isinstance(cores, list) and cores and isinstance(cores[0], dict) \
            else None
        if soc_model is None:
            problems.append(f"{name}: devices[0].soc_model not set -> re-export for the board's device")
        elif soc_model == 0:
            problems.append(f"{name}: soc_model 0 (generic compile): loads without error but produces "
                            "garbage after the first tokens -> re-export with the board's device "
                            "so soc_model/dsp_arch are set")
        if perf is not None and perf != "burst":
            warnings.append(f"{name}: perf_profile '{perf}' (LLM decoding wants 'burst')")
        devices.append((soc_model, dsp_arch, perf))
    if len({(s, a) for s, a, _ in devices}) > 1:
        problems.append(f"the HTP extension configs name different devices "
                        f"({', '.join(f'soc_model {s}/{a}' for s, a, _ in devices)}) -> re-export the bundle")
    return devices[0] if devices else (None, None, None)
