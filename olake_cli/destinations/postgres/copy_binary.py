"""Rows in olake's destination types as ``COPY ... FROM STDIN (FORMAT binary)``, a column at a time.

Binary is used where it helps and is exact: when every column of a table is of a type whose binary
form numpy can build from the Arrow buffers and the target column has exactly that type (booleans,
integers, floats, text and varchar, json and jsonb, uuid, bytea, date, time, timestamp(tz), interval,
and numeric(p,s) up to 15 digits: sent as fixed groups of base-10000 digits, which the server
normalises). Anything else (arrays, other numerics, enums, inet, ...) goes as COPY text
(``copy_text``). Each column becomes one length-prefixed cell per row (``-1`` for NULL); one
element-wise join makes the tuples.
"""

from __future__ import annotations

import re
import struct

import numpy
import pyarrow as pa
import pyarrow.compute as pc

from olake_cli.core.codec.types import INT32_MAX, INT32_MIN, INT64_MAX, INT64_MIN

HEADER = b"PGCOPY\n\xff\r\n\x00" + struct.pack(">ii", 0, 0)
TRAILER = struct.pack(">h", -1)
_PG_EPOCH_DAYS, _PG_EPOCH_US = 10_957, 946_684_800_000_000
_NULL = numpy.frombuffer(struct.pack(">i", -1), numpy.uint8)
_DECIMAL = re.compile(r"decimal\((\d+),(\d+)\)")
_NUMERIC = re.compile(r"numeric\((\d+),(\d+)\)")
_FIXED = {"bool": ("boolean", ">u1"), "int16": ("smallint", ">i2"), "int32": ("integer", ">i4"),
          "int64": ("bigint", ">i8"), "float32": ("real", ">f4"), "float64": ("double precision", ">f8")}
_TEMPORAL = {"date": "date", "time": "time without time zone", "timestamp": "timestamp without time zone",
             "timestamptz": "timestamp with time zone"}
_MAX_DIGITS = 15  # unscaled values times 10^3 stay within int64
_GROUPS = 5  # base-10000 digits of 15 decimal digits plus 3 of padding


def binary_fits(olake_type: str, sql_type: str) -> bool:
    """Whether a column of this olake type goes into a column of this target type in binary, exactly."""
    if olake_type in _FIXED:
        return sql_type == _FIXED[olake_type][0]
    if olake_type in _TEMPORAL:
        return sql_type == _TEMPORAL[olake_type]
    if olake_type == "string":
        return sql_type == "text" or (sql_type.startswith("character varying") and "[" not in sql_type)
    match = _DECIMAL.fullmatch(olake_type)
    if match:
        return int(match[1]) <= _MAX_DIGITS and sql_type == f"numeric({match[1]},{match[2]})"
    return (olake_type, sql_type) in {("json", "json"), ("json", "jsonb"), ("uuid", "uuid"), ("bytes", "bytea"),
                                      ("interval", "interval")}


def copy_binary_rows(columns: list[pa.Array | pa.ChunkedArray], olake_types: list[str], sql_types: list[str]) -> bytes:
    """The tuples of the given columns in COPY's binary format (no header or trailer)."""
    cells = [_cells(_whole(c), t, s) for c, t, s in zip(columns, olake_types, sql_types)]
    count = pa.array([struct.pack(">h", len(cells))] * len(cells[0]), pa.binary()) if cells else None
    if count is None or len(count) == 0:
        return b""
    rows = pc.binary_join_element_wise(count, *cells, pa.scalar(b"", pa.binary()))
    offsets = numpy.frombuffer(rows.buffers()[1], dtype=numpy.int32, count=len(rows) + 1, offset=4 * rows.offset)
    return memoryview(rows.buffers()[2])[int(offsets[0]):int(offsets[-1])].tobytes()


def _whole(array: pa.Array | pa.ChunkedArray) -> pa.Array:
    return array.combine_chunks() if isinstance(array, pa.ChunkedArray) else array


def _cells(array: pa.Array, olake_type: str, sql_type: str) -> pa.Array:
    if isinstance(array.type, pa.BaseExtensionType):
        array = array.storage  # uuid (16 bytes), json (text)
    valid = numpy.asarray(array.is_valid())
    if olake_type in _FIXED:
        values = array.to_numpy(zero_copy_only=False) if array.null_count == 0 else \
            pc.fill_null(array, False if olake_type == "bool" else 0).to_numpy(zero_copy_only=False)
        return _fixed(values.astype(_FIXED[olake_type][1]).view(numpy.uint8).reshape(len(array), -1), valid)
    if olake_type in _TEMPORAL:
        return _fixed(_temporal(array, olake_type).view(numpy.uint8).reshape(len(array), -1), valid)
    if olake_type == "interval":
        parts = [pc.fill_null(array.field(f), 0).to_numpy(zero_copy_only=False).astype(t)
                 for f, t in (("microseconds", ">i8"), ("days", ">i4"), ("months", ">i4"))]
        joined = numpy.concatenate([p.view(numpy.uint8).reshape(len(array), -1) for p in parts], axis=1)
        return _fixed(joined, valid)
    if olake_type == "uuid":
        raw = numpy.frombuffer(array.buffers()[1], numpy.uint8, count=16 * (len(array) + array.offset))
        return _fixed(raw[16 * array.offset:].reshape(len(array), 16), valid)
    if olake_type.startswith("decimal"):
        return _fixed(_numeric(array), valid)
    prefix = b"\x01" if sql_type == "jsonb" else b""  # jsonb's binary form: version 1, then the text
    return _variable(array.cast(pa.binary()), valid, prefix)


