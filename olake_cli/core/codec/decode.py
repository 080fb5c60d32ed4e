"""Decoding: RECORD wire values -> the destination Arrow types.

The representations are those of ``codec.types``; a value the destination type cannot hold raises an
error naming the stream, the column and the row's key.
"""

from __future__ import annotations

import binascii
import math
import re

import pyarrow as pa
import pyarrow.compute as pc

from olake_cli.core.calendar_text import parse_date, parse_timestamp
from olake_cli.core.codec.airbyte_types import is_derived, wire_values
from olake_cli.core.codec.bad_value import BadValue, value_error
from olake_cli.core.codec.types import (
    DAY_US, INT32_MAX, INT32_MIN, INT64_MAX, INT64_MIN, INT_TYPES, INTERVAL_FIELDS, INTERVAL_TYPE, NDARRAY_FIELDS,
    NESTED_KINDS, array_shape, arrow_schema, arrow_type, element_property, field_arrow_type, olake_type_of,
    shaped_array, sub_properties,
)
from olake_cli.core.errors import CatalogError, DestinationError, ProtocolError

_FLOAT_WIRE = {"NaN": float("nan"), "Infinity": float("inf"), "-Infinity": float("-inf")}
_UUID_PATTERN = "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"
_OBJECTID_PATTERN = "^[0-9a-f]{24}$"


def decode_rows(rows: list[dict], json_schema: dict, all_nullable: bool = False,
                stream: str | None = None, key_columns: tuple = ()) -> tuple[pa.Table, list[str]]:
    """RECORD data dicts as an Arrow table of ``arrow_schema(json_schema)``, plus human warnings.

    ``all_nullable`` accepts nulls and missing keys in every column and makes every field nullable
    (CDC delete records carry only the key columns). A value the destination type cannot hold
    raises a DestinationError naming ``stream``, the column and the row's ``key_columns``. A schema whose
    types were derived from Airbyte's (``airbyte_types``) takes its values in Airbyte's forms.
    """
    schema = arrow_schema(json_schema)
    if all_nullable:
        schema = pa.schema([field.with_nullable(True) for field in schema], metadata=schema.metadata)
    warnings: list[str] = []
    arrays = []
    airbyte = is_derived(json_schema)
    for field in schema:
        name = field.name
        try:
            values = [row.get(name) for row in rows]
        except AttributeError:
            raise ProtocolError("record.data must be a JSON object") from None
        try:
            prop = json_schema["properties"][name]
            olake_type = olake_type_of(prop, name)
            if airbyte:
                values = wire_values(values, olake_type)
            array = decode_column(values, olake_type, name, warnings, prop)
        except BadValue as bad:
            key = {k: rows[bad.index].get(k) for k in key_columns}
            raise value_error(DestinationError, stream, name, key, bad.index, bad.detail) from None
        if not field.nullable and array.null_count:
            raise ProtocolError(f"column {name!r}: null (or missing) value in a non-nullable column")
        arrays.append(array)
    return pa.Table.from_arrays(arrays, schema=schema), warnings


def decode_column(values: list | pa.Array, olake_type: str, column: str, warnings: list[str],
                  prop: dict | None = None) -> pa.Array:
    """Wire values of one column as an Arrow array of ``arrow_type(olake_type)`` (``prop``: the
    column's json_schema property, needed by ``document`` and ``array<document>``). Types whose
    wire value is a string also take a string array (see ``record_block``)."""
    kind = olake_type.split("<")[0].split("(")[0]
    decoder = _DECODERS.get(kind)
    if decoder is None:
        raise CatalogError(f"column {column!r}: unknown x-olake-type {olake_type!r}")
    try:
        if kind in NESTED_KINDS:
            return decoder(values, olake_type, column, warnings, prop)
        return decoder(values, olake_type, column, warnings)
    except BadValue:
        raise
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


def _texts(values: list | pa.Array, olake_type: str, column: str) -> pa.Array:
    """The wire texts of a column as a string array (a column parsed a block at a time is one)."""
    if isinstance(values, pa.Array):
        return values
    _check_types(values, (str,), olake_type, column)
    return pa.array(values, type=pa.string())


def _plain_column(values: list, olake_type: str, column: str, warnings: list[str]) -> pa.Array:
    if olake_type != "bool" and olake_type not in INT_TYPES:
        return _texts(values, olake_type, column)
    _check_types(values, (bool,) if olake_type == "bool" else (int,), olake_type, column)
    return pa.array(values, type=arrow_type(olake_type))


