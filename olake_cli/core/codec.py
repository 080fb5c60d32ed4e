"""The olake type system: Arrow types, and the Arrow <-> JSON-lines RECORD codec.

A stream's ``json_schema`` properties each carry an ``x-olake-type`` that fixes the Arrow type at the
destination and the wire value inside ``record.data`` (both sides work a batch at a time):

    bool, int16/32/64      JSON booleans / integers (exact beyond 2^53)
    float32, float64       JSON numbers; NaN/Infinity/-Infinity as those strings
    decimal(p,s)           string "12.30" -> decimal128(p,s); "NaN" becomes null plus a warning
    numeric, string        string -> utf8 (numeric keeps PostgreSQL's exact text, NaN/Infinity too)
    uuid / json            string -> pa.uuid() / pa.json_() (Parquet UUID / JSON logical types)
    bytes                  base64 string -> binary
    date                   "YYYY-MM-DD" -> date32; "infinity"/"-infinity" <-> int32 max/min
    time                   "HH:MM:SS.ffffff" -> time64[us] ("24:00:00.000000" is 86400000000)
    timestamp(tz)          "YYYY-MM-DDTHH:MM:SS.ffffff[+00:00]" -> timestamp[us(, UTC)];
                           "infinity"/"-infinity" <-> int64 max/min (PostgreSQL's own encoding)
    interval               {"months","days","microseconds"} -> struct<int32, int32, int64>
    array<T>               JSON array of T's wire values -> list<element: T>

Dates and timestamps outside years 1..9999 (BC included) are not supported: encoding raises a
SourceError naming the column.  ``encode_records`` also accepts what the ADBC PostgreSQL driver
yields for the scan's ``select_expression`` (infinities wrapped around int64/int32, interval as an
int8[3] or iso_8601 text, numerics as text) and the destination Arrow types above.
"""

from __future__ import annotations

import binascii
import re
from functools import lru_cache

import orjson
import pyarrow as pa
import pyarrow.compute as pc

from olake_cli.core.errors import CatalogError, ProtocolError, SourceError

INT64_MAX, INT64_MIN = 2**63 - 1, -(2**63)
INT32_MAX, INT32_MIN = 2**31 - 1, -(2**31)
# ADBC shifts PostgreSQL's 2000-01-01 epoch to 1970 without overflow checks, wrapping the infinities.
_PG_EPOCH_US, _PG_EPOCH_DAYS = 946_684_800_000_000, 10_957
_ADBC_TS_POS_INF, _ADBC_TS_NEG_INF = INT64_MIN + _PG_EPOCH_US - 1, INT64_MIN + _PG_EPOCH_US
_ADBC_DATE_POS_INF, _ADBC_DATE_NEG_INF = INT32_MIN + _PG_EPOCH_DAYS - 1, INT32_MIN + _PG_EPOCH_DAYS
_TS_MIN_US, _TS_MAX_US = -62_135_596_800_000_000, 253_402_300_799_999_999  # years 1..9999
_DATE_MIN, _DATE_MAX = -719_162, 2_932_896
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
    raise CatalogError(f"unknown x-olake-type {olake_type!r}")


def olake_type_of(prop: dict, column: str) -> str:
    """The x-olake-type of a json_schema property, or a CatalogError naming the column."""
    olake_type = prop.get("x-olake-type") if isinstance(prop, dict) else None
    if not isinstance(olake_type, str):
        raise CatalogError(f"column {column!r}: json_schema property has no x-olake-type")
    return olake_type


def arrow_schema(json_schema: dict) -> pa.Schema:
    """The Arrow schema of a stream: properties in order, nullable when the JSON type allows null."""
    fields = []
    for name, prop in json_schema.get("properties", {}).items():
        json_type = prop.get("type", [])
        nullable = json_type == "null" or (isinstance(json_type, list) and "null" in json_type)
        fields.append(pa.field(name, arrow_type(olake_type_of(prop, name)), nullable=nullable))
    return pa.schema(fields)


# ----------------------------------------------------------------------------- encoding


