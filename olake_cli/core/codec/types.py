"""The olake type system: each ``x-olake-type``, its destination Arrow type and its wire value.

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
                           column's number of dimensions (array<array<T>> for 2-D values)
    ndarray<T>             an array of any shape, with its lower bounds (a PostgreSQL array column
                           whose values differ in depth or do not start at 1):
                           {"lower_bounds": [int], "lengths": [int], "elements": [T]} -> struct of
                           list<int32>, list<int32>, list<T>; the elements in row-major order,
                           ``{}`` as three empty lists

    objectid, decimal128   (BSON, see sources/mongodb) string: 24 lowercase hex / str(Decimal128)
    datetime_ms            integer milliseconds since 1970 (all of int64) -> timestamp[ms, UTC]
    bson                   canonical Extended JSON text -> pa.json_()
    document               JSON object of its sub-fields' wire values -> struct of the property's
                           "properties" (array<document>: of "items": {"properties"}); these need
                           the property: ``field_arrow_type(prop)``, the ``prop`` of
                           ``wire_values`` / ``decode_column``

This module is the bottom of the codec package (see its ``__init__``).
"""

from __future__ import annotations

import re
from functools import lru_cache

import pyarrow as pa

from olake_cli.core.errors import CatalogError

INT64_MAX, INT64_MIN = 2**63 - 1, -(2**63)
INT32_MAX, INT32_MIN = 2**31 - 1, -(2**31)
# years 1..9999 as timestamp[us] / date32 values: Arrow's own text casts handle these, others go
# through calendar_text
ARROW_TEXT_MICROS = (-62_135_596_800_000_000, 253_402_300_799_999_999)
ARROW_TEXT_DAYS = (-719_162, 2_932_896)
DAY_US = 86_400_000_000
INT_TYPES = ("int16", "int32", "int64")
INTERVAL_FIELDS = ("months", "days", "microseconds")
INTERVAL_TYPE = pa.struct([("months", pa.int32()), ("days", pa.int32()), ("microseconds", pa.int64())])
_SIMPLE_TYPES: dict[str, pa.DataType] = {
    "bool": pa.bool_(), "int16": pa.int16(), "int32": pa.int32(), "int64": pa.int64(),
    "float32": pa.float32(), "float64": pa.float64(), "numeric": pa.string(), "string": pa.string(),
    "uuid": pa.uuid(), "json": pa.json_(), "bytes": pa.binary(), "date": pa.date32(),
    "time": pa.time64("us"), "timestamp": pa.timestamp("us"),
    "timestamptz": pa.timestamp("us", tz="UTC"), "interval": INTERVAL_TYPE,
    "objectid": pa.string(), "decimal128": pa.string(), "datetime_ms": pa.timestamp("ms", tz="UTC"),
    "bson": pa.json_(),
}
NDARRAY = "ndarray"
NDARRAY_FIELDS = ("lower_bounds", "lengths", "elements")
NESTED_KINDS = frozenset({"array", "document", NDARRAY})  # their encoders and decoders take the property
_DECIMAL_RE = re.compile(r"decimal\((\d+),(\d+)\)")


@lru_cache(maxsize=512)
def arrow_type(olake_type: str) -> pa.DataType:
    """The destination Arrow type of an x-olake-type string."""
    if olake_type in _SIMPLE_TYPES:
        return _SIMPLE_TYPES[olake_type]
    if olake_type.startswith("array<") and olake_type.endswith(">"):
        return pa.list_(pa.field("element", arrow_type(olake_type[6:-1])))
    if olake_type.startswith(NDARRAY + "<") and olake_type.endswith(">"):
        return ndarray_arrow_type(arrow_type(olake_type[len(NDARRAY) + 1:-1]))
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
        return pa.struct([pa.field(name, field_arrow_type(sub, f"{column}.{name}"), nullable=nullable(sub))
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
    return pa.schema([pa.field(name, field_arrow_type(prop, name), nullable=nullable(prop))
                      for name, prop in json_schema.get("properties", {}).items()])


def stored_schema(json_schema: dict, key_columns: tuple | list, with_changes: bool) -> pa.Schema:
    """The Arrow schema a destination stores a stream's rows with: a NOT NULL column (no "null" in
    its JSON type) stays non-nullable, except, when changes follow (``with_changes``), a column
    outside the key, since a delete carries only its key."""
    return pa.schema([f if f.nullable or not with_changes or f.name in key_columns else f.with_nullable(True)
                      for f in arrow_schema(json_schema)])


def nullable(prop: dict) -> bool:
    """Whether a json_schema property's JSON type allows null."""
    json_type = prop.get("type", [])
    return json_type == "null" or (isinstance(json_type, list) and "null" in json_type)


# ----------------------------------------------------------------------------- array shapes


def ndarray_arrow_type(element: pa.DataType) -> pa.DataType:
    """``struct<lower_bounds: list<int32>, lengths: list<int32>, elements: list<element>>``."""
    bounds = pa.list_(pa.field("element", pa.int32()))
    lower_bounds, lengths, elements = NDARRAY_FIELDS
    return pa.struct([pa.field(lower_bounds, bounds), pa.field(lengths, bounds),
                      pa.field(elements, pa.list_(pa.field("element", element)))])


def array_shape(olake_type: str) -> tuple[str, int | str] | None:
    """(element type, shape) of an array type: the depth of ``array<...<T>>`` or ``NDARRAY`` for
    ``ndarray<T>``; None for any other type."""
    if olake_type.startswith(NDARRAY + "<") and olake_type.endswith(">"):
        return olake_type[len(NDARRAY) + 1:-1], NDARRAY
    depth = 0
    while olake_type.startswith("array<") and olake_type.endswith(">"):
        olake_type, depth = olake_type[6:-1], depth + 1
    return (olake_type, depth) if depth else None


def shaped_array(element: str, shape: int | str) -> str:
    """The array type of ``element`` values with ``shape`` (a depth, or ``NDARRAY``)."""
    if shape == NDARRAY:
        return f"{NDARRAY}<{element}>"
    return "array<" * int(shape) + element + ">" * int(shape)
