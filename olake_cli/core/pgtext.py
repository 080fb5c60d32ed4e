"""PostgreSQL text output (what pgoutput sends for each column) -> olake wire values.

Change capture gets every column as the type's TEXT output, produced by the session that reads the
slot (TimeZone=UTC, DateStyle=ISO, IntervalStyle=iso_8601, extra_float_digits=3), or None (NULL), or
``UNCHANGED_TOAST``.  ``text_to_wire`` turns one such text into exactly the wire value that
``codec.encode_records`` produces for the same database value in a full-load scan, so that
``codec.decode_rows`` gives identical Arrow values on both paths.  ``make_row_converter`` resolves
one converter per column once per json_schema (the hot path of change capture).

Arrays must be one-dimensional (a lower bound other than 1 is dropped, as the full-load scan does);
dates and timestamps outside years 1..9999 (BC included) fail with a SourceError naming the column.
"""

from __future__ import annotations

import binascii
import datetime as dt
import re
import struct
from decimal import Decimal
from functools import lru_cache
from typing import Any, Callable

from olake_cli.core.codec import olake_type_of, parse_iso_interval
from olake_cli.core.errors import CatalogError, SourceError

from olake_cli.core.values import UNCHANGED_TOAST

Converter = Callable[[str], Any]
RowConverter = Callable[[dict], "tuple[dict, list[str]]"]

_DATE_RE = re.compile(r"\d{4}-\d\d-\d\d")
_TIME_RE = re.compile(r"(\d\d:\d\d:\d\d)(?:\.(\d{1,6}))?")
_TIMESTAMP_RE = re.compile(r"(\d{4}-\d\d-\d\d) (\d\d:\d\d:\d\d)(?:\.(\d{1,6}))?")
_TIMESTAMPTZ_RE = re.compile(
    r"(\d{4}-\d\d-\d\d) (\d\d:\d\d:\d\d)(?:\.(\d{1,6}))?([+-])(\d\d)(?::(\d\d))?(?::(\d\d))?")
_ESCAPED_CHAR_RE = re.compile(r"\\(.)", re.DOTALL)
_BYTEA_ESCAPE_RE = re.compile(rb"\\(\\|[0-7]{3})")
_INFINITIES = ("infinity", "-infinity")
_FLOAT_SPECIALS = {"NaN": "NaN", "Infinity": "Infinity", "-Infinity": "-Infinity"}
_BOOLS = {"t": True, "f": False}
_PACK_F32, _UNPACK_F32 = struct.Struct("<f").pack, struct.Struct("<f").unpack
_F32_BITS = struct.Struct("<I")
_MISSING = object()


class _BadText(ValueError):
    """A PostgreSQL text value this module cannot (or must not) convert."""


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
    if _DATE_RE.fullmatch(text) or text in _INFINITIES:
        return text
    raise _BadText("dates outside years 1..9999 are not supported")


def _time(text: str) -> str:
    if len(text) == 15:  # fast path: "HH:MM:SS.ffffff"
        return text
    match = _TIME_RE.fullmatch(text)
    if match is None:
        raise _BadText("not a time")
    return f"{match[1]}.{(match[2] or '').ljust(6, '0')}"


def _timestamp(text: str) -> str:
    if len(text) == 26 and text[4] == "-" and text[19] == ".":  # fast path: 4-digit year, micros
        return f"{text[:10]}T{text[11:]}"
    match = _TIMESTAMP_RE.fullmatch(text)
    if match is None:
        if text in _INFINITIES:
            return text
        raise _BadText("timestamps outside years 1..9999 are not supported")
    return f"{match[1]}T{match[2]}.{(match[3] or '').ljust(6, '0')}"


def _timestamptz(text: str) -> str:
    """A timestamptz as codec's UTC text; offsets other than +00 (TimeZone not UTC) are applied."""
    if len(text) == 29 and text[4] == "-" and text[19] == "." and text[26:] == "+00":  # fast path
        return f"{text[:10]}T{text[11:26]}+00:00"
    match = _TIMESTAMPTZ_RE.fullmatch(text)
    if match is None:
        if text in _INFINITIES:
            return text
        raise _BadText("timestamps outside years 1..9999 are not supported")
    day, clock, fraction, sign, hours, minutes, seconds = match.groups()
    local = f"{day}T{clock}.{(fraction or '').ljust(6, '0')}"
    offset = int(hours) * 3600 + int(minutes or 0) * 60 + int(seconds or 0)
    if offset == 0:
        return local + "+00:00"
    shift = dt.timedelta(seconds=offset if sign == "+" else -offset)
    try:
        utc = dt.datetime.fromisoformat(local) - shift
    except OverflowError:
        raise _BadText("timestamps outside years 1..9999 are not supported") from None
    return utc.isoformat(timespec="microseconds") + "+00:00"


def _interval(text: str) -> dict:
    negated = text.startswith("-P")  # not printed by PostgreSQL 15, accepted for safety
    try:
        value = parse_iso_interval(text[1:] if negated else text, "")
    except SourceError:
        raise _BadText("not iso_8601 interval text (the session needs IntervalStyle=iso_8601)") from None
    if negated:
        value = {key: -part for key, part in value.items()}
    return value


# ----------------------------------------------------------------------------- arrays


def parse_array_literal(text: str, delimiter: str = ",") -> list[str | None]:
    """The elements of a one-dimensional PostgreSQL array literal (text or None); ValueError if bad."""
    if text.startswith("["):  # "[0:2]={...}": a lower bound other than 1, dropped like the scan does
        equals = text.find("=")
        if text.count("[", 0, equals) > 1:
            raise _BadText("multi-dimensional arrays are not supported")
        text = text[equals + 1:]
    if len(text) < 2 or text[0] != "{" or text[-1] != "}":
        raise _BadText("not an array literal")
    body = text[1:-1]
    if not body:
        return []
    if body[0] == "{":
        raise _BadText("multi-dimensional arrays are not supported")
    if '"' not in body:  # unquoted elements never hold quotes, backslashes, spaces or delimiters
        items = body.split(delimiter)
        if "" in items:
            raise _BadText("malformed array literal")
        return [None if item == "NULL" else item for item in items]
    return _parse_quoted_elements(body, delimiter)


