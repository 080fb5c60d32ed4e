"""Full-load rows into a table by one ``COPY ... FROM STDIN``: binary where every column allows it
(``copy_binary``), text otherwise (``copy_text``), with the ``_olake_*`` values of a load when the
table has them."""

from __future__ import annotations

import time
from typing import Iterable

import pyarrow as pa
from psycopg import sql

from olake_cli.destinations.postgres.copy_binary import HEADER, TRAILER, binary_fits, copy_binary_rows
from olake_cli.destinations.postgres.copy_text import copy_text
from olake_cli.destinations.postgres.tables import METADATA_COLUMNS, TargetTable

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