def _float_column(values: list, olake_type: str, column: str, warnings: list[str]) -> pa.Array:
    if str in _check_types(values, (float, int, str), olake_type, column):
        try:
            values = [_FLOAT_WIRE[v] if type(v) is str else v for v in values]
        except KeyError as exc:
            raise ProtocolError(f"column {column!r}: string {exc.args[0]!r} is not a float") from None
    return pa.array(values, type=arrow_type(olake_type))


def _decimal_column(values: list, olake_type: str, column: str, warnings: list[str]) -> pa.Array:
    text = _texts(values, olake_type, column)
    nan = pc.fill_null(pc.equal(text, "NaN"), False)
    nan_count = pc.sum(nan).as_py() or 0
    if nan_count:
        text = pc.if_else(nan, None, text)
        warnings.append(f"column {column!r}: {nan_count} NaN value(s) stored as null in {olake_type}")
    return pc.cast(text, arrow_type(olake_type))


def _uuid_column(values: list, olake_type: str, column: str, warnings: list[str]) -> pa.Array:
    text = _texts(values, olake_type, column)
    canonical = pc.fill_null(pc.match_substring_regex(text, _UUID_PATTERN), True)
    if not pc.all(canonical, min_count=0).as_py():  # no value at all: nothing to refuse
        bad = text.filter(pc.invert(canonical))[0].as_py()
        raise ProtocolError(f"column {column!r}: {bad[:60]!r} is not a canonical uuid")
    hex_text = pc.fill_null(pc.replace_substring(text, "-", ""), "0" * 32)
    raw = bytes.fromhex("".join(hex_text.to_pylist()))
    storage = pa.FixedSizeBinaryArray.from_buffers(pa.binary(16), len(text), [None, pa.py_buffer(raw)])
    storage = pc.if_else(pc.is_null(text), None, storage)
    return pa.ExtensionArray.from_storage(pa.uuid(), storage)


def _bytes_column(values: list, olake_type: str, column: str, warnings: list[str]) -> pa.Array:
    a2b = binascii.a2b_base64
    texts = _texts(values, olake_type, column).to_pylist()
    return pa.array([None if v is None else a2b(v, strict_mode=True) for v in texts], pa.binary())


def _plain_texts(text: pa.Array) -> pa.Array | None:
    """A mask of the texts Arrow's own parser takes (a 4-digit year, no " BC"; None when all
    are): the others hold infinities, BC or years beyond 9999."""
    four_digits = pc.equal(pc.utf8_slice_codeunits(text, 4, 5), "-")
    plain = pc.fill_null(pc.and_(four_digits, pc.invert(pc.ends_with(text, " BC"))), True)
    return None if pc.all(plain).as_py() else plain


def _date_column(values: list, olake_type: str, column: str, warnings: list[str]) -> pa.Array:
    text = _texts(values, olake_type, column)
    plain = _plain_texts(text)
    if plain is None:
        return pc.cast(text, pa.date32())
    days = pc.cast(pc.cast(pc.if_else(plain, text, None), pa.date32()), pa.int32()).to_pylist()
    for index in pc.indices_nonzero(pc.invert(plain)).to_pylist():
        days[index] = _date_days(text[index].as_py(), index)
    return pa.array(days, pa.int32()).cast(pa.date32())


def _date_days(value: str, index: int) -> int:
    """Days since 1970 of one wire date that Arrow's parser does not take."""
    if value in ("infinity", "-infinity"):
        return INT32_MAX if value == "infinity" else INT32_MIN
    days = parse_date(value)
    if not INT32_MIN < days < INT32_MAX:
        raise BadValue(index, f"date {value!r} lies outside Arrow's date32")
    return days


def _timestamp_column(values: list, olake_type: str, column: str, warnings: list[str]) -> pa.Array:
    text = _texts(values, olake_type, column)
    target = arrow_type(olake_type)
    with_zone = olake_type == "timestamptz"
    plain = _plain_texts(text)
    if plain is None:
        return pc.cast(text, target)
    micros = pc.cast(pc.cast(pc.if_else(plain, text, None), target), pa.int64()).to_pylist()
    for index in pc.indices_nonzero(pc.invert(plain)).to_pylist():
        micros[index] = _timestamp_micros(text[index].as_py(), with_zone, index)
    return pa.array(micros, pa.int64()).cast(target)


