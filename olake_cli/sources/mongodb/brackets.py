"""BSON type brackets of ``_id``, chunk bounds as exact JSON, and the query selecting one chunk.

MongoDB compares values of different BSON types by a fixed type order, and a range query such as
``{_id: {$gte: 5}}`` only matches values of the bound's own bracket (numbers here). A full load
therefore splits each bracket present on its own. A chunk is a half-open range ``[min, max)`` inside
one bracket; each bound is stored in the state as a JSON array ``[bracket, value]``:

    ["objectId", null]                                   the bracket's start (as min) or end (as max)
    ["objectId", "{\"$oid\": \"65f0c2a1...\"}"]          canonical Extended JSON of the value
    ["number", "{\"$numberLong\": \"9007199254740993\"}"]  int32/int64/double/decimal stay distinct
    ["object", "bson:<base64>"]                          raw BSON of ``{"v": value}``, only for values
                                                         whose Extended JSON would read back
                                                         differently (keys starting with "$")

A chunk's query is ``{_id: {$type: <the bracket's types>, $gte: min, $not: {$gte: max}}}`` (open ends
left out). The one chunk ``SPANNING`` (from the start of ``minKey`` to the end of ``maxKey``) is the
query ``{}``: a collection small enough for one chunk needs no planning query. Writing the upper end as ``$not $gte`` instead of ``$lt`` makes the chunks of a bracket the
differences ``S_i - S_(i+1)`` of the nested sets ``S_i = {_id >= cut_i}``: no document can fall
between two chunks whatever the server's comparison does (NaN fails both ``$lt`` and ``$gte`` and
would otherwise be lost), and a document lands in two chunks only if the sets are not nested, which
the planner verifies (``chunks.verify_nested``).
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any

import bson
from bson import json_util
from bson.binary import UuidRepresentation
from bson.codec_options import DatetimeConversion
from bson.json_util import CANONICAL_JSON_OPTIONS, JSONOptions

from olake_cli.core.errors import StateError
from olake_cli.sources.mongodb.bson_schema import BSON_CODEC_OPTIONS

BOUND_JSON_OPTIONS: JSONOptions = CANONICAL_JSON_OPTIONS.with_options(
    uuid_representation=UuidRepresentation.STANDARD, datetime_conversion=DatetimeConversion.DATETIME_MS)
_RAW_PREFIX = "bson:"


@dataclass(frozen=True)
class Bracket:
    """A set of BSON types MongoDB orders together: ``types`` are $type aliases."""

    name: str
    types: tuple[str, ...]
    codes: tuple[int, ...]  # BSON element type bytes
    splittable: bool = True  # worth cutting into ranges (many distinct values possible)


# In MongoDB's comparison order. Arrays cannot be an _id (MongoDB refuses them) and are left out so
# that every $type query below can use the _id index; every other BSON type is in exactly one bracket.
BRACKETS: tuple[Bracket, ...] = (
    Bracket("minKey", ("minKey",), (0xFF,), splittable=False),
    Bracket("null", ("null", "undefined"), (0x0A, 0x06), splittable=False),
    Bracket("number", ("int", "long", "double", "decimal"), (0x10, 0x12, 0x01, 0x13)),
    Bracket("string", ("string", "symbol"), (0x02, 0x0E)),
    Bracket("object", ("object",), (0x03,)),
    Bracket("binData", ("binData",), (0x05,)),
    Bracket("objectId", ("objectId",), (0x07,)),
    Bracket("bool", ("bool",), (0x08,), splittable=False),
    Bracket("date", ("date",), (0x09,)),
    Bracket("timestamp", ("timestamp",), (0x11,)),
    Bracket("regex", ("regex",), (0x0B,), splittable=False),
    Bracket("dbPointer", ("dbPointer",), (0x0C,), splittable=False),
    Bracket("javascript", ("javascript",), (0x0D,), splittable=False),
    Bracket("javascriptWithScope", ("javascriptWithScope",), (0x0F,), splittable=False),
    Bracket("maxKey", ("maxKey",), (0x7F,), splittable=False),
)
BY_NAME: dict[str, Bracket] = {b.name: b for b in BRACKETS}
SPANNING: tuple[list, list] = (["minKey", None], ["maxKey", None])  # one chunk: every _id
_BY_CODE: dict[int, Bracket] = {code: b for b in BRACKETS for code in b.codes}


def encode_value(value: Any) -> bytes:
    """``{"v": value}`` as BSON, the way queries send it (exact type of every number)."""
    return bson.encode({"v": value}, codec_options=BSON_CODEC_OPTIONS)


def bracket_of(value: Any) -> Bracket:
    """The bracket of a decoded BSON value (by the type byte it encodes to)."""
    code = encode_value(value)[4]
    found = _BY_CODE.get(code)
    if found is None:
        raise ValueError(f"_id of BSON type 0x{code:02x} cannot be chunked")
    return found


def value_text(value: Any) -> str:
    """An exact text form of a BSON value: canonical Extended JSON, or ``bson:<base64>`` when the
    Extended JSON would not read back as the same BSON (a document with ``$``-prefixed keys)."""
    raw = encode_value(value)
    try:
        text = json_util.dumps(value, json_options=BOUND_JSON_OPTIONS)
        if encode_value(json_util.loads(text, json_options=BOUND_JSON_OPTIONS)) == raw:
            return text
    except Exception:  # json_util raises many types for ambiguous documents; fall back to raw BSON
        pass
    return _RAW_PREFIX + base64.b64encode(raw).decode("ascii")


def parse_value_text(text: str) -> Any:
    """The BSON value ``value_text`` wrote (StateError if the text is not one)."""
    try:
        if text.startswith(_RAW_PREFIX):
            raw = base64.b64decode(text[len(_RAW_PREFIX):], validate=True)
            return bson.decode(raw, codec_options=BSON_CODEC_OPTIONS)["v"]
        return json_util.loads(text, json_options=BOUND_JSON_OPTIONS)
    except Exception as exc:  # bad JSON, bad base64, bad BSON: one message for all
        raise StateError(f"mongodb: chunk bound {text[:80]!r} is not an Extended JSON value "
                         f"({type(exc).__name__})") from None


def make_bound(bracket: Bracket, value: Any = None) -> list:
    """The state form ``[bracket name, value text or None]`` of a bound."""
    return [bracket.name, None if value is None else value_text(value)]


def parse_bound(bound: Any, what: str) -> tuple[Bracket, Any, bool]:
    """(bracket, value, open) of a state bound; StateError if it is not one this source wrote."""
    if (not isinstance(bound, list) or len(bound) != 2 or bound[0] not in BY_NAME
            or not (bound[1] is None or isinstance(bound[1], str))):
        raise StateError(f"mongodb: {what} {bound!r} is not a MongoDB chunk bound [bracket, value] "
                         "(was the state written for another source?)")
    if bound[1] is None:
        return BY_NAME[bound[0]], None, True
    return BY_NAME[bound[0]], parse_value_text(bound[1]), False


def chunk_filter(lo: Any, hi: Any) -> dict:
    """The query matching exactly the documents of the chunk [lo, hi) (state bounds)."""
    bracket, low, low_open = parse_bound(lo, "chunk min")
    high_bracket, high, high_open = parse_bound(hi, "chunk max")
    if (lo, hi) == SPANNING:
        return {}
    if high_bracket is not bracket:
        raise StateError(f"mongodb: chunk [{lo!r}, {hi!r}) spans two type brackets")
    condition: dict[str, Any] = {"$type": list(bracket.types)}
    if not low_open:
        condition["$gte"] = low
    if not high_open:
        condition["$not"] = {"$gte": high}
    return {"_id": condition}


def bracket_chunks(bracket: Bracket, cuts: list) -> list[tuple[list, list]]:
    """State bounds of the chunks of one bracket cut at ``cuts`` (ascending, decoded values)."""
    edges = [make_bound(bracket)] + [make_bound(bracket, c) for c in cuts] + [make_bound(bracket)]
    return [(edges[i], edges[i + 1]) for i in range(len(edges) - 1)]
