"""The ``llm_model_type`` a ``.litertlm`` file names, read on the board with the standard library.

Why the service reads it: LiteRT-LM picks the model data processor that renders tools and parses tool
calls from this field (runtime/conversation/model_data_processor/model_data_processor_factory.cc:342-362
at cbf463d), and the pinned C API has no call that names the processor or the type. A ``generic`` model's
processor returns text only (generic_data_processor.cc:51-63), so a service that offered tools for it
would drop every call the model wrote into the answer's text without a word.

It costs three small reads (the 32-byte preamble, the header flatbuffer, the LlmMetadata section), never
the weights. Format sources, all google-ai-edge/LiteRT-LM at cbf463d:

* the preamble: ``LITERTLM``, major/minor/patch as uint32, 4 bytes of padding, the header's end offset as
  uint64 (schema/core/litertlm_read.cc:72-115); the header flatbuffer starts at byte 32;
* the header: ``LiteRTLMMetaData`` {system_metadata, section_metadata}, ``SectionMetadata`` {objects},
  ``SectionObject`` {items, begin_offset, end_offset, data_type}, data type 5 = ``LlmMetadataProto``
  (schema/core/litertlm_header_schema.fbs);
* the section: protobuf ``LlmMetadata``, ``llm_model_type`` = field 6 (runtime/proto/llm_metadata.proto:81),
  a message whose ``model_type`` oneof members are numbered in runtime/proto/llm_model_type.proto:26-35.

A file without the field gets a type the runtime infers from its tokenizer: gemma3n or gemma3 from the
start-of-turn token, else generic (runtime/util/model_type_utils.cc:85-125); that cannot be seen without
the tokenizer, so :func:`read_model_type` says None and the engine does not claim tools.
"""

from __future__ import annotations

import struct

MAGIC = b"LITERTLM"
PREAMBLE = 32
MAX_HEADER = 16 * 1024 * 1024
MAX_METADATA = 8 * 1024 * 1024
LLM_METADATA_SECTION = 5          # AnySectionDataType LlmMetadataProto
LLM_MODEL_TYPE_FIELD = 6          # LlmMetadata.llm_model_type
# LlmModelType.model_type oneof: member field number -> name (llm_model_type.proto:26-35 at cbf463d)
MODEL_TYPES = {1: "generic_model", 2: "gemma3n", 3: "function_gemma", 4: "gemma3", 5: "qwen3", 7: "qwen2p5",
               8: "gemma4", 9: "fast_vlm"}
# The types whose processor parses tool calls out of the model's text (model_data_processor_factory.cc:345-358:
# the Gemma 3 / 3n, Gemma 4, Qwen 3 / 2.5 and FunctionGemma processors call ParseTextAndToolCalls; the
# generic and FastVLM ones return the text as it is, generic_data_processor.cc:51-63, fastvlm_data_processor.cc:145).
PARSES_TOOL_CALLS = frozenset({"gemma3", "gemma3n", "gemma4", "function_gemma", "qwen3", "qwen2p5"})


class NotLitertlm(ValueError):
    """The file is not a LiteRT-LM container this reader understands (its reason in one line)."""


def _u32(buf: bytes, at: int) -> int:
    if at < 0 or at + 4 > len(buf):
        raise NotLitertlm("header flatbuffer offset out of range")
    return struct.unpack_from("<I", buf, at)[0]


def _field(buf: bytes, table: int, slot: int) -> int | None:
    """Where field ``slot`` of the flatbuffer table at ``table`` is, or None when it is absent."""
    vtable = table - struct.unpack_from("<i", buf, table)[0] if 0 <= table <= len(buf) - 4 else -1
    if vtable < 0 or vtable + 4 > len(buf):
        raise NotLitertlm("header flatbuffer vtable out of range")
    size = struct.unpack_from("<H", buf, vtable)[0]
    entry = vtable + 4 + 2 * slot
    if entry + 2 > vtable + size or entry + 2 > len(buf):
        return None
    off = struct.unpack_from("<H", buf, entry)[0]
    return table + off if off else None


