"""MongoDB documents as Arrow record batches and RECORD wire values, typed by the stream's catalog.

Each field's x-olake-type (inferred by ``bson_schema.infer_json_schema``) fixes what it holds:

    bool, int32, string            the BSON bool, int (Int32), string, exactly
    int64                          BSON long (Int64); an Int32 value widens exactly
    float64                        BSON double; an int or long that is exactly a double widens
    objectid                       str(ObjectId) (24 lowercase hex digits)
    decimal128                     str(Decimal128); an int or long as its digits, a double as the
                                   shortest text that reads back as it ("0.1", "1E+300", "NaN")
    datetime_ms                    BSON date: milliseconds since 1970 (DatetimeMS or datetime)
    bytes, uuid                    Binary subtype 0; subtype 4 of 16 bytes (or uuid.UUID)
    bson                           any value, as canonical Extended JSON text
                                   (``json_util.dumps(value, json_options=EJSON_OPTIONS)``, i.e.
                                   CANONICAL_JSON_OPTIONS with uuid.UUID written as subtype 4)
    document, array<T>             a struct of the property's sub-fields / a list of T

A missing field, or sub-field, is null (a non-nullable ``bson`` ``_id`` holds the text ``null``).
A value that does not fit its field's type, or a field (or sub-field) the json_schema lacks, raises
a SourceError naming the stream, the field and the document's ``_id``: nothing is dropped or
converted silently. Extended JSON cannot tell a document whose field names are its own type markers
(``{"$date": 5}``) from the typed value, so such a ``bson`` value (checked only when a field name
starts with '$') raises too.
"""

from __future__ import annotations

import binascii
import datetime as dt
import struct
import uuid
from bisect import bisect_right
from collections.abc import Callable, Mapping
from decimal import Decimal
from typing import Any, NamedTuple

import bson
import pyarrow as pa
from bson import Binary, DatetimeMS, Decimal128, Int64, ObjectId, json_util
from bson.binary import UuidRepresentation
from bson.codec_options import DatetimeConversion
from bson.json_util import CANONICAL_JSON_OPTIONS, JSONOptions

from olake_cli.core.codec.bad_value import BadValue, value_error
from olake_cli.core.codec.types import (
    INT32_MAX, INT32_MIN, INT64_MAX, INT64_MIN, arrow_schema, element_property, field_arrow_type, olake_type_of,
    sub_properties,
)
from olake_cli.core.errors import CatalogError, SourceError
from olake_cli.sources.mongodb.bson_schema import (
    BSON_CODEC_OPTIONS, as_bson_document, bson_type_name, infer_json_schema, is_exact_double,
)

EJSON_OPTIONS: JSONOptions = CANONICAL_JSON_OPTIONS.with_options(
    uuid_representation=UuidRepresentation.STANDARD, datetime_conversion=DatetimeConversion.DATETIME_MS)
_EPOCH, _ONE_MS = dt.datetime(1970, 1, 1), dt.timedelta(milliseconds=1)
_NONE = type(None)
_TWO_UINT64 = struct.Struct("<QQ")
_BID_SPECIAL, _BID_COEFFICIENT_END = 3 << 61, 10**34


class FieldMisfit(BadValue):
    """A value (of document ``index``) that does not fit the field at ``path``."""

    def __init__(self, index: int, path: str, detail: str) -> None:
        super().__init__(index, detail)
        self.path = path


# ----------------------------------------------------------------------------- scalar types


def _millis(value: DatetimeMS | dt.datetime) -> int:
    if type(value) is DatetimeMS:
        return int(value)
    offset = value.utcoffset() or dt.timedelta(0)  # a naive datetime is UTC, as pymongo's
    return (value.replace(tzinfo=None) - _EPOCH - offset) // _ONE_MS


def _float_wire(value: float) -> float | str:
    if value != value:
        return "NaN"
    if value in (float("inf"), float("-inf")):
        return "Infinity" if value > 0 else "-Infinity"
    return value


def _decimal_text(value: Decimal128) -> str:
    """``str(value)``, four times faster for finite canonical values (the same text exactly)."""
    low, high = _TWO_UINT64.unpack(value.bid)
    if high & _BID_SPECIAL == _BID_SPECIAL:  # NaN, Infinity, or a non-canonical large coefficient
        return str(value)
    coefficient = ((high & 0x1_FFFF_FFFF_FFFF) << 64) | low
    if coefficient >= _BID_COEFFICIENT_END:
        return str(value)
    sign = "-" if high >> 63 else ""
    return str(Decimal(f"{sign}{coefficient}E{((high >> 49) & 0x3FFF) - 6176}"))


