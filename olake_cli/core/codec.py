"""The olake type system: Arrow types, and the Arrow <-> JSON-lines RECORD codec.

A stream's ``json_schema`` properties each carry an ``x-olake-type`` that fixes the Arrow type at the
destination and the wire value inside ``record.data`` (both sides work a batch at a time):

    bool, int16/32/64      JSON booleans / integers (exact beyond 2^53)
    float32, float64       JSON numbers; NaN/Infinity/-Infinity as those strings
    decimal(p,s)           string "12.30" -> decimal128(p,s); "NaN" becomes null plus a warning
    numeric, string        string -> utf8 (numeric keeps PostgreSQL's exact text, NaN/Infinity too)
    uuid / json            string -> pa.uuid() / pa.json_() (Parquet UUID / JSON logical types)
    bytes                  base64 string -> binary
    date                   "YYYY-MM-DD" -> date32 (every PostgreSQL date: "0044-03-15 BC",
                           "10000-01-01"; see calendar_text); "infinity"/"-infinity" <-> int32 max/min
    time                   "HH:MM:SS.ffffff" -> time64[us] ("24:00:00.000000" is 86400000000)
    timestamp(tz)          "YYYY-MM-DDTHH:MM:SS.ffffff[+00:00][ BC]" -> timestamp[us(, UTC)];
                           "infinity"/"-infinity" <-> int64 max/min (PostgreSQL's own encoding);
                           the wire carries PostgreSQL's whole range, Arrow ends at
                           294247-01-10T04:00:54.775806 (decoding a later instant fails)
    interval               {"months","days","microseconds"} -> struct<int32, int32, int64>
    array<T>               JSON array of T's wire values -> list<element: T>; nesting is the
                           column's declared number of dimensions (array<array<T>> for T[][])

    objectid, decimal128   (BSON, see sources/mongodb) string: 24 lowercase hex / str(Decimal128)
    datetime_ms            integer milliseconds since 1970 (all of int64) -> timestamp[ms, UTC]
    bson                   canonical Extended JSON text -> pa.json_()
    document               JSON object of its sub-fields' wire values -> struct of the property's
                           "properties" (array<document>: of "items": {"properties"}); these need
                           the property: ``field_arrow_type(prop)``, the ``prop`` of
                           ``wire_values`` / ``decode_column``

``encode_records`` reads what the ADBC PostgreSQL driver yields for the scan's ``select_expression``:
dates and timestamps shifted to 1970 without overflow checks (so PostgreSQL's infinities and its last
30 years of timestamps arrive wrapped around int64/int32, and are unwrapped here), interval as an
int8[3] or iso_8601 text, numerics as text, multi-dimensional arrays as PostgreSQL's array text.
A value that cannot be carried raises an error naming the stream, the column and the row's key.

This module is the bottom of the codec: ``record_lines`` (Arrow -> RECORD lines) and ``codec_decode``
(wire values or scanned batches -> destination types) build on it; it imports neither.
"""

from __future__ import annotations

import binascii
import re
from functools import lru_cache

import numpy
import pyarrow as pa
import pyarrow.compute as pc

from olake_cli.core.errors import CatalogError, SourceError
from olake_cli.core.calendar_text import date_text, timestamp_text

