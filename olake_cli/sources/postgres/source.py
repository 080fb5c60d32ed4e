"""The PostgreSQL source: check, discover, and the full-load planning the read pipeline drives."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from psycopg import sql

from olake_cli.core.catalog import TEMPORAL_CURSOR_TYPES, check_cursor_column, is_numeric_cursor_type
from olake_cli.core.errors import CatalogError, ConfigError
from olake_cli.sources.postgres import chunks as chunking
from olake_cli.sources.postgres import discover as disco
from olake_cli.sources.postgres import live_schema
from olake_cli.sources.postgres import types as pgtypes
from olake_cli.sources.postgres.connection import PostgresSettings, connect
from olake_cli.sources.postgres.scan import ScanTask


@dataclass
class TableInfo:
    """A selected table as the source sees it now: the catalog's columns and the key."""

    schema: str
    table: str
    columns: list[Any]  # PgColumn, in catalog order
    primary_key: list[str]
    missing: list[str] = field(default_factory=list)  # catalog columns the table dropped: read as NULL
    warnings: list[str] = field(default_factory=list)  # schema changes the run reports on stderr

    def column(self, name: str):
        """The PgColumn called ``name``."""
        return next(c for c in self.columns if c.name == name)


@dataclass
class FullLoadPlan:
    """Chunks of one stream's full load and the column they split on (``ctid`` or key columns)."""

    chunk_column: str | list[str]
    bounds: list[chunking.ChunkBounds]
    table_identity: dict[str, int] | None = None  # ctid chunks: relfilenode of the table or each leaf


