"""Read what matters in a ``.litertlm`` file without reading the file.

A Gemma-4 E2B file is 3.3 GB; the facts a release engineer needs (format version, sections,
NPU-only, context length, the QAIRT build its QNN context binaries were compiled with, whether
the download is complete) live in a few KiB: the 32-byte preamble, the header flatbuffer, the
TFLite operator tables and the first bytes of each context binary. Everything here reads by
offset and counts the bytes it read, so ``provisioner inspect`` stays fast on a slow disk and
``bench/inspect.py`` can prove it.

The header is decoded with the official ``litert-lm-builder`` flatbuffer accessors and the TFLite
model with the generated ``tflite`` schema package; nothing hand-parses either schema.
"""

from __future__ import annotations

import os
import re
import struct
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from provisioner import catalog
from provisioner.errors import ArtifactError

DISPATCH_OP = "DISPATCH_OP"
MAX_HEADER = 16 * 1024 * 1024  # a header flatbuffer larger than this is corrupt, not big
TFLITE_FIRST_WINDOW = 64 * 1024
TFLITE_MAX_WINDOW = 8 * 1024 * 1024  # op tables of NPU sections are tiny; weights live in the context binary
CTX_WINDOW = 64 * 1024  # the build id sits in the first bytes of a QNN context binary
CTX_MAX_WINDOW = 1024 * 1024
BUILD_ID_RE = re.compile(rb"v(\d+\.\d+\.\d+\.\d{6})\d*")
TARGET_RE = re.compile(r"_qualcomm_([a-z]+\d+[a-z]*)", re.IGNORECASE)


class _OutOfWindow(Exception):
    """A flatbuffer access went past the bytes read so far: read more and retry."""


class _Window(bytes):
    """Bytes that refuse slices past their end.

    Flatbuffer accessors slice strings and vectors silently short when the buffer ends early;
    raising instead lets the reader grow its window only when needed, and never trust a
    half-read op table.
    """

    def __getitem__(self, key):  # type: ignore[override]
        if isinstance(key, slice) and key.stop is not None and key.stop > len(self):
            raise _OutOfWindow(key.stop)
        return super().__getitem__(key)


class CountingReader:
    """Positional reads on one file descriptor, counting every byte read (for the read budget)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.fd = os.open(path, os.O_RDONLY)
        self.size = os.fstat(self.fd).st_size
        self.bytes_read = 0
        self.reads = 0

    def read_at(self, offset: int, n: int) -> bytes:
        if offset >= self.size or n <= 0:
            return b""
        n = min(n, self.size - offset)
        chunks = []
        while n > 0:
            data = os.pread(self.fd, n, offset)
            if not data:
                break
            chunks.append(data)
            offset += len(data)
            n -= len(data)
        out = b"".join(chunks)
        self.bytes_read += len(out)
        self.reads += 1
        return out

    def close(self) -> None:
        os.close(self.fd)

    def __enter__(self) -> CountingReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass
class DispatchOp:
    """One NPU partition: where its QNN context binary is, and which QAIRT built it."""

    subgraph: int
    index: int
    name: str | None
    bytecode_offset: int  # relative to the TFLite data start (LiteRT's convention)
    bytecode_size: int
    absolute_offset: int
    qairt_build: str | None
    beyond_eof: bool = False


@dataclass
class Section:
    index: int
    data_type: str
    begin: int
    end: int
    items: dict[str, Any] = field(default_factory=dict)
    dispatch_ops: list[DispatchOp] = field(default_factory=list)
    note: str | None = None

    @property
    def model_type(self) -> str | None:
        return self.items.get("model_type")

    @property
    def backend_constraint(self) -> str | None:
        return self.items.get("backend_constraint")

    @property
    def is_model(self) -> bool:
        return self.data_type == "TFLiteModel"


@dataclass
class LitertlmInfo:
    path: Path
    size: int
    version: str
    header_end: int
    system_metadata: dict[str, Any]
    sections: list[Section]
    llm_metadata: dict[str, Any] | None
    bytes_read: int = 0
    reads: int = 0

    @property
    def declared_size(self) -> int:
        return max((s.end for s in self.sections), default=self.header_end)

    @property
    def truncated(self) -> bool:
        return self.size < self.declared_size

    @property
    def qairt_builds(self) -> list[str]:
        return sorted({op.qairt_build for s in self.sections for op in s.dispatch_ops if op.qairt_build})

    @property
    def npu_only(self) -> bool:
        models = [s for s in self.sections if s.is_model]
        return bool(models) and all(_allowed(s.backend_constraint) == {"npu"} for s in models)

    @property
    def context_size(self) -> int | None:
        if self.llm_metadata and self.llm_metadata.get("max_num_tokens"):
            return int(self.llm_metadata["max_num_tokens"])
        return None

    @property
    def target_soc(self) -> str | None:
        """SoC named in the file name (AI Edge exports are ``<model>_qualcomm_<soc>.litertlm``)."""
        m = TARGET_RE.search(self.path.name)
        return m.group(1).upper() if m else None

    def as_dict(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "header_end": self.header_end,
            "system_metadata": self.system_metadata,
            "sections": [
                {**{k: v for k, v in asdict(s).items() if k != "dispatch_ops"},
                 "model_type": s.model_type, "backend_constraint": s.backend_constraint,
                 "dispatch_ops": [asdict(op) for op in s.dispatch_ops]}
                for s in self.sections
            ],
            "llm_metadata": self.llm_metadata,
            "target_soc": self.target_soc,
            "bytes_read": self.bytes_read,
            "reads": self.reads,
        }


def _allowed(constraint: str | None) -> set[str]:
    if not constraint:
        return {"cpu", "gpu", "npu"}
    return {c.strip() for c in constraint.split(",") if c.strip()}


def _kv(kvp: Any) -> tuple[str, Any]:
    """Decode a header KeyValuePair with the builder's generated union accessors (VData -> table)."""
    from litert_lm_builder import litertlm_header_schema_py_generated as schema

    key = (kvp.Key() or b"").decode("utf-8", "replace")
    names = {v: k for k, v in vars(schema.VData).items() if not k.startswith("_")}
    name = names.get(kvp.ValueType())
    table = kvp.Value()
    if table is None or name in (None, "NONE"):
        return key, None
    obj = getattr(schema, name)()
    obj.Init(table.Bytes, table.Pos)
    value = obj.Value()
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    return key, value