def _ref(buf: bytes, at: int) -> int:
    return at + _u32(buf, at)


def _sections(header: bytes) -> list[tuple[int, int, int]]:
    """(data_type, begin, end) of each SectionObject of the header flatbuffer."""
    root = _u32(header, 0)
    meta = _field(header, root, 1)                       # LiteRTLMMetaData.section_metadata
    if meta is None:
        return []
    objects = _field(header, _ref(header, meta), 0)      # SectionMetadata.objects
    if objects is None:
        return []
    vec = _ref(header, objects)
    out = []
    for i in range(_u32(header, vec)):
        obj = _ref(header, vec + 4 + 4 * i)
        begin, end, dtype = (_field(header, obj, s) for s in (1, 2, 3))
        if begin is None or end is None or dtype is None or end + 8 > len(header) or dtype >= len(header):
            continue
        offsets = struct.unpack_from("<Q", header, begin)[0], struct.unpack_from("<Q", header, end)[0]
        out.append((header[dtype], *offsets))
    return out


def _varint(buf: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if at >= len(buf) or shift > 63:
            raise NotLitertlm("LlmMetadata does not parse (varint)")
        b = buf[at]
        value |= (b & 0x7F) << shift
        at += 1
        shift += 7
        if not b & 0x80:
            return value, at


def _fields(buf: bytes):
    """(number, wire type, value) of each top-level protobuf field; a length-delimited value is bytes."""
    at = 0
    while at < len(buf):
        tag, at = _varint(buf, at)
        number, wire = tag >> 3, tag & 7
        if wire == 0:
            value, at = _varint(buf, at)
        elif wire == 1:
            value, at = buf[at:at + 8], at + 8
        elif wire == 2:
            n, at = _varint(buf, at)
            value, at = buf[at:at + n], at + n
        elif wire == 5:
            value, at = buf[at:at + 4], at + 4
        else:
            raise NotLitertlm(f"LlmMetadata does not parse (wire type {wire})")
        if at > len(buf):
            raise NotLitertlm("LlmMetadata does not parse (field past its end)")
        yield number, wire, value


def read_model_type(path: str) -> str | None:
    """The ``llm_model_type`` member ``path`` names (``gemma4``, ``generic_model``, ...; a number this reader
    does not know as ``type <n>``), or None when the file names none. :class:`NotLitertlm` or OSError when
    the file cannot be read as a LiteRT-LM container."""
    with open(path, "rb") as fh:
        pre = fh.read(PREAMBLE)
        if len(pre) < PREAMBLE or pre[:8] != MAGIC:
            raise NotLitertlm("not a .litertlm file (no LITERTLM preamble)")
        if struct.unpack_from("<I", pre, 8)[0] != 1:
            raise NotLitertlm(f"LiteRT-LM format {struct.unpack_from('<I', pre, 8)[0]}.x; this reader knows 1.x")
        end = struct.unpack_from("<Q", pre, 24)[0]
        if not PREAMBLE < end <= PREAMBLE + MAX_HEADER:
            raise NotLitertlm(f"corrupt header end offset {end}")
        header = fh.read(end - PREAMBLE)
        if len(header) != end - PREAMBLE:
            raise NotLitertlm("the file ends inside its header")
        try:
            found = [(b, e) for t, b, e in _sections(header) if t == LLM_METADATA_SECTION]
        except struct.error as exc:
            raise NotLitertlm(f"corrupt header flatbuffer ({exc})") from None
        if not found or not 0 <= found[-1][1] - found[-1][0] <= MAX_METADATA:
            return None
        begin, stop = found[-1]
        fh.seek(begin)
        meta = fh.read(stop - begin)
    kind = None
    for number, wire, value in _fields(meta):
        if number == LLM_MODEL_TYPE_FIELD and wire == 2:
            for member, member_wire, _ in _fields(value):        # proto3: the last member set wins
                if member_wire == 2:
                    kind = MODEL_TYPES.get(member, f"type {member}")
    return kind
