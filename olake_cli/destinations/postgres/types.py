"""Which PostgreSQL type a stream's column gets in the target, and whether an existing column holds it.

A column from a PostgreSQL source keeps its own type (``x-pg-type``, the base type of a domain):
numeric(p,s), timestamptz, jsonb, arrays, bytea, uuid, interval, ... An enum or extension type the
target does not have becomes text (arrays of it text[]), which holds its values exactly. So do the types
whose values name objects of the source's catalog (``NAMING_TYPES``: regclass and the other OID aliases,
aclitem): the same name is another object in the target, or none, so their text is what arrives. Columns
from other sources map from their olake type: documents and mixed values to jsonb, Decimal128 to
numeric, ObjectId to text, dates to timestamptz.
"""

from __future__ import annotations

import re

_BY_OLAKE_TYPE = {
    "bool": "boolean", "int16": "smallint", "int32": "integer", "int64": "bigint", "float32": "real",
    "float64": "double precision", "numeric": "numeric", "string": "text", "uuid": "uuid", "json": "jsonb",
    "bytes": "bytea", "date": "date", "time": "time without time zone", "timestamp": "timestamp without time zone",
    "timestamptz": "timestamp with time zone", "interval": "interval", "objectid": "text",
    "decimal128": "numeric", "datetime_ms": "timestamp with time zone", "bson": "jsonb", "document": "jsonb",
}
_INTEGERS = ("smallint", "integer", "bigint")
_INTEGER_DIGITS = {"smallint": 5, "integer": 10, "bigint": 19}
_TEXTS = ("text", "character varying")
# Types whose value is an object of the database's own catalog (a number in binary, a name in text).
NAMING_TYPES = frozenset(("regclass", "regtype", "regproc", "regprocedure", "regoper", "regoperator", "regnamespace",
                          "regrole", "regconfig", "regdictionary", "regcollation", "aclitem"))
_TYPMOD = re.compile(r"^(?P<base>[a-z ]+?)(?:\((?P<args>[0-9, ]+)\))?(?P<rest>( with(out)? time zone)?)$")


def olake_sql_type(olake_type: str) -> str:
    """The PostgreSQL type of an olake type (columns without an ``x-pg-type``)."""
    if "document" in olake_type:
        return "jsonb"  # a document, or an array of them, as one JSON value
    depth = 0
    if olake_type.startswith("ndarray<"):
        olake_type, depth = olake_type[8:-1], 1
    while olake_type.startswith("array<"):
        olake_type, depth = olake_type[6:-1], depth + 1
    match = re.fullmatch(r"decimal\((\d+),(\d+)\)", olake_type)
    base = f"numeric({match[1]},{match[2]})" if match else _BY_OLAKE_TYPE[olake_type]
    return base + ("[]" if depth else "")


def wanted_type(prop: dict, olake_type: str) -> str:
    """The type a column should have: the source's PostgreSQL type if it has one (text for ``NAMING_TYPES``,
    text[] for arrays of them), else by olake type."""
    pg_type = prop.get("x-pg-type")
    if not isinstance(pg_type, str) or not pg_type:
        return olake_sql_type(olake_type)
    element = pg_type.removesuffix("[]")
    return "text" + pg_type[len(element):] if element in NAMING_TYPES else pg_type


def holds(existing: str, wanted: str) -> bool:
    """Whether a column of type ``existing`` (format_type text) holds every value of type ``wanted``
    exactly: the same type, or a wider one of the same kind (integers, floats, numerics, text and
    varchar, timestamp precision), json and jsonb either way, arrays of such elements."""
    if existing == wanted:
        return True
    if existing.endswith("[]") != wanted.endswith("[]"):
        return False
    if existing.endswith("[]"):
        return holds(existing[:-2], wanted[:-2])
    have, want = _parts(existing), _parts(wanted)
    if have is None or want is None:
        return False
    if {have[0], want[0]} <= {"json", "jsonb"}:
        return True
    if have[0] == "text":
        return want[0] in _TEXTS or want[0] in ("character", "name", "citext") or want[0] not in _KNOWN_KINDS
    return _same_kind_wider(have, want)


def replaces(planned: str, existing: str) -> bool:
    """Whether a column olake already writes may change in place from ``existing`` to ``planned`` although
    neither holds the other: the source replaced the column's type (a MongoDB field that drifted to mixed
    values, ``bson``, or from integers to doubles; its stream is then loaded anew), or a numeric whose
    scale grows (DynamoDB numbers widening in place: the source keeps their integer digits within the new
    type). Any value converts to jsonb (``to_jsonb``), an integer to a double, and a numeric to one of a
    larger scale exactly (the ALTER fails, changing nothing, on a value with more integer digits)."""
    if planned.endswith("[]") and existing.endswith("[]"):
        planned, existing = planned[:-2], existing[:-2]
    if planned == "jsonb":
        return True
    return planned == "double precision" and existing in _INTEGERS or rescales(existing, planned)


def rescales(narrow: str, wide: str) -> bool:
    """Whether numeric ``wide`` has a larger scale than numeric ``narrow`` (both with a typmod; or arrays
    of such)."""
    if narrow.endswith("[]") and wide.endswith("[]"):
        narrow, wide = narrow[:-2], wide[:-2]
    have, want = _parts(narrow), _parts(wide)
    if have is None or want is None or have[0] != "numeric" or want[0] != "numeric" \
            or len(have[1]) != 2 or len(want[1]) != 2:
        return False
    return want[1][1] > have[1][1]


_KNOWN_KINDS = frozenset(_INTEGERS + _TEXTS + ("real", "double precision", "numeric", "boolean", "uuid", "json",
                                                "jsonb", "bytea", "date", "interval", "time", "timestamp",
                                                "character", "name"))


def _parts(type_text: str) -> tuple[str, tuple[int, ...], str] | None:
    """(base name, typmod numbers, time zone suffix) of a format_type text, or None for other names."""
    match = _TYPMOD.match(type_text)
    if match is None:
        return (type_text, (), "")  # an enum, domain or extension type: compared by name only
    args = tuple(int(a) for a in (match["args"] or "").replace(" ", "").split(",") if a)
    return match["base"].strip(), args, match["rest"] or ""


def _same_kind_wider(have: tuple, want: tuple) -> bool:
    (h, h_args, h_zone), (w, w_args, w_zone) = have, want
    if w in _INTEGERS and h in _INTEGERS:
        return _INTEGERS.index(h) >= _INTEGERS.index(w)
    if w in _INTEGERS and h == "numeric":
        return not h_args or h_args[0] - (h_args[1] if len(h_args) > 1 else 0) >= _INTEGER_DIGITS[w]
    if w == "real" and h == "double precision":
        return True
    if w == h == "numeric":
        if not h_args:
            return True
        if not w_args:
            return False
        w_scale, h_scale = (w_args[1] if len(w_args) > 1 else 0), (h_args[1] if len(h_args) > 1 else 0)
        return h_scale >= w_scale and h_args[0] - h_scale >= w_args[0] - w_scale
    if w == h == "character varying":
        return not h_args or (bool(w_args) and h_args[0] >= w_args[0])
    if w == h and w in ("timestamp", "time") and h_zone == w_zone:
        return not h_args or (bool(w_args) and h_args[0] >= w_args[0])
    return False
