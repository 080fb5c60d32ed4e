"""PostgreSQL column discovery and the mapping of PostgreSQL types onto olake types.

Every column gets an ``olake_type`` (see ``olake_cli.core.codec``) that fixes both its Arrow type at
the destination and its wire encoding in RECORD messages.  ``select_expression`` picks, per column,
the SELECT-list expression the chunk scan uses so that the ADBC driver yields an Arrow type that
``encode_records`` understands exactly:

* native Arrow for bool, integers, floats, bytea, date, time, timestamp(tz) (ADBC wraps PostgreSQL's
  infinity sentinels around int64/int32; the codec recognises the wrapped values);
* ``::text`` where ADBC is lossy or opaque: numeric (ADBC prints NaN as ``nan``), uuid, json(b),
  enums, inet, money, timetz and every type olake does not know;
* interval as an exact ``int8[3]`` of (months, days, microseconds): ADBC's month_day_nano fails on
  intervals longer than about 292 years of hours, and extract() returns exact numerics since PG 14;
* arrays of the declared depth ``pg_attribute.attndims`` (at least 1): ``array<array<T>>`` for
  ``T[][]``.  One-dimensional columns keep their element's native type (or ``text[]``); a value of
  another depth or with a lower bound other than 1 fails the scan with an error naming the column
  (ADBC would silently flatten it and drop the bounds).  Deeper columns are read as PostgreSQL's
  array text, which the codec parses exactly as change capture does (``sources/postgres/pgtext``).
"""

from __future__ import annotations

from dataclasses import dataclass

import psycopg
from psycopg import sql

from olake_cli.core.errors import CatalogError

SCAN_SESSION_SETTINGS: dict[str, str] = {
    "TimeZone": "UTC",
    "DateStyle": "ISO",
    "IntervalStyle": "iso_8601",
    "extra_float_digits": "3",
}

# Built-in type OIDs are fixed by PostgreSQL (pg_type.dat) and never change between versions.
_OLAKE_TYPE_BY_OID: dict[int, str] = {
    16: "bool", 21: "int16", 23: "int32", 20: "int64", 26: "int64",
    700: "float32", 701: "float64", 2950: "uuid", 114: "json", 3802: "json", 17: "bytes",
    1082: "date", 1083: "time", 1114: "timestamp", 1184: "timestamptz", 1186: "interval",
}
_NUMERIC_OID = 1700
_BPCHAR_OID = 1042
_INET_OID = 869  # inet::text always adds /32 or /128; inet's output function (and pgoutput) does not
_MAX_DECIMAL_PRECISION = 38

# The PostgreSQL type each natively scanned olake type is cast to (a no-op for the type itself;
# it turns domains and oid into the base type ADBC knows).
_NATIVE_PG_TYPE: dict[str, str] = {
    "bool": "bool", "int16": "int2", "int32": "int4", "int64": "int8", "float32": "float4",
    "float64": "float8", "bytes": "bytea", "date": "date", "time": "time",
    "timestamp": "timestamp", "timestamptz": "timestamptz",
}


@dataclass(frozen=True)
class PgColumn:
    """One table column, with its domain-resolved base type and its olake type."""

    name: str
    type_name: str  # format_type() of the base type, e.g. 'numeric(10,2)'
    type_oid: int
    element_oid: int | None
    category: str  # pg_type.typcategory of the base type
    nullable: bool
    enum_labels: tuple[str, ...] | None
    olake_type: str


@dataclass(frozen=True)
class _BaseType:
    oid: int
    typmod: int
    type_name: str
    category: str
    element_oid: int | None
    is_enum: bool
    domain_not_null: bool


def olake_type_for(type_oid: int, typmod: int = -1, element_oid: int | None = None, dims: int = 1) -> str:
    """The olake type of a (domain-resolved) PostgreSQL type; arrays pass their element's OID and
    their declared number of dimensions (nested ``array<...>``)."""
    if element_oid is not None:
        depth = max(dims, 1)
        return "array<" * depth + olake_type_for(element_oid, typmod) + ">" * depth
    if type_oid == _NUMERIC_OID:
        return _numeric_olake_type(typmod)
    return _OLAKE_TYPE_BY_OID.get(type_oid, "string")


def _numeric_olake_type(typmod: int) -> str:
    """decimal(p,s) when Arrow decimal128 and Parquet can hold it exactly, else the text 'numeric'."""
    if typmod < 4:  # unconstrained numeric
        return "numeric"
    packed = typmod - 4
    precision = (packed >> 16) & 0xFFFF
    scale = ((packed & 0x7FF) ^ 1024) - 1024  # PG 15 stores the scale as a signed 11-bit value
    if 1 <= precision <= _MAX_DECIMAL_PRECISION and 0 <= scale <= precision:
        return f"decimal({precision},{scale})"
    return "numeric"


