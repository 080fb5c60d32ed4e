"""Number drift of DynamoDB items: the narrowest wider json_schema that holds numbers a column's
``decimal(38,s)`` cannot (README, "DynamoDB", "Numbers that outgrow their column").

A number with more fraction digits than the column's scale, or more integer digits than its bound
(``x-olake-integer-digits``, see ``schema``), widens the column to ``decimal(38,s')`` with the larger
scale and bound while the two fit 38 digits together, else to ``numeric``: the exact decimal text,
which holds every DynamoDB number (38 significant digits, exponents from -130 to +125). Numbers in
sets, lists and maps widen the same way where the column holds them as arrays and documents. Both
steps keep every value already written exactly (``core.schema_drift.exact_number_widening``), so the
stream goes on in place. Any other misfit (another DynamoDB type, an unknown attribute) is not drift:
the reader reports it.
"""

from __future__ import annotations

from collections.abc import Iterable

from olake_cli.core.codec.types import element_property
from olake_cli.core.schema_drift import INTEGER_DIGITS, decimal_digits
from olake_cli.sources.dynamodb.attributes import number_shape, tag_of
from olake_cli.sources.dynamodb.schema import DECIMAL_DIGITS


def widened_schema(json_schema: dict, items: Iterable[dict]) -> dict:
    """``json_schema`` widened just enough for the items' numbers (``json_schema`` itself if all fit)."""
    properties = json_schema.get("properties", {})
    result = dict(properties)
    for item in items:
        for name, value in item.items():
            if name in result:
                result[name] = widen(result[name], value)
    if all(result[name] is prop for name, prop in properties.items()):
        return json_schema
    return {**json_schema, "properties": result}


def widen(prop: dict, value: dict) -> dict:
    """``prop`` itself when ``value``'s numbers fit it, else the property widened for them."""
    olake_type = prop.get("x-olake-type") or ""
    tag = tag_of(value)
    if tag == "N" and olake_type.startswith("decimal("):
        return widen_number(prop, [value["N"]])
    if olake_type.startswith("array<") and tag in ("NS", "L"):
        element = wider = element_property(prop, olake_type)
        if tag == "NS" and olake_type.startswith("array<decimal("):
            wider = widen_number(element, value["NS"])
        elif tag == "L":
            for member in value["L"]:
                wider = widen(wider, member)
        return prop if wider is element else {**prop, "x-olake-type": f"array<{wider['x-olake-type']}>",
                                              "items": wider}
    if olake_type == "document" and tag == "M":
        subs, attributes = prop.get("properties") or {}, value["M"]
        widened = {name: widen(sub, attributes[name]) if name in attributes else sub for name, sub in subs.items()}
        return prop if all(widened[name] is sub for name, sub in subs.items()) else {**prop, "properties": widened}
    return prop


def widen_number(prop: dict, texts: Iterable[str]) -> dict:
    """A decimal property widened for the numbers ``texts`` (``prop`` itself when they fit)."""
    integer, fraction = held = decimal_digits(prop)
    for text in texts:
        needed = number_shape(text)
        integer, fraction = max(integer, needed[0]), max(fraction, needed[1])
    if (integer, fraction) == held:
        return prop
    if integer + fraction > DECIMAL_DIGITS:
        kept = {k: v for k, v in prop.items() if k != INTEGER_DIGITS}
        return {**kept, "x-olake-type": "numeric"}
    return {**prop, "x-olake-type": f"decimal({DECIMAL_DIGITS},{fraction})", INTEGER_DIGITS: integer}
