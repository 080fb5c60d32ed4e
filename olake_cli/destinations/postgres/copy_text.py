"""Rows in olake's destination types as ``COPY ... FROM STDIN`` text, built a column at a time.

Each column becomes PostgreSQL's input text of its values with Arrow compute (integers and floats cast
to their shortest exact text, decimals, timestamps and dates of years 1 to 9999 by Arrow's own casts,
others through ``calendar_text``; ±infinity from the int extremes that stand for them; bytea as hex,
intervals as months, days and microseconds, arrays as array literals of any depth), then is escaped
for COPY's text format (``\\``, tab, newline, carriage return) with ``\\N`` for NULL; one element-wise
join makes the lines. Only documents (MongoDB) and BC or far-future instants go value by value.
"""

from __future__ import annotations

import binascii
from collections.abc import Sequence

import numpy
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from olake_cli.core.calendar_text import date_text, timestamp_text
from olake_cli.core.codec.encode import wire_array, wire_values
from olake_cli.core.codec.types import INT32_MAX, INT32_MIN, INT64_MAX, INT64_MIN, NDARRAY
from olake_cli.core.errors import DestinationError

NULL = "\\N"
_TS_FAST = (-62_135_596_800_000_000, 253_402_300_799_999_999)  # years 1..9999: Arrow's own text
_DATE_FAST = (-719_162, 2_932_896)
_DAY_US = 86_400_000_000
_NEEDS_COPY_ESCAPE = "[\\\\\n\r\t]"
_COPY_ESCAPES = (("\\", "\\\\"), ("\n", "\\n"), ("\r", "\\r"), ("\t", "\\t"))
_TEXT_KINDS = frozenset({"string", "numeric", "objectid", "decimal128", "json", "bson"})


def copy_text(columns: Sequence[pa.Array | pa.ChunkedArray], olake_types: Sequence[str],
              names: Sequence[str], props: Sequence[dict | None]) -> bytes:
    """One COPY text line per row of the given columns (all of the same length)."""
    texts = [copy_escaped(value_texts(_whole(c), t, n, p)) for c, t, n, p in zip(columns, olake_types, names, props)]
    if not texts or len(texts[0]) == 0:
        return b""
    lines = pc.binary_join_element_wise(*texts, "\t") if len(texts) > 1 else texts[0]
    lines = pc.binary_join_element_wise(lines, "\n", "")
    offsets = numpy.frombuffer(lines.buffers()[1], dtype=numpy.int32, count=len(lines) + 1, offset=4 * lines.offset)
    return memoryview(lines.buffers()[2])[int(offsets[0]):int(offsets[-1])].tobytes()


def copy_escaped(text: pa.Array) -> pa.Array:
    """Texts escaped for COPY's text format, NULL as ``\\N``."""
    if pc.any(pc.match_substring_regex(text, _NEEDS_COPY_ESCAPE)).as_py():
        for raw, escaped in _COPY_ESCAPES:
            text = pc.replace_substring(text, raw, escaped)
    return pc.fill_null(text, NULL)


def value_texts(array: pa.Array, olake_type: str, name: str, prop: dict | None = None) -> pa.Array:
    """PostgreSQL's input text of each value of a column (nulls stay null)."""
    if isinstance(array.type, pa.BaseExtensionType) and not isinstance(array.type, pa.UuidType):
        array = array.storage  # json
    kind = olake_type.split("<")[0].split("(")[0]
    if "document" in olake_type:
        return _document_texts(array, olake_type, name, prop)
    if kind == "array":
        return _array_texts(array, olake_type, name, prop)
    if kind == NDARRAY:
        return _ndarray_texts(array, olake_type, name)
    encoder = _ENCODERS.get(kind)
    if encoder is not None:
        return encoder(array)
    if kind in _TEXT_KINDS:
        return array.cast(pa.string())
    if kind == "uuid":
        return wire_array(array, "uuid", name)
    raise DestinationError(f"postgres destination: column '{name}': no COPY text for type {olake_type}")