INT64_MAX, INT64_MIN = 2**63 - 1, -(2**63)
INT32_MAX, INT32_MIN = 2**31 - 1, -(2**31)
# ADBC shifts PostgreSQL's 2000-01-01 epoch to 1970 without overflow checks, wrapping the infinities.
_PG_EPOCH_US, _PG_EPOCH_DAYS = 946_684_800_000_000, 10_957
_ADBC_TS_POS_INF, _ADBC_TS_NEG_INF = INT64_MIN + _PG_EPOCH_US - 1, INT64_MIN + _PG_EPOCH_US
_ADBC_DATE_POS_INF, _ADBC_DATE_NEG_INF = INT32_MIN + _PG_EPOCH_DAYS - 1, INT32_MIN + _PG_EPOCH_DAYS
_TS_MIN_US, _TS_MAX_US = -62_135_596_800_000_000, 253_402_300_799_999_999  # years 1..9999: Arrow's
_DATE_MIN, _DATE_MAX = -719_162, 2_932_896  # own text casts handle these; others go through calendar_text
_DAY_US = 86_400_000_000
_FLOAT_WIRE = {"NaN": float("nan"), "Infinity": float("inf"), "-Infinity": float("-inf")}
_INT_TYPES = ("int16", "int32", "int64")
_INTERVAL_FIELDS = ("months", "days", "microseconds")
_INTERVAL_TYPE = pa.struct([("months", pa.int32()), ("days", pa.int32()), ("microseconds", pa.int64())])
_SIMPLE_TYPES: dict[str, pa.DataType] = {
    "bool": pa.bool_(), "int16": pa.int16(), "int32": pa.int32(), "int64": pa.int64(),
    "float32": pa.float32(), "float64": pa.float64(), "numeric": pa.string(), "string": pa.string(),
    "uuid": pa.uuid(), "json": pa.json_(), "bytes": pa.binary(), "date": pa.date32(),
    "time": pa.time64("us"), "timestamp": pa.timestamp("us"),
    "timestamptz": pa.timestamp("us", tz="UTC"), "interval": _INTERVAL_TYPE,
    "objectid": pa.string(), "decimal128": pa.string(), "datetime_ms": pa.timestamp("ms", tz="UTC"),
    "bson": pa.json_(),
}
_UUID_PATTERN = "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"
_DECIMAL_RE = re.compile(r"decimal\((\d+),(\d+)\)")
_ISO_INTERVAL_RE = re.compile(
    r"P(?:(-?\d+)Y)?(?:(-?\d+)M)?(?:(-?\d+)D)?(?:T(?:(-?\d+)H)?(?:(-?\d+)M)?(?:(-?\d+(?:\.\d{1,6})?)S)?)?")


@lru_cache(maxsize=512)
def arrow_type(olake_type: str) -> pa.DataType:
    """The destination Arrow type of an x-olake-type string."""
    if olake_type in _SIMPLE_TYPES:
        return _SIMPLE_TYPES[olake_type]
    if olake_type.startswith("array<") and olake_type.endswith(">"):
        return pa.list_(pa.field("element", arrow_type(olake_type[6:-1])))
    match = _DECIMAL_RE.fullmatch(olake_type)
    if match and 1 <= int(match[1]) <= 38 and int(match[2]) <= int(match[1]):
        return pa.decimal128(int(match[1]), int(match[2]))
    if "document" in olake_type:
        raise CatalogError(f"x-olake-type {olake_type!r} takes its fields from the json_schema property "
                           "(use field_arrow_type)")
    raise CatalogError(f"unknown x-olake-type {olake_type!r}")


def field_arrow_type(prop: dict, column: str = "?") -> pa.DataType:
    """The destination Arrow type of a json_schema property (``document`` types need the property)."""
    olake_type = olake_type_of(prop, column)
    if "document" not in olake_type:
        return arrow_type(olake_type)
    if olake_type == "document":
        return pa.struct([pa.field(name, field_arrow_type(sub, f"{column}.{name}"), nullable=_nullable(sub))
                          for name, sub in sub_properties(prop, column).items()])
    if olake_type.startswith("array<") and olake_type.endswith(">"):
        element = element_property(prop, olake_type)
        return pa.list_(pa.field("element", field_arrow_type(element, f"{column}[]")))
    raise CatalogError(f"column {column!r}: unknown x-olake-type {olake_type!r}")


def sub_properties(prop: dict, column: str) -> dict:
    """The ``properties`` of a ``document`` property (at least one), or a CatalogError."""
    properties = prop.get("properties")
    if not isinstance(properties, dict) or not properties:
        raise CatalogError(f"column {column!r}: x-olake-type document needs a non-empty 'properties'")
    return properties


