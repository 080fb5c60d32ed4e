"""PostgreSQL column discovery and the mapping of PostgreSQL types onto olake types.

Every column gets an ``olake_type`` (see ``olake_cli.core.codec.types``) that fixes both its Arrow type at
the destination and its wire encoding in RECORD messages.  ``select_expression`` picks, per column,
the SELECT-list expression the chunk scan uses so that the ADBC driver yields an Arrow type that
``encode_records`` understands exactly:

* native Arrow for bool, integers, floats, bytea, date, time, timestamp(tz) (ADBC wraps PostgreSQL's
  infinity sentinels around int64/int32; the codec recognises the wrapped values);
* ``::text`` where ADBC is lossy or opaque: numeric (ADBC prints NaN as ``nan``), uuid, json(b),
  enums, inet, money, timetz and every type olake does not know;
* interval as an exact ``int8[3]`` of (months, days, microseconds): ADBC's month_day_nano fails on
  intervals longer than about 292 years of hours, and extract() returns exact numerics since PG 14;
* arrays as nested lists as deep as the column's values (``array<array<T>>`` for 2-D values), or,
  for a column whose values differ in depth or have a lower bound other than 1, as ``ndarray<T>``
  (lower bounds, lengths, elements); ``discover`` reads that shape from the data (``array_shapes``),
  a run takes it from the catalog (``fetch_columns(..., catalog=...)``), never from the declared
  ``pg_attribute.attndims``, which PostgreSQL does not enforce.  One-dimensional columns keep their
  element's native type (or ``text[]``), with a ``shape_check`` beside them (ADBC would silently
  flatten another shape and drop its bounds); deeper and ``ndarray`` columns are read as PostgreSQL's
  array text, which the chunk reader parses exactly as change capture does (``pgtext``).
"""

from __future__ import annotations

from dataclasses import dataclass

import psycopg
from psycopg import sql

from olake_cli.core.codec.types import NDARRAY, array_shape, shaped_array
from olake_cli.core.errors import CatalogError
from olake_cli.sources.postgres.pgarray import element_delimiter

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


def olake_type_for(type_oid: int, typmod: int = -1, element_oid: int | None = None, dims: int = 1,
                   catalog_type: str | None = None) -> str:
    """The olake type of a (domain-resolved) PostgreSQL type; arrays pass their element's OID and
    take the shape of ``catalog_type`` when that is an array type, else ``dims`` (the declared
    number of dimensions, at least 1: nested ``array<...>``)."""
    if element_oid is not None:
        shape = array_shape(catalog_type or "")
        return shaped_array(olake_type_for(element_oid, typmod), shape[1] if shape else max(dims, 1))
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


def fetch_columns(conn: psycopg.Connection, schema: str, table: str,
                  catalog: dict | None = None) -> list[PgColumn]:
    """The table's user columns in attnum order, with domains resolved and enum labels read; an array
    column takes its shape from its ``catalog`` property (json_schema properties), if any."""
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
            olake_type=olake_type_for(base.oid, base.typmod, element.oid if element else None, dims,
                                      _catalog_type(catalog, name))))
    return columns


def _catalog_type(catalog: dict | None, name: str) -> str | None:
    prop = (catalog or {}).get(name)
    return prop.get("x-olake-type") if isinstance(prop, dict) else None


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
    elif olake_type.startswith(NDARRAY + "<"):
        integers = {"type": ["array"], "items": {"type": ["integer"]}}
        elements = _json_schema_for(shaped_array(array_shape(olake_type)[0], 1), enum_labels, False)
        prop = {"type": ["object"], "additionalProperties": False,
                "required": ["lower_bounds", "lengths", "elements"],
                "properties": {"lower_bounds": integers, "lengths": integers, "elements": elements}}
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


def select_expression(col: PgColumn) -> sql.Composable:
    """The chunk-scan SELECT-list expression for a column, aliased to the column's name."""
    ident = sql.Identifier(col.name)
    if scanned_as_text(col):
        expr = sql.SQL("{}::text").format(ident)  # the chunk reader parses PostgreSQL's array text
    elif col.olake_type.startswith("array<"):
        expr = _array_expression(col, ident)
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