def _fits_float64(value: Any) -> bool:
    kind = type(value)
    return kind is float or (kind in (int, Int64) and is_exact_double(value))


def _float64_array(values: list) -> pa.Array:
    """Doubles, and integers that are exactly doubles (Arrow refuses those beyond 2^53 unconverted)."""
    try:
        return pa.array(values, pa.float64())
    except pa.ArrowInvalid:
        return pa.array([v if v is None or type(v) is float else float(v) for v in values], pa.float64())


def _number_text(value: Any) -> str:
    """A BSON number as Decimal128 text (see the module's table)."""
    kind = type(value)
    if kind is Decimal128:
        return _decimal_text(value)
    if kind is float:
        if value != value or value in (float("inf"), float("-inf")):
            return _float_wire(value)
        return str(Decimal128(repr(value)))
    return str(int(value))


def _uuid_bytes(value: uuid.UUID | Binary) -> bytes:
    return value.bytes if type(value) is uuid.UUID else bytes(value)


def _typed(arrow: pa.DataType) -> Callable[[list], pa.Array]:
    return lambda values: pa.array(values, type=arrow)


class _Scalar(NamedTuple):
    fast: frozenset            # value types taken without a per-value check
    fits: Callable[[Any], bool]
    to_arrow: Callable[[Any], Any] | None
    to_wire: Callable[[Any], Any]
    build: Callable[[list], pa.Array]


def _same(value: Any) -> Any:
    return value


_SCALARS: dict[str, _Scalar] = {
    "bool": _Scalar(frozenset({bool}), lambda v: type(v) is bool, None, _same, _typed(pa.bool_())),
    "int32": _Scalar(frozenset({int}), lambda v: type(v) is int and INT32_MIN <= v <= INT32_MAX,
                     None, _same, _typed(pa.int32())),
    "int64": _Scalar(frozenset({int, Int64}),
                     lambda v: type(v) in (int, Int64) and INT64_MIN <= v <= INT64_MAX,
                     None, int, _typed(pa.int64())),
    "float64": _Scalar(frozenset({float}), _fits_float64, None, lambda v: _float_wire(float(v)),
                       _float64_array),
    "string": _Scalar(frozenset({str}), lambda v: type(v) is str, None, _same, _typed(pa.string())),
    "objectid": _Scalar(frozenset({ObjectId}), lambda v: type(v) is ObjectId, str, str,
                        _typed(pa.string())),
    "decimal128": _Scalar(frozenset({Decimal128}),
                          lambda v: type(v) in (Decimal128, float, Int64) or (type(v) is int and
                                                                            INT64_MIN <= v <= INT64_MAX),
                          _number_text, _number_text, _typed(pa.string())),
    "datetime_ms": _Scalar(frozenset({DatetimeMS}), lambda v: type(v) in (DatetimeMS, dt.datetime),
                           _millis, _millis,
                           lambda values: pa.array(values, pa.int64()).cast(pa.timestamp("ms", "UTC"))),
    "bytes": _Scalar(frozenset({bytes}),
                     lambda v: type(v) is bytes or (type(v) is Binary and v.subtype == 0), None,
                     lambda v: binascii.b2a_base64(v, newline=False).decode("ascii"),
                     _typed(pa.binary())),
    "uuid": _Scalar(frozenset({uuid.UUID}),
                    lambda v: type(v) is uuid.UUID or (type(v) is Binary and v.subtype == 4
                                                       and len(v) == 16),
                    _uuid_bytes, lambda v: str(uuid.UUID(bytes=_uuid_bytes(v))),
                    lambda values: pa.ExtensionArray.from_storage(
                        pa.uuid(), pa.array(values, type=pa.binary(16)))),
}


# ----------------------------------------------------------------------------- errors


def _hint(path: str) -> str:
    while path.endswith("[]"):
        path = path[:-2]
    return f"run discover again, or set the x-olake-type of field {path!r} to bson"


def _misfit(index: int, path: str, value: Any, olake_type: str) -> FieldMisfit:
    preview = repr(value)
    preview = preview if len(preview) <= 60 else preview[:57] + "..."
    return FieldMisfit(index, path, f"BSON {bson_type_name(value)} value {preview} does not fit "
                                    f"x-olake-type {olake_type}; {_hint(path)}")


def _no_value(index: int, path: str) -> FieldMisfit:
    return FieldMisfit(index, path, f"no value (null or missing) in a non-nullable field; {_hint(path)}")