def element_property(prop: dict | None, olake_type: str) -> dict:
    """The property of an ``array<T>`` element: the property's ``items`` with x-olake-type T."""
    items = (prop or {}).get("items")
    return {**(items if isinstance(items, dict) else {}), "x-olake-type": olake_type[6:-1]}


def olake_type_of(prop: dict, column: str) -> str:
    """The x-olake-type of a json_schema property, or a CatalogError naming the column."""
    olake_type = prop.get("x-olake-type") if isinstance(prop, dict) else None
    if not isinstance(olake_type, str):
        raise CatalogError(f"column {column!r}: json_schema property has no x-olake-type")
    return olake_type


def arrow_schema(json_schema: dict) -> pa.Schema:
    """The Arrow schema of a stream: properties in order, nullable when the JSON type allows null."""
    return pa.schema([pa.field(name, field_arrow_type(prop, name), nullable=_nullable(prop))
                      for name, prop in json_schema.get("properties", {}).items()])


def stored_schema(json_schema: dict, key_columns: tuple | list, with_changes: bool) -> pa.Schema:
    """The Arrow schema a destination stores a stream's rows with: a NOT NULL column (no "null" in
    its JSON type) stays non-nullable, except, when changes follow (``with_changes``), a column
    outside the key, since a delete carries only its key."""
    return pa.schema([f if f.nullable or not with_changes or f.name in key_columns else f.with_nullable(True)
                      for f in arrow_schema(json_schema)])


def _nullable(prop: dict) -> bool:
    json_type = prop.get("type", [])
    return json_type == "null" or (isinstance(json_type, list) and "null" in json_type)


# ----------------------------------------------------------------------------- encoding


class BadValue(ValueError):
    """A value (at ``index`` of its column) that cannot be carried; the caller names stream and row."""

    def __init__(self, index: int, detail: str) -> None:
        super().__init__(detail)
        self.index, self.detail = index, detail


def value_error(error_type: type, stream: str | None, column: str, key: dict | None,
                index: int | None, detail: str) -> Exception:
    """An ``error_type`` naming the stream, the column and the row's key (or its index)."""
    parts = [f"stream {stream!r}"] if stream else []
    parts.append(f"column {column!r}")
    if key:
        parts.append("row with key " + ", ".join(f"{k}={v!r}" for k, v in key.items()))
    elif index is not None:
        parts.append(f"row {index + 1} of the batch")
    return error_type(", ".join(parts) + f": {detail}")


def wire_values(array: pa.Array | pa.ChunkedArray, olake_type: str, column: str,
                prop: dict | None = None) -> list:
    """The wire (JSON-ready) values of one column, as a Python list (``prop``: its json_schema
    property, needed by ``document`` and ``array<document>``)."""
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    if isinstance(array.type, pa.UuidType):
        return array.to_pylist()  # uuid.UUID objects; orjson writes their canonical form
    if isinstance(array.type, pa.BaseExtensionType):
        array = array.storage  # json, ADBC's opaque numeric
    kind = olake_type.split("<")[0].split("(")[0]
    encoder = _ENCODERS.get(kind)
    if encoder is None:
        raise CatalogError(f"column {column!r}: unknown x-olake-type {olake_type!r}")
    values = encoder(array, olake_type, column, prop) if kind in _NESTED_KINDS else encoder(array, olake_type, column)
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
        array = array.storage  # json, ADBC's opaque numeric
    if olake_type.split("<")[0].split("(")[0] in _NESTED_KINDS:
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
    elif olake_type in _INT_TYPES:
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


def _fast_mask(raw: pa.Array, bounds: tuple[int, int]) -> pa.Array | None:
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


