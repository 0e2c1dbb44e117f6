"""The model files a runtime stand-in is given, read as the real runtimes would read them.

A ``.litertlm`` file (its header's extent, per LiteRT-LM's file layout) or a Genie bundle's
``genie_config.json`` with its HTP backend config and weight parts: which model it is, the QAIRT
build it was compiled for, its declared against its real size (a truncated download), its
``soc_model`` and DSP arch. Its own module because both runtime stand-ins and the C libraries' model
(:mod:`provisioner.sim.npu`) read models the same way.
Only the standard library is imported at module level: it runs under the board's ``python3`` as any
user.
"""

from __future__ import annotations

import json
import re
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from provisioner.sim.board_view import QAIRT_RE, BoardView


# --------------------------------------------------------------------------- models
@dataclass
class ModelView:
    path: str
    kind: str
    size: int
    declared_size: int | None
    qairt: str | None
    npu_only: bool
    soc_model: int | None = None
    dsp_arch: str | None = None
    perf_profile: str | None = None
    model_id: str | None = None
    config: dict[str, Any] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)

    @property
    def truncated(self) -> bool:
        return self.declared_size is not None and self.size < self.declared_size


def _model_meta(path: Path) -> dict[str, Any]:
    """model.json beside a deployed model version (contracts.board.MODEL_META), if any."""
    for d in (path if path.is_dir() else path.parent, path.parent.parent):
        f = d / "model.json"
        if f.is_file():
            try:
                return json.loads(f.read_text(encoding="utf-8"))
            except ValueError:
                return {}
    return {}


def _scan_build(path: Path, window: int = 1 << 20) -> str | None:
    """The QAIRT build id in the first/last ``window`` bytes (where context binaries sit)."""
    try:
        size = path.stat().st_size
        with open(path, "rb") as fh:
            head = fh.read(window)
            tail = b""
            if size > window:
                fh.seek(max(window, size - window))
                tail = fh.read(window)
    except OSError:
        return None
    for chunk in (head, tail):
        m = QAIRT_RE.search(chunk)
        if m:
            return m.group(1).decode()
    return None


def _match_model(view: BoardView, name: str, kind: str, meta: dict[str, Any]) -> str | None:
    models = view.facts.get("models", {})
    if meta.get("name") in models:
        return meta["name"]
    for mid, m in models.items():
        if m.get("file") and m["file"] == name:
            return mid
    for mid, m in models.items():
        if m.get("kind") == kind and view.board["id"] in (m.get("boards") or []):
            return mid
    return None


LITERTLM_MAGIC = b"LITERTLM"
LITERTLM_PREAMBLE = 32   # magic, u32 major/minor/patch, 4 bytes padding, u64 header end offset


def _fb_table_field(buf: bytes, table: int, slot: int) -> int | None:
    """Absolute position of field ``slot`` of the flatbuffer table at ``table`` (None: absent)."""
    vtable = table - struct.unpack_from("<i", buf, table)[0]
    vt_size = struct.unpack_from("<H", buf, vtable)[0]
    at = 4 + 2 * slot
    if at + 2 > vt_size:
        return None
    off = struct.unpack_from("<H", buf, vtable + at)[0]
    return table + off if off else None


def _fb_deref(buf: bytes, pos: int) -> int:
    return pos + struct.unpack_from("<I", buf, pos)[0]


def _read_header(fh: BinaryIO) -> tuple[int, bytes] | None:
    """(header end offset, the header flatbuffer as read) of an open container: magic ``LITERTLM``, three
    u32 versions, 4 bytes padding, the u64 header end (schema/core/litertlm_read.cc); None if not one."""
    pre = fh.read(LITERTLM_PREAMBLE)
    if len(pre) < LITERTLM_PREAMBLE or pre[:8] != LITERTLM_MAGIC:
        return None
    header_end = struct.unpack_from("<Q", pre, 24)[0]
    if not LITERTLM_PREAMBLE <= header_end <= (64 << 20):
        return None
    return header_end, fh.read(header_end - LITERTLM_PREAMBLE)


