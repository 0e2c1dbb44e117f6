"""Read what matters in a ``.litertlm`` file without reading the file.

A Gemma-4 E2B file is 3.3 GB; the facts a release engineer needs (format version, sections,
NPU-only, context length, the QAIRT build its QNN context binaries were compiled with, whether
the download is complete) live in a few KiB: the 32-byte preamble, the header flatbuffer, the
TFLite operator tables and the first bytes of each context binary. Everything here reads by
offset and counts the bytes it read, so ``provisioner inspect`` stays fast on a slow disk and
``bench/inspect_litertlm.py`` can prove it.

Why no ``litert_lm_builder``/``tflite``/``flatbuffers``/``protobuf`` imports: together they pull
in numpy, absl and protobuf - about 0.2 s of start-up, a hundred times the reading itself, and
``provisioner inspect`` is meant to be a one-second check. The three wire formats involved are
small and stable, so this module reads exactly the fields it needs with ``struct``, through the
readers in :mod:`provisioner.artifacts.wire_formats`:

* FlatBuffers tables/vectors/strings (``Flat``) for the LiteRT-LM header (``LiteRTLMMetaData``)
  and the TFLite ``Model`` (operator codes, operators, custom options);
* a FlexBuffers map of scalars and strings (``flex_map``) for a ``DISPATCH_OP``'s options;
* protobuf varint/length fields (``proto_fields``) for the LLM metadata.

The slot and field numbers below come from the schemas' generated code shipped in the
``litert-lm-builder`` and ``tflite`` packages; ``tests/artifacts/test_litertlm_schema.py`` checks
them against the installed packages, so a schema change shows up as a failing test. Every offset
is bounds-checked: a corrupt file gives one :class:`ArtifactError` line, never a traceback.
"""

from __future__ import annotations

import os
import re
import struct
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from provisioner.artifacts.wire_formats import U8, U32, U64, Corrupt, Flat, OutOfWindow, flex_map, proto_fields
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



class TruncatedFile(ArtifactError):
    """The file ends inside its own header: an interrupted download, so "checked and unfit" (exit 1).

    A file cut after the header is reported (``LitertlmInfo.truncated``), not raised; both say
    ``truncated`` and both exit 1, so a script need not care where the download stopped.
    """

    exit_code = EXIT_UNFIT


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


def _kv(fb: Flat, kvp: int) -> tuple[str, Any]:
    """Decode a header KeyValuePair: the union ``value`` is a one-field table of the tagged type."""
    key = (fb.bytes(kvp, KV_KEY) or b"").decode("utf-8", "replace")
    member = VDATA.get(fb.scalar(kvp, KV_VALUE_TYPE, U8))
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
            system, sections = _parse_header(Flat(raw))
        except Corrupt as exc:  # the whole header is in ``raw``: out of window means corrupt too
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


def _parse_header(fb: Flat) -> tuple[dict[str, Any], list[Section] | None]:
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
        dtype_id = fb.scalar(obj, SECTION_DATA_TYPE, U8)
        dtype = SECTION_TYPES.get(dtype_id, f"unknown({dtype_id})")
        sections.append(Section(index=i, data_type=dtype, begin=fb.scalar(obj, SECTION_BEGIN, U64),
                                end=fb.scalar(obj, SECTION_END, U64), items=items))
    return system, sections


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
        for number, wire, value in proto_fields(r.read_at(s.begin, s.end - s.begin)):
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
                for member, member_wire, _ in proto_fields(value):
                    if member_wire == 2 and (name := _model_type_name(member)):
                        model_type = name
    except (Corrupt, UnicodeDecodeError):
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
        except OutOfWindow:
            if window >= limit or window >= TFLITE_MAX_WINDOW:
                s.note = ("TFLite op table unreadable (truncated?)" if window >= limit
                          else f"TFLite op table larger than {TFLITE_MAX_WINDOW >> 20} MiB; not scanned")
                return
            window = min(window * 4, limit, TFLITE_MAX_WINDOW)
        except Corrupt as exc:
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
    fb = Flat(buf)
    model = fb.root()
    codes = []
    for code in fb.tables(model, MODEL_OPERATOR_CODES) or []:
        custom = fb.bytes(code, OPCODE_CUSTOM_CODE)
        codes.append(custom.decode("utf-8", "replace") if custom else None)
    out = []
    for g, sg in enumerate(fb.tables(model, MODEL_SUBGRAPHS) or []):
        for k, op in enumerate(fb.tables(sg, SUBGRAPH_OPERATORS) or []):
            idx = fb.scalar(op, OPERATOR_OPCODE_INDEX, U32)
            if idx >= len(codes) or codes[idx] != DISPATCH_OP:
                continue
            raw = fb.bytes(op, OPERATOR_CUSTOM_OPTIONS)
            opts = flex_map(raw) if raw else {}
            offset, size, name = opts.get("bytecode_offset"), opts.get("bytecode_size", 0), opts.get("name")
            if not isinstance(offset, int | float) or not isinstance(size, int | float):
                continue
            out.append((g, k, name if isinstance(name, str) else None, int(offset), int(size)))
    return out


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
