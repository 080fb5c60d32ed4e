"""A MongoDB collection's json_schema, inferred from sampled documents (BSON types -> x-olake-type).

Each field's x-olake-type follows from the set of BSON types its sampled values have (null and a
missing field aside, they only make the field nullable):

    bool -> bool                 string -> string
    int -> int32                 long, or int and long -> int64 (Int32 values widen exactly)
    double, alone or with int    float64 (NaN, +/-Infinity and -0.0 kept) when every int and long
    and long                     value is exactly a double (every int is; a long beyond 2^53 may
                                 not be), else decimal128
    decimal, alone or with       decimal128: the exact number as Decimal128 text (a double as the
    other numbers                shortest text that reads back as the same double)
    objectId -> objectid         (24 lowercase hex digits)
    date -> datetime_ms          milliseconds since 1970, BSON's whole range
    binData:0 -> bytes           binData:4 of 16 bytes -> uuid
    object -> document           when every sampled value has the same keys in the same order
                                 (at least one); its sub-fields follow these rules recursively
    array -> array<T>            when the elements of every sampled array infer to one T that is
                                 not bson (array<document> keeps the element's fields in "items")
    anything else -> bson        canonical Extended JSON: a mix of types other than numbers,
                                 timestamp, regex, minKey, maxKey, javascript(WithScope), dbRef,
                                 other binary subtypes, documents or arrays of inconsistent shape,
                                 a field only ever null

Int32 and Int64: pymongo decodes a BSON int64 as ``bson.int64.Int64`` and an int32 as ``int``; a
plain ``int`` built by hand is named as pymongo would store it (``int`` within 32 bits, else
``long``). Read with ``BSON_CODEC_OPTIONS`` (or pass ``RawBSONDocument``\\s) so that dates arrive as
``DatetimeMS`` (no overflow beyond Python's years 1..9999) and subtype-4 binaries as UUIDs.

Every field except ``_id`` is nullable: a sample cannot prove that later documents hold a field,
and MongoDB has no NOT NULL. ``_id`` comes first and is never null (a sampled null ``_id`` makes it
``bson``, where BSON null is the text ``null``). Field names are kept exactly (dots, dollars). A
change event carries the whole document, so the schema says its updates are complete
(``x-olake-updates-complete``: no ``_olake_toast_unchanged`` column).
"""

from __future__ import annotations

import datetime as dt
import re
import uuid
from collections.abc import Iterable, Mapping
from typing import Any

import bson
from bson import Binary, Code, DatetimeMS, Decimal128, Int64, MaxKey, MinKey, ObjectId, Regex, Timestamp
from bson.binary import UuidRepresentation
from bson.codec_options import CodecOptions, DatetimeConversion
from bson.dbref import DBRef
from bson.raw_bson import RawBSONDocument

from olake_cli.core.codec.types import INT32_MAX, INT32_MIN
from olake_cli.core.row_metadata import UPDATES_COMPLETE

BSON_CODEC_OPTIONS: CodecOptions = CodecOptions(
    datetime_conversion=DatetimeConversion.DATETIME_MS, uuid_representation=UuidRepresentation.STANDARD)

_TYPE_NAMES: dict[type, str] = {
    type(None): "null", bool: "bool", float: "double", str: "string", ObjectId: "objectId",
    Decimal128: "decimal", Int64: "long", DatetimeMS: "date", dt.datetime: "date", bytes: "binData:0",
    uuid.UUID: "binData:4", Timestamp: "timestamp", Regex: "regex", re.Pattern: "regex",
    MinKey: "minKey", MaxKey: "maxKey", DBRef: "dbRef", list: "array", tuple: "array", dict: "object",
}
_SCALAR_OLAKE_TYPES = {
    "bool": "bool", "string": "string", "objectId": "objectid", "date": "datetime_ms", "binData:0": "bytes",
}
NUMBER_BSON_TYPES = frozenset({"int", "long", "double", "decimal"})
NUMBER_OLAKE_TYPES = {"int32": "int", "int64": "long", "float64": "double", "decimal128": "decimal"}
_JSON_TYPES = {"bool": ["boolean"], "int32": ["integer"], "int64": ["integer"],
               "float64": ["number", "string"], "datetime_ms": ["integer"], "document": ["object"]}


def bson_type_name(value: Any) -> str:
    """The BSON type a decoded value has, by MongoDB's $type alias (binary: ``binData:<subtype>``)."""
    kind = type(value)
    name = _TYPE_NAMES.get(kind)
    if name is not None:
        return name
    if kind is int:
        return "int" if INT32_MIN <= value <= INT32_MAX else "long"
    if kind is Binary:
        return f"binData:{value.subtype}"
    if kind is Code:
        return "javascript" if value.scope is None else "javascriptWithScope"
    if isinstance(value, Mapping):
        return "object"
    return f"python:{kind.__name__}"  # not a BSON value: only ``bson`` could take it, and fails