def _whole(array: pa.Array | pa.ChunkedArray) -> pa.Array:
    return array.combine_chunks() if isinstance(array, pa.ChunkedArray) else array


def _bools(array: pa.Array) -> pa.Array:
    return pc.if_else(array, "t", "f")


def _numbers(array: pa.Array) -> pa.Array:
    return pc.cast(array, pa.string())  # floats: shortest exact text; "nan", "inf" are float input too


def _bytes(array: pa.Array) -> pa.Array:
    """``\\x`` and the hex digits of each value, computed over the whole data buffer at once."""
    array = array.cast(pa.binary())
    offsets = numpy.frombuffer(array.buffers()[1], dtype=numpy.int32, count=len(array) + 1, offset=4 * array.offset)
    first, last = int(offsets[0]), int(offsets[-1])
    data = array.buffers()[2]
    digits = binascii.hexlify(memoryview(data)[first:last]) if data is not None and last > first else b""
    hexed = pa.StringArray.from_buffers(len(array), pa.py_buffer(((offsets - first) * 2).astype(numpy.int32)),
                                        pa.py_buffer(digits))
    return pc.if_else(array.is_valid(), pc.binary_join_element_wise("\\x", hexed, ""), pa.scalar(None, pa.string()))


def _dates(array: pa.Array) -> pa.Array:
    raw = array.view(pa.int32())

    def slow(days: int) -> str:
        return "infinity" if days == INT32_MAX else "-infinity" if days == INT32_MIN else date_text(days)

    return _fast_or_slow(raw, _DATE_FAST, lambda fast: pc.cast(array.filter(fast), pa.string()), slow)


def _timestamps(array: pa.Array) -> pa.Array:
    if array.type.unit != "us":
        try:
            array = pc.cast(array, pa.timestamp("us", tz=array.type.tz))
        except pa.ArrowInvalid as exc:
            raise DestinationError(f"postgres destination: a timestamp out of PostgreSQL's range: {exc}") from None
    with_zone = array.type.tz is not None
    raw = array.view(pa.int64())

    def fast_texts(fast: pa.Array) -> pa.Array:
        text = pc.cast(raw.filter(fast).view(pa.timestamp("us")), pa.string())
        return pc.binary_join_element_wise(text, "+00", "") if with_zone else text

    def slow(micros: int) -> str:
        if micros in (INT64_MAX, INT64_MIN):
            return "infinity" if micros == INT64_MAX else "-infinity"
        return timestamp_text(micros, with_zone)

    return _fast_or_slow(raw, _TS_FAST, fast_texts, slow)


def _fast_or_slow(raw: pa.Array, bounds: tuple[int, int], fast_texts, slow) -> pa.Array:
    """Texts from ``fast_texts`` for raw values inside ``bounds``, from ``slow(value)`` for the others."""
    fast = pc.fill_null(pc.and_(pc.greater_equal(raw, bounds[0]), pc.less_equal(raw, bounds[1])), True)
    if pc.all(fast).as_py():
        return fast_texts(fast)
    values: list = [None] * len(raw)
    for index, text in zip(pc.indices_nonzero(fast).to_pylist(), fast_texts(fast).to_pylist()):
        values[index] = text
    raws = raw.to_pylist()
    for index in pc.indices_nonzero(pc.invert(fast)).to_pylist():
        values[index] = slow(raws[index])
    return pa.array(values, pa.string())


def _times(array: pa.Array) -> pa.Array:
    array = pc.cast(array, pa.time64("us"))
    midnight = pc.fill_null(pc.equal(array.view(pa.int64()), _DAY_US), False)  # PostgreSQL's 24:00:00
    safe = pc.if_else(midnight, pa.scalar(0, pa.time64("us")), array)
    return pc.if_else(midnight, "24:00:00", pc.cast(safe, pa.string()))