def encode_records(batch: pa.RecordBatch, json_schema: dict, stream: str, namespace: str | None,
                   emitted_at: int, extra_data: dict | None = None) -> bytes:
    """The batch's rows as RECORD JSON lines; ``extra_data`` keys are added to every row's data."""
    properties = json_schema.get("properties", {})
    names = list(batch.schema.names)
    columns = []
    for name, array in zip(names, batch.columns):
        if name not in properties:
            raise CatalogError(f"column {name!r} is not a property of stream {stream!r}")
        columns.append(wire_values(array, olake_type_of(properties[name], name), name))
    for key, value in (extra_data or {}).items():
        names.append(key)
        columns.append([value] * batch.num_rows)
    record: dict = {"stream": stream}
    if namespace is not None:
        record["namespace"] = namespace
    record["emitted_at"] = emitted_at
    prefix = orjson.dumps({"type": "RECORD", "record": record})[:-2] + b',"data":'
    if batch.num_rows == 0:
        return b""
    if not columns:
        return (prefix + b"{}}}\n") * batch.num_rows
    dumps = orjson.dumps
    data = [dumps(dict(zip(names, row))) for row in zip(*columns)]
    return prefix + (b"}}\n" + prefix).join(data) + b"}}\n"


def wire_values(array: pa.Array | pa.ChunkedArray, olake_type: str, column: str) -> list:
    """The wire (JSON-ready) values of one column, as a Python list."""
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
    return encoder(array, olake_type, column)


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
    return array.to_pylist()


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


def _infinity_masks(raw: pa.Array, pos: tuple[int, int], neg: tuple[int, int],
                    bounds: tuple[int, int], column: str) -> tuple[pa.Array, pa.Array] | None:
    """Masks of +/-infinity (canonical or ADBC-wrapped), or None when there are none; checks range."""
    in_range = pc.and_(pc.greater_equal(raw, bounds[0]), pc.less_equal(raw, bounds[1]))
    if pc.all(in_range).as_py() is not False:
        return None
    pos_mask = pc.fill_null(pc.is_in(raw, pa.array(pos, raw.type)), False)
    neg_mask = pc.fill_null(pc.is_in(raw, pa.array(neg, raw.type)), False)
    bad = pc.invert(pc.or_(pc.fill_null(in_range, True), pc.or_(pos_mask, neg_mask)))
    if pc.any(bad).as_py():
        value = raw.filter(bad)[0].as_py()
        raise SourceError(f"column {column!r}: value {value} (Arrow {raw.type}) lies outside years "
                          "1..9999, which olake does not support")
    return pos_mask, neg_mask


def _with_infinities(text: pa.Array, masks: tuple[pa.Array, pa.Array] | None) -> list:
    if masks is not None:
        text = pc.if_else(masks[0], "infinity", pc.if_else(masks[1], "-infinity", text))
    return text.to_pylist()


def _dates(array: pa.Array, olake_type: str, column: str) -> list:
    _expect(array, pa.types.is_date32(array.type), olake_type, column)
    raw = array.view(pa.int32())
    masks = _infinity_masks(raw, (INT32_MAX, _ADBC_DATE_POS_INF), (INT32_MIN, _ADBC_DATE_NEG_INF),
                            (_DATE_MIN, _DATE_MAX), column)
    finite = array if masks is None else pc.if_else(pc.or_(*masks), None, array)
    return _with_infinities(pc.cast(finite, pa.string()), masks)


def _timestamps(array: pa.Array, olake_type: str, column: str) -> list:
    _expect(array, pa.types.is_timestamp(array.type), olake_type, column)
    if array.type.unit != "us":
        array = pc.cast(array, pa.timestamp("us", tz=array.type.tz))
    raw = array.view(pa.int64())
    masks = _infinity_masks(raw, (INT64_MAX, _ADBC_TS_POS_INF), (INT64_MIN, _ADBC_TS_NEG_INF),
                            (_TS_MIN_US, _TS_MAX_US), column)
    finite = raw if masks is None else pc.if_else(pc.or_(*masks), None, raw)
    # casting a naive timestamp to string is ~8x faster than strftime: "YYYY-MM-DD HH:MM:SS.ffffff"
    text = pc.cast(finite.view(pa.timestamp("us")), pa.string())
    text = pc.utf8_replace_slice(text, start=10, stop=11, replacement="T")
    if olake_type == "timestamptz":  # values are UTC instants whatever the Arrow zone says
        text = pc.binary_join_element_wise(text, "+00:00", "")
    return _with_infinities(text, masks)


def _times(array: pa.Array, olake_type: str, column: str) -> list:
    _expect(array, pa.types.is_time(array.type), olake_type, column)
    array = pc.cast(array, pa.time64("us"))
    raw = array.view(pa.int64())
    text = pc.cast(array, pa.string())
    midnight = pc.fill_null(pc.equal(raw, _DAY_US), False)  # PostgreSQL's 24:00:00
    return pc.if_else(midnight, "24:00:00.000000", text).to_pylist()


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


