"""PostgreSQL text output (what pgoutput sends for each column) -> olake wire values.

Change capture gets every column as the type's TEXT output, produced by the session that reads the
slot (TimeZone=UTC, DateStyle=ISO, IntervalStyle=iso_8601, extra_float_digits=3), or None (NULL), or
``UNCHANGED_TOAST``.  ``text_to_wire`` turns one such text into exactly the wire value that
``record_lines.encode_records`` produces for the same database value in a full-load scan, so that
``codec.decode.decode_rows`` gives identical Arrow values on both paths.  Change capture converts a column
of a run at a time (``column_json_texts``: the JSON texts of the wire values, Arrow compute for the
common types).

Arrays become nested lists of the column's depth (``array<array<T>>``), or, in a column whose values
vary in depth or lower bounds (``ndarray<T>``), their lower bounds, lengths and elements (see
``pgarray``); a value of another shape than its column's fails naming the column and what to do.
Dates and timestamps cover PostgreSQL's whole range (BC, years beyond 9999; see calendar_text).
"""

from __future__ import annotations

import binascii
import re
import struct
from decimal import Decimal
from functools import lru_cache
from typing import Any
from collections.abc import Callable

import orjson
import pyarrow as pa
import pyarrow.compute as pc

from olake_cli.core.codec.bad_value import BadValue
from olake_cli.core.codec.encode import parse_iso_interval
from olake_cli.core.codec.types import NDARRAY, array_shape, olake_type_of
from olake_cli.core.record_lines import json_texts, quoted_texts
from olake_cli.core.errors import CatalogError, SourceError
from olake_cli.sources.postgres.pgarray import (BadText, element_delimiter, parse_any_literal, parse_array_literal,
                                                parse_nested_literal)
from olake_cli.core.calendar_text import parse_date, parse_timestamp, timestamp_text


Converter = Callable[[str], Any]

_TIME_RE = re.compile(r"(\d\d:\d\d:\d\d)(?:\.(\d{1,6}))?")
_BYTEA_ESCAPE_RE = re.compile(rb"\\(\\|[0-7]{3})")
_INFINITIES = ("infinity", "-infinity")
_FLOAT_SPECIALS = {"NaN": "NaN", "Infinity": "Infinity", "-Infinity": "-Infinity"}
_BOOLS = {"t": True, "f": False}
_PACK_F32, _UNPACK_F32 = struct.Struct("<f").pack, struct.Struct("<f").unpack
_F32_BITS = struct.Struct("<I")


# ----------------------------------------------------------------------------- scalars


def _bool(text: str) -> bool:
    return _BOOLS[text]


def _float64(text: str) -> float | str:
    special = _FLOAT_SPECIALS.get(text)
    return special if special is not None else float(text)


def _float32(text: str) -> float | str:
    """The float32 value PostgreSQL printed (shortest form), as the double the codec emits."""
    special = _FLOAT_SPECIALS.get(text)
    if special is not None:
        return special
    wide = float(text)
    narrow = _UNPACK_F32(_PACK_F32(wide))[0]
    if narrow == wide:
        return narrow
    # Rounding text -> double -> float32 can only differ from text -> float32 when the double lands
    # exactly on a midpoint between two float32 values; settle that case with exact arithmetic.
    bits = _F32_BITS.unpack(_PACK_F32(narrow))[0]
    step = 1 if abs(wide) > abs(narrow) else -1
    neighbour = _UNPACK_F32(_F32_BITS.pack(bits + step))[0]
    if (narrow + neighbour) / 2 != wide:
        return narrow
    exact, midpoint = Decimal(text), Decimal(wide)
    if exact == midpoint:
        return narrow  # a true tie: both roundings are ties-to-even
    return neighbour if (exact > midpoint) == (neighbour > narrow) else narrow


def _bytes(text: str) -> str:
    """bytea output (hex, or the legacy escape format) as base64."""
    if text.startswith("\\x"):
        raw = binascii.a2b_hex(text[2:])
    else:
        raw = _BYTEA_ESCAPE_RE.sub(_bytea_unescape, text.encode("latin-1"))
    return binascii.b2a_base64(raw, newline=False).decode("ascii")


def _bytea_unescape(match: re.Match) -> bytes:
    escaped = match[1]
    return b"\\" if escaped == b"\\" else bytes([int(escaped, 8)])


def _date(text: str) -> str:
    if len(text) == 10 and text[4] == "-":  # fast path: a 4-digit year, no " BC"
        return text
    if text not in _INFINITIES:
        parse_date(text)  # validates; PostgreSQL's text (" BC", 5+ digit years) is the wire form
    return text


def _time(text: str) -> str:
    if len(text) == 15:  # fast path: "HH:MM:SS.ffffff"
        return text
    match = _TIME_RE.fullmatch(text)
    if match is None:
        raise BadText("not a time")
    return f"{match[1]}.{(match[2] or '').ljust(6, '0')}"