def _unknown(index: int, path: str, document: Mapping, known: frozenset) -> FieldMisfit:
    name = next(key for key in document if key not in known)
    field = f"{path}.{name}" if path else name
    return FieldMisfit(index, field, "field not in the stream's json_schema; run discover again, or "
                                     f"add field {field!r} with x-olake-type bson")


def _source_error(stream_label: str, document: Mapping, bad: FieldMisfit) -> SourceError:
    return value_error(SourceError, stream_label, bad.path, {"_id": document.get("_id")}, bad.index,
                       bad.detail)


def is_nullable(prop: dict) -> bool:
    """Whether a property's JSON type allows null."""
    json_type = prop.get("type", [])
    return json_type == "null" or (isinstance(json_type, list) and "null" in json_type)


def scalar_fits(olake_type: str, value: Any) -> bool | None:
    """Whether ``value`` fits a scalar x-olake-type (None: not a MongoDB scalar type)."""
    spec = _SCALARS.get(olake_type)
    return None if spec is None else spec.fits(value)


def _scalar(olake_type: str, path: str) -> _Scalar:
    spec = _SCALARS.get(olake_type)
    if spec is None:
        raise CatalogError(f"field {path!r}: x-olake-type {olake_type!r} is not a MongoDB type")
    return spec


def _ejson(value: Any, index: int, path: str) -> str:
    try:
        text = json_util.dumps(value, json_options=EJSON_OPTIONS)
    except (TypeError, ValueError, OverflowError) as exc:
        raise FieldMisfit(index, path, f"value {type(value).__name__} is not BSON ({exc})") from None
    if _has_dollar_key(value) and not _reads_back(text, value):
        raise FieldMisfit(index, path, "a document whose field names Extended JSON reads as type "
                                       "markers ('$minKey', '$date', ...) cannot be carried exactly")
    return text


def _has_dollar_key(value: Any) -> bool:
    """Whether a document inside ``value`` has a field name starting with '$' (EJSON's markers)."""
    if isinstance(value, Mapping):
        return any(type(key) is str and key.startswith("$") or _has_dollar_key(item)
                   for key, item in value.items())
    if type(value) in (list, tuple):
        return any(_has_dollar_key(item) for item in value)
    return False


def _reads_back(text: str, value: Any) -> bool:
    """Whether Extended JSON ``text`` reads back as exactly the BSON of ``value``."""
    try:
        back = json_util.loads(text, json_options=EJSON_OPTIONS)
        return bson.encode({"v": back}, codec_options=BSON_CODEC_OPTIONS) == \
            bson.encode({"v": value}, codec_options=BSON_CODEC_OPTIONS)
    except Exception:  # noqa: BLE001 - any failure to read it back means it cannot be carried
        return False


# ----------------------------------------------------------------------------- Arrow columns


def documents_to_batch(documents: list, json_schema: dict, stream_label: str) -> pa.RecordBatch:
    """BSON documents as a record batch of exactly ``arrow_schema(json_schema)``.

    A missing field is null; a value that does not fit its field's x-olake-type, or a field the
    json_schema lacks, raises a SourceError naming ``stream_label``, the field and the ``_id``.
    """
    docs = [d if type(d) is dict else as_bson_document(d) for d in documents]
    properties = json_schema.get("properties", {})
    schema = arrow_schema(json_schema)
    known = frozenset(properties)
    arrays = []
    try:
        for index, doc in enumerate(docs):
            if not known.issuperset(doc):
                raise _unknown(index, "", doc, known)
        for field in schema:
            name = field.name
            arrays.append(_column([d.get(name) for d in docs], properties[name], name, field.nullable))
    except FieldMisfit as bad:
        raise _source_error(stream_label, docs[bad.index], bad) from None
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _column(values: list, prop: dict, path: str, nullable: bool) -> pa.Array:
    olake_type = olake_type_of(prop, path)
    if olake_type == "bson":
        null = None if nullable else "null"
        texts = [null if v is None else _ejson(v, i, path) for i, v in enumerate(values)]
        return pa.ExtensionArray.from_storage(pa.json_(), pa.array(texts, type=pa.string()))
    if olake_type == "document":
        array = _document_column(values, prop, path)
    elif olake_type.startswith("array<"):
        array = _list_column(values, prop, olake_type, path)
    else:
        array = _scalar_column(values, olake_type, path)
    if not nullable and array.null_count:
        raise _no_value(values.index(None), path)
    return array


def _scalar_column(values: list, olake_type: str, path: str) -> pa.Array:
    spec = _scalar(olake_type, path)
    present = set(map(type, values))
    present.discard(_NONE)
    if not present <= spec.fast:
        _raise_first_misfit(values, spec, olake_type, path)
    converted = values if spec.to_arrow is None else \
        [None if v is None else spec.to_arrow(v) for v in values]
    try:
        return spec.build(converted)
    except (OverflowError, pa.ArrowInvalid):
        _raise_first_misfit(values, spec, olake_type, path)
        raise


