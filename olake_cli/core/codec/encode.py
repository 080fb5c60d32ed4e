"""Encoding: Arrow columns (as a source scanned them) -> RECORD wire values, of the types in ``codec.types``.

``wire_values`` and ``wire_array`` read the Arrow values of the destination types (MongoDB documents,
``ndarray`` structs) and what a source's driver yields in their place: interval as a struct, an int8[3],
a month_day_nano interval or iso_8601 text, numerics as decimals or text, timestamps of any unit. A date
or timestamp outside years 1..9999 is days or microseconds since 1970 unless the caller passes an
``InstantReader`` that reads the driver's own encoding of it (a source's business: core names no
driver). A value that cannot be carried raises a ``BadValue``; the caller names the stream, the column
and the row's key.
"""

from __future__ import annotations

import binascii
import re
from collections.abc import Callable

import numpy
import pyarrow as pa
import pyarrow.compute as pc

from olake_cli.core.calendar_text import date_text, timestamp_text
from olake_cli.core.codec.bad_value import BadValue
from olake_cli.core.codec.types import (
    ARROW_TEXT_DAYS, ARROW_TEXT_MICROS, DAY_US, INT_TYPES, NDARRAY_FIELDS, NESTED_KINDS, array_shape,
    element_property, olake_type_of, shaped_array, sub_properties,
)
from olake_cli.core.errors import CatalogError, SourceError

InstantReader = Callable[[int, str], int | str]
"""``(raw, olake_type) -> value``: a raw date32 or timestamp[us] value outside years 1..9999, as a driver
yields it, read as days or microseconds since 1970 (a Python int of any size) or as the word
``"infinity"`` or ``"-infinity"``; ``olake_type`` is ``date``, ``timestamp`` or ``timestamptz``."""
_INSTANT_KINDS = frozenset({"date", "timestamp", "timestamptz"})  # their encoders take an InstantReader
_ISO_INTERVAL_RE = re.compile(
    r"P(?:(-?\d+)Y)?(?:(-?\d+)M)?(?:(-?\d+)D)?(?:T(?:(-?\d+)H)?(?:(-?\d+)M)?(?:(-?\d+(?:\.\d{1,6})?)S)?)?")


def wire_values(array: pa.Array | pa.ChunkedArray, olake_type: str, column: str,
                prop: dict | None = None, instants: InstantReader | None = None) -> list:
    """The wire (JSON-ready) values of one column, as a Python list (``prop``: its json_schema
    property, needed by ``document`` and ``array<document>``; ``instants``: reads the dates and
    timestamps outside years 1..9999, nested ones too)."""
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    if isinstance(array.type, pa.UuidType):
        return array.to_pylist()  # uuid.UUID objects; orjson writes their canonical form
    if isinstance(array.type, pa.BaseExtensionType):
        array = array.storage  # json, or a driver's own extension type (an opaque numeric)
    kind = olake_type.split("<")[0].split("(")[0]
    encoder = _ENCODERS.get(kind)
    if encoder is None:
        raise CatalogError(f"column {column!r}: unknown x-olake-type {olake_type!r}")
    if kind in NESTED_KINDS:
        values = encoder(array, olake_type, column, prop, instants)
    elif kind in _INSTANT_KINDS:
        values = encoder(array, olake_type, column, instants)
    else:
        values = encoder(array, olake_type, column)
    return values.to_pylist() if isinstance(values, pa.Array) else values


def wire_array(array: pa.Array | pa.ChunkedArray, olake_type: str, column: str,
               prop: dict | None = None) -> pa.Array | list:
    """``wire_values``, but as an Arrow array where the encoder builds one (text, integers,
    booleans: what ``record_lines`` turns into JSON without a Python object per value)."""
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    if isinstance(array.type, pa.UuidType):
        return _uuid_texts(array)
    if isinstance(array.type, pa.BaseExtensionType):
        array = array.storage  # json, or a driver's own extension type (an opaque numeric)
    if olake_type.split("<")[0].split("(")[0] in NESTED_KINDS:
        return wire_values(array, olake_type, column, prop)
    kind = olake_type.split("(")[0]
    encoder = _ENCODERS.get(kind)
    if encoder is None:
        raise CatalogError(f"column {column!r}: unknown x-olake-type {olake_type!r}")
    return encoder(array, olake_type, column)