def _fixed(values: numpy.ndarray, valid: numpy.ndarray) -> pa.Array:
    """Cells of a fixed-width binary form (``values``: one row of bytes per value)."""
    rows, width = values.shape
    whole = numpy.empty((rows, 4 + width), numpy.uint8)
    whole[:, :4] = numpy.frombuffer(struct.pack(">i", width), numpy.uint8)
    whole[:, 4:] = values
    keep = numpy.ones(whole.shape, bool)
    if not valid.all():
        whole[~valid, :4] = _NULL
        keep[~valid, 4:] = False
    lengths = numpy.where(valid, 4 + width, 4).astype(numpy.int32)
    offsets = numpy.concatenate([[0], numpy.cumsum(lengths)]).astype(numpy.int32)
    return pa.BinaryArray.from_buffers(pa.binary(), rows, [None, pa.py_buffer(offsets),
                                                           pa.py_buffer(whole[keep].tobytes())])


def _variable(array: pa.Array, valid: numpy.ndarray, prefix: bytes) -> pa.Array:
    """Cells of text-like values: their byte length (plus ``prefix``), then the prefix and the bytes."""
    offsets = numpy.frombuffer(array.buffers()[1], numpy.int32, count=len(array) + 1, offset=4 * array.offset)
    lengths = numpy.diff(offsets) + len(prefix)
    heads = numpy.where(valid, lengths, -1).astype(">i4").view(numpy.uint8).reshape(len(array), 4)
    head = pa.FixedSizeBinaryArray.from_buffers(pa.binary(4), len(array), [None, pa.py_buffer(heads.tobytes())])
    body = pc.fill_null(array, b"")
    if prefix:
        body = pc.if_else(pa.array(valid), pc.binary_join_element_wise(pa.scalar(prefix), body, b""), body)
    return pc.binary_join_element_wise(head.cast(pa.binary()), body, b"")


def _temporal(array: pa.Array, olake_type: str) -> numpy.ndarray:
    """Dates as days, times and timestamps as microseconds, counted as PostgreSQL does (from 2000-01-01;
    ±infinity as the int extremes)."""
    if olake_type == "date":
        days = pc.fill_null(array.view(pa.int32()), 0).to_numpy(zero_copy_only=False).astype(numpy.int64)
        infinite = (days == INT32_MAX) | (days == INT32_MIN)
        return numpy.where(infinite, days, days - _PG_EPOCH_DAYS).astype(">i4")
    micros = pc.fill_null(array.cast(pa.time64("us") if olake_type == "time" else array.type).view(pa.int64()), 0) \
        .to_numpy(zero_copy_only=False)
    if olake_type == "time":
        return micros.astype(">i8")
    infinite = (micros == INT64_MAX) | (micros == INT64_MIN)
    return numpy.where(infinite, micros, micros - _PG_EPOCH_US).astype(">i8")


def _numeric(array: pa.Array) -> numpy.ndarray:
    """numeric(p,s) values (p <= 15) as fixed groups of base-10000 digits: ndigits, weight, sign, dscale."""
    scale = array.type.scale
    raw = numpy.frombuffer(array.buffers()[1], numpy.int64, count=2 * (len(array) + array.offset))
    unscaled = raw[2 * array.offset::2].copy()  # the low 64 bits hold every value of up to 18 digits
    unscaled[~numpy.asarray(array.is_valid())] = 0
    pad = (-scale) % 4
    magnitude = numpy.abs(unscaled).astype(numpy.uint64) * numpy.uint64(10 ** pad)
    groups = numpy.empty((len(array), _GROUPS), numpy.uint64)
    for position in range(_GROUPS):  # most significant first
        groups[:, _GROUPS - 1 - position] = (magnitude // numpy.uint64(10_000 ** position)) % numpy.uint64(10_000)
    header = numpy.empty((len(array), 4), ">i2")
    header[:, 0] = _GROUPS
    header[:, 1] = _GROUPS - 1 - (scale + pad) // 4
    header[:, 2] = numpy.where(unscaled < 0, 0x4000, 0)
    header[:, 3] = scale
    return numpy.concatenate([header.view(numpy.uint8), groups.astype(">i2").view(numpy.uint8)], axis=1)