def read_litertlm(path: str | Path) -> LitertlmInfo:
    """Parse header, sections, LLM metadata and DISPATCH_OP context binaries of a ``.litertlm``.

    Raises :class:`ArtifactError` (one line) for a file that is not a LiteRT-LM container or
    whose header is corrupt. A truncated file is *not* an error here: the caller reports it with
    everything else it found.
    """
    from litert_lm_builder import litertlm_core as core

    path = Path(path)
    with CountingReader(path) as r:
        pre = r.read_at(0, core.HEADER_BEGIN_BYTE_OFFSET)
        if len(pre) < core.HEADER_BEGIN_BYTE_OFFSET or pre[:8] != core.HEADER_MAGIC_BYTES:
            what = "file is shorter than the 32-byte preamble" if len(pre) < 8 else f"magic is {pre[:8]!r}"
            raise ArtifactError(f"{path}: not a .litertlm file ({what}, expected b'LITERTLM')",
                                "check the download (is it an HTML error page?) or pass the right file")
        major, minor, patch = struct.unpack_from("<III", pre, 8)
        if major != core.LITERTLM_MAJOR_VERSION:
            raise ArtifactError(f"{path}: unsupported LiteRT-LM format {major}.{minor}.{patch}",
                                f"this provisioner reads format {core.LITERTLM_MAJOR_VERSION}.x")
        (header_end,) = struct.unpack_from("<Q", pre, core.HEADER_END_LOCATION_BYTE_OFFSET)
        if not core.HEADER_BEGIN_BYTE_OFFSET < header_end <= core.HEADER_BEGIN_BYTE_OFFSET + MAX_HEADER:
            raise ArtifactError(f"{path}: corrupt header (header end offset {header_end})",
                                "re-download the file; check its sha256")
        if header_end > r.size:
            raise ArtifactError(f"{path}: truncated inside the header ({r.size} bytes, header ends at {header_end})",
                                "re-download the file; check size and sha256")
        raw = _Window(r.read_at(core.HEADER_BEGIN_BYTE_OFFSET, header_end - core.HEADER_BEGIN_BYTE_OFFSET))
        try:
            system, sections = _parse_header(raw)
        except ArtifactError:
            raise
        except Exception as exc:  # flatbuffer garbage shows up as struct/index/decode errors
            raise ArtifactError(f"{path}: corrupt header flatbuffer ({type(exc).__name__})",
                                "re-download the file; check its sha256") from exc
        for s in sections:
            if s.begin < header_end or s.end < s.begin:
                raise ArtifactError(f"{path}: corrupt header (section {s.index} spans {s.begin}..{s.end})",
                                    "re-download the file; check its sha256")

        info = LitertlmInfo(path=path, size=r.size, version=f"{major}.{minor}.{patch}", header_end=header_end,
                            system_metadata=system, sections=sections, llm_metadata=None)
        for s in sections:
            if s.end > r.size:
                s.note = f"section ends at {s.end} but the file has only {r.size} bytes"
            if s.data_type == "LlmMetadataProto" and s.end <= r.size:
                info.llm_metadata = _llm_metadata(r, s)
            elif s.is_model and "npu" in _allowed(s.backend_constraint):
                _dispatch_ops(r, s)
        info.bytes_read, info.reads = r.bytes_read, r.reads
    return info