def _timestamp_micros(value: str, with_zone: bool, index: int) -> int:
    """Microseconds since 1970 of one wire timestamp that Arrow's parser does not take."""
    if value in ("infinity", "-infinity"):
        return INT64_MAX if value == "infinity" else INT64_MIN
    micros, has_offset = parse_timestamp(value)
    if has_offset != with_zone:
        raise ValueError(f"{value[:40]!r} {'lacks' if with_zone else 'has'} a zone offset")
    if not INT64_MIN < micros < INT64_MAX:
        raise BadValue(index, f"timestamp {value!r} lies beyond Arrow's timestamp[us] (microseconds "
                              "since 1970 in 64 bits end at 294247-01-10T04:00:54.775806; int64 "
                              "max/min stand for infinity)")
    return micros


def _time_column(values: list, olake_type: str, column: str, warnings: list[str]) -> pa.Array:
    text = _texts(values, olake_type, column)
    midnight = pc.fill_null(pc.match_substring_regex(text, r"^24:00:00(\.0{1,6})?$"), False)
    as_timestamp = pc.binary_join_element_wise("1970-01-01T", pc.if_else(midnight, None, text), "")
    micros = pc.cast(pc.cast(as_timestamp, pa.timestamp("us")), pa.int64())
    if not pc.all(pc.fill_null(pc.less(micros, DAY_US), True), min_count=0).as_py():
        raise ProtocolError(f"column {column!r}: time value with a date part")
    micros = pc.if_else(midnight, DAY_US, micros)
    return pc.cast(micros, pa.time64("us"))


def _interval_column(values: list, olake_type: str, column: str, warnings: list[str]) -> pa.Array:
    _check_types(values, (dict,), olake_type, column)
    try:
        if any(len(v) != 3 for v in values if v is not None):
            raise KeyError
        parts = [[None if v is None else v[key] for v in values] for key in INTERVAL_FIELDS]
        for part in parts:
            _check_types(part, (int,), olake_type, column)
    except (KeyError, ProtocolError):
        bad = next(v for v in values if v is not None and not _is_interval_object(v))
        raise ProtocolError(f"column {column!r}: interval must be an object of exactly the "
                            f"integers months, days, microseconds; got {str(bad)[:80]!r}") from None
    children = [pa.array(part, type=field.type) for part, field in zip(parts, INTERVAL_TYPE)]
    mask = pa.array([value is None for value in values], pa.bool_())
    return pa.StructArray.from_arrays(children, fields=list(INTERVAL_TYPE), mask=mask)


def _is_interval_object(value: dict) -> bool:
    return sorted(value) == sorted(INTERVAL_FIELDS) and all(type(v) is int for v in value.values())


def _json_column(values: list, olake_type: str, column: str, warnings: list[str]) -> pa.Array:
    return pa.ExtensionArray.from_storage(pa.json_(), _texts(values, olake_type, column))


def _array_column(values: list, olake_type: str, column: str, warnings: list[str],
                  prop: dict | None = None) -> pa.Array:
    _check_types(values, (list,), olake_type, column)
    offsets, flat = [0], []
    for value in values:
        if value is not None:
            flat.extend(value)
        offsets.append(len(flat))
    element_prop = None if prop is None else element_property(prop, olake_type)
    try:
        elements = decode_column(flat, olake_type[6:-1], f"{column}[]", warnings, element_prop)
    except BadValue as bad:
        raise BadValue(next(row for row, end in enumerate(offsets[1:]) if end > bad.index),
                       bad.detail) from None
    mask = pa.array([value is None for value in values], pa.bool_())
    target = arrow_type(olake_type) if prop is None else field_arrow_type(prop, column)
    return pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), elements, type=target, mask=mask)


