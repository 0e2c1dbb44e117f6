"""Read what matters in a ``.litertlm`` file without reading the file.

A Gemma-4 E2B file is 3.3 GB; the facts a release engineer needs (format version, sections,
NPU-only, context length, the QAIRT build its QNN context binaries were compiled with, whether
the download is complete) live in a few KiB: the 32-byte preamble, the header flatbuffer, the
TFLite operator tables and the first bytes of each context binary. Everything here reads by
offset and counts the bytes it read, so ``provisioner inspect`` stays fast on a slow disk and
``bench/inspect.py`` can prove it.

Why no ``litert_lm_builder``/``tflite``/``flatbuffers``/``protobuf`` imports: together they pull
in numpy, absl and protobuf - about 0.2 s of start-up, a hundred times the reading itself, and
``provisioner inspect`` is meant to be a one-second check. The three wire formats involved are
small and stable, so this module reads exactly the fields it needs with ``struct``:

* FlatBuffers tables/vectors/strings (:class:`_Flat`) for the LiteRT-LM header
  (``LiteRTLMMetaData``) and the TFLite ``Model`` (operator codes, operators, custom options);
* a FlexBuffers map of scalars and strings (:func:`_flex_map`) for a ``DISPATCH_OP``'s options;
* protobuf varint/length fields (:func:`_proto_fields`) for the LLM metadata.

The slot and field numbers below come from the schemas' generated code shipped in the
``litert-lm-builder`` and ``tflite`` packages; ``tests/artifacts/test_litertlm_schema.py`` checks
them against the installed packages, so a schema change shows up as a failing test. Every offset
is bounds-checked: a corrupt file gives one :class:`ArtifactError` line, never a traceback.
"""

from __future__ import annotations

import os
import re
import struct
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from provisioner.errors import EXIT_UNFIT, ArtifactError

DISPATCH_OP = "DISPATCH_OP"
MAX_HEADER = 16 * 1024 * 1024  # a header flatbuffer larger than this is corrupt, not big
TFLITE_FIRST_WINDOW = 64 * 1024
TFLITE_MAX_WINDOW = 8 * 1024 * 1024  # op tables of NPU sections are tiny; weights live in the context binary
CTX_WINDOW = 64 * 1024  # the build id sits in the first bytes of a QNN context binary
CTX_MAX_WINDOW = 1024 * 1024
BUILD_ID_RE = re.compile(rb"v(\d+\.\d+\.\d+\.\d{6})\d*")
TARGET_RE = re.compile(r"_qualcomm_([a-z]+\d+[a-z]*)", re.IGNORECASE)

# --- LiteRT-LM container (litert_lm_builder.litertlm_core) ---
MAGIC = b"LITERTLM"
MAJOR_VERSION = 1  # the format major version this reader understands
HEADER_BEGIN = 32  # the header flatbuffer starts after the 32-byte preamble
HEADER_END_AT = 24  # u64 in the preamble: where the header flatbuffer ends

# --- LiteRT-LM header schema (litertlm_header_schema_py_generated): table -> field slot ---
HDR_SYSTEM_METADATA, HDR_SECTION_METADATA = 0, 1  # LiteRTLMMetaData
SYSTEM_ENTRIES = 0  # SystemMetadata.entries: [KeyValuePair]
SECTIONS_OBJECTS = 0  # SectionMetadata.objects: [SectionObject]
SECTION_ITEMS, SECTION_BEGIN, SECTION_END, SECTION_DATA_TYPE = 0, 1, 2, 3  # SectionObject
KV_KEY, KV_VALUE_TYPE, KV_VALUE = 0, 1, 2  # KeyValuePair (value: union VData, one-field tables)
# VData union member -> (name, struct format of its ``value`` field, or None for a string)
VDATA: dict[int, tuple[str, str | None]] = {
    1: ("UInt8", "<B"), 2: ("Int8", "<b"), 3: ("UInt16", "<H"), 4: ("Int16", "<h"), 5: ("UInt32", "<I"),
    6: ("Int32", "<i"), 7: ("Float32", "<f"), 8: ("Bool", "<?"), 9: ("StringValue", None), 10: ("UInt64", "<Q"),
    11: ("Int64", "<q"), 12: ("Double", "<d"),
}
SECTION_TYPES = {
    0: "NONE", 1: "GenericBinaryData", 2: "Deprecated", 3: "TFLiteModel", 4: "SP_Tokenizer", 5: "LlmMetadataProto",
    6: "HF_Tokenizer_Zlib", 7: "TFLiteWeights", 8: "EmbeddingMetadataProto", 9: "ExecutorMetadataProto",
    10: "TtsMetadataProto", 11: "AsrMetadataProto",
}

