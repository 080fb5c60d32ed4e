"""DynamoDB items as Arrow record batches typed by the stream's catalog (see ``schema`` for the rules).

Each column holds exactly what its x-olake-type says: ``string``, ``bool``, ``bytes`` the S, BOOL and B
values; ``decimal(38,s)`` the N values, cast by Arrow with no rounding; ``numeric`` the N text as
DynamoDB returned it; ``document`` a struct of the map's attributes; ``array<T>`` a list of a set's
members or of a list's elements; ``json`` the value's DynamoDB JSON text. NULL and a missing attribute
are null (a json column keeps NULL as ``{"NULL":true}``).

A value that does not fit its column (another DynamoDB type, a number beyond the decimal's digits, an
attribute or map name the json_schema lacks) raises a SourceError naming the stream, the attribute and
the item's key: nothing is dropped or converted silently.
"""

from __future__ import annotations

from bisect import bisect_right

import pyarrow as pa

from olake_cli.core.codec import (
    BadValue, arrow_schema, element_property, field_arrow_type, olake_type_of, sub_properties, value_error,
)
from olake_cli.core.errors import SourceError
from olake_cli.sources.dynamodb.attributes import SET_TAGS, json_text, tag_of
from olake_cli.sources.dynamodb.schema import DYNAMODB_TYPE

_TAGS_OF = {"string": ("S",), "bool": ("BOOL",), "bytes": ("B",), "document": ("M",)}
_ARROW_SCALARS = {"string": pa.string(), "bool": pa.bool_(), "bytes": pa.binary()}


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
    olake_type = olake_type_of(prop, path)
    if olake_type == "json":
        texts = [None if value is None else json_text(value) for value in values]
        array = pa.ExtensionArray.from_storage(pa.json_(), pa.array(texts, pa.string()))
    else:
        array = _typed_column(_checked(values, prop, olake_type, path), prop, olake_type, path)
    if not nullable and array.null_count:
        index = next(i for i, valid in enumerate(array.is_valid().to_pylist()) if not valid)
        raise Misfit(index, path, "no value (NULL or missing) in a key attribute")
    return array


def _checked(values: list, prop: dict, olake_type: str, path: str) -> list:
    """The values with NULL as None, after checking that each has a DynamoDB type the column takes."""
    expected = prop.get(DYNAMODB_TYPE)
    allowed = (expected,) if expected else _allowed_tags(olake_type)
    checked = []
    for index, value in enumerate(values):
        if value is None or "NULL" in value:
            checked.append(None)
        elif tag_of(value) in allowed:
            checked.append(value)
        else:
            raise Misfit(index, path, f"a {tag_of(value)} value does not fit x-olake-type {olake_type} "
                                      f"(DynamoDB type {' or '.join(allowed)}); {_hint(path)}")
    return checked


def _allowed_tags(olake_type: str) -> tuple[str, ...]:
    """The DynamoDB types a column of ``olake_type`` takes when its property names none."""
    if olake_type in _TAGS_OF:
        return _TAGS_OF[olake_type]
    if olake_type.startswith("array<"):
        element = _allowed_tags(olake_type[6:-1])
        return ("L", *(s for s, e in SET_TAGS.items() if element == (e,)))
    return ("N",)  # decimal(38,s), numeric


def _typed_column(values: list, prop: dict, olake_type: str, path: str) -> pa.Array:
    if olake_type.startswith("array<"):
        return _list_column(values, prop, olake_type, path)
    payloads = [None if value is None else value[tag_of(value)] for value in values]
    if olake_type in _ARROW_SCALARS:
        return pa.array(payloads, _ARROW_SCALARS[olake_type])
    if olake_type == "document":
        return _document_column(payloads, prop, path)
    return _number_column(payloads, olake_type, path)


def _number_column(texts: list, olake_type: str, path: str) -> pa.Array:
    """N texts as ``numeric`` (the text itself) or cast exactly to ``decimal(38,s)``."""
    text = pa.array(texts, pa.string())
    if olake_type == "numeric":
        return text
    target = field_arrow_type({"x-olake-type": olake_type}, path)
    try:
        return text.cast(target)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        for index, value in enumerate(texts):
            try:
                pa.array([value], pa.string()).cast(target)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                raise Misfit(index, path, f"number {value} does not fit x-olake-type {olake_type} exactly; "
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
    """Lists (of attribute values) and sets (their members made attribute values) as a list column."""
    offsets, members = [0], []
    for value in values:
        if value is not None:
            tag = tag_of(value)
            if tag == "L":
                members.extend(value["L"])
            else:
                members.extend({SET_TAGS[tag]: member} for member in value[tag])
        offsets.append(len(members))
    try:
        elements = _column(members, element_property(prop, olake_type), f"{path}[]", True)
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
