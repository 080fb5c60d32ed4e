"""Airbyte's type system (plain JSON Schema with Airbyte's hints, no ``x-olake-type``) as olake types, and
Airbyte's record values as olake wire values.

A stream whose json_schema properties carry no ``x-olake-type`` (what any Airbyte source discovers) gets
one derived for each property by ``with_derived_types``, which also marks the schema (``DERIVED``) so
that ``wire_values`` turns each column's Airbyte values into olake wire values before decoding:

    {"type": "string"}                                   string          utf8
    format "date"                                        date            date32 ("2021-01-23", "... BC")
    format "date-time", airbyte_type
        "timestamp_with_timezone" or none                timestamptz     timestamp[us, UTC] (a value
                                                                         without an offset is UTC)
        "timestamp_without_timezone"                     timestamp       timestamp[us]
    format "time", airbyte_type
        "time_without_timezone"                          time            time64[us]
        "time_with_timezone" or none                     string          utf8 (the text, offset kept)
    contentEncoding "base64"                             bytes           binary
    airbyte_type "big_integer" / "big_number"            numeric         utf8 (the exact text)
    {"type": "integer"}, number with airbyte_type
        "integer"                                        int64           int64
    {"type": "number"}                                   float64         float64
    {"type": "boolean"}                                  bool            bool
    {"type": "array", "items": one of the above}         array<T>        list<T>
    objects, arrays of anything else, unions of types,
    no type at all                                       json            JSON (the value as JSON text)

A type may be a nullable union (``["null", "string"]``); every column outside the primary key is made
nullable, as Airbyte's destinations do (a source may leave any field out of a record).
"""

from __future__ import annotations

import copy
import re

import orjson

DERIVED = "x-olake-wire"  # on a json_schema: its properties' types were derived; values come in Airbyte's forms
AIRBYTE = "airbyte"
_SCALAR = ("string", "integer", "number", "boolean")
_OFFSET = re.compile(r"(Z|z|[+-]\d\d(:?\d\d)?)( BC)?$")


def derived_type(prop: dict) -> str:
    """The olake type of a plain JSON Schema property with Airbyte's hints (see the module's table)."""
    kind = _json_type(prop)
    if kind == "array":
        items = prop.get("items")
        element = derived_type(items) if isinstance(items, dict) and _json_type(items) in _SCALAR else "json"
        return "json" if element == "json" else f"array<{element}>"
    if kind == "string":
        return _string_type(prop)
    if kind == "integer" or (kind == "number" and prop.get("airbyte_type") == "integer"):
        return "int64"
    return {"number": "float64", "boolean": "bool"}.get(kind or "", "json")


def _json_type(prop: dict) -> str | None:
    """The one JSON type of a property besides null (None: none, several, or not given)."""
    json_type = prop.get("type")
    types = [json_type] if isinstance(json_type, str) else json_type if isinstance(json_type, list) else []
    types = [t for t in types if t != "null"]
    return types[0] if len(types) == 1 and isinstance(types[0], str) else None


def _string_type(prop: dict) -> str:
    hint, fmt = prop.get("airbyte_type"), prop.get("format")
    if hint in ("big_integer", "big_number"):
        return "numeric"
    if prop.get("contentEncoding") == "base64":
        return "bytes"
    if fmt == "date":
        return "date"
    if fmt == "date-time" or hint in ("timestamp_with_timezone", "timestamp_without_timezone"):
        return "timestamp" if hint == "timestamp_without_timezone" else "timestamptz"
    if fmt == "time" and hint == "time_without_timezone":
        return "time"
    return "string"


def is_derived(json_schema: dict) -> bool:
    """Whether a json_schema's types were derived from Airbyte's (its values come in Airbyte's forms)."""
    return json_schema.get(DERIVED) == AIRBYTE


def is_plain(json_schema: dict) -> bool:
    """Whether no property of a json_schema carries an ``x-olake-type`` (an Airbyte source's schema)."""
    properties = json_schema.get("properties") or {}
    return not any(isinstance(p, dict) and "x-olake-type" in p for p in properties.values())


def with_derived_types(json_schema: dict, key_columns: list[str]) -> dict:
    """A copy of a plain json_schema whose properties carry derived ``x-olake-type``s, nullable outside
    ``key_columns``, marked ``DERIVED``."""
    out = copy.deepcopy(json_schema)
    properties = out.get("properties") or {}
    for name, prop in list(properties.items()):
        prop = prop if isinstance(prop, dict) else {}
        derived = {**prop, "x-olake-type": derived_type(prop)}
        if name not in key_columns:
            derived["type"] = _with_null(prop.get("type"))
        properties[name] = derived
    out["properties"] = properties
    out[DERIVED] = AIRBYTE
    return out


def _with_null(json_type: object) -> list:
    types = [json_type] if isinstance(json_type, str) else list(json_type) if isinstance(json_type, list) else []
    return types if "null" in types or not types else ["null", *types]


def wire_values(values: list, olake_type: str) -> list:
    """A column's Airbyte values as olake wire values of ``olake_type``: JSON values as their JSON text, a
    timestamp with time zone without an offset taken as UTC; other values unchanged (the decoder checks them)."""
    if olake_type == "json":
        return [None if v is None else orjson.dumps(v).decode() for v in values]
    if olake_type == "timestamptz":
        return [_utc_if_naive(v) for v in values]
    if olake_type.startswith("array<"):
        return [wire_values(v, olake_type[6:-1]) if isinstance(v, list) else v for v in values]
    return values


def _utc_if_naive(value: object) -> object:
    if not isinstance(value, str) or _OFFSET.search(value) or value in ("infinity", "-infinity"):
        return value
    return value[:-3] + "+00:00 BC" if value.endswith(" BC") else value + "+00:00"