def _uuid_texts(array: pa.Array) -> pa.Array:
    """A uuid array as its canonical texts (8-4-4-4-12 lowercase hex), computed a buffer at a time."""
    storage = array.storage
    data = storage.buffers()[1]
    hex_digits = binascii.hexlify(memoryview(data)[storage.offset * 16:(storage.offset + len(array)) * 16])
    offsets = pa.array(numpy.arange(0, 32 * len(array) + 1, 32, dtype=numpy.int32))
    whole = pa.StringArray.from_buffers(len(array), offsets.buffers()[1], pa.py_buffer(hex_digits))
    parts = [pc.utf8_slice_codeunits(whole, a, b) for a, b in ((0, 8), (8, 12), (12, 16), (16, 20), (20, 32))]
    return pc.if_else(array.is_valid(), pc.binary_join_element_wise(*parts, "-"), None)


def _expect(array: pa.Array, ok: bool, olake_type: str, column: str) -> None:
    if not ok:
        raise SourceError(f"column {column!r}: cannot encode Arrow {array.type} as {olake_type}")


def _plain(array: pa.Array, olake_type: str, column: str) -> list:
    type_ = array.type
    if olake_type == "bool":
        _expect(array, pa.types.is_boolean(type_), olake_type, column)
    elif olake_type in INT_TYPES:
        _expect(array, pa.types.is_integer(type_), olake_type, column)
    elif pa.types.is_decimal(type_) and olake_type.startswith(("decimal", "numeric")):
        # Arrow's decimal-to-string cast switches to exponents ("1E-10"); PostgreSQL never does
        return [None if d is None else format(d, "f") for d in array.to_pylist()]
    else:
        _expect(array, pa.types.is_string(array.type) or pa.types.is_large_string(array.type),
                olake_type, column)
    return array


def _floats(array: pa.Array, olake_type: str, column: str) -> list:
    _expect(array, pa.types.is_floating(array.type), olake_type, column)
    values = array.to_pylist()
    special = pc.fill_null(pc.invert(pc.is_finite(array)), False)
    for index in pc.indices_nonzero(special).to_pylist():
        value = values[index]
        values[index] = "NaN" if value != value else ("Infinity" if value > 0 else "-Infinity")
    return values


def _bytes(array: pa.Array, olake_type: str, column: str) -> list:
    _expect(array, pa.types.is_binary(array.type) or pa.types.is_large_binary(array.type),
            olake_type, column)
    b2a = binascii.b2a_base64
    return [None if v is None else b2a(v, newline=False).decode("ascii") for v in array.to_pylist()]


def arrow_text_mask(raw: pa.Array, bounds: tuple[int, int]) -> pa.Array | None:
    """Which values Arrow's own text cast handles (years 1..9999); None when all of them are."""
    fast = pc.and_(pc.greater_equal(raw, bounds[0]), pc.less_equal(raw, bounds[1]))
    return None if pc.all(fast).as_py() is not False else pc.fill_null(fast, True)


def _fill_slow(text: pa.Array, fast: pa.Array | None, raw: pa.Array, to_text) -> pa.Array | list:
    """``text``, the values outside ``fast`` replaced by ``to_text(raw value)`` (then a list)."""
    if fast is None:
        return text
    values = text.to_pylist()
    raws = raw.to_pylist()
    for index in pc.indices_nonzero(pc.invert(fast)).to_pylist():
        values[index] = to_text(raws[index])
    return values


