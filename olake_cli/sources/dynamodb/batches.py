"""DynamoDB items as Arrow record batches typed by the stream's catalog (see ``schema`` for the rules).

Each column holds exactly what its x-olake-type says: ``string``, ``bool``, ``bytes`` the S, BOOL and B
values; ``decimal(38,s)`` the N values, cast by Arrow with no rounding (and within the property's
``x-olake-integer-digits``, see ``schema``); ``numeric`` the N text as
DynamoDB returned it; ``document`` a struct of the map's attributes; ``array<T>`` a list of a set's
members or of a list's elements; ``json`` the value's DynamoDB JSON text. NULL and a missing attribute
are null (a json column keeps NULL as ``{"NULL":true}``).

A value that does not fit its column (another DynamoDB type, a number beyond the decimal's digits, an
attribute or map name the json_schema lacks) raises a SourceError naming the stream, the attribute and
the item's key: nothing is dropped or converted silently. (The readers widen a column for numbers
beyond it, ``drift``, and convert the items again.)
"""

from __future__ import annotations

from bisect import bisect_right

import pyarrow as pa

from olake_cli.core.codec.bad_value import BadValue, value_error
from olake_cli.core.codec.types import arrow_schema, element_property, field_arrow_type, olake_type_of, sub_properties
from olake_cli.core.errors import SourceError
from olake_cli.core.schema_drift import decimal_digits
from olake_cli.sources.dynamodb.attributes import SET_TAGS, json_text, tag_of
from olake_cli.sources.dynamodb.schema import DYNAMODB_TYPE

_TAGS_OF = {"string": ("S",), "bool": ("BOOL",), "bytes": ("B",), "document": ("M",)}
_ARROW_SCALARS = {"string": pa.string(), "bool": pa.bool_(), "bytes": pa.binary()}
_OTHER = object()  # a value of another DynamoDB type than the column's


class Misfit(BadValue):
    """A value (of item ``index``) that does not fit the attribute at ``path``."""

    def __init__(self, index: int, path: str, detail: str) -> None:
        super().__init__(index, detail)
        self.path = path


def items_to_batch(items: list[dict], json_schema: dict, label: str, key_names: tuple[str, ...]) -> pa.RecordBatch:
    """Items (low-level attribute values) as a record batch of exactly ``arrow_schema(json_schema)``."""
    properties = json_schema.get("properties", {})
    schema = arrow_schema(json_schema)
    try:
        for index, item in enumerate(items):
            if not properties.keys() >= item.keys():
                raise _unknown(index, "", item, properties)
        arrays = [_column([item.get(f.name) for item in items], properties[f.name], f.name, f.nullable)
                  for f in schema]
    except Misfit as bad:
        item = items[bad.index]
        key = {name: _plain(item[name]) for name in key_names if name in item}
        raise value_error(SourceError, label, bad.path, key, bad.index, bad.detail) from None
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _column(values: list, prop: dict, path: str, nullable: bool) -> pa.Array:
    """One column from the attribute values (None: missing) of its attribute."""
    olake_type = olake_type_of(prop, path)
    if olake_type == "json":
        texts = [None if value is None else json_text(value) for value in values]
        array = pa.ExtensionArray.from_storage(pa.json_(), pa.array(texts, pa.string()))
    elif olake_type.startswith("array<"):
        array = _list_column(_checked(values, prop, olake_type, path), prop, olake_type, path)
    else:
        array = _from_payloads(_payloads(values, prop, olake_type, path), prop, olake_type, path)
    if not nullable and array.null_count:
        index = next(i for i, valid in enumerate(array.is_valid().to_pylist()) if not valid)
        raise Misfit(index, path, "no value (NULL or missing) in a key attribute")
    return array


def _allowed(prop: dict, olake_type: str) -> tuple[str, ...]:
    """The DynamoDB types the column takes: the property's own, else those its olake type can hold."""
    expected = prop.get(DYNAMODB_TYPE)
    return (expected,) if expected else _allowed_tags(olake_type)


def _allowed_tags(olake_type: str) -> tuple[str, ...]:
    if olake_type in _TAGS_OF:
        return _TAGS_OF[olake_type]
    if olake_type.startswith("array<"):
        element = _allowed_tags(olake_type[6:-1])
        return ("L", *(s for s, e in SET_TAGS.items() if element == (e,)))
    return ("N",)  # decimal(38,s), numeric


def _payloads(values: list, prop: dict, olake_type: str, path: str) -> list:
    """The values' payloads of a column of one DynamoDB type (NULL as None); a value of another type
    is a Misfit."""
    (tag,) = _allowed(prop, olake_type)
    payloads = [None if value is None else value.get(tag, _OTHER) for value in values]
    if _OTHER in payloads:
        for index, (value, payload) in enumerate(zip(values, payloads)):
            if payload is _OTHER:
                if "NULL" not in value:
                    raise _wrong_type(index, path, value, olake_type, (tag,))
                payloads[index] = None
    return payloads