def scanned_as_text(col: PgColumn) -> bool:
    """Whether the scan reads the column as PostgreSQL's array text (multi-dimensional and ndarray
    columns), which the chunk reader parses into wire values."""
    shape = array_shape(col.olake_type)
    return shape is not None and shape[1] != 1


def text_arrays(columns: list[PgColumn]) -> tuple[tuple[str, str, str], ...]:
    """(name, olake type, element delimiter) of the columns the scan reads as array text."""
    return tuple((c.name, c.olake_type, element_delimiter(c.type_name)) for c in columns if scanned_as_text(c))


def shape_checks(columns: list[PgColumn]) -> list[tuple[PgColumn, sql.Composable]]:
    """Each one-dimensional array column (read natively) with an expression giving ``array_dims`` of a
    value of another shape (more dimensions, or a lower bound other than 1), NULL otherwise."""
    return [(c, sql.SQL("CASE WHEN array_ndims({v}) > 1 OR array_lower({v}, 1) <> 1 THEN array_dims({v}) END"
                        ).format(v=sql.Identifier(c.name)))
            for c in columns if (array_shape(c.olake_type) or ("", 0))[1] == 1]


def _interval_triple(value: sql.Composable) -> sql.Composable:
    """An exact int8[3] (months, days, microseconds) of an interval, NULL for NULL."""
    return sql.SQL(
        "CASE WHEN {v} IS NULL THEN NULL ELSE ARRAY["
        "(extract(year FROM {v}) * 12 + extract(month FROM {v}))::int8, "
        "extract(day FROM {v})::int8, "
        "(extract(hour FROM {v}) * 3600000000 + extract(minute FROM {v}) * 60000000"
        " + extract(microseconds FROM {v}))::int8] END"
    ).format(v=value)


def _array_expression(col: PgColumn, ident: sql.Identifier) -> sql.Composable:
    """A one-dimensional array cast to a type ADBC decodes exactly (its shape is checked beside it)."""
    element_type = col.olake_type[len("array<"):-1]
    if element_type in _NATIVE_PG_TYPE:
        array_type = sql.SQL(_NATIVE_PG_TYPE[element_type] + "[]")
    elif col.element_oid == _BPCHAR_OID:
        array_type = sql.SQL("bpchar[]")
    else:
        array_type = sql.SQL("text[]")  # intervals too: the codec parses their iso_8601 text
    if col.element_oid == _INET_OID:  # each element through inet's output function, as pgoutput does
        return sql.SQL("CASE WHEN {v} IS NULL THEN NULL ELSE ARRAY(SELECT CASE WHEN e IS NULL THEN NULL "
                       "ELSE format('%s', e) END FROM unnest({v}) WITH ORDINALITY AS u(e, i) ORDER BY i) "
                       "END").format(v=ident)
    return sql.SQL("{v}::{t}").format(v=ident, t=array_type)


def type_property(conn: psycopg.Connection, type_oid: int, typmod: int, nullable: bool = True,
                  catalog_type: str | None = None) -> dict:
    """The catalog json_schema property of a column of type ``type_oid`` (domains resolved); an array
    takes the shape of ``catalog_type`` (the column's catalog type), else one dimension.

    Change capture uses it for the columns a pgoutput Relation message announces.
    """
    base = _resolve_base_type(conn, type_oid, typmod)
    element = _resolve_base_type(conn, base.element_oid, base.typmod) if base.element_oid else None
    owner = element if element is not None else base
    column = PgColumn(name="", type_name=base.type_name, type_oid=base.oid,
                      element_oid=element.oid if element else None, category=base.category,
                      nullable=nullable, enum_labels=_enum_labels(conn, owner.oid) if owner.is_enum else None,
                      olake_type=olake_type_for(base.oid, base.typmod, element.oid if element else None, 1,
                                                catalog_type))
    return json_schema_property(column)