def is_exact_double(value: int) -> bool:
    """Whether an integer is exactly a double (every Int32 is; an Int64 beyond 2^53 may not be)."""
    return -2**53 <= value <= 2**53 or int(float(value)) == value


def number_type(names: set[str] | frozenset[str], inexact: bool) -> str:
    """The x-olake-type of BSON numbers of these types (``inexact``: some int or long is not a double)."""
    if "decimal" in names or ("double" in names and inexact):
        return "decimal128"
    if "double" in names:
        return "float64"
    return "int32" if names == {"int"} else "int64"


def as_bson_document(document: Mapping) -> Mapping:
    """A decoded document: ``RawBSONDocument``\\s are decoded with ``BSON_CODEC_OPTIONS``."""
    if isinstance(document, RawBSONDocument):
        return bson.decode(document.raw, codec_options=BSON_CODEC_OPTIONS)
    return document


class _FieldStats:
    """The BSON types one field had across the sample, with its sub-fields and array elements."""

    __slots__ = ("types", "keys", "same_keys", "fields", "items", "uuid_ok", "inexact")

    def __init__(self) -> None:
        self.types: set[str] = set()
        self.keys: tuple | None = None
        self.same_keys = True
        self.fields: dict[str, _FieldStats] = {}
        self.items: _FieldStats | None = None
        self.uuid_ok = True
        self.inexact = False  # an int or long value that is not exactly a double

    def observe(self, value: Any) -> None:
        name = bson_type_name(value)
        self.types.add(name)
        if name == "object":
            self._observe_document(value)
        elif name == "array":
            if self.items is None:
                self.items = _FieldStats()
            for element in value:
                self.items.observe(element)
        elif name == "binData:4" and type(value) is Binary and len(value) != 16:
            self.uuid_ok = False
        elif name == "long" and not is_exact_double(value):
            self.inexact = True

    def _observe_document(self, document: Mapping) -> None:
        keys = tuple(document)
        if self.keys is None:
            self.keys = keys
        elif keys != self.keys:
            self.same_keys = False
            self.fields = {}  # a bson field: its sub-fields no longer matter
        if self.same_keys:
            for key, value in document.items():
                self.fields.setdefault(key, _FieldStats()).observe(value)


def infer_json_schema(documents: Iterable[Mapping]) -> dict:
    """The json_schema of a collection from sampled documents (see the module's rules)."""
    fields: dict[str, _FieldStats] = {"_id": _FieldStats()}
    for document in documents:
        for key, value in as_bson_document(document).items():
            stats = fields.get(key)
            if stats is None:
                stats = fields[key] = _FieldStats()
            stats.observe(value)
    properties = {"_id": _id_property(fields.pop("_id"))}
    properties.update((name, _property(stats, nullable=True)) for name, stats in fields.items())
    return {"type": "object", "properties": properties, UPDATES_COMPLETE: True}


def _id_property(stats: _FieldStats) -> dict:
    if not stats.types:  # no document sampled
        return {"type": ["string"], "x-olake-type": "objectid", "x-olake-bson-types": []}
    return _property(stats, nullable=False)


def _olake_type(stats: _FieldStats | None) -> str:
    """The x-olake-type of a field from the BSON types it had (null and missing aside)."""
    seen = set() if stats is None else stats.types - {"null"}
    if seen and seen <= NUMBER_BSON_TYPES:
        return number_type(seen, stats.inexact)
    if len(seen) != 1:
        return "bson"
    (name,) = seen
    if name in _SCALAR_OLAKE_TYPES:
        return _SCALAR_OLAKE_TYPES[name]
    if name == "binData:4":
        return "uuid" if stats.uuid_ok else "bson"
    if name == "object":
        return "document" if stats.same_keys and stats.keys else "bson"
    if name == "array":
        element = _olake_type(stats.items)
        return "bson" if element == "bson" else f"array<{element}>"
    return "bson"


def json_type(olake_type: str, nullable: bool) -> list[str]:
    """The JSON types (``type``) of a property of this x-olake-type."""
    kinds = ["array"] if olake_type.startswith("array<") else _JSON_TYPES.get(olake_type, ["string"])
    return [*kinds, "null"] if nullable else list(kinds)


def field_property(values: list[Any], nullable: bool = True) -> dict:
    """The json_schema property of one field holding ``values`` (the rules above)."""
    stats = _FieldStats()
    for value in values:
        stats.observe(value)
    return _property(stats, nullable)


def _property(stats: _FieldStats, nullable: bool) -> dict:
    """The json_schema property of a field: JSON type, x-olake-type, the BSON types seen."""
    olake_type = _olake_type(stats)
    if not nullable and "null" in stats.types:
        olake_type = "bson"
    prop = {"type": json_type(olake_type, nullable), "x-olake-type": olake_type,
            "x-olake-bson-types": sorted(stats.types)}
    if olake_type == "document":
        prop["properties"] = {name: _property(sub, nullable=True) for name, sub in stats.fields.items()}
    elif olake_type.startswith("array<"):
        prop["items"] = _property(stats.items, nullable=True)
    return prop