def _parse_quoted_elements(body: str, delimiter: str) -> list[str | None]:
    """Elements of an array body holding quoted elements (validated: malformed text raises)."""
    if "\\" in body:
        return _parse_escaped_elements(body, delimiter)
    parts = body.split('"')  # no escapes: outside, quoted, outside, quoted, ..., outside
    last = len(parts) - 1
    if last % 2:
        raise _BadText("unterminated quoted array element")
    items: list[str | None] = []
    for index, part in enumerate(parts):
        if index % 2:
            items.append(part)
        else:
            items.extend(_unquoted_elements(part, delimiter, index > 0, index < last))
    return items


def _unquoted_elements(stretch: str, delimiter: str, after_quote: bool,
                       before_quote: bool) -> list[str | None]:
    """The unquoted elements in a stretch of array body that quoted elements bound."""
    pieces = stretch.split(delimiter)
    start = 1 if after_quote else 0  # a closing quote must be followed by a delimiter
    stop = len(pieces) - 1 if before_quote else len(pieces)  # an opening one preceded by one
    if (stop < start or (after_quote and pieces[0]) or (before_quote and pieces[-1])
            or "" in pieces[start:stop] or "{" in stretch or "}" in stretch):
        raise _BadText("malformed array literal")
    return [None if piece == "NULL" else piece for piece in pieces[start:stop]]


def _parse_escaped_elements(body: str, delimiter: str) -> list[str | None]:
    body_re, element_re = _element_patterns(delimiter)
    if body_re.fullmatch(body) is None:
        raise _BadText("malformed array literal")
    items: list[str | None] = []
    for quoted, plain in element_re.findall(body):
        if quoted:
            item = quoted[1:-1]
            items.append(_ESCAPED_CHAR_RE.sub(r"\1", item) if "\\" in item else item)
        else:
            items.append(None if plain == "NULL" else plain)
    return items


@lru_cache(maxsize=8)
def _element_patterns(delimiter: str) -> tuple[re.Pattern, re.Pattern]:
    """(whole body, one element) patterns of a one-dimensional array body with this delimiter."""
    d = re.escape(delimiter)
    element = rf'("(?:[^"\\]|\\.)*")|([^"{{}}\\{d}]*)'
    body = re.compile(rf"(?:{element})(?:{d}(?:{element}))*", re.DOTALL)
    return body, re.compile(rf"(?:^|{d})(?:{element})", re.DOTALL)


def _array_converter(element: Converter | None, delimiter: str) -> Converter:
    if element is None:
        return lambda text: parse_array_literal(text, delimiter)

    def convert(text: str) -> list:
        return [None if item is None else element(item) for item in parse_array_literal(text, delimiter)]

    return convert


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
    if olake_type.startswith("array<") and olake_type.endswith(">"):
        element_type = olake_type[6:-1]
        if element_type.startswith("array<"):
            raise CatalogError(f"nested array type {olake_type!r} is not supported")
        return _array_converter(converter_for(element_type), delimiter)
    kind = olake_type.split("(")[0]
    if kind not in _SCALAR_CONVERTERS:
        raise CatalogError(f"unknown x-olake-type {olake_type!r}")
    return _SCALAR_CONVERTERS[kind]


def _array_delimiter(prop: dict) -> str:
    """box is the only built-in type whose arrays are delimited by ';' instead of ','."""
    return ";" if str(prop.get("x-pg-type", "")).startswith("box") else ","


def _conversion_error(column: str, olake_type: str, text: str, exc: Exception) -> SourceError:
    reason = str(exc) if isinstance(exc, _BadText) else f"{type(exc).__name__}: {exc}"
    return SourceError(f"column {column!r}: cannot convert PostgreSQL text {text[:80]!r} to "
                       f"{olake_type}: {reason}")


_CONVERSION_ERRORS = (ValueError, KeyError, OverflowError, IndexError, binascii.Error)


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


def make_row_converter(json_schema: dict) -> RowConverter:
    """A fast ``row_to_wire`` bound to one json_schema (converters resolved once)."""
    properties = json_schema.get("properties", {})
    olake_types = {name: olake_type_of(prop, name) for name, prop in properties.items()}
    converters = {name: converter_for(olake_types[name], _array_delimiter(properties[name]))
                  for name in properties}

    def convert_row(values: dict) -> tuple[dict, list[str]]:
        data: dict = {}
        toasted: list[str] = []
        name, value = "", None
        try:
            for name, value in values.items():
                convert = converters.get(name, _MISSING)
                if convert is _MISSING:
                    continue
                if value is None:
                    data[name] = None
                elif value is UNCHANGED_TOAST:
                    toasted.append(name)
                elif convert is None:
                    data[name] = value
                else:
                    data[name] = convert(value)
        except _CONVERSION_ERRORS as exc:
            raise _conversion_error(name, olake_types[name], str(value), exc) from None
        return data, toasted

    return convert_row


def row_to_wire(values: dict, json_schema: dict) -> tuple[dict, list[str]]:
    """A change's column texts as RECORD data, plus the UNCHANGED_TOAST columns (left out of data).

    Columns that are not properties of ``json_schema`` are ignored.  For many rows, call
    ``make_row_converter`` once and reuse the function it returns.
    """
    return make_row_converter(json_schema)(values)