def litertlm_extent(path: Path) -> int | None:
    """How long the file must be for the runtime to load it: the header end and every section's end.

    What LiteRT-LM's loader reads (google-ai-edge/LiteRT-LM @767d74f9, schema/core/litertlm_read.cc:
    magic ``LITERTLM``, three u32 versions, 4 bytes padding, u64 header end offset, then the
    ``LiteRTLMMetaData`` flatbuffer of schema/core/litertlm_header_schema.fbs, whose
    ``section_metadata.objects[]`` carry ``begin_offset``/``end_offset``). Each section is mapped
    with runtime/util/memory_mapped_file_posix.cc, which refuses a range past the end of the file
    ("Length and offset too large"), so a file cut anywhere before its last section's end fails to
    load, whatever a model.json beside it says. None: not a LiteRT-LM container (or a header this
    reader does not understand) - then only model.json can tell.
    """
    try:
        with open(path, "rb") as fh:
            header = _read_header(fh)
    except OSError:
        return None
    if header is None:
        return None
    header_end, buf = header
    if len(buf) < header_end - LITERTLM_PREAMBLE:
        return header_end                                  # "Failed to read header data."
    try:
        root = _fb_deref(buf, 0)
        sm_field = _fb_table_field(buf, root, 1)           # LiteRTLMMetaData.section_metadata
        if sm_field is None:
            return header_end
        objs_field = _fb_table_field(buf, _fb_deref(buf, sm_field), 0)   # SectionMetadata.objects
        if objs_field is None:
            return header_end
        vec = _fb_deref(buf, objs_field)
        extent = header_end
        for i in range(struct.unpack_from("<I", buf, vec)[0]):
            obj = _fb_deref(buf, vec + 4 + 4 * i)
            end = _fb_table_field(buf, obj, 2)             # SectionObject.end_offset (ulong)
            if end is not None:
                extent = max(extent, struct.unpack_from("<Q", buf, end)[0])
        return extent
    except struct.error:
        return None


# LlmModelType's oneof members (runtime/proto/llm_model_type.proto:26-35 at LiteRT-LM cbf463d)
_LLM_MODEL_TYPES = {1: "generic_model", 2: "gemma3n", 3: "function_gemma", 4: "gemma3", 5: "qwen3", 7: "qwen2p5",
                    8: "gemma4", 9: "fast_vlm"}


def _proto_fields(buf: bytes) -> list[tuple[int, int, Any]]:
    """(number, wire type, value) of a protobuf message's top-level fields (varint, fixed and length-delimited)."""
    out, at = [], 0

    def varint() -> int:
        nonlocal at
        value = shift = 0
        while True:
            b = buf[at]
            at += 1
            value |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                return value
    while at < len(buf):
        tag = varint()
        wire = tag & 7
        if wire == 0:
            value: Any = varint()
        elif wire == 2:
            n = varint()
            value, at = buf[at:at + n], at + n
        elif wire in (1, 5):
            n = 8 if wire == 1 else 4
            value, at = buf[at:at + n], at + n
        else:
            raise ValueError(f"wire type {wire}")
        out.append((tag >> 3, wire, value))
    return out


def llm_model_type(path: Path) -> str | None:
    """The ``llm_model_type`` the file's LlmMetadata section names, as the runtime chooses its model data
    processor by it (runtime/conversation/model_data_processor/model_data_processor_factory.cc:342-362 at
    cbf463d): section data type 5 (LlmMetadataProto, schema/core/litertlm_header_schema.fbs), field 6 of
    LlmMetadata (runtime/proto/llm_metadata.proto:81). None: no such section or field, or not a container."""
    try:
        with open(path, "rb") as fh:
            header = _read_header(fh)
            if header is None:
                return None
            buf = header[1]
            sm = _fb_table_field(buf, _fb_deref(buf, 0), 1)                 # LiteRTLMMetaData.section_metadata
            objs = _fb_table_field(buf, _fb_deref(buf, sm), 0) if sm is not None else None
            if objs is None:
                return None
            vec = _fb_deref(buf, objs)
            for i in range(struct.unpack_from("<I", buf, vec)[0]):
                obj = _fb_deref(buf, vec + 4 + 4 * i)
                begin, end, dtype = (_fb_table_field(buf, obj, slot) for slot in (1, 2, 3))
                if None in (begin, end, dtype) or buf[dtype] != 5:
                    continue
                start, stop = struct.unpack_from("<Q", buf, begin)[0], struct.unpack_from("<Q", buf, end)[0]
                if not 0 <= stop - start <= (8 << 20):
                    return None
                fh.seek(start)
                found = None
                for number, wire, value in _proto_fields(fh.read(stop - start)):
                    if number == 6 and wire == 2:
                        for member, member_wire, _ in _proto_fields(value):
                            if member_wire == 2:
                                found = _LLM_MODEL_TYPES.get(member, f"type {member}")
                return found
    except (OSError, struct.error, IndexError, ValueError, TypeError):
        return None
    return None