_parse_iso_interval = parse_iso_interval  # the former private name


def _arrays(array: pa.Array, olake_type: str, column: str) -> list:
    _expect(array, pa.types.is_list(array.type) or pa.types.is_large_list(array.type),
            olake_type, column)
    element_values = wire_values(array.flatten(), olake_type[6:-1], column)
    result, position = [], 0
    for length in pc.list_value_length(array).to_pylist():
        if length is None:
            result.append(None)
        else:
            result.append(element_values[position:position + length])
            position += length
    return result


_ENCODERS = {
    "bool": _plain, "int16": _plain, "int32": _plain, "int64": _plain, "decimal": _plain,
    "numeric": _plain, "string": _plain, "json": _plain, "uuid": _plain,
    "float32": _floats, "float64": _floats, "bytes": _bytes, "date": _dates, "time": _times,
    "timestamp": _timestamps, "timestamptz": _timestamps, "interval": _intervals, "array": _arrays,
}

# ----------------------------------------------------------------------------- decoding


def decode_rows(rows: list[dict], json_schema: dict,
                all_nullable: bool = False) -> tuple[pa.Table, list[str]]:
    """RECORD data dicts as an Arrow table of ``arrow_schema(json_schema)``, plus human warnings.

    ``all_nullable`` accepts nulls and missing keys in every column and makes every field nullable
    (CDC delete records carry only the key columns).
    """
    schema = arrow_schema(json_schema)
    if all_nullable:
        schema = pa.schema([field.with_nullable(True) for field in schema], metadata=schema.metadata)
    warnings: list[str] = []
    arrays = []
    for field in schema:
        name = field.name
        try:
            values = [row.get(name) for row in rows]
        except AttributeError:
            raise ProtocolError("record.data must be a JSON object") from None
        array = decode_column(values, olake_type_of(json_schema["properties"][name], name), name,
                              warnings)
        if not field.nullable and array.null_count:
            raise ProtocolError(f"column {name!r}: null (or missing) value in a non-nullable column")
        arrays.append(array)
    return pa.Table.from_arrays(arrays, schema=schema), warnings


def to_destination(batch: pa.RecordBatch | pa.Table, json_schema: dict) -> tuple[pa.Table, list[str]]:
    """A scanned batch converted straight to the destination types (no JSON in between).

    The same per-column encoders and decoders as the JSON path, so both give identical tables.
    """
    schema = arrow_schema(json_schema)
    schema = pa.schema([field.with_nullable(True) for field in schema], metadata=schema.metadata)
    warnings: list[str] = []
    arrays = []
    for field in schema:
        olake_type = olake_type_of(json_schema["properties"][field.name], field.name)
        column = batch.column(field.name)
        direct = _already_exact(column, olake_type, field.type, field.name)
        if direct is not None:
            arrays.append(direct)
            continue
        values = wire_values(column, olake_type, field.name)
        if olake_type == "uuid" or olake_type == "array<uuid>":
            values = _uuid_text(values)
        arrays.append(decode_column(values, olake_type, field.name, warnings))
    return pa.Table.from_arrays(arrays, schema=schema), warnings


_PLAIN_TYPES = {"bool", "int16", "int32", "int64", "float32", "float64", "string"}


def _already_exact(array: pa.Array | pa.ChunkedArray, olake_type: str, target: pa.DataType,
                   column: str) -> pa.Array | None:
    """The scanned column itself when it already is the destination value (no per-value work):
    plain types of the right Arrow type, and dates/timestamps without infinities."""
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    if olake_type in _PLAIN_TYPES and array.type == target:
        return array
    if olake_type == "date" and pa.types.is_date32(array.type):
        masks = _infinity_masks(array.view(pa.int32()), (INT32_MAX, _ADBC_DATE_POS_INF),
                                (INT32_MIN, _ADBC_DATE_NEG_INF), (_DATE_MIN, _DATE_MAX), column)
        return array if masks is None else None
    if olake_type in ("timestamp", "timestamptz") and pa.types.is_timestamp(array.type) \
            and array.type.unit == "us" and (array.type.tz is None) == (target.tz is None):
        masks = _infinity_masks(array.view(pa.int64()), (INT64_MAX, _ADBC_TS_POS_INF),
                                (INT64_MIN, _ADBC_TS_NEG_INF), (_TS_MIN_US, _TS_MAX_US), column)
        return array.cast(target) if masks is None else None
    return None


