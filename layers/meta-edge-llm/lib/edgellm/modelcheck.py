"""The one rule deciding whether a model can run in an image: exact QAIRT build, right SoC.

A QNN context binary is compiled against one QAIRT build and (for Genie bundles) one QNN
``soc_model``/``dsp_arch``. Host libraries, DSP skel and context binaries must all come from
that build, so an image that carries a different QAIRT - or targets another SoC - produces a
model that fails to load, or worse, prints garbage after a token or two.

This module is shared, byte for byte, by two callers so they can never disagree:

* the layer's ``edge-llm-model.bbclass`` (imported through ``addpylib`` in ``conf/layer.conf``),
  which FAILS the build, and
* ``provisioner/image/render.py`` (imported by file path), which refuses to render.

Both print :func:`check_message`'s text. Standard library only: bitbake imports it.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass

_BUILD_RE = re.compile(r"^[vV]?(\d+\.\d+\.\d+)\.(\d{6})\d*$")


def normalize_qairt(raw: str | None) -> str:
    """``v2.45.0.260326154327`` -> ``2.45.0.260326`` (the 6-digit build id the runtime needs)."""
    text = str(raw or "").strip()
    m = _BUILD_RE.match(text)
    return f"{m.group(1)}.{m.group(2)}" if m else text.lstrip("vV")


@dataclass(frozen=True)
class ModelFacts:
    """What a model was compiled for. Empty/None fields are unknown and not checked."""

    name: str
    kind: str                      # "litertlm" | "genie"
    qairt: str = ""                # normalized QAIRT build id
    soc_model: int | None = None   # QNN soc_model (Genie bundles)
    dsp_arch: str | None = None    # "v73", "v75" (Genie bundles)


@dataclass(frozen=True)
class ImageFacts:
    """What an image provides: its MACHINE, the QAIRT builds it carries, the SoC's NPU identity."""

    machine: str
    qairt_versions: tuple[str, ...]
    soc_model: int | None
    hexagon_arch: str


def problems(model: ModelFacts, image: ImageFacts) -> list[str]:
    """Every reason ``model`` cannot run in ``image`` (empty list = fine)."""
    out: list[str] = []
    qairt = normalize_qairt(model.qairt)
    if not qairt:
        out.append(f"model {model.name}: its QAIRT build is unknown")
    elif qairt not in image.qairt_versions:
        carried = ", ".join(image.qairt_versions) or "none"
        out.append(f"model {model.name} needs QAIRT {qairt} but the {image.machine} image carries {carried}")
    if model.soc_model is not None and image.soc_model is not None and int(model.soc_model) != int(image.soc_model):
        out.append(f"model {model.name} is compiled for soc_model {model.soc_model} but {image.machine} "
                   f"is soc_model {image.soc_model}")
    if model.dsp_arch and model.dsp_arch.lower() != image.hexagon_arch.lower():
        out.append(f"model {model.name} is compiled for dsp_arch {model.dsp_arch} but {image.machine} "
                   f"has Hexagon {image.hexagon_arch}")
    return out


HINT = ("pin the model's exact QAIRT build in the manifest's qairt list, or use the model export for "
        "this board's SoC (read it with `provisioner inspect MODEL`)")


def check_message(model: ModelFacts, image: ImageFacts) -> str | None:
    """One line (problems joined by '; ', then ' -> ' and the fix), or None when the model fits."""
    found = problems(model, image)
    if not found:
        return None
    return f"{'; '.join(found)} -> {HINT}"


def split_message(message: str) -> tuple[str, str]:
    """Split :func:`check_message` output into (what is wrong, what to do) for error classes."""
    what, _, fix = message.partition(" -> ")
    return what, fix


def _int_or_none(value: object) -> int | None:
    try:
        return int(str(value))
    except (TypeError, ValueError):
        return None


def genie_bundle_facts(name: str, bundle_dir: str) -> ModelFacts:
    """Read a Genie bundle's QAIRT build and HTP device target (small text files only).

    ``tool-versions.yaml`` carries ``qairt: 2.45.0.260326154327``; ``htp_backend_ext_config.json``
    carries ``devices[0].soc_model`` and ``devices[0].dsp_arch``. Missing files leave fields unknown.
    """
    qairt = ""
    tv = os.path.join(bundle_dir, "tool-versions.yaml")
    if os.path.isfile(tv):
        with open(tv, encoding="utf-8") as f:
            for line in f:
                m = re.match(r"^\s*qairt\s*:\s*['\"]?([0-9.vV]+)", line)
                if m:
                    qairt = normalize_qairt(m.group(1))
                    break
    soc_model = None
    dsp_arch = None
    ext = os.path.join(bundle_dir, "htp_backend_ext_config.json")
    if os.path.isfile(ext):
        with open(ext, encoding="utf-8") as f:
            data = json.load(f)
        devices = data.get("devices") or [{}]
        dev = devices[0] if isinstance(devices, list) and devices else {}
        soc_model = _int_or_none(dev.get("soc_model"))
        arch = dev.get("dsp_arch")
        dsp_arch = str(arch) if arch else None
    return ModelFacts(name=name, kind="genie", qairt=qairt, soc_model=soc_model, dsp_arch=dsp_arch)


_CTX_BUILD_RE = re.compile(rb"v(\d\.\d{1,2}\.\d{1,2}\.\d{6})")


def litertlm_qairt_builds(path: str, chunk: int = 8 << 20) -> list[str]:
    """QAIRT build ids in a ``.litertlm`` (the ``v2.44.0.260225...`` text of its QNN context binaries).

    A streaming scan with overlap, for the build step (which reads the whole file anyway to hash
    it); the provisioner's inspector reads only the header and op table instead.
    """
    found: set[str] = set()
    tail = b""
    with open(path, "rb") as f:
        while True:
            block = f.read(chunk)
            if not block:
                break
            data = tail + block
            found.update(m.group(1).decode() for m in _CTX_BUILD_RE.finditer(data))
            tail = data[-32:]
    return sorted(found)


def facts_from_vars(getvar) -> tuple[ModelFacts, ImageFacts]:
    """Build both fact sets from bitbake-style variables (``getvar(name) -> str | None``).

    The variable names are the layer's documented interface (README.md).
    """
    model = ModelFacts(
        name=getvar("EDGE_LLM_MODEL_NAME") or "",
        kind=getvar("EDGE_LLM_MODEL_KIND") or "",
        qairt=normalize_qairt(getvar("EDGE_LLM_MODEL_QAIRT")),
        soc_model=_int_or_none(getvar("EDGE_LLM_MODEL_SOC_MODEL")),
        dsp_arch=getvar("EDGE_LLM_MODEL_DSP_ARCH") or None,
    )
    image = ImageFacts(
        machine=getvar("MACHINE") or "",
        qairt_versions=tuple((getvar("EDGE_LLM_QAIRT_VERSIONS") or "").split()),
        soc_model=_int_or_none(getvar("EDGE_LLM_SOC_MODEL")),
        hexagon_arch=getvar("EDGE_LLM_HEXAGON_ARCH") or "",
    )
    return model, image
