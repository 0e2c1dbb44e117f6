"""Board, model, QAIRT and QLI-release facts as data, with a small typed loader.

The YAML files next to this module are the single source of truth; nothing else in the
project hard-codes a soc_id, a Hexagon arch or a repo pin.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import Any

from provisioner.errors import UserError

QAIRT_BUILD_RE = re.compile(r"^\d+\.\d+\.\d+\.\d{6}$")


@dataclass(frozen=True)
class Performance:
    """A measured speed for one model on one board and OS (the acceptance reference)."""

    model: str
    os: str
    decode_tok_s: float
    ttft_s: float | None = None
    prefill_tok_s: float | None = None
    init_s: float | None = None


@dataclass(frozen=True)
class Board:
    """One board type: every fact later stages need to build, flash and verify it."""

    id: str
    name: str
    soc: str
    soc_family: str
    codename: str
    soc0_machine: str
    soc_id: int
    dt_compatible: tuple[str, ...]
    dt_model: str
    hexagon_arch: str
    vtcm_mb: int
    cdsp_count: int
    qnn_soc_model: int
    kas_machine: str
    storage_type: str
    sector_size: int
    luns: tuple[int, ...]
    qairt_skel_dir: str
    qairt_host_lib_dir: str
    system_qairt_skel_dir: str
    contents_chip_ids: tuple[str, ...]
    performance: tuple[Performance, ...] = field(default=())
    #: Bytes of the board's UFS device (boards.yaml storage.size_bytes): bounds a partition that grows
    #: to the end of its LUN (``num_partition_sectors="0"``), which no XML gives a size for.
    storage_bytes: int | None = None

    def expected(self, model: str, os: str = "qli") -> Performance | None:
        """Reference speed for ``model`` on this board, preferring ``os``."""
        matches = [p for p in self.performance if p.model == model]
        for p in matches:
            if p.os == os:
                return p
        return matches[0] if matches else None

    @property
    def skel_lib(self) -> str:
        """File name of the HTP skel for this board's Hexagon arch (e.g. libQnnHtpV75Skel.so)."""
        return f"libQnnHtp{self.hexagon_arch.upper()}Skel.so"

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "name": self.name,
            "soc": self.soc,
            "soc_family": self.soc_family,
            "codename": self.codename,
            "soc0_machine": self.soc0_machine,
            "soc_id": self.soc_id,
            "dt_compatible": list(self.dt_compatible),
            "dt_model": self.dt_model,
            "hexagon_arch": self.hexagon_arch,
            "vtcm_mb": self.vtcm_mb,
            "cdsp_count": self.cdsp_count,
            "qnn_soc_model": self.qnn_soc_model,
            "kas_machine": self.kas_machine,
            "storage": {"type": self.storage_type, "sector_size": self.sector_size, "luns": list(self.luns),
                        "size_bytes": self.storage_bytes},
            "qairt_skel_dir": self.qairt_skel_dir,
            "qairt_host_lib_dir": self.qairt_host_lib_dir,
            "system_qairt_skel_dir": self.system_qairt_skel_dir,
            "contents_chip_ids": list(self.contents_chip_ids),
            "performance": [p.__dict__ for p in self.performance],
        }


@dataclass(frozen=True)
class ModelInfo:
    """Reference facts about a known model (defaults and expectations, not requirements)."""

    id: str
    kind: str
    qairt: str
    boards: tuple[str, ...]
    context: int
    runtime: str
    chat_template: str
    file: str | None = None
    size: int | None = None
    parts: int | None = None
    npu_only: bool = False
    tool_format: str | None = None     # the family whose tool-call prompt format the model was trained on


@dataclass(frozen=True)
class Release:
    """A QLI release: Yocto series and the exact pins of every repo it is built from."""

    id: str
    yocto_series: str
    kas_header_version: int
    distro: str
    base_image: str
    system_qairt: str
    machines: tuple[str, ...]
    meta_qcom_releases: dict[str, str]
    lock: dict[str, dict[str, str]]
    meta_qcom_ci_files: tuple[str, ...]


def _load(name: str) -> dict[str, Any]:
    import yaml  # here, not at the top: `inspect` of a .litertlm only needs normalize_qairt (start-up time)

    text = resources.files(__package__).joinpath(name).read_text(encoding="utf-8")
    # libyaml's safe loader when PyYAML has it: the same documents, ~20x faster than the pure-Python
    # one (boards.yaml is read by every virtual board's qdl and console process at start-up)
    return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


@cache
def boards() -> dict[str, Board]:
    """All known boards by id (the kas machine name, e.g. ``iq-8275-evk``)."""
    data = _load("boards.yaml")["boards"]
    out: dict[str, Board] = {}
    for bid, b in data.items():
        out[bid] = Board(
            id=bid,
            name=b["name"],
            soc=b["soc"],
            soc_family=b["soc_family"],
            codename=b["codename"],
            soc0_machine=b["soc0_machine"],
            soc_id=int(b["soc_id"]),
            dt_compatible=tuple(b["dt_compatible"]),
            dt_model=b["dt_model"],
            hexagon_arch=b["hexagon_arch"],
            vtcm_mb=int(b["vtcm_mb"]),
            cdsp_count=int(b["cdsp_count"]),
            qnn_soc_model=int(b["qnn_soc_model"]),
            kas_machine=b["kas_machine"],
            storage_type=b["storage"]["type"],
            sector_size=int(b["storage"]["sector_size"]),
            luns=tuple(b["storage"]["luns"]),
            qairt_skel_dir=b["qairt_skel_dir"],
            qairt_host_lib_dir=b["qairt_host_lib_dir"],
            system_qairt_skel_dir=b["system_qairt_skel_dir"],
            contents_chip_ids=tuple(b["contents_chip_ids"]),
            performance=tuple(Performance(**p) for p in b.get("performance", [])),
            storage_bytes=int(b["storage"]["size_bytes"]) if b["storage"].get("size_bytes") else None,
        )
    return out


