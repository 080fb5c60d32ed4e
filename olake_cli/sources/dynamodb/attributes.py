"""DynamoDB attribute values as boto3's low-level client gives them: ``{"S": "x"}``, ``{"N": "1.5"}``,
``{"B": b"..."}``, ``{"M": {...}}``, ...; their numbers' shapes, and DynamoDB JSON text.

DynamoDB JSON is the service's own wire form of an attribute value (binary as base64 text), written
with sorted keys: it keeps every type apart (a set from a list, a number from a string), so it is an
exact text form of any value. Keys (``LastEvaluatedKey``) are written the same way in chunk bounds.
"""

from __future__ import annotations

import binascii
from decimal import Decimal, InvalidOperation, localcontext
from typing import Any

import orjson

SCALAR_TAGS = ("S", "N", "B", "BOOL", "NULL")
SET_TAGS = {"SS": "S", "NS": "N", "BS": "B"}  # a set's tag -> its elements' tag
_BINARY_TAGS = ("B", "BS")


def tag_of(value: dict) -> str:
    """The type tag of an attribute value (its one key)."""
    return next(iter(value))


def number_shape(text: str) -> tuple[int, int]:
    """(integer digits, fraction digits) the exact decimal ``text`` needs, trailing zeros aside:
    ``"120.50"`` -> (3, 1), ``"1E+3"`` -> (4, 0), ``"0.001"`` -> (0, 3)."""
    with localcontext() as context:
        context.prec = 200  # DynamoDB numbers have 38 digits and exponents within -130..125
        try:
            value = Decimal(text).normalize()
        except InvalidOperation:
            raise ValueError(f"{text!r} is not a number") from None
    _, digits, exponent = value.as_tuple()
    if not isinstance(exponent, int):
        raise ValueError(f"{text!r} is not a finite number")
    if digits == (0,):
        return 0, 0
    return max(0, len(digits) + exponent), max(0, -exponent)


def to_json_value(value: dict) -> dict:
    """An attribute value in DynamoDB JSON form (binary as base64 text), nested values too."""
    tag = tag_of(value)
    payload = value[tag]
    if tag == "B":
        return {"B": _base64(payload)}
    if tag == "BS":
        return {"BS": [_base64(item) for item in payload]}
    if tag == "M":
        return {"M": {name: to_json_value(item) for name, item in payload.items()}}
    if tag == "L":
        return {"L": [to_json_value(item) for item in payload]}
    return {tag: payload}


def from_json_value(obj: dict) -> dict:
    """The attribute value of its DynamoDB JSON form (inverse of :func:`to_json_value`)."""
    tag = tag_of(obj)
    payload = obj[tag]
    if tag == "B":
        return {"B": binascii.a2b_base64(payload)}
    if tag == "BS":
        return {"BS": [binascii.a2b_base64(item) for item in payload]}
    if tag == "M":
        return {"M": {name: from_json_value(item) for name, item in payload.items()}}
    if tag == "L":
        return {"L": [from_json_value(item) for item in payload]}
    return {tag: payload}


def json_text(value: dict) -> str:
    """An attribute value as DynamoDB JSON text (sorted keys)."""
    return orjson.dumps(to_json_value(value), option=orjson.OPT_SORT_KEYS).decode()


def key_text(key: dict[str, dict]) -> str:
    """An item key (or ``LastEvaluatedKey``) as DynamoDB JSON text: ``{"pk":{"S":"a"}}``."""
    return orjson.dumps({name: to_json_value(value) for name, value in key.items()},
                        option=orjson.OPT_SORT_KEYS).decode()


def key_from_text(text: str) -> dict[str, dict]:
    """The item key of :func:`key_text`'s output."""
    return {name: from_json_value(value) for name, value in orjson.loads(text).items()}


def _base64(data: Any) -> str:
    return binascii.b2a_base64(bytes(data), newline=False).decode("ascii")
