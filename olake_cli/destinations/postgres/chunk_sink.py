"""The fast path of ``olake sync``: a Spark task COPYs its full-load chunk into the target itself.

From a PostgreSQL source into a table of built-in types, the task passes the source's binary COPY data
through untouched (``write_copy``). Otherwise it converts its Arrow batches to the destination types
(``codec.scanned.to_destination``) and streams them as COPY data. Either way the rows go into the table
(or into the staging table of a load that replaces the table's rows, see ``bookkeeping.register_load``),
then the task records the chunk in ``_olake.chunks``, all in one transaction committed under the
replication origin. A chunk the target already holds (a task run again
after a kill, or a retried attempt racing an earlier one) is skipped: its mark is there, or the second
mark fails on its key and that attempt rolls back. A task outliving its run (a killed driver's Spark
worker) writes nothing once its load is complete or replaced. A chunk of a load that an earlier run
began (another snapshot) replaces the rows of its keys (``load_copy.replacing_keys``). No row crosses
the pipe or the JVM.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any
from collections.abc import Callable, Iterable

from psycopg import sql

from olake_cli.core.codec.scanned import to_destination
from olake_cli.core.errors import DestinationError
from olake_cli.destinations.postgres import bookkeeping
from olake_cli.destinations.postgres.load_copy import copy_load, copy_passthrough, replacing_keys
from olake_cli.destinations.postgres.config import TargetSettings
from olake_cli.destinations.postgres.session import classify, commit_under_origin, open_connection
from olake_cli.destinations.postgres.tables import TargetTable

_UNIQUE_VIOLATION = "23505"


@dataclass
class PostgresChunkSink:
    """Picklable: the target's settings, each stream's table (filled as streams open) and the run's id."""

    settings: TargetSettings
    tables: dict[tuple, TargetTable] = field(default_factory=dict)
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    writes_local_files = False  # tasks write over the network: any Spark master will do

    def write(self, namespace: str | None, stream: str, load_id: str | None, chunk_index: int,
              load_op_key: str | None, json_schema: dict, batches: Iterable[tuple[Any, dict | None]],
              key_columns: tuple[str, ...] = ()) -> tuple[int, list[str]]:
        """COPY one chunk's (batch, wire columns) pairs and mark it, in one transaction; (rows, warnings)."""
        table = self._table(namespace, stream)
        warnings: list[str] = []

        def load(conn, target: sql.Composable) -> int:
            def converted():
                for batch, wire_columns in batches:
                    table_part, found = to_destination(batch, json_schema, table.label, key_columns, wire_columns)
                    warnings.extend(w for w in found if w not in warnings)
                    yield table_part

            return copy_load(conn, target, table, converted(), load_op_key)

        return self._write(table, load_id, chunk_index, load, warnings)

    def copy_casts(self, namespace: str | None, stream: str) -> tuple[tuple[str, str], ...] | None:
        """The casts a PostgreSQL source applies so its binary COPY data fits the stream's table, or None."""
        table = self.tables.get((namespace, stream))
        return None if table is None else table.copy_casts

    def write_copy(self, namespace: str | None, stream: str, load_id: str | None, chunk_index: int,
                   blocks: Iterable[bytes]) -> tuple[int, list[str]]:
        """COPY one chunk's binary COPY data as it arrives and mark it, in one transaction; (rows, [])."""
        table = self._table(namespace, stream)
        warnings: list[str] = []
        return self._write(table, load_id, chunk_index,
                           lambda conn, target: copy_passthrough(conn, target, table, blocks), warnings)

    def _table(self, namespace: str | None, stream: str) -> TargetTable:
        table = self.tables.get((namespace, stream))
        if table is None:
            raise DestinationError(f"postgres destination: no table was opened for stream '{namespace}.{stream}'")
        return table

    def _write(self, table: TargetTable, load_id: str | None, chunk_index: int,
               load: Callable[[Any, sql.Composable], int], warnings: list[str]) -> tuple[int, list[str]]:
        """Run ``load`` (rows into the target it is given; their count) in the chunk's transaction."""
        conn = open_connection(self.settings)
        try:
            return self._load_and_mark(conn, table, load_id or "0", chunk_index, load, warnings)
        except Exception as exc:
            if _marked_meanwhile(conn, exc, table, load_id or "0", chunk_index):
                return 0, [f"chunk {chunk_index} was committed by another attempt meanwhile; this one is dropped"]
            raise classify(exc, self.settings, f"writing chunk {chunk_index} of {table.label}") from None
        finally:
            conn.close()

    def _load_and_mark(self, conn, table: TargetTable, load_id: str, chunk_index: int,
                       load: Callable[[Any, sql.Composable], int], warnings: list[str]) -> tuple[int, list[str]]:
        if bookkeeping.load_finished(conn, table.ident, load_id):
            conn.rollback()
            return 0, [f"chunk {chunk_index}: its load is already complete in the target; skipped"]
        staged = bookkeeping.register_load(conn, table.ident, load_id, table.column_list())
        conn.commit()  # every task (and the driver) sees the decision
        if bookkeeping.chunk_committed(conn, table.ident, load_id, chunk_index):
            conn.rollback()
            return 0, [f"chunk {chunk_index} is already in the target (committed by an earlier run); skipped"]
        target = bookkeeping.load_rows_target(table.ident, staged)
        if table.key and bookkeeping.resumed_elsewhere(conn, table.ident, load_id, self.run_id):
            rows = replacing_keys(conn, target, table, load)
        else:
            rows = load(conn, target)
        if not bookkeeping.still_current(conn, table.ident, load_id):
            conn.rollback()
            return 0, [f"chunk {chunk_index}: its load is no longer the one the target receives; dropped"]
        bookkeeping.mark_chunk(conn, table.ident, load_id, chunk_index, rows, self.run_id)
        commit_under_origin(conn, self.settings.origin, step="postgres-chunk")
        return rows, warnings


def _marked_meanwhile(conn, exc: Exception, table: TargetTable, load_id: str, chunk_index: int) -> bool:
    """Whether ``exc`` is a unique violation because another attempt committed the chunk first (its rows
    or its mark): the chunk's mark is there now. A key the table held before, with no mark, is not: the
    chunk must not pass as done."""
    if getattr(exc, "sqlstate", None) != _UNIQUE_VIOLATION:
        return False
    try:
        conn.rollback()
        return bookkeeping.chunk_committed(conn, table.ident, load_id, chunk_index)
    except Exception:  # the connection is gone: report the violation itself
        return False