def _uuid_text(values: list) -> list:
    """uuid.UUID objects (what the encoder hands orjson) as their canonical text."""
    return [v if v is None or isinstance(v, str) else
            [None if u is None else str(u) for u in v] if isinstance(v, list) else str(v) for v in values]


def decode_column(values: list, olake_type: str, column: str, warnings: list[str]) -> pa.Array:
    """Wire values of one column as an Arrow array of ``arrow_type(olake_type)``."""
    kind = olake_type.split("<")[0].split("(")[0]
    decoder = _DECODERS.get(kind)
    if decoder is None:
        raise CatalogError(f"column {column!r}: unknown x-olake-type {olake_type!r}")
    try:
        return decoder(values, olake_type, column, warnings)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, ValueError, binascii.Error) as exc:
        raise ProtocolError(f"column {column!r}: invalid {olake_type} value: {exc}") from None


def _check_types(values: list, allowed: tuple[type, ...], olake_type: str, column: str) -> set:
    """The Python types present; ProtocolError names the first value of a type not allowed."""
    present = set(map(type, values))
    present.discard(type(None))
    if present.issubset(allowed):
        return present
    for value in values:
        if value is not None and type(value) not in allowed:
            raise ProtocolError(f"column {column!r}: expected a {olake_type} wire value, got "
                                f"{type(value).__name__} {str(value)[:60]!r}")
    return present


def _plain_column(values: list, olake_type: str, column: str, warnings: list[str]) -> pa.Array:
    allowed = {"bool": (bool,)}.get(olake_type, (int,) if olake_type in _INT_TYPES else (str,))
    _check_types(values, allowed, olake_type, column)
    return pa.array(values, type=arrow_type(olake_type))


def _float_column(values: list, olake_type: str, column: str, warnings: list[str]) -> pa.Array:
    if str in _check_types(values, (float, int, str), olake_type, column):
        try:
            values = [_FLOAT_WIRE[v] if type(v) is str else v for v in values]
        except KeyError as exc:
            raise ProtocolError(f"column {column!r}: string {exc.args[0]!r} is not a float") from None
    return pa.array(values, type=arrow_type(olake_type))


def _decimal_column(values: list, olake_type: str, column: str, warnings: list[str]) -> pa.Array:
    _check_types(values, (str,), olake_type, column)
    text = pa.array(values, type=pa.string())
    nan = pc.fill_null(pc.equal(text, "NaN"), False)
    nan_count = pc.sum(nan).as_py() or 0
    if nan_count:
        text = pc.if_else(nan, None, text)
        warnings.append(f"column {column!r}: {nan_count} NaN value(s) stored as null in {olake_type}")
    return pc.cast(text, arrow_type(olake_type))


def _uuid_column(values: list, olake_type: str, column: str, warnings: list[str]) -> pa.Array:
    _check_types(values, (str,), olake_type, column)
    text = pa.array(values, type=pa.string())
    canonical = pc.fill_null(pc.match_substring_regex(text, _UUID_PATTERN), True)
    if not pc.all(canonical).as_py():
        bad = text.filter(pc.invert(canonical))[0].as_py()
        raise ProtocolError(f"column {column!r}: {bad[:60]!r} is not a canonical uuid")
    hex_text = pc.fill_null(pc.replace_substring(text, "-", ""), "0" * 32)
    raw = bytes.fromhex("".join(hex_text.to_pylist()))
    storage = pa.FixedSizeBinaryArray.from_buffers(pa.binary(16), len(text), [None, pa.py_buffer(raw)])
    storage = pc.if_else(pc.is_null(text), None, storage)
    return pa.ExtensionArray.from_storage(pa.uuid(), storage)


def _bytes_column(values: list, olake_type: str, column: str, warnings: list[str]) -> pa.Array:
    _check_types(values, (str,), olake_type, column)
    a2b = binascii.a2b_base64
    return pa.array([None if v is None else a2b(v, strict_mode=True) for v in values], pa.binary())


def _infinity_text_masks(text: pa.Array) -> tuple[pa.Array, pa.Array, pa.Array]:
    pos = pc.fill_null(pc.equal(text, "infinity"), False)
    neg = pc.fill_null(pc.equal(text, "-infinity"), False)
    return pos, neg, pc.if_else(pc.or_(pos, neg), None, text)