class PostgresSource:
    """Connector facade used by the CLI and the pipelines."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.settings = PostgresSettings.from_config(config)

    def check(self) -> str:
        """Connect and verify SELECT privilege on every table of the configured schemas."""
        with connect(self.settings) as conn:
            missing_schemas = [s for s in self.settings.schemas if conn.execute(
                "SELECT 1 FROM pg_namespace WHERE nspname = %s", (s,)).fetchone() is None]
            if missing_schemas:
                raise ConfigError(f"postgres: schema(s) {', '.join(missing_schemas)} do not exist in "
                                  f"database '{self.settings.database}'; fix 'schemas'")
            denied = conn.execute(
                """SELECT n.nspname || '.' || c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                   WHERE n.nspname = ANY(%s) AND c.relkind IN ('r','p') AND NOT c.relispartition
                     AND NOT (has_schema_privilege(n.oid, 'USAGE') AND has_table_privilege(c.oid, 'SELECT'))
                   ORDER BY 1""", (list(self.settings.schemas),)).fetchall()
            if denied:
                names = ", ".join(r[0] for r in denied[:5]) + (" ..." if len(denied) > 5 else "")
                role = sql.Identifier(self.settings.username).as_string(conn)
                grants = " ".join(f"GRANT SELECT ON {_qualified(conn, r[0])} TO {role};" for r in denied[:5])
                raise ConfigError(f"postgres: user '{self.settings.username}' lacks SELECT on {names}; "
                                  f"run as an admin: {grants} (and GRANT USAGE ON SCHEMA where missing)")
            tables = [(t[0], t[1]) for t in disco.list_tables(conn, self.settings.schemas)]
            cdc = self._check_change_capture(conn, tables)
        return (f"connected to {self.settings.describe()}; {len(tables)} table(s) readable in "
                f"{', '.join(self.settings.schemas)}{cdc}")

    def _check_change_capture(self, conn, tables: list[tuple[str, str]]) -> str:
        """When a slot or publication is configured: every CDC problem with the SQL that fixes it."""
        from olake_cli.sources.postgres import cdc_setup

        if not (self.settings.replication_slot or self.settings.publication):
            return ""
        problems = cdc_setup.cdc_problems(conn, self.settings, tables)
        if problems:
            if self.settings.create_slot_and_publication:  # read creates these itself
                problems = [p for p in problems if not _creatable(p.what)]
            if problems:
                text = "; ".join(p.what + (f" (fix: {' '.join(p.fix_sql.split())})" if p.fix_sql else "")
                                 for p in problems)
                raise ConfigError(f"postgres: change capture is not ready, {len(problems)} problem(s): {text}")
        notes = cdc_setup.cdc_notes(conn, self.settings, tables)
        return "; change capture ready" + "".join(f"; note: {n}" for n in notes)

    def discover(self) -> dict[str, Any]:
        """The catalog of every table in the configured schemas."""
        with connect(self.settings) as conn:
            return disco.discover_catalog(conn, self.settings.schemas)

    def resolve_tables(self, conn, streams: list[Any]) -> dict[tuple, TableInfo]:
        """Match catalog streams to live tables, reconciling schema changes since the catalog was made.

        Unknown streams, renamed columns and type changes that lose values raise CatalogError; dropped
        columns are read as NULL and widened ones take their live type (both reported in ``warnings``).
        """
        live = {(s, t): (kind, oid) for s, t, kind, oid in disco.list_tables(conn, _namespaces(streams, self))}
        resolved = {}
        for stream in streams:
            schema = stream.namespace or self.settings.schemas[0]
            if (schema, stream.name) not in live:
                raise CatalogError(f"catalog: stream '{schema}.{stream.name}' does not exist in database "
                                   f"'{self.settings.database}' (run discover again)")
            label = f"{schema}.{stream.name}"
            found = live_schema.reconcile(stream, label, pgtypes.fetch_columns(conn, schema, stream.name),
                                          live_schema.column_attnums(conn, schema, stream.name))
            _check_cursor(stream, label, found)
            pkey = stream.primary_key_columns or disco.primary_key(conn, live[(schema, stream.name)][1])
            resolved[stream.key] = TableInfo(schema, stream.name, found.columns, pkey, found.missing,
                                             found.warnings)
        return resolved

    def plan_full_load(self, conn, info: TableInfo) -> FullLoadPlan:
        """Chunks for a new full load, planned inside the exported snapshot."""
        rows = self.settings.chunk_rows
        key_present = not set(info.primary_key) & set(info.missing)
        if self.settings.chunk_strategy == "primary_key" and info.primary_key and key_present:
            bounds = chunking.plan_key_chunks(conn, info.schema, info.table, info.primary_key, rows)
            return FullLoadPlan(list(info.primary_key), bounds)
        return FullLoadPlan(chunking.CTID, chunking.plan_ctid_chunks(conn, info.schema, info.table, rows),
                            self.table_identity(conn, info))

    def table_identity(self, conn, info: TableInfo) -> dict[str, int]:
        """What ctid ranges refer to: relfilenode of the table, or of every leaf partition."""
        return chunking.table_identity(conn, info.schema, info.table)

    def max_cursor(self, conn, info: TableInfo, cursor: str) -> str | None:
        """The largest FINITE cursor value now (text form); NaN and infinities never become a position."""
        query = sql.SQL("SELECT max({c})::text FROM {s}.{t} WHERE {finite}").format(
            c=sql.Identifier(cursor), s=sql.Identifier(info.schema), t=sql.Identifier(info.table),
            finite=_finite(info.column(cursor)) or sql.SQL("true"))
        return conn.execute(query).fetchone()[0]

    def scan_task(self, conn, info: TableInfo, stream: Any, index: int, chunk_column, lo, hi,
                  snapshot_id: str | None, extra_where: sql.Composable | None = None,
                  extra_data: dict[str, Any] | None = None) -> ScanTask:
        """A picklable task reading rows of [lo, hi) of one table (optionally filtered further)."""
        key_types = [] if chunk_column == chunking.CTID else [info.column(k).type_name for k in chunk_column]
        where = chunking.chunk_predicate(chunk_column, key_types, lo, hi)
        if extra_where is not None:
            where = sql.SQL("({}) AND ({})").format(where, extra_where)
        key = tuple(info.primary_key)
        cols = [live_schema.select_null(c) if c.name in info.missing else pgtypes.select_expression(c, key)
                for c in info.columns]
        query = sql.SQL("SELECT {cols} FROM {s}.{t} WHERE {w}").format(
            cols=sql.SQL(", ").join(cols), s=sql.Identifier(info.schema), t=sql.Identifier(info.table), w=where)
        return ScanTask(stream=stream.name, namespace=stream.namespace, chunk_index=index,
                        query=query.as_string(conn), uri=self.settings.uri(), snapshot_id=snapshot_id,
                        json_schema=stream.json_schema, batch_rows=self.settings.batch_rows,
                        extra_data=extra_data, key_columns=key)

    def incremental_task(self, conn, info: TableInfo, stream: Any, cursor: str, after: str | None,
                         upto: str | None, snapshot_id: str | None, extra_data: dict[str, Any]) -> ScanTask:
        """A task reading rows with ``after - lookback <= cursor <= upto``, plus every row whose cursor is
        NaN or infinite (they cannot hold a position, so every pass reads them again).

        The boundary is re-read on purpose: rows that share the last cursor value are never lost; the
        destination absorbs the repeats. ``upto`` None (no finite value yet) reads only the non-finite rows.
        """
        column = info.column(cursor)
        ident, cast = sql.Identifier(cursor), sql.SQL(column.type_name)
        if upto is None:
            where: sql.Composable = sql.SQL("false")
        else:
            where = sql.SQL("{c} <= {u}::{t}").format(c=ident, u=sql.Literal(upto), t=cast)
        if after is not None and upto is not None:
            start = sql.SQL("{a}::{t}").format(a=sql.Literal(after), t=cast)
            if stream.cursor_lookback is not None:
                start = sql.SQL("{s} - {lb}").format(s=start, lb=_lookback(column, stream.cursor_lookback))
            where = sql.SQL("{c} >= {s} AND {w}").format(c=ident, s=start, w=where)
        finite = _finite(column)
        if finite is not None:
            where = sql.SQL("({f} AND {w}) OR NOT ({f})").format(f=finite, w=where)
        return self.scan_task(conn, info, stream, 0, chunking.CTID, None, None, snapshot_id,
                              extra_where=where, extra_data=extra_data)


def _finite(column) -> sql.Composable | None:
    """A condition true for cursor values that can be a position (not NaN, not ±infinity); None for
    types without such values."""
    ident = sql.Identifier(column.name)
    if column.olake_type in TEMPORAL_CURSOR_TYPES:
        return sql.SQL("isfinite({})").format(ident)
    if column.olake_type.startswith(("float", "numeric", "decimal(")):
        base = sql.SQL("float8" if column.olake_type.startswith("float") else "numeric")
        return sql.SQL("{c} NOT IN ('NaN'::{b}, 'Infinity'::{b}, '-Infinity'::{b})").format(c=ident, b=base)
    return None


def _lookback(column, lookback: Any) -> sql.Composable:
    """The look-back window as SQL: an interval for date and timestamp cursors, else a number."""
    if is_numeric_cursor_type(column.olake_type):
        return sql.Literal(lookback)
    return sql.SQL("{}::interval").format(sql.Literal(lookback))


def _check_cursor(stream: Any, label: str, found: live_schema.LiveColumns) -> None:
    """An incremental stream's cursor column exists in the table and has an orderable type."""
    cursor = stream.cursor_column
    if stream.sync_mode != "incremental" or cursor is None:
        return
    if cursor in found.missing:
        raise CatalogError(f"catalog: stream '{label}': cursor_field '{cursor}' no longer exists in the "
                           f"table; choose another cursor (the stream then loads anew)")
    column = next(c for c in found.columns if c.name == cursor)
    check_cursor_column(f"catalog: stream '{label}'", cursor, column.olake_type, stream.cursor_lookback)


def _creatable(problem: str) -> bool:
    """Whether ``read`` with create_slot_and_publication fixes this problem by itself."""
    return problem.endswith(("does not exist in this database",)) or (
        problem.startswith("replication slot") and "does not exist" in problem) or (
        problem.startswith("publication") and ("does not cover" in problem or "does not publish" in problem))


def _qualified(conn, dotted: str) -> str:
    schema, _, table = dotted.partition(".")
    return f"{sql.Identifier(schema).as_string(conn)}.{sql.Identifier(table).as_string(conn)}"


def _namespaces(streams: list[Any], source: PostgresSource) -> list[str]:
    return sorted({s.namespace or source.settings.schemas[0] for s in streams})