_COLUMNS_SQL = """
SELECT a.attname, a.atttypid, a.atttypmod, a.attnotnull, a.attndims
FROM pg_attribute a
JOIN pg_class c ON c.oid = a.attrelid
JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = %s AND c.relname = %s AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY a.attnum
"""

_TYPE_SQL = """
SELECT t.typtype, t.typbasetype, t.typtypmod, t.typnotnull, t.typcategory, t.typelem,
       format_type(t.oid, %s)
FROM pg_type t WHERE t.oid = %s
"""


def fetch_columns(conn: psycopg.Connection, schema: str, table: str) -> list[PgColumn]:
    """The table's user columns in attnum order, with domains resolved and enum labels read."""
    rows = conn.execute(_COLUMNS_SQL, (schema, table)).fetchall()
    if not rows:
        raise CatalogError(f"table {schema}.{table} not found or has no columns")
    columns = []
    for name, type_oid, typmod, not_null, dims in rows:
        base = _resolve_base_type(conn, type_oid, typmod)
        element = _resolve_base_type(conn, base.element_oid, base.typmod) if base.element_oid else None
        labels_owner = element if element is not None else base
        labels = _enum_labels(conn, labels_owner.oid) if labels_owner.is_enum else None
        columns.append(PgColumn(
            name=name, type_name=base.type_name, type_oid=base.oid,
            element_oid=element.oid if element else None, category=base.category,
            nullable=not (not_null or base.domain_not_null), enum_labels=labels,
            olake_type=olake_type_for(base.oid, base.typmod, element.oid if element else None, dims)))
    return columns


def _resolve_base_type(conn: psycopg.Connection, type_oid: int, typmod: int) -> _BaseType:
    """Follow domains down to their base type; arrays (category 'A') report their element OID."""
    domain_not_null = False
    while True:
        row = conn.execute(_TYPE_SQL, (typmod, type_oid)).fetchone()
        if row is None:
            raise CatalogError(f"type oid {type_oid} not found")
        typtype, base_oid, base_typmod, not_null, category, element_oid, type_name = row
        if typtype != "d":
            break
        domain_not_null = domain_not_null or not_null
        type_oid, typmod = base_oid, base_typmod if base_typmod != -1 else typmod
    return _BaseType(oid=type_oid, typmod=typmod, type_name=type_name, category=category,
                     element_oid=element_oid if category == "A" and element_oid else None,
                     is_enum=typtype == "e", domain_not_null=domain_not_null)


def _enum_labels(conn: psycopg.Connection, enum_oid: int) -> tuple[str, ...]:
    rows = conn.execute(
        "SELECT enumlabel FROM pg_enum WHERE enumtypid = %s ORDER BY enumsortorder", (enum_oid,)
    ).fetchall()
    return tuple(label for (label,) in rows)


def json_schema_property(col: PgColumn) -> dict:
    """The catalog json_schema property for a column, carrying x-olake-type and x-pg-type."""
    prop = _json_schema_for(col.olake_type, col.enum_labels, col.nullable)
    prop["x-olake-type"] = col.olake_type
    prop["x-pg-type"] = col.type_name
    return prop


def _json_schema_for(olake_type: str, enum_labels: tuple[str, ...] | None, nullable: bool) -> dict:
    """The JSON-schema fragment of one olake type (array items are always nullable)."""
    if olake_type.startswith("array<"):
        items = _json_schema_for(olake_type[len("array<"):-1], enum_labels, True)
        items["x-olake-type"] = olake_type[len("array<"):-1]
        prop: dict = {"type": ["array"], "items": items}
    elif olake_type == "interval":
        prop = {"type": ["object"], "additionalProperties": False,
                "required": ["months", "days", "microseconds"],
                "properties": {k: {"type": "integer"} for k in ("months", "days", "microseconds")}}
    else:
        prop = _scalar_json_schema(olake_type)
        if enum_labels is not None:
            prop["enum"] = list(enum_labels) + ([None] if nullable else [])
    if nullable:
        prop["type"] = ["null", *prop["type"]]
    return prop


def _scalar_json_schema(olake_type: str) -> dict:
    if olake_type == "bool":
        return {"type": ["boolean"]}
    if olake_type in ("int16", "int32", "int64"):
        return {"type": ["integer"]}
    if olake_type in ("float32", "float64"):
        return {"type": ["number", "string"]}
    formats = {"date": "date", "time": "time", "timestamp": "date-time", "timestamptz": "date-time",
               "uuid": "uuid"}
    prop: dict = {"type": ["string"]}
    if olake_type in formats:
        prop["format"] = formats[olake_type]
    if olake_type == "bytes":
        prop["contentEncoding"] = "base64"
    if olake_type == "json":
        prop["contentMediaType"] = "application/json"
    return prop