def _checked(values: list, prop: dict, olake_type: str, path: str) -> list:
    """The values with NULL as None, each of a DynamoDB type the column takes (else a Misfit)."""
    allowed = _allowed(prop, olake_type)
    checked = []
    for index, value in enumerate(values):
        if value is None or "NULL" in value:
            checked.append(None)
        elif tag_of(value) in allowed:
            checked.append(value)
        else:
            raise _wrong_type(index, path, value, olake_type, allowed)
    return checked


def _wrong_type(index: int, path: str, value: dict, olake_type: str, allowed: tuple[str, ...]) -> Misfit:
    return Misfit(index, path, f"a {tag_of(value)} value does not fit x-olake-type {olake_type} (DynamoDB type "
                               f"{' or '.join(allowed)}); {_hint(path)}")


def _from_payloads(payloads: list, prop: dict, olake_type: str, path: str) -> pa.Array:
    """A scalar, number or document column from its payloads."""
    if olake_type in _ARROW_SCALARS:
        return pa.array(payloads, _ARROW_SCALARS[olake_type])
    if olake_type == "document":
        return _document_column(payloads, prop, path)
    return _number_column(payloads, prop, olake_type, path)


def _number_column(texts: list, prop: dict, olake_type: str, path: str) -> pa.Array:
    """N texts as ``numeric`` (the text itself) or cast exactly to ``decimal(38,s)``, through the
    decimal of the property's integer digits (a number beyond them does not fit)."""
    text = pa.array(texts, pa.string())
    if olake_type == "numeric":
        return text
    target = field_arrow_type({"x-olake-type": olake_type}, path)
    integer, scale = decimal_digits({**prop, "x-olake-type": olake_type})
    check = target if integer + scale == target.precision else pa.decimal128(max(1, integer + scale), scale)
    try:
        return text.cast(check).cast(target)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        bound = "" if check is target else f" (up to {integer} integer digits)"
        for index, value in enumerate(texts):
            try:
                pa.array([value], pa.string()).cast(check)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                raise Misfit(index, path, f"number {value} does not fit x-olake-type {olake_type}{bound} exactly; "
                                          f"{_hint(path, 'numeric')}") from None
        raise


def _document_column(maps: list, prop: dict, path: str) -> pa.Array:
    properties = sub_properties(prop, path)
    for index, attributes in enumerate(maps):
        if attributes is not None and not properties.keys() >= attributes.keys():
            raise _unknown(index, path, attributes, properties)
    struct_type = field_arrow_type(prop, path)
    children = [_column([None if m is None else m.get(name) for m in maps], sub, f"{path}.{name}", True)
                for name, sub in properties.items()]
    mask = pa.array([m is None for m in maps], pa.bool_()) if None in maps else None
    return pa.StructArray.from_arrays(children, fields=list(struct_type), mask=mask)


def _list_column(values: list, prop: dict, olake_type: str, path: str) -> pa.Array:
    """Sets (their members are plain payloads) and lists (of attribute values) as one list column."""
    offsets, members = [0], []
    sets_only = all(value is None or "L" not in value for value in values)
    for value in values:
        if value is not None:
            tag = tag_of(value)
            payload = value[tag]
            members.extend(payload if sets_only or tag == "L" else ({SET_TAGS[tag]: m} for m in payload))
        offsets.append(len(members))
    element = element_property(prop, olake_type)
    try:
        if sets_only:
            elements = _from_payloads(members, element, olake_type[6:-1], f"{path}[]")
        else:
            elements = _column(members, element, f"{path}[]", True)
    except Misfit as bad:
        raise Misfit(bisect_right(offsets, bad.index) - 1, bad.path, bad.detail) from None
    mask = pa.array([v is None for v in values], pa.bool_()) if None in values else None
    return pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), elements,
                                    type=field_arrow_type(prop, path), mask=mask)


def _unknown(index: int, path: str, attributes: dict, properties: dict) -> Misfit:
    name = next(key for key in attributes if key not in properties)
    full = f"{path}.{name}" if path else name
    return Misfit(index, full, "attribute not in the stream's json_schema; run discover again, or add "
                               f"attribute {full!r} with x-olake-type json")


def _hint(path: str, fallback: str = "json") -> str:
    while path.endswith("[]"):
        path = path[:-2]
    return f"run discover again, or set the x-olake-type of attribute {path!r} to {fallback}"


def _plain(value: dict) -> object:
    """A key attribute's value for messages (S, N text, or B bytes)."""
    return value[tag_of(value)]