def _raise_first_misfit(values: list, spec: _Scalar, olake_type: str, path: str) -> None:
    for index, value in enumerate(values):
        if value is not None and not spec.fits(value):
            raise _misfit(index, path, value, olake_type)


def _document_column(values: list, prop: dict, path: str) -> pa.Array:
    properties = sub_properties(prop, path)
    known = frozenset(properties)
    valid = [value is not None for value in values]
    for index, value in enumerate(values):
        if value is not None:
            if not isinstance(value, Mapping):
                raise _misfit(index, path, value, "document")
            if not known.issuperset(value):
                raise _unknown(index, path, value, known)
    struct_type = field_arrow_type(prop, path)
    children = []
    for field, (name, sub) in zip(struct_type, properties.items()):
        sub_values = [None if v is None else v.get(name) for v in values]
        children.append(_column(sub_values, sub, f"{path}.{name}", True))
        if not field.nullable:
            for index, (ok, sub_value) in enumerate(zip(valid, sub_values)):
                if ok and sub_value is None:
                    raise _no_value(index, f"{path}.{name}")
    mask = None if all(valid) else pa.array([not ok for ok in valid], pa.bool_())
    return pa.StructArray.from_arrays(children, fields=list(struct_type), mask=mask)


def _list_column(values: list, prop: dict, olake_type: str, path: str) -> pa.Array:
    offsets, flat, nulls = [0], [], []
    for index, value in enumerate(values):
        if value is not None and type(value) not in (list, tuple):
            raise _misfit(index, path, value, olake_type)
        nulls.append(value is None)
        if value is not None:
            flat.extend(value)
        offsets.append(len(flat))
    try:
        elements = _column(flat, element_property(prop, olake_type), f"{path}[]", True)
    except FieldMisfit as bad:
        raise FieldMisfit(bisect_right(offsets, bad.index) - 1, bad.path, bad.detail) from None
    mask = pa.array(nulls, pa.bool_()) if any(nulls) else None
    return pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), elements,
                                    type=field_arrow_type(prop, path), mask=mask)


# ----------------------------------------------------------------------------- wire values


def document_to_wire(document: Mapping, json_schema: dict, stream_label: str) -> dict:
    """One document as its RECORD data (wire values), as ``encode_records`` gives that row.

    The same errors as ``documents_to_batch``.
    """
    doc = as_bson_document(document)
    properties = json_schema.get("properties", {})
    known = frozenset(properties)
    try:
        if not known.issuperset(doc):
            raise _unknown(0, "", doc, known)
        return {name: _wire_value(doc.get(name), prop, name, is_nullable(prop))
                for name, prop in properties.items()}
    except FieldMisfit as bad:
        raise _source_error(stream_label, doc, bad) from None


def _wire_value(value: Any, prop: dict, path: str, nullable: bool) -> Any:
    olake_type = olake_type_of(prop, path)
    if value is None:
        if nullable:
            return None
        if olake_type == "bson":
            return "null"
        raise _no_value(0, path)
    if olake_type == "bson":
        return _ejson(value, 0, path)
    if olake_type == "document":
        return _document_wire(value, prop, path)
    if olake_type.startswith("array<"):
        if type(value) not in (list, tuple):
            raise _misfit(0, path, value, olake_type)
        element = element_property(prop, olake_type)
        return [_wire_value(item, element, f"{path}[]", True) for item in value]
    spec = _scalar(olake_type, path)
    if not spec.fits(value):
        raise _misfit(0, path, value, olake_type)
    return spec.to_wire(value)


def _document_wire(value: Any, prop: dict, path: str) -> dict:
    if not isinstance(value, Mapping):
        raise _misfit(0, path, value, "document")
    properties = sub_properties(prop, path)
    known = frozenset(properties)
    if not known.issuperset(value):
        raise _unknown(0, path, value, known)
    wire = {}
    for name, sub in properties.items():
        sub_value = value.get(name)
        if sub_value is None and not is_nullable(sub):
            raise _no_value(0, f"{path}.{name}")
        wire[name] = _wire_value(sub_value, sub, f"{path}.{name}", True)
    return wire


__all__ = ["BSON_CODEC_OPTIONS", "EJSON_OPTIONS", "FieldMisfit", "bson_type_name", "document_to_wire",
           "documents_to_batch", "infer_json_schema", "is_nullable", "scalar_fits"]