def _timestamp(text: str) -> str:
    if len(text) == 26 and text[4] == "-" and text[19] == ".":  # fast path: 4-digit year, micros
        return f"{text[:10]}T{text[11:]}"
    if text in _INFINITIES:
        return text
    micros, has_offset = parse_timestamp(text)
    if has_offset:
        raise BadText("a timestamp without time zone printed with an offset")
    return timestamp_text(micros, False)


def _timestamptz(text: str) -> str:
    """A timestamptz as codec's UTC text; offsets other than +00 (TimeZone not UTC) are applied."""
    if len(text) == 29 and text[4] == "-" and text[19] == "." and text[26:] == "+00":  # fast path
        return f"{text[:10]}T{text[11:26]}+00:00"
    if text in _INFINITIES:
        return text
    micros, has_offset = parse_timestamp(text)
    if not has_offset:
        raise BadText("a timestamptz printed without an offset")
    return timestamp_text(micros, True)


def _interval(text: str) -> dict:
    negated = text.startswith("-P")  # not printed by PostgreSQL 15, accepted for safety
    try:
        value = parse_iso_interval(text[1:] if negated else text, "")
    except SourceError:
        raise BadText("not iso_8601 interval text (the session needs IntervalStyle=iso_8601)") from None
    if negated:
        value = {key: -part for key, part in value.items()}
    return value


# ----------------------------------------------------------------------------- arrays


def _map_nested(value: list, element: Converter) -> list:
    return [None if item is None else _map_nested(item, element) if isinstance(item, list)
            else element(item) for item in value]


def _array_converter(element: Converter | None, delimiter: str, depth: int | str) -> Converter:
    if depth == NDARRAY:
        return lambda text: _with_elements(parse_any_literal(text, delimiter), element)
    if depth > 1:
        if element is None:
            return lambda text: parse_nested_literal(text, delimiter, depth)
        return lambda text: _map_nested(parse_nested_literal(text, delimiter, depth), element)
    if element is None:
        return lambda text: parse_array_literal(text, delimiter)

    def convert(text: str) -> list:
        return [None if item is None else element(item) for item in parse_array_literal(text, delimiter)]

    return convert


def _with_elements(value: dict, element: Converter | None) -> dict:
    """An ndarray value with its element texts converted."""
    if element is not None:
        value["elements"] = [None if item is None else element(item) for item in value["elements"]]
    return value


# ----------------------------------------------------------------------------- resolution

_SCALAR_CONVERTERS: dict[str, Converter | None] = {
    "bool": _bool, "int16": int, "int32": int, "int64": int, "float32": _float32,
    "float64": _float64, "decimal": None, "numeric": None, "string": None, "uuid": None,
    "json": None, "bytes": _bytes, "date": _date, "time": _time, "timestamp": _timestamp,
    "timestamptz": _timestamptz, "interval": _interval,
}


@lru_cache(maxsize=256)
def converter_for(olake_type: str, delimiter: str = ",") -> Converter | None:
    """The text -> wire function of an olake type; None means the text is the wire value."""
    shape = array_shape(olake_type)
    if shape is not None:
        return _array_converter(converter_for(shape[0]), delimiter, shape[1])
    kind = olake_type.split("(")[0]
    if kind not in _SCALAR_CONVERTERS:
        raise CatalogError(f"unknown x-olake-type {olake_type!r}")
    return _SCALAR_CONVERTERS[kind]


def _reason(olake_type: str, text: str, exc: Exception) -> str:
    reason = str(exc) if isinstance(exc, BadText) else f"{type(exc).__name__}: {exc}"
    return f"cannot convert PostgreSQL text {text[:80]!r} to {olake_type}: {reason}"


def _conversion_error(column: str, olake_type: str, text: str, exc: Exception) -> SourceError:
    return SourceError(f"column {column!r}: {_reason(olake_type, text, exc)}")


_CONVERSION_ERRORS = (ValueError, KeyError, OverflowError, IndexError, binascii.Error)


def convert_or_bad(olake_type: str, text: str, index: int, delimiter: str = ",") -> Any:
    """``text_to_wire`` for the value at ``index`` of a column; a BadValue when it cannot convert."""
    convert = converter_for(olake_type, delimiter)
    try:
        return text if convert is None else convert(text)
    except _CONVERSION_ERRORS as exc:
        raise BadValue(index, _reason(olake_type, text, exc)) from None


def column_types(json_schema: dict) -> dict[str, tuple[str, str]]:
    """Each property's (olake type, array delimiter); a CatalogError for a type without a converter."""
    types = {}
    for name, prop in json_schema.get("properties", {}).items():
        types[name] = (olake_type_of(prop, name), element_delimiter(str(prop.get("x-pg-type", ""))))
        converter_for(*types[name])
    return types


