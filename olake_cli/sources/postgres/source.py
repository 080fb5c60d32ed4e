"""The PostgreSQL source: check, discover, and the full-load planning the read pipeline drives."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from psycopg import sql

from olake_cli.core.errors import CatalogError, ConfigError
from olake_cli.sources.postgres import chunks as chunking
from olake_cli.sources.postgres import discover as disco
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

    def column(self, name: str):
        """The PgColumn called ``name``."""
        return next(c for c in self.columns if c.name == name)


@dataclass
class FullLoadPlan:
    """Chunks of one stream's full load and the column they split on (``ctid`` or key columns)."""

    chunk_column: str | list[str]
    bounds: list[chunking.ChunkBounds]


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
        """Match catalog streams to live tables; unknown streams or columns raise CatalogError."""
        live = {(s, t): (kind, oid) for s, t, kind, oid in disco.list_tables(conn, _namespaces(streams, self))}
        resolved = {}
        for stream in streams:
            schema = stream.namespace or self.settings.schemas[0]
            if (schema, stream.name) not in live:
                raise CatalogError(f"catalog: stream '{schema}.{stream.name}' does not exist in database "
                                   f"'{self.settings.database}' (run discover again)")
            by_name = {c.name: c for c in pgtypes.fetch_columns(conn, schema, stream.name)}
            wanted = list(stream.json_schema.get("properties", {}))
            unknown = [c for c in wanted if c not in by_name]
            if unknown:
                raise CatalogError(f"catalog: stream '{schema}.{stream.name}' names column(s) "
                                   f"{', '.join(unknown)} that the table does not have (run discover again)")
            pkey = stream.primary_key_columns or disco.primary_key(conn, live[(schema, stream.name)][1])
            resolved[stream.key] = TableInfo(schema, stream.name, [by_name[c] for c in wanted], pkey)
        return resolved

    def plan_full_load(self, conn, info: TableInfo) -> FullLoadPlan:
        """Chunks for a new full load, planned inside the exported snapshot."""
        rows = self.settings.chunk_rows
        if self.settings.chunk_strategy == "primary_key" and info.primary_key:
            bounds = chunking.plan_key_chunks(conn, info.schema, info.table, info.primary_key, rows)
            return FullLoadPlan(list(info.primary_key), bounds)
        return FullLoadPlan(chunking.CTID, chunking.plan_ctid_chunks(conn, info.schema, info.table, rows))

    def max_cursor(self, conn, info: TableInfo, cursor: str) -> str | None:
        """The largest cursor value now (text form), captured before a full load bounds it."""
        query = sql.SQL("SELECT max({c})::text FROM {s}.{t}").format(
            c=sql.Identifier(cursor), s=sql.Identifier(info.schema), t=sql.Identifier(info.table))
        return conn.execute(query).fetchone()[0]

    def scan_task(self, conn, info: TableInfo, stream: Any, index: int, chunk_column, lo, hi,
                  snapshot_id: str | None, extra_where: sql.Composable | None = None,
                  extra_data: dict[str, Any] | None = None) -> ScanTask:
        """A picklable task reading rows of [lo, hi) of one table (optionally filtered further)."""
        key_types = [] if chunk_column == chunking.CTID else [info.column(k).type_name for k in chunk_column]
        where = chunking.chunk_predicate(chunk_column, key_types, lo, hi)
        if extra_where is not None:
            where = sql.SQL("({}) AND ({})").format(where, extra_where)
        query = sql.SQL("SELECT {cols} FROM {s}.{t} WHERE {w}").format(
            cols=sql.SQL(", ").join(pgtypes.select_expression(c) for c in info.columns),
            s=sql.Identifier(info.schema), t=sql.Identifier(info.table), w=where)
        return ScanTask(stream=stream.name, namespace=stream.namespace, chunk_index=index,
                        query=query.as_string(conn), uri=self.settings.uri(), snapshot_id=snapshot_id,
                        json_schema=stream.json_schema, batch_rows=self.settings.batch_rows,
                        extra_data=extra_data)

    def incremental_task(self, conn, info: TableInfo, stream: Any, cursor: str, after: str | None,
                         upto: str, snapshot_id: str | None, extra_data: dict[str, Any]) -> ScanTask:
        """A task reading rows with ``after <= cursor <= upto`` (the boundary is re-read on purpose:
        rows that share the last cursor value are never lost; the destination absorbs the repeats)."""
        cast = sql.SQL(info.column(cursor).type_name)
        where = sql.SQL("{c} <= {u}::{t}").format(c=sql.Identifier(cursor), u=sql.Literal(upto), t=cast)
        if after is not None:
            where = sql.SQL("{c} >= {a}::{t} AND {w}").format(c=sql.Identifier(cursor), a=sql.Literal(after),
                                                              t=cast, w=where)
        return self.scan_task(conn, info, stream, 0, chunking.CTID, None, None, snapshot_id,
                              extra_where=where, extra_data=extra_data)


def _creatable(problem: str) -> bool:
    """Whether ``read`` with create_slot_and_publication fixes this problem by itself."""
    return problem.endswith(("does not exist in this database",)) or (
        problem.startswith("replication slot") and "does not exist" in problem) or (
        problem.startswith("publication") and "does not cover" in problem)


def _qualified(conn, dotted: str) -> str:
    schema, _, table = dotted.partition(".")
    return f"{sql.Identifier(schema).as_string(conn)}.{sql.Identifier(table).as_string(conn)}"


def _namespaces(streams: list[Any], source: PostgresSource) -> list[str]:
    return sorted({s.namespace or source.settings.schemas[0] for s in streams})
