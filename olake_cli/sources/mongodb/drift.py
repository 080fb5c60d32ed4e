"""Schema drift of MongoDB documents: the narrowest wider json_schema that holds values the stream's
types cannot, by one rule (README, "Schema drift"):

* numbers widen as discovery types them (``bson_schema.number_type``): int32 becomes int64 for a long,
  int32 or int64 becomes float64 for a double, float64 becomes decimal128 for a long that is not
  exactly a double, any number becomes decimal128 for a Decimal128;
* a field the stream lacks becomes a new column, typed as discovery types its values;
* any other value outside its field's type turns that field (a document's sub-field, an array's
  element type, or the column) into ``bson``: canonical Extended JSON text, which holds every value.

A widening that is not an in-place one (``core.schema_drift``) makes the read pipeline load the
stream anew, so every earlier value is checked against the new type too.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from olake_cli.core.codec.types import element_property, nullable
from olake_cli.sources.mongodb.bson_scalars import scalar_fits
from olake_cli.sources.mongodb.bson_schema import (
    NUMBER_BSON_TYPES, NUMBER_OLAKE_TYPES, as_bson_document, bson_type_name, field_property, is_exact_double,
    json_type, number_type,
)


def widened_schema(json_schema: dict, documents: Iterable[Mapping]) -> dict:
    """``json_schema`` widened just enough to hold every document (``json_schema`` itself if all fit)."""
    properties = json_schema.get("properties", {})
    result = dict(properties)
    new_fields: dict[str, list] = {}
    for document in documents:
        for name, value in as_bson_document(document).items():
            if name in new_fields or name not in result:
                new_fields.setdefault(name, []).append(value)
            else:
                result[name] = widen(result[name], value)
    result.update((name, field_property(values)) for name, values in new_fields.items())
    if all(result[name] is prop for name, prop in properties.items()) and not new_fields:
        return json_schema
    return {**json_schema, "properties": result}


def widen(prop: dict, value: Any) -> dict:
    """``prop`` itself when ``value`` fits it, else the narrowest wider property that holds it."""
    olake_type = prop.get("x-olake-type")
    if olake_type == "bson":
        return prop
    if value is None:
        return prop if nullable(prop) else _retyped(prop, "bson", "null")
    if olake_type == "document":
        return _widen_document(prop, value)
    if isinstance(olake_type, str) and olake_type.startswith("array<"):
        return _widen_array(prop, olake_type, value)
    fits = scalar_fits(olake_type, value)
    if fits is None or fits:  # not a MongoDB type: the converter names the problem
        return prop
    name = bson_type_name(value)
    if olake_type in NUMBER_OLAKE_TYPES and name in NUMBER_BSON_TYPES:
        inexact = name == "long" and not is_exact_double(value)
        return widen(_retyped(prop, number_type({NUMBER_OLAKE_TYPES[olake_type], name}, inexact), name), value)
    return _retyped(prop, "bson", name)


def _widen_document(prop: dict, value: Any) -> dict:
    subs = prop.get("properties") or {}
    if not isinstance(value, Mapping) or not subs.keys() >= value.keys():
        return _retyped(prop, "bson", bson_type_name(value))
    widened = {name: widen(sub, value.get(name)) for name, sub in subs.items()}
    if all(widened[name] is sub for name, sub in subs.items()):
        return prop
    return {**prop, "properties": widened}


def _widen_array(prop: dict, olake_type: str, value: Any) -> dict:
    if type(value) not in (list, tuple):
        return _retyped(prop, "bson", bson_type_name(value))
    element = widened = element_property(prop, olake_type)
    for item in value:
        widened = widen(widened, item)
    if widened is element:
        return prop
    if widened["x-olake-type"] == "bson":
        return _retyped(prop, "bson", "array")
    return {**prop, "x-olake-type": f"array<{widened['x-olake-type']}>", "items": widened}


def _retyped(prop: dict, olake_type: str, bson_type: str) -> dict:
    """``prop`` as a scalar (or bson) property of ``olake_type`` that also saw ``bson_type`` values."""
    kept = {k: v for k, v in prop.items() if k not in ("type", "x-olake-type", "x-olake-bson-types",
                                                       "properties", "items")}
    seen = sorted(set(prop.get("x-olake-bson-types") or []) | {bson_type})
    return {**kept, "type": json_type(olake_type, nullable(prop)), "x-olake-type": olake_type,
            "x-olake-bson-types": seen}

