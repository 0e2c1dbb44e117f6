"""FlatBuffers, FlexBuffers and protobuf read by offset with ``struct``, bounds-checked.

The ``.litertlm`` reader (:mod:`provisioner.artifacts.litertlm`) follows three wire formats: the
LiteRT-LM header and the TFLite ``Model`` are FlatBuffers, a ``DISPATCH_OP``'s custom options are a
FlexBuffers map, the LLM metadata is a protobuf message. Importing the real libraries would pull in
numpy, absl and protobuf for a check meant to take a second, so these few readers decode just the
shapes needed. Kept apart from the reader because they know the wire formats, not LiteRT-LM's
schema: every impossible offset raises :class:`Corrupt`, a read past the bytes read so far
:class:`OutOfWindow` (read more of the file and retry).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import Any

U8, U16, U32, I32, U64 = (struct.Struct(f) for f in ("<B", "<H", "<I", "<i", "<Q"))


class Corrupt(Exception):
    """An offset or length in the file points nowhere sensible."""


class OutOfWindow(Corrupt):
    """A read went past the bytes read so far: read more of the file and retry (or it is truncated)."""


class Flat:
    """Just enough of the FlatBuffers binary format to follow tables, vectors and strings.

    A table starts with a signed offset back to its vtable; the vtable lists, per field slot, the
    field's offset inside the table (0 = absent, use the default). Vectors and strings are a u32
    length followed by the data; references to them are u32 offsets forward from where they are
    stored. Every read is bounds-checked: past the end of ``buf`` raises :class:`OutOfWindow`
    (the caller may read more of the file), anything else impossible raises :class:`Corrupt`.
    """

    __slots__ = ("buf",)

    def __init__(self, buf: bytes) -> None:
        self.buf = buf

    def get(self, fmt: struct.Struct, pos: int) -> Any:
        if pos < 0:
            raise Corrupt(f"offset {pos} before the start")
        if pos + fmt.size > len(self.buf):
            raise OutOfWindow(f"offset {pos} beyond {len(self.buf)} bytes")
        return fmt.unpack_from(self.buf, pos)[0]

    def deref(self, pos: int) -> int:
        """Follow the u32 offset stored at ``pos`` (to a table, vector or string)."""
        return pos + self.get(U32, pos)

    def root(self) -> int:
        return self.deref(0)

    def field(self, table: int, slot: int) -> int | None:
        """Absolute position of field ``slot`` of the table at ``table``; None when absent."""
        vtable = table - self.get(I32, table)
        vtable_size = self.get(U16, vtable)
        if vtable_size < 4 or vtable_size % 2:
            raise Corrupt(f"vtable at {vtable} has size {vtable_size}")
        entry = 4 + 2 * slot
        if entry + 2 > vtable_size:
            return None  # written by an older schema: the field is absent
        offset = self.get(U16, vtable + entry)
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
        n = self.get(U32, ref)
        if ref + 4 + n * elem_size > len(self.buf):
            raise OutOfWindow(f"vector at {ref} of {n} elements ends beyond {len(self.buf)} bytes")
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


def varint(buf: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(buf) or shift > 63:
            raise Corrupt("varint runs past the end")
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7


def proto_fields(buf: bytes) -> Iterator[tuple[int, int, Any]]:
    """(field number, wire type, value) of every field of a protobuf message, in file order.

    Values: int for varints, bytes for length-delimited and fixed-size fields. Groups (wire types
    3/4, long deprecated) are treated as corrupt.
    """
    pos = 0
    while pos < len(buf):
        key, pos = varint(buf, pos)
        number, wire = key >> 3, key & 7
        if number == 0:
            raise Corrupt("field number 0")
        if wire == 0:
            value, pos = varint(buf, pos)
        elif wire in (1, 2, 5):
            if wire == 2:
                n, pos = varint(buf, pos)
            else:
                n = 8 if wire == 1 else 4
            if pos + n > len(buf):
                raise Corrupt("field runs past the end")
            value, pos = buf[pos:pos + n], pos + n
        else:
            raise Corrupt(f"wire type {wire}")
        yield number, wire, value


# FlexBuffers value types (flatbuffers/flexbuffers.py ``Type``)
_FLEX_NULL, _FLEX_INT, _FLEX_UINT, _FLEX_FLOAT, _FLEX_KEY, _FLEX_STRING = 0, 1, 2, 3, 4, 5
_FLEX_INDIRECT_INT, _FLEX_INDIRECT_UINT, _FLEX_INDIRECT_FLOAT, _FLEX_MAP, _FLEX_BOOL = 6, 7, 8, 9, 26


def _flex_uint(buf: bytes, pos: int, width: int, signed: bool = False) -> int:
    if pos < 0 or pos + width > len(buf) or width not in (1, 2, 4, 8):
        raise Corrupt(f"flexbuffer read of {width} bytes at {pos} outside {len(buf)} bytes")
    return int.from_bytes(buf[pos:pos + width], "little", signed=signed)


def flex_map(buf: bytes) -> dict[str, Any]:
    """The scalar and string entries of the FlexBuffers map ``buf`` (DISPATCH_OP custom options).

    Layout: the last byte is the root's width, the one before its packed type (type << 2 | log2
    width); a map's values sit at its offset, preceded by [keys offset, keys width, length], and
    are followed by one packed type byte per value. Nested vectors/maps/blobs are not needed and
    come back as None. A root that is not a map gives ``{}``.
    """
    if len(buf) < 3:
        raise Corrupt("flexbuffer shorter than 3 bytes")
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
        raise Corrupt(f"flexbuffer map of {size} entries runs past the end")
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
        raise Corrupt(f"flexbuffer key at {pos} is not terminated")
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
        raise Corrupt(f"flexbuffer string at {target} runs past the end")
    return buf[target:target + n].decode("utf-8", "replace")


def _flex_float(buf: bytes, pos: int, width: int) -> float:
    if width not in (4, 8) or pos < 0 or pos + width > len(buf):
        raise Corrupt(f"flexbuffer float of {width} bytes at {pos}")
    return struct.unpack_from("<f" if width == 4 else "<d", buf, pos)[0]