def _parse_header(raw: bytes) -> tuple[dict[str, Any], list[Section]]:
    from litert_lm_builder import litertlm_core as core
    from litert_lm_builder import litertlm_header_schema_py_generated as schema

    root = schema.LiteRTLMMetaData.GetRootAs(raw, 0)
    system: dict[str, Any] = {}
    sm = root.SystemMetadata()
    if sm is not None:
        for i in range(sm.EntriesLength()):
            k, v = _kv(sm.Entries(i))
            system[k] = v
    sections: list[Section] = []
    sec = root.SectionMetadata()
    if sec is None:
        raise ArtifactError("header has no section table", "re-download the file")
    for i in range(sec.ObjectsLength()):
        obj = sec.Objects(i)
        items = dict(_kv(obj.Items(j)) for j in range(obj.ItemsLength()))
        try:
            dtype = core.any_section_data_type_to_string(obj.DataType())
        except ValueError:
            dtype = f"unknown({obj.DataType()})"
        sections.append(Section(index=i, data_type=dtype, begin=obj.BeginOffset(), end=obj.EndOffset(), items=items))
    return system, sections


def _llm_metadata(r: CountingReader, s: Section) -> dict[str, Any] | None:
    from litert_lm_builder.runtime.proto import llm_metadata_pb2

    if s.end - s.begin > 4 * 1024 * 1024:
        return None
    msg = llm_metadata_pb2.LlmMetadata()
    try:
        msg.ParseFromString(r.read_at(s.begin, s.end - s.begin))
    except Exception:
        s.note = "LLM metadata does not parse"
        return None
    out: dict[str, Any] = {}
    if msg.max_num_tokens:
        out["max_num_tokens"] = msg.max_num_tokens
    model_type = msg.llm_model_type.WhichOneof("model_type")
    if model_type:
        out["model_type"] = model_type
    for flag in ("supports_thinking", "supports_function_calling"):
        if getattr(msg, flag):
            out[flag] = True
    if msg.min_runtime_version:
        out["min_runtime_version"] = msg.min_runtime_version
    out["has_jinja_template"] = bool(msg.jinja_prompt_template)
    return out


def _dispatch_ops(r: CountingReader, s: Section) -> None:
    """Find DISPATCH_OPs in a TFLite section and read the build id of each context binary."""
    limit = min(s.end, r.size) - s.begin
    window = min(TFLITE_FIRST_WINDOW, limit)
    data = b""
    while True:
        data += r.read_at(s.begin + len(data), window - len(data))
        try:
            ops = _tflite_dispatch_ops(_Window(data))
            break
        except (_OutOfWindow, struct.error, ValueError, IndexError):
            if window >= limit or window >= TFLITE_MAX_WINDOW:
                s.note = ("TFLite op table unreadable (truncated?)" if window >= limit
                          else f"TFLite op table larger than {TFLITE_MAX_WINDOW >> 20} MiB; not scanned")
                return
            window = min(window * 4, limit, TFLITE_MAX_WINDOW)
    seen: dict[int, str | None] = {}
    for sg, idx, name, off, size in ops:
        absolute = s.begin + off
        beyond = absolute >= r.size
        if absolute not in seen:
            seen[absolute] = None if beyond else _build_id(r, absolute, size)
        s.dispatch_ops.append(DispatchOp(subgraph=sg, index=idx, name=name, bytecode_offset=off,
                                         bytecode_size=size, absolute_offset=absolute,
                                         qairt_build=seen[absolute], beyond_eof=beyond))


def _tflite_dispatch_ops(buf: bytes) -> list[tuple[int, int, str | None, int, int]]:
    import tflite as T  # generated TFLite schema (reader classes)
    from flatbuffers import flexbuffers

    if len(buf) >= 8 and buf[4:8] != b"TFL3":
        raise ArtifactError("TFLite section has no TFL3 identifier", "re-download the file")
    model = T.Model.GetRootAs(buf, 0)
    codes = []
    for i in range(model.OperatorCodesLength()):
        code = model.OperatorCodes(i).CustomCode()
        codes.append(code.decode("utf-8", "replace") if code else None)
    out = []
    for g in range(model.SubgraphsLength()):
        sg = model.Subgraphs(g)
        for k in range(sg.OperatorsLength()):
            op = sg.Operators(k)
            idx = op.OpcodeIndex()
            if idx >= len(codes) or codes[idx] != DISPATCH_OP:
                continue
            n = op.CustomOptionsLength()
            raw = bytes(op.CustomOptionsAsNumpy().tobytes()) if n else b""
            opts = flexbuffers.Loads(raw) if raw else {}
            if not isinstance(opts, dict) or "bytecode_offset" not in opts:
                continue
            name = opts.get("name")
            out.append((g, k, name if isinstance(name, str) else None,
                        int(opts["bytecode_offset"]), int(opts.get("bytecode_size", 0))))
    return out


def _build_id(r: CountingReader, offset: int, size: int) -> str | None:
    """The QAIRT build id text (``v2.44.0.260225...``) near the start of a QNN context binary."""
    end = offset + (size if size else CTX_MAX_WINDOW)
    data = r.read_at(offset, min(CTX_WINDOW, end - offset))
    m = BUILD_ID_RE.search(data)
    if not m and end - offset > CTX_WINDOW:  # rare: look a little further, once
        data = data[-64:] + r.read_at(offset + CTX_WINDOW, min(CTX_MAX_WINDOW, end - offset) - CTX_WINDOW)
        m = BUILD_ID_RE.search(data)
    return catalog.normalize_qairt(m.group(1).decode()) if m else None
