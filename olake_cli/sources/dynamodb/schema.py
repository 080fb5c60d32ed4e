"""A DynamoDB table's json_schema, inferred from sampled items (attribute types -> x-olake-type).

Each attribute's x-olake-type follows from the type tags its sampled values have (NULL and a missing
attribute aside: they only leave the column null):

    S -> string          B -> bytes          BOOL -> bool
    N -> decimal(38,s)   s: the most fraction digits sampled, when every sampled number then fits
                         38 digits; else numeric (the exact text DynamoDB returns). The property
                         also bounds its numbers' integer digits (``x-olake-integer-digits``): the
                         most sampled, plus half of the digits that leaves free beside s. A later
                         number beyond the bound or the scale widens the column in place (``drift``)
    SS, NS, BS -> array<string>, array<decimal(38,s) or numeric>, array<bytes> (a set as a list)
    M -> document        when every sampled map has the same (non-empty) set of names; its
                         attributes follow these rules, fields sorted by name
    L -> array<T>        when the elements of every sampled list infer to one T that is not json
    anything else -> json: DynamoDB JSON text of the value (attributes of mixed types, a map of
                         varying names, a list of mixed elements, an attribute only ever NULL)

The property keeps the DynamoDB type in ``x-olake-dynamodb-type`` (absent for json): a value of
another type at run time does not fit. The key attributes (partition key, then sort key) come first
and are never null; the others follow sorted by name.
"""

from __future__ import annotations

from collections.abc import Iterable

from olake_cli.core.schema_drift import INTEGER_DIGITS
from olake_cli.sources.dynamodb.attributes import SET_TAGS, number_shape, tag_of

DECIMAL_DIGITS = 38
DYNAMODB_TYPE = "x-olake-dynamodb-type"
_SCALARS = {"S": "string", "B": "bytes", "BOOL": "bool"}
_JSON_TYPES = {"bool": ["boolean"], "document": ["object"]}
_KEY_TYPES = {"S": "string", "B": "bytes"}


class _Stats:
    """The type tags one attribute had across the sample, with its numbers' digits, map names and
    list elements."""

    __slots__ = ("tags", "integer_digits", "fraction_digits", "names", "same_names", "fields", "items")

    def __init__(self) -> None:
        self.tags: set[str] = set()
        self.integer_digits = self.fraction_digits = 0
        self.names: frozenset | None = None
        self.same_names = True
        self.fields: dict[str, _Stats] = {}
        self.items: _Stats | None = None

    def observe(self, value: dict) -> None:
        tag = tag_of(value)
        self.tags.add(tag)
        payload = value[tag]
        if tag == "N":
            self.number(payload)
        elif tag == "NS":
            for text in payload:
                self.number(text)
        elif tag == "M":
            self._observe_map(payload)
        elif tag == "L":
            self.items = self.items or _Stats()
            for item in payload:
                self.items.observe(item)

    def number(self, text: str) -> None:
        integer, fraction = number_shape(text)
        self.integer_digits = max(self.integer_digits, integer)
        self.fraction_digits = max(self.fraction_digits, fraction)

    def _observe_map(self, attributes: dict) -> None:
        names = frozenset(attributes)
        if self.names is None:
            self.names = names
        elif names != self.names:
            self.same_names, self.fields = False, {}
        if self.same_names:
            for name, item in attributes.items():
                self.fields.setdefault(name, _Stats()).observe(item)


def number_type(stats: _Stats | None) -> str:
    """``decimal(38,s)`` when every sampled number fits it (s = most fraction digits), else ``numeric``."""
    if stats is None:
        return f"decimal({DECIMAL_DIGITS},0)"
    if stats.integer_digits + stats.fraction_digits > DECIMAL_DIGITS:
        return "numeric"
    return f"decimal({DECIMAL_DIGITS},{stats.fraction_digits})"


def integer_digits(stats: _Stats | None, olake_type: str) -> dict:
    """The ``x-olake-integer-digits`` bound of a ``decimal(38,s)`` column (see the module), as a property
    entry ({} for other types)."""
    if not olake_type.startswith("decimal("):
        return {}
    scale = int(olake_type[olake_type.index(",") + 1:-1])
    sampled = max(1, stats.integer_digits if stats is not None else 0)
    return {INTEGER_DIGITS: min(DECIMAL_DIGITS - scale, sampled + (DECIMAL_DIGITS - scale - sampled) // 2)}


def infer_json_schema(items: Iterable[dict], key_attributes: list[tuple[str, str]]) -> dict:
    """The json_schema of a table from sampled items; ``key_attributes``: (name, S|N|B) of the
    partition key and then the sort key."""
    stats: dict[str, _Stats] = {}
    for item in items:
        for name, value in item.items():
            stats.setdefault(name, _Stats()).observe(value)
    properties = {name: _key_property(tag, stats.pop(name, None)) for name, tag in key_attributes}
    properties.update((name, _property(stats[name], nullable=True)) for name in sorted(stats))
    return {"type": "object", "properties": properties}


def _key_property(tag: str, stats: _Stats | None) -> dict:
    olake_type = number_type(stats) if tag == "N" else _KEY_TYPES[tag]
    return {"type": _json_type(olake_type), "x-olake-type": olake_type, DYNAMODB_TYPE: tag,
            **integer_digits(stats, olake_type)}


def _olake_type(stats: _Stats | None) -> tuple[str, str | None]:
    """(x-olake-type, DynamoDB tag it holds; None for json) of an attribute's sampled values."""
    seen = set() if stats is None else stats.tags - {"NULL"}
    if len(seen) != 1:
        return "json", None
    (tag,) = seen
    if tag in _SCALARS:
        return _SCALARS[tag], tag
    if tag == "N":
        return number_type(stats), tag
    if tag in SET_TAGS:
        element = SET_TAGS[tag]
        return f"array<{number_type(stats) if element == 'N' else _SCALARS[element]}>", tag
    if tag == "M":
        return ("document", tag) if stats.same_names and stats.names else ("json", None)
    element, _ = _olake_type(stats.items)  # L
    return ("json", None) if element == "json" else (f"array<{element}>", tag)


def _property(stats: _Stats | None, nullable: bool) -> dict:
    olake_type, tag = _olake_type(stats)
    json_type = _json_type(olake_type)
    prop: dict = {"type": [*json_type, "null"] if nullable else json_type, "x-olake-type": olake_type}
    if tag is not None:
        prop[DYNAMODB_TYPE] = tag
    prop.update(integer_digits(stats, olake_type))
    if olake_type == "document":
        prop["properties"] = {name: _property(stats.fields[name], nullable=True) for name in sorted(stats.fields)}
    elif tag in SET_TAGS:
        element = olake_type[6:-1]
        prop["items"] = {"type": _json_type(element), "x-olake-type": element, DYNAMODB_TYPE: SET_TAGS[tag],
                         **integer_digits(stats, element)}
    elif tag == "L":
        prop["items"] = _property(stats.items, nullable=True)
    return prop


def _json_type(olake_type: str) -> list[str]:
    if olake_type.startswith("array<"):
        return ["array"]
    return list(_JSON_TYPES.get(olake_type, ["string"]))