def _dates(array: pa.Array, olake_type: str, column: str, instants: InstantReader | None = None) -> list:
    _expect(array, pa.types.is_date32(array.type), olake_type, column)
    raw = array.view(pa.int32())
    fast = arrow_text_mask(raw, ARROW_TEXT_DAYS)
    text = pc.cast(array if fast is None else pc.if_else(fast, array, None), pa.string())

    def slow(value: int) -> str:
        days = value if instants is None else instants(value, olake_type)
        return days if isinstance(days, str) else date_text(days)

    return _fill_slow(text, fast, raw, slow)


def _timestamps(array: pa.Array, olake_type: str, column: str, instants: InstantReader | None = None) -> list:
    _expect(array, pa.types.is_timestamp(array.type), olake_type, column)
    if array.type.unit != "us":
        array = pc.cast(array, pa.timestamp("us", tz=array.type.tz))
    raw = array.view(pa.int64())
    fast = arrow_text_mask(raw, ARROW_TEXT_MICROS)
    finite = raw if fast is None else pc.if_else(fast, raw, None)
    # casting a naive timestamp to string is ~8x faster than strftime: "YYYY-MM-DD HH:MM:SS.ffffff"
    text = pc.cast(finite.view(pa.timestamp("us")), pa.string())
    text = pc.utf8_replace_slice(text, start=10, stop=11, replacement="T")
    with_zone = olake_type == "timestamptz"
    if with_zone:  # values are UTC instants whatever the Arrow zone says
        text = pc.binary_join_element_wise(text, "+00:00", "")

    def slow(value: int) -> str:
        micros = value if instants is None else instants(value, olake_type)
        return micros if isinstance(micros, str) else timestamp_text(micros, with_zone)

    return _fill_slow(text, fast, raw, slow)


def _times(array: pa.Array, olake_type: str, column: str) -> list:
    _expect(array, pa.types.is_time(array.type), olake_type, column)
    array = pc.cast(array, pa.time64("us"))
    raw = array.view(pa.int64())
    text = pc.cast(array, pa.string())
    midnight = pc.fill_null(pc.equal(raw, DAY_US), False)  # PostgreSQL's 24:00:00
    return pc.if_else(midnight, "24:00:00.000000", text)