def column_json_texts(texts: pa.Array, olake_type: str, delimiter: str = ",") -> pa.Array:
    """The JSON texts of the wire values of one column's PostgreSQL texts (a null's text is ``null``).

    Exactly ``orjson.dumps(text_to_wire(...))`` of each value, a column at a time for the common types:
    integers as printed, booleans, floats through one cast, strings and numerics escaped, dates, times
    and timestamps of four-digit years rearranged; every other value one by one. A value that cannot
    be converted raises a BadValue at its index.
    """
    kind = olake_type.split("(")[0]
    if kind in ("int16", "int32", "int64"):
        return texts
    if kind in ("string", "json"):
        return json_texts(texts, "string", "")
    if kind in ("decimal", "numeric", "uuid"):  # digits, letters, '-' and '.': nothing to escape
        return quoted_texts(texts)
    fast = FAST_WIRE_TEXTS.get(kind)
    if fast is None:
        return _one_by_one(texts, pc.is_valid(texts), olake_type, delimiter)
    wire, done = fast(texts)
    if wire is None:
        return _one_by_one(texts, pc.is_valid(texts), olake_type, delimiter)
    json = wire if kind == "bool" else json_texts(wire, kind, "") if kind.startswith("float") else quoted_texts(wire)
    slow = pc.and_(pc.is_valid(texts), pc.invert(done))
    if not pc.any(slow).as_py():
        return json
    return pc.replace_with_mask(json, slow, _one_by_one(texts, slow, olake_type, delimiter).filter(slow))


def _one_by_one(texts: pa.Array, rows: pa.Array, olake_type: str, delimiter: str) -> pa.Array:
    """JSON texts of the ``rows`` values converted one at a time (null elsewhere)."""
    dumps, values = orjson.dumps, texts.to_pylist()
    return pa.array([dumps(convert_or_bad(olake_type, text, i, delimiter)).decode() if wanted else None
                     for i, (text, wanted) in enumerate(zip(values, rows.to_pylist()))], pa.string())


def _fast_bools(texts: pa.Array) -> tuple[pa.Array, pa.Array]:
    true = pc.equal(texts, "t")
    return pc.if_else(true, "true", "false"), pc.fill_null(pc.or_(true, pc.equal(texts, "f")), False)


def _fast_floats(texts: pa.Array, float_type: pa.DataType) -> tuple[pa.Array | None, pa.Array]:
    try:
        return pc.cast(texts, float_type), pc.is_valid(texts)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None, pc.is_valid(texts)


def _fast_by_length(length: int) -> Callable:
    """Texts already in their wire form when they have ``length`` characters (and a '-' at 4 for dates)."""
    def fast(texts: pa.Array) -> tuple[pa.Array, pa.Array]:
        done = pc.equal(pc.utf8_length(texts), length)
        if length == 10:
            done = pc.and_(done, pc.equal(pc.utf8_slice_codeunits(texts, 4, 5), "-"))
        return texts, pc.fill_null(done, False)
    return fast


def _fast_timestamps(zone: str, wire_zone: str) -> Callable:
    """Timestamps of four-digit years (``zone``: the offset PostgreSQL prints under TimeZone=UTC)."""
    pattern = r"^(?P<d>\d{4}-\d\d-\d\d) (?P<t>\d\d:\d\d:\d\d)(?:\.(?P<f>\d{1,6}))?" + zone + "$"

    def fast(texts: pa.Array) -> tuple[pa.Array, pa.Array]:
        parts = pc.extract_regex(texts, pattern)
        fraction = pc.utf8_rpad(parts.field("f"), width=6, padding="0")
        wire = pc.binary_join_element_wise(parts.field("d"), "T", parts.field("t"), ".", fraction, wire_zone, "")
        return wire, pc.is_valid(parts)
    return fast


# kind -> f(texts) giving (wire texts or None, the rows they convert): the common values by Arrow compute
FAST_WIRE_TEXTS: dict[str, Callable] = {
    "bool": _fast_bools, "float32": lambda t: _fast_floats(t, pa.float32()),
    "float64": lambda t: _fast_floats(t, pa.float64()), "date": _fast_by_length(10), "time": _fast_by_length(15),
    "timestamp": _fast_timestamps("", ""), "timestamptz": _fast_timestamps(r"\+00", "+00:00"),
}


def text_to_wire(olake_type: str, text: str | None, column: str, delimiter: str = ",") -> Any:
    """The wire value ``encode_records`` gives for the value PostgreSQL printed as ``text``."""
    if text is None:
        return None
    if not isinstance(text, str):
        raise SourceError(f"column {column!r}: expected PostgreSQL text, got {text!r}")
    convert = converter_for(olake_type, delimiter)
    if convert is None:
        return text
    try:
        return convert(text)
    except _CONVERSION_ERRORS as exc:
        raise _conversion_error(column, olake_type, text, exc) from None
