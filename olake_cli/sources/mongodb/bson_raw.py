"""The BSON byte layout, read for many documents at once with numpy: where each document starts, the
size of each element's value, and the element of each expected field in every (sub-)document at once
(``walk``); anything outside the regular layout raises ``Refused``. ``bson_arrow`` builds Arrow
columns from what this finds.
"""

from __future__ import annotations

import struct
from typing import Any, NamedTuple

import numpy as np

PAD = bytes(64)  # gathers past a document's end land here, never outside the buffer
IS_NULL = np.zeros(256, bool)
IS_NULL[[0x0A, 0x06]] = True  # null, undefined: both decode to None
_FIXED = np.full(256, -1, np.int64)
for _code, _size in {0x01: 8, 0x06: 0, 0x07: 12, 0x08: 1, 0x09: 8, 0x0A: 0, 0x10: 4, 0x11: 8, 0x12: 8,
                     0x13: 16, 0xFF: 0, 0x7F: 0}.items():
    _FIXED[_code] = _size
_LENGTH_PLUS = {0x02: 4, 0x0D: 4, 0x0E: 4, 0x03: 0, 0x04: 0, 0x0F: 0, 0x05: 5, 0x0C: 16}


class Refused(Exception):
    """The batch leaves the regular layout: the caller converts it document by document."""


class Slots(NamedTuple):
    """Elements of many containers at once: type byte, value position, and whether present."""

    kind: np.ndarray  # uint8 BSON type (meaningless where not present)
    value: np.ndarray  # int64 position of the value
    present: np.ndarray  # bool


def document_starts(data: bytes) -> np.ndarray:
    """The offset of each document of the buffer (each one's length leads it)."""
    starts, pos, end = [], 0, len(data)
    unpack = struct.Struct("<i").unpack_from
    while pos < end:
        starts.append(pos)
        (size,) = unpack(data, pos)
        if size < 5:
            raise Refused
        pos += size
    if pos != end:
        raise Refused
    return np.array(starts, np.int64)


def bytes_at(buf: np.ndarray, pos: np.ndarray, width: int) -> np.ndarray:
    """``width`` bytes at each position, one row each (clipped to the buffer)."""
    return buf.take(pos[:, None] + np.arange(width), mode="clip")


def i32(buf: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """Little-endian int32 at each position, as int64."""
    return np.ascontiguousarray(bytes_at(buf, pos, 4)).view("<i4").ravel().astype(np.int64)


def i64(buf: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """Little-endian int64 at each position."""
    return np.ascontiguousarray(bytes_at(buf, pos, 8)).view("<i8").ravel()


def value_sizes(buf: np.ndarray, kind: np.ndarray, value: np.ndarray, present: np.ndarray) -> np.ndarray:
    """The byte size of each present value (0 elsewhere); refused for a regex or an unknown type."""
    sizes = np.where(present, _FIXED[kind], 0)
    for code, extra in _LENGTH_PLUS.items():
        rows = present & (kind == code)
        if rows.any():
            sizes[rows] = i32(buf, value[rows]) + extra
    if (sizes < 0).any():
        raise Refused
    return sizes


def walk(buf: np.ndarray, cursor: np.ndarray, end: np.ndarray, active: np.ndarray,
         properties: dict) -> dict[str, Slots]:
    """The element of each property in containers whose elements start at ``cursor`` (those
    ``active``), in the properties' order; refused unless each container ends right after them."""
    cursor = cursor.copy()
    slots = {}
    for name, _prop in properties.items():
        key = np.frombuffer(name.encode("utf-8") + b"\0", np.uint8)
        kind = buf[cursor]
        present = active & (kind != 0) & (bytes_at(buf, cursor + 1, len(key)) == key).all(axis=1)
        value = cursor + 1 + len(key)
        cursor = np.where(present, value + value_sizes(buf, kind, value, present), cursor)
        slots[name] = Slots(kind, value, present)
    if (active & (cursor != end)).any() or (buf[end[active]] != 0).any():
        raise Refused
    return slots


def element_value(buf: np.ndarray, kind: int, value: int, size: int | None = None) -> Any:
    """One element's value decoded by pymongo (as the document-by-document path decodes it)."""
    import bson

    from olake_cli.sources.mongodb.bson_schema import BSON_CODEC_OPTIONS

    if size is None:
        size = int(value_sizes(buf, np.array([kind], np.uint8), np.array([value]), np.ones(1, bool))[0])
    body = bytes([kind]) + b"v\0" + buf[value:value + size].tobytes()
    document = struct.pack("<i", len(body) + 5) + body + b"\0"
    return bson.decode(document, codec_options=BSON_CODEC_OPTIONS)["v"]
