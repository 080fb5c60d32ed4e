"""A PostgreSQL read session: the selected tables resolved against the live database, one exported
snapshot shared by every chunk, and the chunk readers planned in it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from psycopg import sql

from olake_cli.core.catalog import TEMPORAL_CURSOR_TYPES, check_cursor_column, is_numeric_cursor_type
from olake_cli.core.contracts import FullLoadPlan
from olake_cli.core.errors import CatalogError
from olake_cli.core.state import StreamState
from olake_cli.sources.postgres import chunks as chunking
from olake_cli.sources.postgres import discover as disco
from olake_cli.sources.postgres import live_schema
from olake_cli.sources.postgres import types as pgtypes
from olake_cli.sources.postgres.connection import PostgresSettings, connect
from olake_cli.sources.postgres.membership_wait import wait_for_earlier_writers
from olake_cli.sources.postgres.scan import PostgresChunkReader
from olake_cli.sources.postgres.snapshot import ExportedSnapshot, rewritten_query
from olake_cli.sources.postgres.wrapped_instants import instant_columns


@dataclass
class TableInfo:
    """A selected table as the source sees it now: the catalog's columns and the key."""

    schema: str
    table: str
    columns: list[Any]  # PgColumn, in catalog order
    primary_key: list[str]
    missing: list[str] = field(default_factory=list)  # catalog columns the table dropped: read as NULL
    warnings: list[str] = field(default_factory=list)  # schema changes the run reports on stderr
    relkind: str = "r"  # 'r' table, 'p' partitioned, 'v' view, 'm' materialized view

    def column(self, name: str):
        """The PgColumn called ``name``."""
        return next(c for c in self.columns if c.name == name)


def resolve_tables(conn, settings: PostgresSettings, streams: list[Any]) -> dict[tuple, TableInfo]:
    """Match catalog streams to live tables, reconciling schema changes since the catalog was made.

    Unknown streams, renamed columns and type changes that lose values raise CatalogError; dropped
    columns are read as NULL and widened ones take their live type (both reported in ``warnings``).
    """
    namespaces = sorted({s.namespace or settings.schemas[0] for s in streams})
    live = {(s, t): (kind, oid) for s, t, kind, oid in disco.list_tables(conn, namespaces)}
    resolved = {}
    for stream in streams:
        schema = stream.namespace or settings.schemas[0]
        if (schema, stream.name) not in live:
            raise CatalogError(f"catalog: stream '{schema}.{stream.name}' does not exist in database "
                               f"'{settings.database}' (run discover again)")
        label = f"{schema}.{stream.name}"
        columns = pgtypes.fetch_columns(conn, schema, stream.name, stream.json_schema.get("properties"))
        found = live_schema.reconcile(stream, label, columns, live_schema.column_attnums(conn, schema, stream.name))
        _check_cursor(stream, label, found)
        pkey = stream.primary_key_columns or disco.primary_key(conn, live[(schema, stream.name)][1])
        resolved[stream.key] = TableInfo(schema, stream.name, found.columns, pkey, found.missing,
                                         found.warnings, live[(schema, stream.name)][0])
    return resolved