def _intervals(array: pa.Array) -> pa.Array:
    parts = [pc.cast(array.field(f), pa.string()) for f in ("months", "days", "microseconds")]
    text = pc.binary_join_element_wise(parts[0], " mons ", parts[1], " days ", parts[2], " microseconds", "")
    return pc.if_else(array.is_valid(), text, pa.scalar(None, pa.string()))


def _array_texts(array: pa.Array, olake_type: str, name: str, prop: dict | None) -> pa.Array:
    """Array literals: ``{...}`` of the elements' texts, quoted (sub-arrays unquoted), NULL unquoted."""
    element_type = olake_type[6:-1]
    items = (prop or {}).get("items") if isinstance(prop, dict) else None
    elements = _element_literals(array.flatten(), element_type, name, items if isinstance(items, dict) else None)
    lengths = pc.fill_null(pc.list_value_length(array), 0).to_numpy(zero_copy_only=False)
    offsets = pa.array(numpy.concatenate([[0], numpy.cumsum(lengths)]).astype(numpy.int32))
    lists = pa.ListArray.from_arrays(offsets, elements, mask=array.is_null())
    return pc.binary_join_element_wise("{", pc.binary_join(lists, ","), "}", "")


def _element_literals(values: pa.Array, element_type: str, name: str, prop: dict | None) -> pa.Array:
    """Array elements as they stand in an array literal: quoted texts, sub-arrays as they are, NULL."""
    texts = value_texts(values, element_type, name, prop)
    if not element_type.startswith("array<"):
        escaped = pc.replace_substring(pc.replace_substring(texts, "\\", "\\\\"), '"', '\\"')
        texts = pc.binary_join_element_wise('"', escaped, '"', "")
    return pc.fill_null(texts, "NULL")


def _ndarray_texts(array: pa.Array, olake_type: str, name: str) -> pa.Array:
    """Array literals with their bounds: ``[0:1][1:2]={{...},{...}}`` (``{}`` for an empty array)."""
    lower, lengths, elements = array.flatten()
    literals = _element_literals(elements.flatten(), olake_type[len(NDARRAY) + 1:-1], name, None).to_pylist()
    counts = pc.fill_null(pc.list_value_length(elements), 0).to_pylist()
    out, position = [], 0
    for valid, bounds, shape, count in zip(array.is_valid().to_pylist(), lower.to_pylist(), lengths.to_pylist(),
                                           counts):
        items, position = literals[position:position + count], position + count
        if not valid:
            out.append(None)
        elif not shape:
            out.append("{}")
        else:
            dims = "".join(f"[{low}:{low + size - 1}]" for low, size in zip(bounds, shape))
            out.append(f"{dims}={_nested(items, shape)}")
    return pa.array(out, pa.string())


def _nested(items: list[str], shape: list[int]) -> str:
    """Row-major ``items`` as nested braces of ``shape``."""
    if len(shape) == 1:
        return "{" + ",".join(items) + "}"
    step = len(items) // shape[0] if shape[0] else 0
    return "{" + ",".join(_nested(items[i * step:(i + 1) * step], shape[1:]) for i in range(shape[0])) + "}"


def _document_texts(array: pa.Array, olake_type: str, name: str, prop: dict | None) -> pa.Array:
    """Documents (and arrays of them) as JSON text of their wire values."""
    dumps = orjson.dumps
    return pa.array([None if v is None else dumps(v).decode() for v in wire_values(array, olake_type, name, prop)],
                    pa.string())


_ENCODERS = {
    "bool": _bools, "int16": _numbers, "int32": _numbers, "int64": _numbers, "float32": _numbers,
    "float64": _numbers, "decimal": _numbers, "bytes": _bytes, "date": _dates, "time": _times,
    "timestamp": _timestamps, "timestamptz": _timestamps, "datetime_ms": _timestamps, "interval": _intervals,
}
