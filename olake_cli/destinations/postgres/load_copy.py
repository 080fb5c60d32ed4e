"""Full-load rows into a table by one ``COPY ... FROM STDIN``: binary where every column allows it
(``copy_binary``), text otherwise (``copy_text``), with the ``_olake_*`` values of a load when the
table has them; or, from a PostgreSQL source into a table of built-in types, the source's own binary
COPY data passed through untouched (``passthrough_casts``, ``copy_passthrough``).

A load resumed in a later run reads its remaining chunks in a new snapshot, so a row changed between
the runs may come again (ctid chunks: its new version moved to another chunk's pages) while its old
version sits in a chunk already committed. Such chunks go through ``replacing_keys``: COPYed into a
temporary table, then each key's earlier row deleted and the new rows inserted (the later snapshot wins).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

import pyarrow as pa
from psycopg import sql

from olake_cli.core.faults import crash_point
from olake_cli.destinations.postgres.copy_binary import HEADER, TRAILER, binary_fits, copy_binary_rows
from olake_cli.destinations.postgres.copy_text import copy_text
from olake_cli.destinations.postgres.tables import METADATA_COLUMNS, TargetTable
from olake_cli.destinations.postgres.types import NAMING_TYPES

COPY_BATCH_ROWS = 50_000  # rows encoded per block
_META_TYPES = ("string", "string", "timestamptz", "timestamptz")


def copy_load(conn, target: sql.Composable, table: TargetTable, parts: Iterable[pa.Table | pa.RecordBatch],
              op_key: str | None) -> int:
    """COPY full-load rows (the stream's columns in destination types) into ``target``; the row count."""
    binary = uses_binary(table)
    statement = sql.SQL("COPY {} ({}) FROM STDIN{}").format(
        target, table.column_list(), sql.SQL(" (FORMAT binary)" if binary else ""))
    rows = 0
    with conn.cursor().copy(statement) as copy:
        if binary:
            copy.write(HEADER)
        for part in parts:
            for start in range(0, part.num_rows, COPY_BATCH_ROWS):
                copy.write(_block(table, part.slice(start, COPY_BATCH_ROWS), op_key, binary))
            rows += part.num_rows
        if binary:
            copy.write(TRAILER)
    return rows


def uses_binary(table: TargetTable) -> bool:
    """Whether every column of ``table`` goes in binary (exact, and cheaper for the server to read)."""
    return all(binary_fits(c.olake_type, c.sql_type) for c in table.columns)


def _block(table: TargetTable, rows: pa.Table | pa.RecordBatch, op_key: str | None, binary: bool) -> bytes:
    columns = [rows.column(c.name) for c in table.columns]
    types, sql_types = [c.olake_type for c in table.columns], [c.sql_type for c in table.columns]
    if table.metadata:
        count, now = rows.num_rows, int(time.time() * 1_000_000)
        columns += [pa.array(["r"] * count), pa.array([op_key] * count, pa.string()),
                    pa.nulls(count, pa.timestamp("us", tz="UTC")),
                    pa.array([now] * count, pa.int64()).view(pa.timestamp("us", tz="UTC"))]
        types += list(_META_TYPES)
        sql_types += [t for _, t in METADATA_COLUMNS]
    if binary:
        return copy_binary_rows(columns, types, sql_types)
    props = [c.prop for c in table.columns] + [None] * (len(columns) - len(table.columns))
    return copy_text(columns, types, table.column_names(), props)


def passthrough_casts(conn, table: TargetTable) -> tuple[tuple[str, str], ...] | None:
    """The ``(column, type)`` casts under which a PostgreSQL source's binary COPY data fits ``table``
    exactly, or None: the table has ``_olake_*`` columns, or a column whose binary form is not the same
    value in another database: a type (or element type) that is not one of PostgreSQL's fixed built-in
    types (binary data names an enum, a composite or an extension type by the number its database
    assigned), a composite, or one of ``NAMING_TYPES`` (a number naming an object of the source's catalog).

    Each column's type holds its source type (``tables.check_table``), so the cast on the source is exact.
    """
    if table.metadata:
        return None
    types, names = [c.sql_type for c in table.columns], sorted(NAMING_TYPES)
    portable = conn.execute(_PORTABLE_TYPES, (types, names, names, types)).fetchone()[0]
    return tuple((c.name, c.sql_type) for c in table.columns) if portable else None


# PostgreSQL's own types (pg_type.dat) have OIDs below 10000, the same in every database and version.
_PORTABLE_TYPES = """
SELECT count(*) = cardinality(%s::text[]) AND coalesce(bool_and(
  t.oid < 10000 AND t.typtype NOT IN ('c', 'p') AND NOT t.typname = ANY(%s::text[])
  AND (e.oid IS NULL OR (e.oid < 10000 AND e.typtype NOT IN ('c', 'p') AND NOT e.typname = ANY(%s::text[])))), false)
FROM unnest(%s::text[]) AS n JOIN pg_type t ON t.oid = to_regtype(n) LEFT JOIN pg_type e ON e.oid = t.typelem"""


def copy_passthrough(conn, target: sql.Composable, table: TargetTable, blocks: Iterable[bytes]) -> int:
    """COPY binary data (header to trailer, the table's columns in order) into ``target``; the row count.
    Crash point ``postgres-copy-block`` (core/faults.py): a block sent, the COPY not ended."""
    statement = sql.SQL("COPY {} ({}) FROM STDIN (FORMAT binary)").format(target, table.column_list())
    with conn.cursor() as cur:
        with cur.copy(statement) as copy:
            for block in blocks:
                copy.write(block)
                crash_point("postgres-copy-block")
        return cur.rowcount


def replacing_keys(conn, target: sql.Composable, table: TargetTable, load: Callable[[object, sql.Composable], int]) -> int:
    """Run ``load`` (rows into the target it is given; their count) into a temporary table shaped like
    ``table``, then replace ``target``'s rows of the same keys with them; the row count."""
    temp = sql.Identifier("olake_resumed_chunk")
    conn.execute(sql.SQL("CREATE TEMP TABLE {} ON COMMIT DROP AS SELECT {} FROM {} WITH NO DATA").format(
        temp, table.column_list(), table.qualified))
    rows = load(conn, temp)
    match = sql.SQL(" AND ").join(sql.SQL("t.{k} = s.{k}").format(k=sql.Identifier(k)) for k in table.key)
    conn.execute(sql.SQL("DELETE FROM {} t USING {} s WHERE {}").format(target, temp, match))
    conn.execute(sql.SQL("INSERT INTO {} ({}) SELECT {} FROM {}").format(target, table.column_list(),
                                                                          table.column_list(), temp))
    return rows
