"""Run-start schema check: the catalog's columns against the live table (see core/schema_change).

A dropped column is read as NULL of its catalog type, a widened column takes its live (wider) type in
the stream's json_schema, an added column is only noted; a rename (found by attnum: attnums are never
reused, so a catalog column missing whose place now holds an unselected column was renamed, or dropped
while that one was added) and a type change that would lose values fail with a CatalogError.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from psycopg import sql

from olake_cli.core.errors import CatalogError
from olake_cli.core.schema_change import compare_columns, describe_incompatible
from olake_cli.sources.postgres import types as pgtypes

_ATTNUMS_SQL = """
SELECT a.attname, a.attnum, a.attisdropped FROM pg_attribute a
WHERE a.attrelid = %s::regclass AND a.attnum > 0 ORDER BY a.attnum
"""


@dataclass
class LiveColumns:
    """The columns a run reads for one stream (catalog order) and what it should say about them."""

    columns: list[pgtypes.PgColumn]
    missing: list[str] = field(default_factory=list)  # catalog columns the table lost: read as NULL
    warnings: list[str] = field(default_factory=list)


def column_attnums(conn, schema: str, table: str) -> tuple[dict[str, int], set[int]]:
    """(live column name -> attnum, attnums of dropped columns) of a table.

    Change capture can map relation columns to attnums with it: attnums are never reused.
    """
    qualified = sql.SQL("{}.{}").format(sql.Identifier(schema), sql.Identifier(table)).as_string(conn)
    rows = conn.execute(_ATTNUMS_SQL, (qualified,)).fetchall()
    return {name: num for name, num, dropped in rows if not dropped}, {num for _, num, dropped in rows if dropped}


def renamed_columns(catalog_columns: list[str], attnums: dict[str, int], dropped: set[int]) -> dict[str, list[str]]:
    """Catalog column -> unselected live columns now in its attnum slot (renamed, or dropped and replaced).

    Missing catalog columns between two present ones share the attnums between them: when there are as
    many attnums (dropped or unselected) as missing columns they pair up in order, otherwise every
    unselected column in the slot is a candidate. Only meaningful while the present catalog columns keep
    attnum order (discover lists them so).
    """
    present = [attnums[c] for c in catalog_columns if c in attnums]
    if present != sorted(present):
        return {}
    unselected = {num: name for name, num in attnums.items() if name not in catalog_columns}
    found: dict[str, list[str]] = {}
    for low, high, missing in _slots(catalog_columns, attnums):
        places = sorted(n for n in [*unselected, *dropped] if low < n < high)
        candidates = [unselected[n] for n in places if n in unselected]
        if not candidates:
            continue
        if len(places) == len(missing):
            found.update({col: [unselected[n]] for col, n in zip(missing, places) if n in unselected})
        else:
            found.update({col: candidates for col in missing})
    return found


def _slots(catalog_columns: list[str], attnums: dict[str, int]) -> list[tuple[float, float, list[str]]]:
    """(attnum below, attnum above, missing columns) for each run of catalog columns the table lacks."""
    slots, low, missing = [], 0.0, []
    for column in catalog_columns:
        if column not in attnums:
            missing.append(column)
            continue
        if missing:
            slots.append((low, float(attnums[column]), missing))
        low, missing = float(attnums[column]), []
    if missing:
        slots.append((low, float("inf"), missing))
    return slots


def reconcile(stream: Any, label: str, live: list[pgtypes.PgColumn],
              attnums: tuple[dict[str, int], set[int]]) -> LiveColumns:
    """Check ``stream``'s catalog columns against the live ones; widen its json_schema in place."""
    props = dict(stream.json_schema.get("properties", {}))
    by_name = {c.name: c for c in live}
    renames = renamed_columns(list(props), *attnums)
    if renames:
        old, new = next(iter(renames.items()))
        raise CatalogError(f"{label}: column '{old}' was renamed to '{' or '.join(new)}' (or dropped while "
                           f"that column was added); run discover, update the catalog and let the stream "
                           f"load anew")
    diff = compare_columns(props, {c.name: c.olake_type for c in live})
    if diff.incompatible:
        raise CatalogError(describe_incompatible(label, diff))
    result = LiveColumns(columns=[])
    for name, (old, new) in diff.widened.items():
        props[name] = pgtypes.json_schema_property(by_name[name])
        result.warnings.append(f"{label}: column '{name}' widened from {old} to {new}; "
                               f"this run copies it as {new}")
    for name in diff.dropped:
        result.warnings.append(f"{label}: column '{name}' no longer exists in the table; it is read as NULL")
    if diff.added:
        result.warnings.append(f"{label}: column(s) {', '.join(diff.added)} are not in the catalog and are "
                               f"not copied (run discover and select them to copy them)")
    if diff.widened:
        stream.json_schema = {**stream.json_schema, "properties": props}
    result.missing = list(diff.dropped)
    result.columns = [by_name[n] if n in by_name else null_column(n, props[n]) for n in props]
    return result


def null_column(name: str, prop: Any) -> pgtypes.PgColumn:
    """A stand-in for a dropped column; ``type_name`` is the type its scan expression yields."""
    olake_type = (prop.get("x-olake-type") if isinstance(prop, dict) else None) or "string"
    is_array = olake_type.startswith("array<")
    inner = olake_type[len("array<"):-1] if is_array else olake_type
    native = pgtypes._NATIVE_PG_TYPE  # the scan's cast of each natively read olake type
    if inner == "interval" and not is_array:
        scan_type = "int8[]"  # intervals are read as (months, days, microseconds)
    else:
        scan_type = (native.get(inner) or "text") + ("[]" if is_array else "")
    return pgtypes.PgColumn(name=name, type_name=scan_type, type_oid=0, element_oid=None, category="",
                            nullable=True, enum_labels=None, olake_type=olake_type)


def select_null(column: pgtypes.PgColumn) -> sql.Composable:
    """``NULL::<scan type> AS "name"``: the scan's select-list entry of a dropped column."""
    return sql.SQL("NULL::{} AS {}").format(sql.SQL(column.type_name), sql.Identifier(column.name))