def _date_column(values: list, olake_type: str, column: str, warnings: list[str]) -> pa.Array:
    _check_types(values, (str,), olake_type, column)
    pos, neg, finite = _infinity_text_masks(pa.array(values, type=pa.string()))
    days = pc.cast(pc.cast(finite, pa.date32()), pa.int32())
    days = pc.if_else(pos, pa.scalar(INT32_MAX, pa.int32()),
                     pc.if_else(neg, pa.scalar(INT32_MIN, pa.int32()), days))
    return pc.cast(days, pa.date32())


def _timestamp_column(values: list, olake_type: str, column: str, warnings: list[str]) -> pa.Array:
    _check_types(values, (str,), olake_type, column)
    target = arrow_type(olake_type)
    pos, neg, finite = _infinity_text_masks(pa.array(values, type=pa.string()))
    micros = pc.cast(pc.cast(finite, target), pa.int64())
    micros = pc.if_else(pos, INT64_MAX, pc.if_else(neg, INT64_MIN, micros))
    return pc.cast(micros, target)


def _time_column(values: list, olake_type: str, column: str, warnings: list[str]) -> pa.Array:
    _check_types(values, (str,), olake_type, column)
    text = pa.array(values, type=pa.string())
    midnight = pc.fill_null(pc.match_substring_regex(text, r"^24:00:00(\.0{1,6})?$"), False)
    as_timestamp = pc.binary_join_element_wise("1970-01-01T", pc.if_else(midnight, None, text), "")
    micros = pc.cast(pc.cast(as_timestamp, pa.timestamp("us")), pa.int64())
    if not pc.all(pc.fill_null(pc.less(micros, _DAY_US), True)).as_py():
        raise ProtocolError(f"column {column!r}: time value with a date part")
    micros = pc.if_else(midnight, _DAY_US, micros)
    return pc.cast(micros, pa.time64("us"))


def _interval_column(values: list, olake_type: str, column: str, warnings: list[str]) -> pa.Array:
    _check_types(values, (dict,), olake_type, column)
    try:
        if any(len(v) != 3 for v in values if v is not None):
            raise KeyError
        parts = [[None if v is None else v[key] for v in values] for key in _INTERVAL_FIELDS]
        for part in parts:
            _check_types(part, (int,), olake_type, column)
    except (KeyError, ProtocolError):
        bad = next(v for v in values if v is not None and not _is_interval_object(v))
        raise ProtocolError(f"column {column!r}: interval must be an object of exactly the "
                            f"integers months, days, microseconds; got {str(bad)[:80]!r}") from None
    children = [pa.array(part, type=field.type) for part, field in zip(parts, _INTERVAL_TYPE)]
    mask = pa.array([value is None for value in values], pa.bool_())
    return pa.StructArray.from_arrays(children, fields=list(_INTERVAL_TYPE), mask=mask)


def _is_interval_object(value: dict) -> bool:
    return sorted(value) == sorted(_INTERVAL_FIELDS) and all(type(v) is int for v in value.values())


def _json_column(values: list, olake_type: str, column: str, warnings: list[str]) -> pa.Array:
    _check_types(values, (str,), olake_type, column)
    return pa.ExtensionArray.from_storage(pa.json_(), pa.array(values, type=pa.string()))


def _array_column(values: list, olake_type: str, column: str, warnings: list[str]) -> pa.Array:
    _check_types(values, (list,), olake_type, column)
    offsets, flat = [0], []
    for value in values:
        if value is not None:
            flat.extend(value)
        offsets.append(len(flat))
    elements = decode_column(flat, olake_type[6:-1], f"{column}[]", warnings)
    mask = pa.array([value is None for value in values], pa.bool_())
    return pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), elements,
                                    type=arrow_type(olake_type), mask=mask)


_DECODERS = {
    "bool": _plain_column, "int16": _plain_column, "int32": _plain_column, "int64": _plain_column,
    "numeric": _plain_column, "string": _plain_column, "float32": _float_column,
    "float64": _float_column, "decimal": _decimal_column, "uuid": _uuid_column,
    "bytes": _bytes_column, "json": _json_column, "date": _date_column, "time": _time_column,
    "timestamp": _timestamp_column, "timestamptz": _timestamp_column,
    "interval": _interval_column, "array": _array_column,
}