def _intervals(array: pa.Array, olake_type: str, column: str) -> list:
    type_ = array.type
    if pa.types.is_struct(type_):
        return array.to_pylist()
    if pa.types.is_list(type_) and pa.types.is_integer(type_.value_type):
        parts = [pc.list_element(array, i).to_pylist() for i in range(3)]
        return [None if m is None else {"months": m, "days": d, "microseconds": u}
                for m, d, u in zip(*parts)]
    if type_ == pa.month_day_nano_interval():
        return [None if v is None else {"months": v.months, "days": v.days,
                                        "microseconds": v.nanoseconds // 1000}
                for v in array.to_pylist()]
    _expect(array, pa.types.is_string(type_), olake_type, column)
    return [None if v is None else parse_iso_interval(v, column) for v in array.to_pylist()]


def parse_iso_interval(text: str, column: str) -> dict:
    """PostgreSQL's IntervalStyle iso_8601 text as months/days/microseconds, exactly."""
    match = _ISO_INTERVAL_RE.fullmatch(text)
    if match is None or text in ("P", "PT"):
        raise SourceError(f"column {column!r}: unexpected interval text {text!r} "
                          "(the scan must run with IntervalStyle=iso_8601)")
    years, months, days, hours, minutes, seconds = match.groups()
    micros = 0
    if seconds:
        whole, _, fraction = seconds.partition(".")
        sign = -1 if whole.startswith("-") else 1
        micros = sign * (abs(int(whole)) * 1_000_000 + int(fraction.ljust(6, "0")))
    micros += (int(hours or 0) * 3600 + int(minutes or 0) * 60) * 1_000_000
    return {"months": int(years or 0) * 12 + int(months or 0), "days": int(days or 0),
            "microseconds": micros}


def _datetimes_ms(array: pa.Array, olake_type: str, column: str) -> list:
    _expect(array, pa.types.is_timestamp(array.type), olake_type, column)
    if array.type.unit != "ms":
        try:
            array = pc.cast(array, pa.timestamp("ms", tz=array.type.tz))  # safe: refuses truncation
        except pa.ArrowInvalid as exc:
            raise SourceError(f"column {column!r}: {exc}") from None
    return array.view(pa.int64()).to_pylist()


def _documents(array: pa.Array, olake_type: str, column: str, prop: dict | None,
               instants: InstantReader | None = None) -> list:
    _expect(array, pa.types.is_struct(array.type), olake_type, column)
    properties = sub_properties(prop or {}, column)
    children = dict(zip((field.name for field in array.type), array.flatten()))
    if set(children) != set(properties):
        raise SourceError(f"column {column!r}: struct fields {sorted(children)} are not the "
                          f"document's properties {sorted(properties)}")
    names = list(properties)
    columns = [wire_values(children[name], olake_type_of(sub, name), f"{column}.{name}", sub, instants)
               for name, sub in properties.items()]
    return [dict(zip(names, row)) if valid else None
            for valid, row in zip(array.is_valid().to_pylist(), zip(*columns))]


def _arrays(array: pa.Array, olake_type: str, column: str, prop: dict | None = None,
            instants: InstantReader | None = None) -> list:
    _expect(array, pa.types.is_list(array.type) or pa.types.is_large_list(array.type),
            olake_type, column)
    element_prop = element_property(prop, olake_type) if prop is not None else None
    try:
        element_values = wire_values(array.flatten(), olake_type[6:-1], column, element_prop, instants)
    except BadValue as bad:
        raise BadValue(row_of_element(array, bad.index), bad.detail) from None
    result, position = [], 0
    for length in pc.list_value_length(array).to_pylist():
        if length is None:
            result.append(None)
        else:
            result.append(element_values[position:position + length])
            position += length
    return result


def _ndarrays(array: pa.Array, olake_type: str, column: str, prop: dict | None = None,
              instants: InstantReader | None = None) -> list:
    """``ndarray`` structs as ``{"lower_bounds", "lengths", "elements"}`` objects (a column of nulls of
    any type, such as a dropped column's, as nulls)."""
    if array.null_count == len(array):
        return [None] * len(array)
    _expect(array, pa.types.is_struct(array.type) and
            [f.name for f in array.type] == list(NDARRAY_FIELDS), olake_type, column)
    lower, lengths, elements = array.flatten()
    elements = _arrays(elements, shaped_array(array_shape(olake_type)[0], 1), column, None, instants)
    return [{"lower_bounds": lo, "lengths": n, "elements": e} if valid else None
            for valid, lo, n, e in zip(array.is_valid().to_pylist(), lower.to_pylist(), lengths.to_pylist(),
                                       elements)]


def row_of_element(array: pa.Array, element_index: int) -> int:
    """The row of a list array holding its flattened element ``element_index``."""
    ends = pc.cumulative_sum(pc.fill_null(pc.list_value_length(array), 0)).to_pylist()
    return next(row for row, end in enumerate(ends) if end > element_index)


_ENCODERS = {
    "bool": _plain, "int16": _plain, "int32": _plain, "int64": _plain, "decimal": _plain,
    "numeric": _plain, "string": _plain, "json": _plain, "uuid": _plain,
    "float32": _floats, "float64": _floats, "bytes": _bytes, "date": _dates, "time": _times,
    "timestamp": _timestamps, "timestamptz": _timestamps, "interval": _intervals, "array": _arrays,
    "objectid": _plain, "decimal128": _plain, "bson": _plain, "datetime_ms": _datetimes_ms,
    "document": _documents, "ndarray": _ndarrays,
}