def read_litertlm(view: BoardView, path: Path) -> ModelView:
    meta = _model_meta(path)
    size = path.stat().st_size
    # The virtual runtime reads the file its own way (its own header reader, a scan for the QAIRT stamp),
    # never with the product's inspector: what it stands in for is the runtime, not `provisioner inspect`.
    # The container's own section table decides first: a release that published a cut file declares the
    # cut size in model.json, and the real loader still refuses it.
    declared = litertlm_extent(path) or declared_sizes(meta).get(path.name) or meta.get("size")
    qairt = _scan_build(path) or meta.get("qairt")
    mid = _match_model(view, path.name, "litertlm", meta)
    npu_only = bool(view.facts.get("models", {}).get(mid or "", {}).get("npu_only", True))
    return ModelView(str(path), "litertlm", size, declared, qairt, bool(npu_only), model_id=mid)


def read_genie(view: BoardView, config_path: Path) -> ModelView:
    cfg = json.loads(config_path.read_text(encoding="utf-8"))
    base = config_path.parent
    missing = []
    engine = cfg.get("dialog", {}).get("engine", {})
    bins = engine.get("model", {}).get("binary", {}).get("ctx-bins", [])
    total = 0
    for b in bins:
        p = base / b
        if p.is_file():
            total += p.stat().st_size
        else:
            missing.append(b)
    tok = cfg.get("dialog", {}).get("tokenizer", {}).get("path")
    if tok and not (base / tok).is_file():
        missing.append(tok)
    ext = engine.get("backend", {}).get("extensions")
    ext_cfg: dict[str, Any] = {}
    if ext:
        if (base / ext).is_file():
            ext_cfg = json.loads((base / ext).read_text(encoding="utf-8"))
        else:
            missing.append(ext)
    dev = (ext_cfg.get("devices") or [{}])[0]
    cores = dev.get("cores") or [{}]
    qairt = None
    tv = base / "tool-versions.yaml"
    if tv.is_file():
        m = re.search(r"^qairt:\s*['\"]?v?([0-9.]+)", tv.read_text(encoding="utf-8"), re.M)
        if m:
            qairt = _normalize(m.group(1))
    if qairt is None and bins and (base / bins[0]).is_file():
        qairt = _scan_build(base / bins[0])
    meta = _model_meta(base)
    declared = meta.get("size")
    mid = _match_model(view, base.name, "genie", meta)
    mv = ModelView(str(base), "genie", total, None, qairt, True, soc_model=dev.get("soc_model"),
                   dsp_arch=dev.get("dsp_arch"), perf_profile=cores[0].get("perf_profile"), model_id=mid,
                   config=cfg, missing=missing)
    sizes = declared_sizes(meta)
    if sizes and not missing:
        # model.json (written at deploy) declares the size of every file of the bundle
        present = sum((base / f).stat().st_size for f in sizes if (base / f).is_file())
        if present < sum(sizes.values()):
            mv.size, mv.declared_size = present, sum(sizes.values())
    elif isinstance(declared, int) and declared > 0 and not missing and isinstance(meta.get("files"), list):
        present = sum((base / f).stat().st_size for f in meta["files"] if isinstance(f, str) and (base / f).is_file())
        if present < declared:
            mv.size, mv.declared_size = present, declared
    return mv


def declared_sizes(meta: dict[str, Any]) -> dict[str, int]:
    """file name -> size from model.json's ``files: [{name, size, sha256}]`` (empty if not given)."""
    out = {}
    for f in meta.get("files") or []:
        if isinstance(f, dict) and isinstance(f.get("name"), str) and isinstance(f.get("size"), int):
            out[f["name"]] = f["size"]
    return out


def _normalize(raw: str) -> str:
    m = re.match(r"^v?(\d+\.\d+\.\d+)\.(\d{6})\d*$", raw.strip())
    return f"{m.group(1)}.{m.group(2)}" if m else raw.strip()
