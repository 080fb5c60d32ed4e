"""Discovery: every table, view and materialized view of the configured schemas becomes one stream.

Views and materialized views are offered ``full_refresh`` (and ``incremental`` on an orderable
column) only: they have no replica identity for ``cdc``, and a plain view is read in one chunk.
Array columns take their shape from the data (``array_shapes``: one pass over each table that has
array columns), not from their declaration.
"""

from __future__ import annotations

from typing import Any

from olake_cli.core.catalog import is_cursor_type
from olake_cli.core.errors import ConfigError
from olake_cli.core.stream_filter import keep_streams
from olake_cli.sources.postgres import types as pgtypes
from olake_cli.sources.postgres.array_shapes import with_data_shapes
from olake_cli.sources.postgres.replica_identity import ResolvedTable, keyless_tables

TABLES_SQL = """
SELECT n.nspname, c.relname, c.relkind, c.oid
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = ANY(%s) AND c.relkind IN ('r', 'p', 'v', 'm') AND NOT c.relispartition
ORDER BY n.nspname, c.relname
"""

PRIMARY_KEY_SQL = """
SELECT a.attname
FROM pg_index i
JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord) ON true
JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
WHERE i.indrelid = %s AND i.indisprimary
ORDER BY k.ord
"""


TABLE_KINDS = ("r", "p")  # relations change capture can serve; views ('v') and matviews ('m') cannot
_RELKIND_NAMES = {"r": "table", "p": "partitioned", "v": "view", "m": "materialized_view"}


def require_schemas(conn, schemas: tuple[str, ...] | list[str]) -> None:
    """A ConfigError naming each configured schema the database does not have, and the schemas it has:
    ``check``, ``discover`` and every run refuse a misspelt schema instead of finding nothing in it."""
    missing = [row[0] for row in conn.execute(
        "SELECT s FROM unnest(%s::text[]) WITH ORDINALITY AS u(s, n) "
        "WHERE NOT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = s) ORDER BY n", (list(schemas),)).fetchall()]
    if not missing:
        return
    existing = [row[0] for row in conn.execute(
        "SELECT nspname FROM pg_namespace WHERE nspname NOT LIKE 'pg\\_%' AND nspname <> 'information_schema' "
        "ORDER BY 1").fetchall()]
    raise ConfigError(f"postgres: schema(s) {', '.join(missing)} do not exist in database '{conn.info.dbname}' "
                      f"(its schemas: {', '.join(existing) or 'none'}); fix 'schemas'")


def list_tables(conn, schemas: tuple[str, ...] | list[str],
                kinds: tuple[str, ...] = ("r", "p", "v", "m")) -> list[tuple[str, str, str, int]]:
    """(schema, name, relkind, oid) of every table, partitioned table, view and materialized view
    (``kinds`` restricts them), partitions excluded."""
    return [tuple(row) for row in conn.execute(TABLES_SQL, (list(schemas),)).fetchall() if row[2] in kinds]


def primary_key(conn, table_oid: int) -> list[str]:
    """Primary-key column names in key order (empty if the table has none)."""
    return [row[0] for row in conn.execute(PRIMARY_KEY_SQL, (table_oid,)).fetchall()]


def discover_stream(conn, schema: str, table: str, relkind: str, oid: int,
                    cdc_unsupported: str | None = None) -> dict[str, Any]:
    """One catalog stream entry for a table, with its JSON Schema, key, cursor candidates and sync modes.

    ``cdc_unsupported`` (why the table has no usable replica identity, with the fix) drops ``cdc``.
    """
    populated = relkind != "m" or conn.execute("SELECT relispopulated FROM pg_class WHERE oid = %s",
                                                (oid,)).fetchone()[0]
    columns = with_data_shapes(conn, schema, table, pgtypes.fetch_columns(conn, schema, table), populated)
    properties = {col.name: pgtypes.json_schema_property(col) for col in columns}
    pkey = primary_key(conn, oid)
    candidates = [col.name for col in columns if is_cursor_type(col.olake_type)]
    modes = ["full_refresh"] + ([] if cdc_unsupported or relkind not in TABLE_KINDS else ["cdc"])
    if candidates:
        modes.insert(1, "incremental")
    default_cursor = _default_cursor(candidates)
    return {
        "name": table,
        "namespace": schema,
        "json_schema": {"type": "object", "properties": properties},
        "supported_sync_modes": modes,
        "source_defined_primary_key": [[name] for name in pkey],
        "default_cursor_field": [default_cursor] if default_cursor else [],
        "cursor_candidates": candidates,
        "selected": True,
        "sync_mode": "full_refresh",
        "x-olake": {"relkind": _RELKIND_NAMES[relkind],
                    **({"cdc_unsupported": cdc_unsupported} if cdc_unsupported else {})},
    }


def _default_cursor(candidates: list[str]) -> str | None:
    for preferred in ("updated_at", "modified_at", "last_modified", "updated"):
        if preferred in candidates:
            return preferred
    return None


def discover_catalog(conn, schemas: tuple[str, ...] | list[str], include: tuple[str, ...] = (),
                     exclude: tuple[str, ...] = ()) -> dict[str, Any]:
    """The catalog object (``{"streams": [...]}``) of every table in ``schemas`` the ``include`` and
    ``exclude`` patterns keep (``core.stream_filter``); a ConfigError for a schema that does not exist."""
    require_schemas(conn, schemas)
    rows = list_tables(conn, schemas)
    chosen = set(keep_streams([(s, t) for s, t, _, _ in rows], include, exclude, "postgres"))
    rows = [row for row in rows if (row[0], row[1]) in chosen]
    keyless = keyless_tables(conn, [ResolvedTable(s, t, oid, kind == "p") for s, t, kind, oid in rows
                                    if kind in TABLE_KINDS])
    reasons = {oid: f"{k.reason}; for cdc run: {' '.join(k.fix_sql(conn).splitlines())}"
               for oid, k in keyless.items()}
    return {"streams": [discover_stream(conn, *row, reasons.get(row[3])) for row in rows]}