# --- TFLite schema (tflite package): table -> field slot ---
MODEL_OPERATOR_CODES, MODEL_SUBGRAPHS = 1, 2  # Model
OPCODE_CUSTOM_CODE = 1  # OperatorCode
SUBGRAPH_OPERATORS = 3  # SubGraph
OPERATOR_OPCODE_INDEX, OPERATOR_CUSTOM_OPTIONS = 0, 5  # Operator
TFLITE_IDENTIFIER = b"TFL3"

# --- LlmMetadata protobuf (litert_lm_builder.runtime.proto.llm_metadata_pb2): field numbers ---
LLM_MAX_NUM_TOKENS, LLM_MODEL_TYPE, LLM_JINJA_TEMPLATE = 5, 6, 7
LLM_SUPPORTS_THINKING, LLM_SUPPORTS_FUNCTION_CALLING, LLM_MIN_RUNTIME_VERSION = 11, 12, 14
# LlmModelType's ``model_type`` oneof: field number -> name (newer ones are looked up in the schema)
LLM_MODEL_TYPES = {
    1: "generic_model", 2: "gemma3n", 3: "function_gemma", 4: "gemma3", 5: "qwen3", 7: "qwen2p5", 8: "gemma4",
    9: "fast_vlm", 11: "lfm2", 12: "minicpm5", 13: "minicpmv4",
}

_U8, _U16, _U32, _I32, _U64 = (struct.Struct(f) for f in ("<B", "<H", "<I", "<i", "<Q"))


class TruncatedFile(ArtifactError):
    """The file ends inside its own header: an interrupted download, so "checked and unfit" (exit 1).

    A file cut after the header is reported (``LitertlmInfo.truncated``), not raised; both say
    ``truncated`` and both exit 1, so a script need not care where the download stopped.
    """

    exit_code = EXIT_UNFIT


class _Corrupt(Exception):
    """An offset or length in the file points nowhere sensible."""


class _OutOfWindow(_Corrupt):
    """A read went past the bytes read so far: read more of the file and retry (or it is truncated)."""


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
        return bool(models) and all(allowed_backends(s.backend_constraint) == {"npu"} for s in models)

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


def allowed_backends(constraint: str | None) -> set[str]:
    """Backends a section's ``backend_constraint`` allows (``"cpu, gpu"``; none given: any of them).

    Lower-cased like ``litert_lm_builder``'s ``add_tflite_model`` writes it, so a hand-edited
    ``NPU`` still counts.
    """
    if not constraint:
        return {"cpu", "gpu", "npu"}
    return {c.strip().lower() for c in constraint.split(",") if c.strip()}


