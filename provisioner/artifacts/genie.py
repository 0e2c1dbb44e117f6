"""Read a Genie bundle folder (Qualcomm AI Hub export) and say whether it is complete.

A bundle is only usable as a whole: every ``ctx-bins`` entry, the tokenizer and the HTP
extension config named by ``genie_config.json`` must be next to it, and the extension config's
``soc_model``/``dsp_arch`` must name the board's NPU. A generic ``soc_model: 0`` compile loads
without any error and prints garbage after the first tokens (seed 002), so it is the one thing
this reader refuses loudest.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from provisioner import catalog
from provisioner.artifacts.litertlm import BUILD_ID_RE, CountingReader
from provisioner.errors import ArtifactError

CONFIG = "genie_config.json"
EXT_CONFIG = "htp_backend_ext_config.json"
TOOL_VERSIONS = "tool-versions.yaml"
PART_RE = re.compile(r"_part_(\d+)_of_(\d+)\.bin$")
CTX_WINDOW = 64 * 1024


@dataclass
class GenieFile:
    name: str
    role: str  # ctx-bin | tokenizer | extensions | config | other
    size: int | None  # None = missing
    referenced: bool
    qairt_build: str | None = None


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

    @property
    def size(self) -> int:
        return sum(f.size or 0 for f in self.files)

    @property
    def qairt_builds(self) -> list[str]:
        builds = {f.qairt_build for f in self.files if f.qairt_build}
        if self.qairt:
            builds.add(self.qairt)
        return sorted(builds)

    def as_dict(self) -> dict[str, Any]:
        return {
            "files": [f.__dict__ for f in self.files],
            "ctx_bins": self.ctx_bins,
            "perf_profile": self.perf_profile,
            "tool_versions_qairt": self.qairt_raw,
            "bytes_read": self.bytes_read,
        }


def _load_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ArtifactError(f"{path}: unreadable JSON ({exc})", "re-export or re-copy the bundle") from exc


def _get(data: Any, *keys: str) -> Any:
    for k in keys:
        if not isinstance(data, dict):
            return None
        data = data.get(k)
    return data


def read_genie(path: str | Path) -> GenieInfo:
    """Inventory a Genie bundle folder; problems that stop it from running go in ``problems``.

    Raises :class:`ArtifactError` only when the folder is not a Genie bundle at all.
    """
    d = Path(path)
    cfg_path = d / CONFIG
    if not cfg_path.is_file():
        raise ArtifactError(f"{d}: not a Genie bundle ({CONFIG} missing)",
                            "pass the whole exported folder (<model>-genie-w4a16-<chipset>/), not single files")
    cfg = _load_json(cfg_path)
    dialog = cfg.get("dialog") if isinstance(cfg, dict) else None
    if not isinstance(dialog, dict):
        raise ArtifactError(f"{cfg_path}: no 'dialog' object", "this is not a genie-t2t-run dialog config")

    problems: list[str] = []
    warnings: list[str] = []
    files: dict[str, GenieFile] = {}

    def ref(name: str | None, role: str) -> None:
        if not name:
            return
        p = d / name
        files[name] = GenieFile(name=name, role=role, size=p.stat().st_size if p.is_file() else None, referenced=True)

    ctx_bins = _get(dialog, "engine", "model", "binary", "ctx-bins") or []
    if not isinstance(ctx_bins, list) or not ctx_bins:
        problems.append(f"{CONFIG}: dialog.engine.model.binary.ctx-bins is empty -> re-export the bundle")
        ctx_bins = []
    for name in ctx_bins:
        ref(str(name), "ctx-bin")
    tokenizer = _get(dialog, "tokenizer", "path")
    ref(tokenizer, "tokenizer")
    ext_name = _get(dialog, "engine", "backend", "extensions")
    ref(ext_name, "extensions")
    files[CONFIG] = GenieFile(CONFIG, "config", cfg_path.stat().st_size, True)

    for p in sorted(d.iterdir()):
        if p.is_file() and p.name not in files:
            files[p.name] = GenieFile(p.name, "ctx-bin" if PART_RE.search(p.name) else "other", p.stat().st_size,
                                      False)

    for f in files.values():
        if f.referenced and f.size is None and f.role != "extensions":  # reported below with its diagnosis
            problems.append(f"missing {f.role} '{f.name}' (named in {CONFIG}) -> copy the whole exported folder; "
                            "never copy only some parts")
        elif f.role == "ctx-bin" and f.size == 0:
            problems.append(f"'{f.name}' is empty -> re-copy the bundle")
    # part numbering: _part_i_of_N must cover 1..N
    totals = {int(m.group(2)) for n in ctx_bins if (m := PART_RE.search(str(n)))}
    if len(totals) == 1:
        n = totals.pop()
        have = {int(m.group(1)) for name in ctx_bins if (m := PART_RE.search(str(name)))}
        gaps = sorted(set(range(1, n + 1)) - have)
        if gaps:
            problems.append(f"{CONFIG} lists {len(have)} of {n} parts (missing part {', '.join(map(str, gaps))}) "
                            "-> re-export the bundle")
    for f in files.values():
        if f.role == "ctx-bin" and not f.referenced:
            warnings.append(f"'{f.name}' is in the folder but not in {CONFIG} ctx-bins")

    soc_model = dsp_arch = perf = None
    ext_path = d / (ext_name or EXT_CONFIG)
    if not ext_name:
        problems.append(f"{CONFIG} names no HTP extensions config -> add "
                        f"\"extensions\": \"{EXT_CONFIG}\" to dialog.engine.backend")
    if ext_path.is_file():
        ext = _load_json(ext_path)
        devices = ext.get("devices") if isinstance(ext, dict) else None
        dev = devices[0] if isinstance(devices, list) and devices and isinstance(devices[0], dict) else {}
        if isinstance(dev.get("soc_model"), int):
            soc_model = dev["soc_model"]
        dsp_arch = dev.get("dsp_arch")
        cores = dev.get("cores") or []
        if cores and isinstance(cores[0], dict):
            perf = cores[0].get("perf_profile")
        if soc_model is None:
            problems.append(f"{ext_path.name}: devices[0].soc_model not set -> re-export for the board's device")
        elif soc_model == 0:
            problems.append(f"{ext_path.name}: soc_model 0 (generic compile): loads without error but produces "
                            "garbage after the first tokens (seed 002) -> re-export with the board's device "
                            "so soc_model/dsp_arch are set")
        if perf is not None and perf != "burst":
            warnings.append(f"{ext_path.name}: perf_profile '{perf}' (LLM decoding wants 'burst')")
    elif ext_name:
        problems.append(f"missing {ext_path.name}: the HTP device (soc_model/dsp_arch) is not configured, "
                        "the context binaries may run generic and print garbage -> re-export with AI Hub device "
                        "attributes, or write it with the board's soc_model and dsp_arch")

    qairt_raw = qairt = None
    tv = d / TOOL_VERSIONS
    if tv.is_file():
        import yaml  # only bundles need it: keeps yaml out of `inspect FILE.litertlm` start-up

        try:
            data = yaml.safe_load(tv.read_text(encoding="utf-8")) or {}
        except yaml.YAMLError as exc:
            raise ArtifactError(f"{tv}: YAML syntax error", "re-copy the bundle") from exc
        if isinstance(data, dict) and data.get("qairt") is not None:
            qairt_raw = str(data["qairt"])
            qairt = catalog.normalize_qairt(qairt_raw)
    else:
        warnings.append(f"no {TOOL_VERSIONS}: QAIRT build taken from the context binaries")

    # the build id inside each context binary (first bytes only): catches mixed exports
    bytes_read = 0
    for name in ctx_bins:
        f = files[str(name)]
        if f.size:
            with CountingReader(d / f.name) as r:
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
    return GenieInfo(path=d, files=list(files.values()), ctx_bins=[str(n) for n in ctx_bins],
                     context_size=int(context) if isinstance(context, int) else None, soc_model=soc_model,
                     dsp_arch=str(dsp_arch) if dsp_arch else None, perf_profile=perf, qairt_raw=qairt_raw,
                     qairt=qairt, problems=problems, warnings=warnings, bytes_read=bytes_read)