def _ndarray_column(values: list, olake_type: str, column: str, warnings: list[str],
                    prop: dict | None = None) -> pa.Array:
    """``{"lower_bounds", "lengths", "elements"}`` objects as ndarray structs; a shape that does not
    match its elements, or bounds beyond int32, is a ProtocolError."""
    _check_types(values, (dict,), olake_type, column)
    for value in values:
        if value is not None and not _is_ndarray_object(value):
            raise ProtocolError(f"column {column!r}: an {olake_type} value is an object of the integer lists "
                                f"lower_bounds and lengths (one of each per dimension, lengths at least 1) "
                                f"and the list of elements (the lengths' product); got {str(value)[:80]!r}")
    parts = [[None if v is None else v[name] for v in values] for name in NDARRAY_FIELDS]
    element_type = shaped_array(array_shape(olake_type)[0], 1)
    children = [_array_column(parts[0], "array<int32>", f"{column}.lower_bounds", warnings),
                _array_column(parts[1], "array<int32>", f"{column}.lengths", warnings),
                _array_column(parts[2], element_type, f"{column}.elements", warnings)]
    uppers = [None if v is None else [lo + n - 1 for lo, n in zip(v["lower_bounds"], v["lengths"])]
              for v in values]
    _array_column(uppers, "array<int32>", f"{column} (upper bounds)", warnings)  # int32, as in PostgreSQL
    struct_type = arrow_type(olake_type)
    mask = pa.array([value is None for value in values], pa.bool_())
    return pa.StructArray.from_arrays(children, fields=list(struct_type), mask=mask)


def _is_ndarray_object(value: dict) -> bool:
    """Exactly the three keys, integer bounds and lengths of one length, as many elements as the
    lengths' product (none for the empty array)."""
    if sorted(value) != sorted(NDARRAY_FIELDS):
        return False
    lower, lengths, elements = (value[name] for name in NDARRAY_FIELDS)
    if not (type(lower) is list and type(lengths) is list and type(elements) is list) or len(lower) != len(lengths):
        return False
    if any(type(n) is not int or n < 1 for n in lengths) or any(type(lo) is not int for lo in lower):
        return False
    return len(elements) == (math.prod(lengths) if lengths else 0)


def _objectid_column(values: list, olake_type: str, column: str, warnings: list[str]) -> pa.Array:
    text = _texts(values, olake_type, column)
    if not pc.all(pc.fill_null(pc.match_substring_regex(text, _OBJECTID_PATTERN), True), min_count=0).as_py():
        bad = next(v for v in text.to_pylist() if v is not None and not re.fullmatch(_OBJECTID_PATTERN, v))
        raise ProtocolError(f"column {column!r}: {bad[:60]!r} is not 24 lowercase hex digits")
    return text


def _datetime_ms_column(values: list, olake_type: str, column: str,
                        warnings: list[str]) -> pa.Array:
    _check_types(values, (int,), olake_type, column)
    return pa.array(values, type=pa.int64()).cast(arrow_type(olake_type))


def _document_column(values: list, olake_type: str, column: str, warnings: list[str],
                     prop: dict | None = None) -> pa.Array:
    _check_types(values, (dict,), olake_type, column)
    properties = sub_properties(prop or {}, column)
    unknown = next((key for v in values if v is not None for key in v if key not in properties), None)
    if unknown is not None:
        raise ProtocolError(f"column {column!r}: {unknown!r} is not a field of this document")
    struct_type = field_arrow_type(prop, column)
    mask = pa.array([value is None for value in values], pa.bool_())
    children = []
    for field, (name, sub) in zip(struct_type, properties.items()):
        child = decode_column([None if v is None else v.get(name) for v in values],
                              olake_type_of(sub, name), f"{column}.{name}", warnings, sub)
        if not field.nullable and pc.any(pc.and_not(child.is_null(), mask)).as_py():
            raise ProtocolError(f"column {column!r}: null (or missing) value in the non-nullable "
                                f"field {name!r}")
        children.append(child)
    return pa.StructArray.from_arrays(children, fields=list(struct_type), mask=mask)


_DECODERS = {
    "bool": _plain_column, "int16": _plain_column, "int32": _plain_column, "int64": _plain_column,
    "numeric": _plain_column, "string": _plain_column, "float32": _float_column,
    "float64": _float_column, "decimal": _decimal_column, "uuid": _uuid_column,
    "bytes": _bytes_column, "json": _json_column, "date": _date_column, "time": _time_column,
    "timestamp": _timestamp_column, "timestamptz": _timestamp_column,
    "interval": _interval_column, "array": _array_column,
    "objectid": _objectid_column, "decimal128": _plain_column, "datetime_ms": _datetime_ms_column,
    "bson": _json_column, "document": _document_column, "ndarray": _ndarray_column,
}