class _Flat:
    """Just enough of the FlatBuffers binary format to follow tables, vectors and strings.

    A table starts with a signed offset back to its vtable; the vtable lists, per field slot, the
    field's offset inside the table (0 = absent, use the default). Vectors and strings are a u32
    length followed by the data; references to them are u32 offsets forward from where they are
    stored. Every read is bounds-checked: past the end of ``buf`` raises :class:`_OutOfWindow`
    (the caller may read more of the file), anything else impossible raises :class:`_Corrupt`.
    """

    __slots__ = ("buf",)

    def __init__(self, buf: bytes) -> None:
        self.buf = buf

    def get(self, fmt: struct.Struct, pos: int) -> Any:
        if pos < 0:
            raise _Corrupt(f"offset {pos} before the start")
        if pos + fmt.size > len(self.buf):
            raise _OutOfWindow(f"offset {pos} beyond {len(self.buf)} bytes")
        return fmt.unpack_from(self.buf, pos)[0]

    def deref(self, pos: int) -> int:
        """Follow the u32 offset stored at ``pos`` (to a table, vector or string)."""
        return pos + self.get(_U32, pos)

    def root(self) -> int:
        return self.deref(0)

    def field(self, table: int, slot: int) -> int | None:
        """Absolute position of field ``slot`` of the table at ``table``; None when absent."""
        vtable = table - self.get(_I32, table)
        vtable_size = self.get(_U16, vtable)
        if vtable_size < 4 or vtable_size % 2:
            raise _Corrupt(f"vtable at {vtable} has size {vtable_size}")
        entry = 4 + 2 * slot
        if entry + 2 > vtable_size:
            return None  # written by an older schema: the field is absent
        offset = self.get(_U16, vtable + entry)
        return table + offset if offset else None

    def scalar(self, table: int, slot: int, fmt: struct.Struct, default: Any = 0) -> Any:
        pos = self.field(table, slot)
        return default if pos is None else self.get(fmt, pos)

    def table(self, table: int, slot: int) -> int | None:
        pos = self.field(table, slot)
        return None if pos is None else self.deref(pos)

    def _span(self, table: int, slot: int, elem_size: int) -> tuple[int, int] | None:
        ref = self.table(table, slot)
        if ref is None:
            return None
        n = self.get(_U32, ref)
        if ref + 4 + n * elem_size > len(self.buf):
            raise _OutOfWindow(f"vector at {ref} of {n} elements ends beyond {len(self.buf)} bytes")
        return ref + 4, n

    def tables(self, table: int, slot: int) -> list[int] | None:
        """Positions of the tables in the vector field ``slot`` (None when absent)."""
        span = self._span(table, slot, 4)
        if span is None:
            return None
        start, n = span
        return [self.deref(start + 4 * i) for i in range(n)]

    def bytes(self, table: int, slot: int) -> bytes | None:
        """A string or ``[ubyte]`` field's bytes (None when absent)."""
        span = self._span(table, slot, 1)
        if span is None:
            return None
        start, n = span
        return self.buf[start:start + n]


def _kv(fb: _Flat, kvp: int) -> tuple[str, Any]:
    """Decode a header KeyValuePair: the union ``value`` is a one-field table of the tagged type."""
    key = (fb.bytes(kvp, KV_KEY) or b"").decode("utf-8", "replace")
    member = VDATA.get(fb.scalar(kvp, KV_VALUE_TYPE, _U8))
    value_table = fb.table(kvp, KV_VALUE)
    if member is None or value_table is None:
        return key, None
    name, fmt = member
    if fmt is None:  # StringValue
        raw = fb.bytes(value_table, 0)
        return key, None if raw is None else raw.decode("utf-8", "replace")
    default = False if name == "Bool" else 0.0 if name in ("Float32", "Double") else 0
    return key, fb.scalar(value_table, 0, struct.Struct(fmt), default)


def read_litertlm(path: str | Path) -> LitertlmInfo:
    """Parse header, sections, LLM metadata and DISPATCH_OP context binaries of a ``.litertlm``.

    Raises :class:`ArtifactError` (one line) for a file that is not a LiteRT-LM container or
    whose header is corrupt, :class:`TruncatedFile` when it ends inside the header. A file cut
    after the header is *not* an error here: the caller reports it with everything else it found.
    """
    path = Path(path)
    with CountingReader(path) as r:
        pre = r.read_at(0, HEADER_BEGIN)
        if not pre or pre[:len(MAGIC)] != MAGIC[:len(pre)]:
            what = "file is empty" if not pre else f"starts with {pre[:len(MAGIC)]!r}"
            raise ArtifactError(f"{path}: not a .litertlm file ({what}, expected {MAGIC!r})",
                                "check the download (is it an HTML error page?) or pass the right file")
        if len(pre) < HEADER_BEGIN:
            raise TruncatedFile(f"{path}: truncated: {r.size} bytes, header needs {HEADER_BEGIN}",
                                "re-download the file; check size and sha256")
        major, minor, patch = struct.unpack_from("<III", pre, 8)
        if major != MAJOR_VERSION:
            raise ArtifactError(f"{path}: unsupported LiteRT-LM format {major}.{minor}.{patch}",
                                f"this provisioner reads format {MAJOR_VERSION}.x")
        (header_end,) = struct.unpack_from("<Q", pre, HEADER_END_AT)
        if not HEADER_BEGIN < header_end <= HEADER_BEGIN + MAX_HEADER:
            raise ArtifactError(f"{path}: corrupt header (header end offset {header_end})",
                                "re-download the file; check its sha256")
        if header_end > r.size:
            raise TruncatedFile(f"{path}: truncated: {r.size} bytes, header needs {header_end}",
                                "re-download the file; check size and sha256")
        raw = r.read_at(HEADER_BEGIN, header_end - HEADER_BEGIN)
        try:
            system, sections = _parse_header(_Flat(raw))
        except _Corrupt as exc:  # the whole header is in ``raw``: out of window means corrupt too
            raise ArtifactError(f"{path}: corrupt header flatbuffer ({exc})",
                                "re-download the file; check its sha256") from None
        if sections is None:
            raise ArtifactError(f"{path}: header has no section table", "re-download the file")
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
            elif s.is_model and "npu" in allowed_backends(s.backend_constraint):
                _dispatch_ops(r, s)
        info.bytes_read, info.reads = r.bytes_read, r.reads
    return info