def _adbc_date_text(raw: int) -> str:
    """A date32 value as ADBC yields it (infinities wrapped) in PostgreSQL's text."""
    if raw == _ADBC_DATE_POS_INF:
        return "infinity"
    return "-infinity" if raw == _ADBC_DATE_NEG_INF else date_text(raw)


def _adbc_micros(raw: int) -> int | str:
    """An ADBC timestamp value unwrapped: microseconds since 1970, or an infinity word."""
    if raw == _ADBC_TS_POS_INF:
        return "infinity"
    if raw == _ADBC_TS_NEG_INF:
        return "-infinity"
    return raw + 2**64 if raw < _ADBC_TS_POS_INF else raw  # PostgreSQL's last 30 years wrap


def _dates(array: pa.Array, olake_type: str, column: str) -> list:
    _expect(array, pa.types.is_date32(array.type), olake_type, column)
    raw = array.view(pa.int32())
    fast = _fast_mask(raw, (_DATE_MIN, _DATE_MAX))
    text = pc.cast(array if fast is None else pc.if_else(fast, array, None), pa.string())
    return _fill_slow(text, fast, raw, _adbc_date_text)


def _timestamps(array: pa.Array, olake_type: str, column: str) -> list:
    _expect(array, pa.types.is_timestamp(array.type), olake_type, column)
    if array.type.unit != "us":
        array = pc.cast(array, pa.timestamp("us", tz=array.type.tz))
    raw = array.view(pa.int64())
    fast = _fast_mask(raw, (_TS_MIN_US, _TS_MAX_US))
    finite = raw if fast is None else pc.if_else(fast, raw, None)
    # casting a naive timestamp to string is ~8x faster than strftime: "YYYY-MM-DD HH:MM:SS.ffffff"
    text = pc.cast(finite.view(pa.timestamp("us")), pa.string())
    text = pc.utf8_replace_slice(text, start=10, stop=11, replacement="T")
    with_zone = olake_type == "timestamptz"
    if with_zone:  # values are UTC instants whatever the Arrow zone says
        text = pc.binary_join_element_wise(text, "+00:00", "")

    def slow(value: int) -> str:
        micros = _adbc_micros(value)
        return micros if isinstance(micros, str) else timestamp_text(micros, with_zone)

    return _fill_slow(text, fast, raw, slow)


def _times(array: pa.Array, olake_type: str, column: str) -> list:
    _expect(array, pa.types.is_time(array.type), olake_type, column)
    array = pc.cast(array, pa.time64("us"))
    raw = array.view(pa.int64())
    text = pc.cast(array, pa.string())
    midnight = pc.fill_null(pc.equal(raw, _DAY_US), False)  # PostgreSQL's 24:00:00
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


def _documents(array: pa.Array, olake_type: str, column: str, prop: dict | None) -> list:
    _expect(array, pa.types.is_struct(array.type), olake_type, column)
    properties = sub_properties(prop or {}, column)
    children = dict(zip((field.name for field in array.type), array.flatten()))
    if set(children) != set(properties):
        raise SourceError(f"column {column!r}: struct fields {sorted(children)} are not the "
                          f"document's properties {sorted(properties)}")
    names = list(properties)
    columns = [wire_values(children[name], olake_type_of(sub, name), f"{column}.{name}", sub)
               for name, sub in properties.items()]
    return [dict(zip(names, row)) if valid else None
            for valid, row in zip(array.is_valid().to_pylist(), zip(*columns))]


def _arrays(array: pa.Array, olake_type: str, column: str, prop: dict | None = None) -> list:
    _expect(array, pa.types.is_list(array.type) or pa.types.is_large_list(array.type),
            olake_type, column)
    element_prop = element_property(prop, olake_type) if prop is not None else None
    try:
        element_values = wire_values(array.flatten(), olake_type[6:-1], column, element_prop)
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
    "document": _documents,
}
_NESTED_KINDS = frozenset({"array", "document"})  # their encoders and decoders take the property