def _norm(text: str) -> str:
    return re.sub(r"[^a-z0-9]", "", text.lower())


def board(board_id: str) -> Board:
    """Look a board up by id, accepting common spellings (``IQ-8275``, ``iq8275``, ``QCS8275``).

    Raises a :class:`UserError` naming the known boards when nothing matches.
    """
    all_boards = boards()
    if board_id in all_boards:
        return all_boards[board_id]
    key = _norm(board_id)
    for b in all_boards.values():
        if key in {_norm(b.id), _norm(b.id.removesuffix("-evk")), _norm(b.name), _norm(b.soc)}:
            return b
    raise UserError(
        f"unknown board '{board_id}'",
        f"use one of: {', '.join(sorted(all_boards))} (see `provisioner boards`)",
    )


@cache
def soc_models() -> dict[int, dict[str, str]]:
    """QNN soc_model enum -> {soc, hexagon_arch}, for naming what a bundle targets."""
    return {int(k): v for k, v in _load("boards.yaml")["soc_models"].items()}


@cache
def usb_ids() -> dict[str, str]:
    """USB vendor/product ids of EDL (9008) and crash-dump (900e) mode."""
    return dict(_load("boards.yaml")["usb"])


@cache
def models() -> dict[str, ModelInfo]:
    data = _load("models.yaml")["models"]
    return {
        mid: ModelInfo(
            id=mid,
            kind=m["kind"],
            qairt=str(m["qairt"]),
            boards=tuple(m.get("boards", [])),
            context=int(m.get("context", 0)),
            runtime=m["runtime"],
            chat_template=m.get("chat_template", "plain"),
            file=m.get("file"),
            size=m.get("size"),
            parts=m.get("parts"),
            npu_only=bool(m.get("npu_only", False)),
            tool_format=m.get("tool_format"),
        )
        for mid, m in data.items()
    }


@cache
def qairt_catalog() -> dict[str, Any]:
    """QAIRT download URL pattern and known versions."""
    data = _load("qairt.yaml")
    data["versions"] = {str(k): v for k, v in data["versions"].items()}
    return data


def qairt_url(version: str) -> str:
    return qairt_catalog()["url_pattern"].format(version=version)


# ai-hub-models writes tool-versions.yaml as `qairt: <build><time digits>` and sometimes adds a
# flavour suffix (`2.45.0.260326154327-auto`); context binaries embed `v<build><time digits>`.
_QAIRT_ID_RE = re.compile(r"^[vV]?(\d+\.\d+\.\d+)\.(\d{6})\d*(?:-([A-Za-z0-9_.]+))?$")


def split_qairt(raw: str) -> tuple[str, str | None]:
    """Split a QAIRT id into its build id and flavour: ``2.45.0.260326154327-auto`` -> ``("2.45.0.260326", "auto")``.

    The runtime (and the manifest's ``qairt``) needs the 6-digit build id; the flavour is only
    shown beside it. An id that is not a full build id comes back stripped, without a flavour.
    """
    text = str(raw).strip()
    m = _QAIRT_ID_RE.match(text)
    if not m:
        return text.lstrip("vV"), None
    return f"{m.group(1)}.{m.group(2)}", m.group(3)


def normalize_qairt(raw: str) -> str:
    """Reduce a QAIRT id to its build id: ``2.45.0.260326154327`` -> ``2.45.0.260326``.

    ``tool-versions.yaml`` and context binaries may carry trailing time digits, a leading ``v``
    or a flavour suffix (``-auto``); the runtime needs the 6-digit build id.
    """
    return split_qairt(raw)[0]


def is_qairt_build(version: str) -> bool:
    """True for a full build id like ``2.44.0.260225`` (not ``2.44`` or ``2.44.0``)."""
    return bool(QAIRT_BUILD_RE.match(str(version)))


@cache
def releases() -> dict[str, Release]:
    data = _load("releases.yaml")["releases"]
    return {
        rid: Release(
            id=rid,
            yocto_series=r["yocto_series"],
            kas_header_version=int(r["kas_header_version"]),
            distro=r["distro"],
            base_image=r["base_image"],
            system_qairt=str(r["system_qairt"]),
            machines=tuple(r["machines"]),
            meta_qcom_releases=dict(r["meta_qcom_releases"]),
            lock={k: dict(v) for k, v in r["lock"].items()},
            meta_qcom_ci_files=tuple(r["meta_qcom_ci_files"]),
        )
        for rid, r in data.items()
    }


def release(release_id: str) -> Release:
    all_releases = releases()
    if release_id not in all_releases:
        raise UserError(
            f"unknown QLI release '{release_id}'",
            f"use one of: {', '.join(sorted(all_releases))}, or add it to provisioner/catalog/releases.yaml",
        )
    return all_releases[release_id]