def _parse_header(fb: _Flat) -> tuple[dict[str, Any], list[Section] | None]:
    """System metadata and the section table of a ``LiteRTLMMetaData`` flatbuffer (None: no table)."""
    root = fb.root()
    system: dict[str, Any] = {}
    sm = fb.table(root, HDR_SYSTEM_METADATA)
    if sm is not None:
        for kvp in fb.tables(sm, SYSTEM_ENTRIES) or []:
            k, v = _kv(fb, kvp)
            system[k] = v
    sec = fb.table(root, HDR_SECTION_METADATA)
    if sec is None:
        return system, None
    sections: list[Section] = []
    for i, obj in enumerate(fb.tables(sec, SECTIONS_OBJECTS) or []):
        items = dict(_kv(fb, kvp) for kvp in fb.tables(obj, SECTION_ITEMS) or [])
        dtype_id = fb.scalar(obj, SECTION_DATA_TYPE, _U8)
        dtype = SECTION_TYPES.get(dtype_id, f"unknown({dtype_id})")
        sections.append(Section(index=i, data_type=dtype, begin=fb.scalar(obj, SECTION_BEGIN, _U64),
                                end=fb.scalar(obj, SECTION_END, _U64), items=items))
    return system, sections


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(buf) or shift > 63:
            raise _Corrupt("varint runs past the end")
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7


def _proto_fields(buf: bytes) -> Iterator[tuple[int, int, Any]]:
    """(field number, wire type, value) of every field of a protobuf message, in file order.

    Values: int for varints, bytes for length-delimited and fixed-size fields. Groups (wire types
    3/4, long deprecated) are treated as corrupt.
    """
    pos = 0
    while pos < len(buf):
        key, pos = _varint(buf, pos)
        number, wire = key >> 3, key & 7
        if number == 0:
            raise _Corrupt("field number 0")
        if wire == 0:
            value, pos = _varint(buf, pos)
        elif wire in (1, 2, 5):
            if wire == 2:
                n, pos = _varint(buf, pos)
            else:
                n = 8 if wire == 1 else 4
            if pos + n > len(buf):
                raise _Corrupt("field runs past the end")
            value, pos = buf[pos:pos + n], pos + n
        else:
            raise _Corrupt(f"wire type {wire}")
        yield number, wire, value


def _model_type_name(number: int) -> str | None:
    """Name of LlmModelType oneof member ``number``; members newer than this reader come from the schema."""
    if number in LLM_MODEL_TYPES:
        return LLM_MODEL_TYPES[number]
    try:  # rare: costs the protobuf import, only for a model type this reader has not met yet
        from litert_lm_builder.runtime.proto import llm_model_type_pb2
    except ImportError:
        return None
    member = llm_model_type_pb2.LlmModelType.DESCRIPTOR.fields_by_number.get(number)
    return member.name if member is not None and member.containing_oneof is not None else None