def select_expression(col: PgColumn, key_columns: tuple = ()) -> sql.Composable:
    """The chunk-scan SELECT-list expression for a column, aliased to the column's name.

    An array value that cannot be carried fails the scan naming the column (and ``key_columns``).
    """
    ident = sql.Identifier(col.name)
    if col.olake_type.startswith("array<array<"):
        expr = sql.SQL("{}::text").format(ident)  # nested lists: the chunk reader parses PostgreSQL's text
    elif col.olake_type.startswith("array<"):
        expr = _array_expression(col, ident, key_columns)
    elif col.olake_type == "interval":
        expr = _interval_triple(ident)
    elif col.olake_type in _NATIVE_PG_TYPE:
        expr = sql.SQL("{}::{}").format(ident, sql.SQL(_NATIVE_PG_TYPE[col.olake_type]))
    elif col.type_oid == _BPCHAR_OID:
        expr = sql.SQL("{}::bpchar").format(ident)  # ::text would strip char(n) padding
    elif col.type_oid == _INET_OID:
        expr = sql.SQL("CASE WHEN {v} IS NULL THEN NULL ELSE format('%s', {v}) END").format(v=ident)
    else:
        expr = sql.SQL("{}::text").format(ident)
    return sql.SQL("{} AS {}").format(expr, ident)


def _interval_triple(value: sql.Composable) -> sql.Composable:
    """An exact int8[3] (months, days, microseconds) of an interval, NULL for NULL."""
    return sql.SQL(
        "CASE WHEN {v} IS NULL THEN NULL ELSE ARRAY["
        "(extract(year FROM {v}) * 12 + extract(month FROM {v}))::int8, "
        "extract(day FROM {v})::int8, "
        "(extract(hour FROM {v}) * 3600000000 + extract(minute FROM {v}) * 60000000"
        " + extract(microseconds FROM {v}))::int8] END"
    ).format(v=value)


def _array_expression(col: PgColumn, ident: sql.Identifier, key_columns: tuple) -> sql.Composable:
    """Cast a one-dimensional array to a type ADBC decodes exactly; a value of more dimensions or
    with a lower bound other than 1 fails the scan (ADBC would flatten it and drop its bounds)."""
    element_type = col.olake_type[len("array<"):-1]
    if element_type in _NATIVE_PG_TYPE:
        array_type = sql.SQL(_NATIVE_PG_TYPE[element_type] + "[]")
    elif col.element_oid == _BPCHAR_OID:
        array_type = sql.SQL("bpchar[]")
    else:
        array_type = sql.SQL("text[]")  # intervals too: the codec parses their iso_8601 text
    message = sql.SQL("{} || array_dims({v}) || {}").format(
        sql.Literal(f"olake: column {col.name!r}: array with dimensions "), sql.Literal(
            " cannot be carried: the column is declared with 1 dimension and lists cannot carry lower"
            " bounds other than 1" + (f"; row with key ({', '.join(key_columns)}) = " if key_columns else "")),
        v=ident)
    if key_columns:
        message = sql.SQL("{} || ROW({})::text").format(
            message, sql.SQL(", ").join(sql.Identifier(k) for k in key_columns))
    value: sql.Composable = sql.SQL("{v}::{t}").format(v=ident, t=array_type)
    if col.element_oid == _INET_OID:  # each element through inet's output function, as pgoutput does
        value = sql.SQL("CASE WHEN {v} IS NULL THEN NULL ELSE ARRAY(SELECT CASE WHEN e IS NULL THEN NULL "
                        "ELSE format('%s', e) END FROM unnest({v}) WITH ORDINALITY AS u(e, i) ORDER BY i) "
                        "END").format(v=ident)
    return sql.SQL(
        "CASE WHEN array_ndims({v}) > 1 OR array_lower({v}, 1) <> 1 THEN ({msg})::{t} ELSE {value} END"
    ).format(v=ident, msg=message, t=array_type, value=value)


def type_property(conn: psycopg.Connection, type_oid: int, typmod: int, nullable: bool = True,
                  dims: int = 1) -> dict:
    """The catalog json_schema property of a column of type ``type_oid`` (domains resolved); ``dims``
    is an array column's declared number of dimensions (pg_attribute.attndims).

    Change capture uses it for the columns a pgoutput Relation message announces.
    """
    base = _resolve_base_type(conn, type_oid, typmod)
    element = _resolve_base_type(conn, base.element_oid, base.typmod) if base.element_oid else None
    owner = element if element is not None else base
    column = PgColumn(name="", type_name=base.type_name, type_oid=base.oid,
                      element_oid=element.oid if element else None, category=base.category,
                      nullable=nullable, enum_labels=_enum_labels(conn, owner.oid) if owner.is_enum else None,
                      olake_type=olake_type_for(base.oid, base.typmod, element.oid if element else None, dims))
    return json_schema_property(column)