class PostgresReadSession:
    """The run's view of the database: resolved tables and one exported snapshot (a context manager)."""

    def __init__(self, settings: PostgresSettings, streams: list[Any], log: Callable[[str], None]) -> None:
        self.settings, self.log = settings, log
        with connect(settings) as conn:
            disco.require_schemas(conn, settings.schemas)  # as check and discover do: a misspelt one finds nothing
            self.tables = resolve_tables(conn, settings, streams)
        self.warnings = [w for info in self.tables.values() for w in info.warnings]
        self.snapshot = ExportedSnapshot(settings)
        self._captured = {s.label: self.tables[s.key] for s in streams if s.sync_mode == "cdc"}

    def __enter__(self) -> PostgresReadSession:
        if self._captured and self.settings.publication:  # see membership_wait
            with connect(self.settings) as conn:
                wait_for_earlier_writers(conn, self.settings.publication, {
                    label: sql.Identifier(t.schema, t.table).as_string(conn) for label, t in self._captured.items()},
                    self.log)
        self.snapshot.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.snapshot.__exit__(*exc)

    def key_columns(self, stream: Any) -> tuple[str, ...]:
        """The table's primary key (or the catalog's override)."""
        return tuple(self.tables[stream.key].primary_key)

    def plan_full_load(self, stream: Any) -> FullLoadPlan:
        """Chunks for a new full load, planned inside the exported snapshot.

        ctid chunks record the table's identity (relfilenodes), so a resume after a rewrite is refused.
        """
        info, conn, rows = self._table(stream), self.snapshot.conn, self.settings.chunk_rows
        if info.relkind == "v":  # a view has no pages to split: one chunk, the whole view
            return FullLoadPlan([(None, None)], chunking.CTID, {"table_identity": {}})
        key_present = not set(info.primary_key) & set(info.missing)
        estimate = _row_estimate(conn, info)
        if self.settings.chunk_strategy == "primary_key" and info.primary_key and key_present:
            bounds = chunking.plan_key_chunks(conn, info.schema, info.table, info.primary_key, rows)
            return FullLoadPlan([(b.min, b.max) for b in bounds], list(info.primary_key), {}, estimate)
        bounds = chunking.plan_ctid_chunks(conn, info.schema, info.table, rows)
        return FullLoadPlan([(b.min, b.max) for b in bounds], chunking.CTID,
                            {"table_identity": self._identity(info)}, estimate)

    def resume_blocker(self, stream: Any, previous: StreamState) -> str | None:
        """Why a ctid load cannot resume: the table was rewritten since its chunks were planned.

        Key-range chunks do not depend on the physical layout and always resume.
        """
        if previous.chunk_column not in (None, chunking.CTID):
            return None
        recorded = previous.source.get("table_identity")
        if recorded == self._identity(self._table(stream)):
            return None
        if recorded is None:
            return ("the state does not record which physical table its ctid chunks refer to "
                    "(written by an older olake)")
        return ("the table was rewritten since its full load began (VACUUM FULL, CLUSTER, a rewriting "
                "ALTER TABLE or a partition change), so its ctid chunks no longer name the same rows")

    def chunk_reader(self, stream: Any, load: StreamState, index: int) -> PostgresChunkReader:
        """The reader of chunk ``index`` of the load: rows of [min, max) on the load's chunk column."""
        chunk = load.chunks[index]
        column = chunking.CTID if load.chunk_column is None else load.chunk_column
        return self._reader(stream, index, column, chunk.min, chunk.max)

    def max_cursor(self, stream: Any) -> str | None:
        """The largest FINITE cursor value now (text form); NaN and infinities never become a position."""
        info, cursor = self._table(stream), stream.cursor_column
        query = sql.SQL("SELECT max({c})::text FROM {s}.{t} WHERE {finite}").format(
            c=sql.Identifier(cursor), s=sql.Identifier(info.schema), t=sql.Identifier(info.table),
            finite=_finite(info.column(cursor)) or sql.SQL("true"))
        return self.snapshot.conn.execute(query).fetchone()[0]

    def incremental_reader(self, stream: Any, after: str | None, upto: str | None) -> PostgresChunkReader:
        """Rows with ``after - lookback <= cursor <= upto``, plus every row whose cursor is NaN or
        infinite (they cannot hold a position, so every pass reads them again).

        The boundary is re-read on purpose: rows that share the last cursor value are never lost; the
        destination absorbs the repeats. ``upto`` None (no finite value yet) reads only the non-finite rows.
        """
        column = self.tables[stream.key].column(stream.cursor_column)
        ident, cast = sql.Identifier(column.name), sql.SQL(column.type_name)
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
        return self._reader(stream, 0, chunking.CTID, None, None, extra_where=where)

    def _table(self, stream: Any) -> TableInfo:
        """The stream's table, locked against DDL until the load ends (see ``ExportedSnapshot.hold``)."""
        info = self.tables[stream.key]
        self.snapshot.hold(info.schema, info.table, stream.label)
        return info

    def _identity(self, info: TableInfo) -> dict[str, int]:
        """What ctid ranges refer to: relfilenode of the table, or of every leaf partition."""
        return chunking.table_identity(self.snapshot.conn, info.schema, info.table)

    def _reader(self, stream: Any, index: int, chunk_column, lo, hi,
                extra_where: sql.Composable | None = None) -> PostgresChunkReader:
        """A reader of rows of [lo, hi) of one table (optionally filtered further)."""
        info, conn = self._table(stream), self.snapshot.conn
        key_types = [] if chunk_column == chunking.CTID else [info.column(k).type_name for k in chunk_column]
        where = chunking.chunk_predicate(chunk_column, key_types, lo, hi)
        if extra_where is not None:
            where = sql.SQL("({}) AND ({})").format(where, extra_where)
        key = tuple(info.primary_key)
        present = [c for c in info.columns if c.name not in info.missing]
        checks = pgtypes.shape_checks(present)
        cols = [live_schema.select_null(c) if c.name in info.missing else pgtypes.select_expression(c)
                for c in info.columns]
        cols += [sql.SQL("{} AS {}").format(check, sql.Identifier(f"olake_shape_{i}"))
                 for i, (_, check) in enumerate(checks)]  # last: the reader inspects and drops them
        table = sql.SQL("{}.{}").format(sql.Identifier(info.schema), sql.Identifier(info.table))
        rows_of = sql.SQL("FROM {t} WHERE {w}").format(t=table, w=where)
        query = sql.SQL("SELECT {cols} {rows_of}").format(cols=sql.SQL(", ").join(cols), rows_of=rows_of)
        return PostgresChunkReader(label=stream.label, chunk_index=index, query=query.as_string(conn),
                                   copy_from=rows_of.as_string(conn), copy_columns=frozenset(c.name for c in present),
                                   uri=self.settings.uri(), snapshot_id=self.snapshot.snapshot_id,
                                   batch_rows=self.settings.batch_rows, key_columns=key,
                                   rewrite_check=rewritten_query(table.as_string(conn)).as_string(conn),
                                   lock_timeout_s=self.settings.lock_timeout,
                                   text_arrays=pgtypes.text_arrays(present), instant_columns=instant_columns(present),
                                   shape_checks=tuple((c.name, c.olake_type) for c, _ in checks))


def _row_estimate(conn, info: TableInfo) -> int:
    """Rows of a table (every leaf of a partitioned one) from ``pg_class.reltuples``; a table never
    analyzed (reltuples -1, or 0 with pages) is counted."""
    table = sql.SQL("{}.{}").format(sql.Identifier(info.schema), sql.Identifier(info.table))
    qualified = table.as_string(conn)
    tuples, unknown = conn.execute(
        """SELECT coalesce(sum(greatest(c.reltuples, 0)), 0)::bigint,
                  coalesce(bool_or(c.reltuples < 0 OR (c.reltuples = 0 AND c.relpages > 0)), false)
           FROM (SELECT relid FROM pg_partition_tree(%s::regclass) WHERE isleaf
                 UNION SELECT %s::regclass) t JOIN pg_class c ON c.oid = t.relid
           WHERE c.relkind IN ('r', 'm')""", (qualified, qualified)).fetchone()
    if unknown:
        tuples = conn.execute(sql.SQL("SELECT count(*) FROM {}").format(table)).fetchone()[0]
    return int(tuples)


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