def _llm_metadata(r: CountingReader, s: Section) -> dict[str, Any] | None:
    """The few LlmMetadata fields ``inspect`` shows (proto3: a repeated scalar field's last value wins)."""
    if s.end - s.begin > 4 * 1024 * 1024:
        return None
    max_tokens, model_type, thinking, function_calling = 0, None, False, False
    min_runtime, jinja = "", ""
    try:
        for number, wire, value in _proto_fields(r.read_at(s.begin, s.end - s.begin)):
            if wire == 0 and number == LLM_MAX_NUM_TOKENS:
                max_tokens = value & 0xFFFFFFFF
                max_tokens -= (max_tokens >> 31) << 32  # int32
            elif wire == 0 and number == LLM_SUPPORTS_THINKING:
                thinking = bool(value)
            elif wire == 0 and number == LLM_SUPPORTS_FUNCTION_CALLING:
                function_calling = bool(value)
            elif wire == 2 and number == LLM_MIN_RUNTIME_VERSION:
                min_runtime = value.decode("utf-8")
            elif wire == 2 and number == LLM_JINJA_TEMPLATE:
                jinja = value.decode("utf-8")
            elif wire == 2 and number == LLM_MODEL_TYPE:
                for member, member_wire, _ in _proto_fields(value):
                    if member_wire == 2 and (name := _model_type_name(member)):
                        model_type = name
    except (_Corrupt, UnicodeDecodeError):
        s.note = "LLM metadata does not parse"
        return None
    out: dict[str, Any] = {}
    if max_tokens:
        out["max_num_tokens"] = max_tokens
    if model_type:
        out["model_type"] = model_type
    if thinking:
        out["supports_thinking"] = True
    if function_calling:
        out["supports_function_calling"] = True
    if min_runtime:
        out["min_runtime_version"] = min_runtime
    out["has_jinja_template"] = bool(jinja)
    return out


def _dispatch_ops(r: CountingReader, s: Section) -> None:
    """Find DISPATCH_OPs in a TFLite section and read the build id of each context binary."""
    limit = min(s.end, r.size) - s.begin
    window = min(TFLITE_FIRST_WINDOW, limit)
    data = b""
    while True:
        data += r.read_at(s.begin + len(data), window - len(data))
        if len(data) >= 8 and data[4:8] != TFLITE_IDENTIFIER:
            raise ArtifactError(f"{r.path}: section {s.index} (TFLiteModel) has no TFL3 identifier",
                                "re-download the file; check its sha256")
        try:
            ops = _tflite_dispatch_ops(data)
            break
        except _OutOfWindow:
            if window >= limit or window >= TFLITE_MAX_WINDOW:
                s.note = ("TFLite op table unreadable (truncated?)" if window >= limit
                          else f"TFLite op table larger than {TFLITE_MAX_WINDOW >> 20} MiB; not scanned")
                return
            window = min(window * 4, limit, TFLITE_MAX_WINDOW)
        except _Corrupt as exc:
            s.note = f"TFLite op table is corrupt ({exc}); not scanned"
            return
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
    """(subgraph, operator index, name, bytecode offset, bytecode size) of every DISPATCH_OP in a TFLite model."""
    fb = _Flat(buf)
    model = fb.root()
    codes = []
    for code in fb.tables(model, MODEL_OPERATOR_CODES) or []:
        custom = fb.bytes(code, OPCODE_CUSTOM_CODE)
        codes.append(custom.decode("utf-8", "replace") if custom else None)
    out = []
    for g, sg in enumerate(fb.tables(model, MODEL_SUBGRAPHS) or []):
        for k, op in enumerate(fb.tables(sg, SUBGRAPH_OPERATORS) or []):
            idx = fb.scalar(op, OPERATOR_OPCODE_INDEX, _U32)
            if idx >= len(codes) or codes[idx] != DISPATCH_OP:
                continue
            raw = fb.bytes(op, OPERATOR_CUSTOM_OPTIONS)
            opts = _flex_map(raw) if raw else {}
            offset, size, name = opts.get("bytecode_offset"), opts.get("bytecode_size", 0), opts.get("name")
            if not isinstance(offset, int | float) or not isinstance(size, int | float):
                continue
            out.append((g, k, name if isinstance(name, str) else None, int(offset), int(size)))
    return out


# FlexBuffers value types (flatbuffers/flexbuffers.py ``Type``)
_FLEX_NULL, _FLEX_INT, _FLEX_UINT, _FLEX_FLOAT, _FLEX_KEY, _FLEX_STRING = 0, 1, 2, 3, 4, 5
_FLEX_INDIRECT_INT, _FLEX_INDIRECT_UINT, _FLEX_INDIRECT_FLOAT, _FLEX_MAP, _FLEX_BOOL = 6, 7, 8, 9, 26


def _flex_uint(buf: bytes, pos: int, width: int, signed: bool = False) -> int:
    if pos < 0 or pos + width > len(buf) or width not in (1, 2, 4, 8):
        raise _Corrupt(f"flexbuffer read of {width} bytes at {pos} outside {len(buf)} bytes")
    return int.from_bytes(buf[pos:pos + width], "little", signed=signed)


def _flex_map(buf: bytes) -> dict[str, Any]:
    """The scalar and string entries of the FlexBuffers map ``buf`` (DISPATCH_OP custom options).

    Layout: the last byte is the root's width, the one before its packed type (type << 2 | log2
    width); a map's values sit at its offset, preceded by [keys offset, keys width, length], and
    are followed by one packed type byte per value. Nested vectors/maps/blobs are not needed and
    come back as None. A root that is not a map gives ``{}``.
    """
    if len(buf) < 3:
        raise _Corrupt("flexbuffer shorter than 3 bytes")
    root_width, packed = buf[-1], buf[-2]
    root = len(buf) - 2 - root_width
    if packed >> 2 != _FLEX_MAP:
        return {}
    width = 1 << (packed & 3)
    data = root - _flex_uint(buf, root, root_width)
    size = _flex_uint(buf, data - width, width)
    keys_at = data - 3 * width
    keys = keys_at - _flex_uint(buf, keys_at, width)
    key_width = _flex_uint(buf, data - 2 * width, width)
    if data + size * (width + 1) > len(buf):
        raise _Corrupt(f"flexbuffer map of {size} entries runs past the end")
    out: dict[str, Any] = {}
    for i in range(size):
        key_ref = keys + i * key_width
        key = _flex_cstring(buf, key_ref - _flex_uint(buf, key_ref, key_width))
        packed_value = buf[data + size * width + i]
        out[key] = _flex_value(buf, data + i * width, width, packed_value >> 2, 1 << (packed_value & 3))
    return out


def _flex_cstring(buf: bytes, pos: int) -> str:
    end = buf.find(b"\0", pos) if pos >= 0 else -1
    if end < 0:
        raise _Corrupt(f"flexbuffer key at {pos} is not terminated")
    return buf[pos:end].decode("utf-8", "replace")


def _flex_value(buf: bytes, pos: int, parent_width: int, kind: int, width: int) -> Any:
    """One map value: inline scalars use the map's width, indirect ones and strings their own."""
    if kind == _FLEX_NULL:
        return None
    if kind in (_FLEX_INT, _FLEX_UINT, _FLEX_BOOL):
        value = _flex_uint(buf, pos, parent_width, signed=kind == _FLEX_INT)
        return bool(value) if kind == _FLEX_BOOL else value
    if kind == _FLEX_FLOAT:
        return _flex_float(buf, pos, parent_width)
    if kind not in (_FLEX_INDIRECT_INT, _FLEX_INDIRECT_UINT, _FLEX_INDIRECT_FLOAT, _FLEX_STRING, _FLEX_KEY):
        return None  # vectors, maps, blobs: not needed here
    target = pos - _flex_uint(buf, pos, parent_width)
    if kind == _FLEX_INDIRECT_FLOAT:
        return _flex_float(buf, target, width)
    if kind in (_FLEX_INDIRECT_INT, _FLEX_INDIRECT_UINT):
        return _flex_uint(buf, target, width, signed=kind == _FLEX_INDIRECT_INT)
    if kind == _FLEX_KEY:
        return _flex_cstring(buf, target)
    n = _flex_uint(buf, target - width, width)
    if target + n > len(buf):
        raise _Corrupt(f"flexbuffer string at {target} runs past the end")
    return buf[target:target + n].decode("utf-8", "replace")


def _flex_float(buf: bytes, pos: int, width: int) -> float:
    if width not in (4, 8) or pos < 0 or pos + width > len(buf):
        raise _Corrupt(f"flexbuffer float of {width} bytes at {pos}")
    return struct.unpack_from("<f" if width == 4 else "<d", buf, pos)[0]


def _build_id(r: CountingReader, offset: int, size: int) -> str | None:
    """The QAIRT build id text (``v2.44.0.260225...``) near the start of a QNN context binary."""
    if offset < 0:  # a corrupt bytecode_offset pointing before the section
        return None
    end = offset + (size if size > 0 else CTX_MAX_WINDOW)
    data = r.read_at(offset, min(CTX_WINDOW, end - offset))
    m = BUILD_ID_RE.search(data)
    if not m and end - offset > CTX_WINDOW:  # rare: look a little further, once
        data = data[-64:] + r.read_at(offset + CTX_WINDOW, min(CTX_MAX_WINDOW, end - offset) - CTX_WINDOW)
        m = BUILD_ID_RE.search(data)
    # group 1 stops at the 6-digit build id: already what catalog.normalize_qairt would return
    return m.group(1).decode() if m else None
