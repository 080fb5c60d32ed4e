"""Chunk scans: inside a Spark task, read one chunk under the exported snapshot into Arrow batches.

Array columns read as PostgreSQL's array text (multi-dimensional and ``ndarray`` columns) are parsed
into wire values by ``wire_columns``, and so are date and timestamp columns holding a value the driver
may have wrapped (``wrapped_instants``); a one-dimensional array column read natively comes with a shape
check (``types.shape_check``) as one of the query's last columns, which the reader inspects and drops:
a value of another shape fails the chunk naming the column, the row's key and what to do.

``copy_rows`` reads the same chunk as binary COPY data instead, each column cast to a type the caller
names (``sync`` into a PostgreSQL destination whose columns are built-in types: the rows go from
server to server without being decoded).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any
from collections.abc import Iterator

from olake_cli.core.errors import (OlakeError, SnapshotLostError, SourceChangedError, SourceError, TransientError,
                                     from_library)
from olake_cli.shared.postgres_connection import is_transient, sqlstate
from olake_cli.sources.postgres.snapshot import BEING_ALTERED


@dataclass(frozen=True)
class PostgresChunkReader:
    """One chunk's query and the snapshot it reads under; small and picklable (one Spark partition)."""

    label: str
    chunk_index: int
    query: str
    uri: str = field(repr=False)
    snapshot_id: str | None
    batch_rows: int = 10_000
    key_columns: tuple[str, ...] = ()
    text_arrays: tuple[tuple[str, str, str], ...] = ()  # (column, x-olake-type, delimiter) read as array text
    shape_checks: tuple[tuple[str, str], ...] = ()  # (column, x-olake-type) checked by the last columns
    instant_columns: tuple[tuple[str, str], ...] = ()  # (column, x-olake-type) of dates and timestamps
    rewrite_check: str | None = None  # counts the table's leaves rewritten since the snapshot
    lock_timeout_s: int = 5  # how long the scan waits for its table lock (DDL queued on the table)
    copy_from: str = ""  # "FROM <table> WHERE <chunk>" of the query, for copy_rows
    copy_columns: frozenset[str] = frozenset()  # the stream's columns the table still has

    def read_batches(self) -> Iterator[Any]:
        """Arrow record batches of the chunk, read through ADBC inside the exported snapshot."""
        try:
            yield from self._batches()
        except OlakeError:
            raise
        except Exception as exc:  # driver errors arrive as many types; report them as one SourceError
            raise self._as_olake_error(exc) from None

    def copy_rows(self, casts: tuple[tuple[str, str], ...]) -> Iterator[bytes]:
        """The chunk's rows as binary COPY data in blocks of about 1 MiB, read under the exported snapshot
        like :meth:`read_batches` (same errors): each ``(column, type)`` of ``casts`` is the column cast
        to that SQL type, NULL for a column the table no longer has."""
        try:
            yield from self._copy_blocks(casts)
        except OlakeError:
            raise
        except Exception as exc:
            raise self._as_olake_error(exc) from None

    def _as_olake_error(self, exc: Exception) -> OlakeError:
        """A driver error of the scan as one olake error, without the password."""
        if sqlstate(exc) == _LOCK_NOT_AVAILABLE:  # another session queued for an exclusive lock
            return SourceChangedError(BEING_ALTERED.format(label=self.label))
        if sqlstate(exc) == _UNDEFINED_TABLE:
            return SourceChangedError(f"{self.label} was dropped during its full load; committed chunks "
                                      "are kept; run discover again if it is gone for good")
        if "invalid snapshot identifier" in str(exc):
            return SnapshotLostError(f"chunk {self.chunk_index} of {self.label}: the load's snapshot is gone "
                                     "(the database restarted, or the connection that exported it was "
                                     "lost); run again to resume: finished chunks are kept")
        where = f"chunk {self.chunk_index} of {self.label}"
        if is_transient(exc):
            return TransientError(_scrub(f"{where}: {type(exc).__name__}: {exc}", self.uri))
        return from_library(where, exc, lambda text: _scrub(text, self.uri))

    def _begin(self, cur) -> None:
        """Enter the load's snapshot with the scan's session settings (the transaction's first statements)."""
        from olake_cli.sources.postgres.types import SCAN_SESSION_SETTINGS

        cur.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        if self.snapshot_id:
            cur.execute(f"SET TRANSACTION SNAPSHOT '{self.snapshot_id}'")
        for name, value in {**SCAN_SESSION_SETTINGS, "lock_timeout": f"{int(self.lock_timeout_s)}s"}.items():
            cur.execute(f"SET {name} = '{value}'")

    def _batches(self) -> Iterator[Any]:
        import adbc_driver_postgresql.dbapi as dbapi

        with dbapi.connect(self.uri) as conn:
            with conn.cursor() as cur:
                self._begin(cur)
                cur.execute(self.query)
                for batch in cur.fetch_record_batch():
                    batch = self._shapes_checked(batch)
                    for start in range(0, batch.num_rows, self.batch_rows):
                        yield batch.slice(start, self.batch_rows)
                self._check_not_rewritten(cur)
            conn.rollback()

    def _copy_blocks(self, casts: tuple[tuple[str, str], ...]) -> Iterator[bytes]:
        import psycopg
        from psycopg import sql

        from olake_cli.sources.postgres.copy_out import copy_out_blocks

        columns = sql.SQL(", ").join(
            sql.SQL("{}::{} AS {}").format(sql.Identifier(name) if name in self.copy_columns else sql.NULL,
                                           sql.SQL(_checked_type(type_name)), sql.Identifier(name))
            for name, type_name in casts)
        statement = sql.SQL("COPY (SELECT {} {}) TO STDOUT (FORMAT binary)").format(columns, sql.SQL(self.copy_from))
        with psycopg.connect(self.uri) as conn:
            with conn.cursor() as cur:
                self._begin(cur)
                yield from copy_out_blocks(conn, statement, _COPY_BLOCK_BYTES)
                self._check_not_rewritten(cur)
            conn.rollback()

    def _check_not_rewritten(self, cur) -> None:
        """SourceChangedError if the table read was rewritten since the snapshot (this scan waited for
        a lock while DDL ran): its rows would be the wrong ones, or none."""
        if self.rewrite_check is None:
            return
        cur.execute(self.rewrite_check)
        if cur.fetchone()[0]:
            raise SourceChangedError(f"{self.label} was rewritten (VACUUM FULL, CLUSTER, TRUNCATE or a rewriting "
                                     "ALTER TABLE) during its full load; committed chunks are kept; run again: "
                                     "the rerun decides whether the load can resume")

    def _shapes_checked(self, batch):
        """``batch`` without its shape-check columns; a SourceError for the first value they flag."""
        if not self.shape_checks:
            return batch
        from olake_cli.core.codec.bad_value import value_error
        from olake_cli.sources.postgres.pgarray import SHAPE_CHANGED

        width = batch.num_columns - len(self.shape_checks)
        data = batch.select(range(width))
        for offset, (name, olake_type) in enumerate(self.shape_checks):
            flagged = batch.column(width + offset)
            if flagged.null_count == len(flagged):
                continue
            index = flagged.is_valid().to_pylist().index(True)
            key = {k: data.column(k)[index].as_py() for k in self.key_columns if k in data.schema.names}
            raise value_error(SourceError, self.label, name, key, index,
                              f"an array with dimensions {flagged[index].as_py()} in a column of type {olake_type} "
                              f"(1 dimension, starting at 1); {SHAPE_CHANGED}")
        return data

    def wire_columns(self, batch) -> dict[str, list] | None:
        """Wire values of the array columns that arrive as PostgreSQL's array text, and of the date and
        timestamp columns holding a value outside years 1..9999 (see ``wrapped_instants``)."""
        from olake_cli.core.codec.bad_value import BadValue, value_error
        from olake_cli.sources.postgres.pgtext import convert_or_bad
        from olake_cli.sources.postgres.wrapped_instants import instant_wire_columns

        if not self.text_arrays and not self.instant_columns:
            return None
        parsed = instant_wire_columns(batch, self.instant_columns)
        for name, olake_type, delimiter in self.text_arrays:
            texts = batch.column(name).to_pylist()
            try:
                parsed[name] = [None if t is None else convert_or_bad(olake_type, t, i, delimiter)
                                for i, t in enumerate(texts)]
            except BadValue as bad:
                key = {k: batch.column(k)[bad.index].as_py() for k in self.key_columns if k in batch.schema.names}
                raise value_error(SourceError, self.label, name, key, bad.index, bad.detail) from None
        return parsed or None

def _checked_type(type_name: str) -> str:
    """A SQL type name as ``format_type`` writes it, refused if it could be anything else."""
    if not _TYPE_NAME.fullmatch(type_name) or "--" in type_name:
        raise SourceError(f"cannot cast a column to {type_name!r}: not a type name")
    return type_name


_TYPE_NAME = re.compile(r'[A-Za-z_"][A-Za-z0-9_ ,()"-]*(\[\])*')  # numeric(5,-2), "char", text[]
_COPY_BLOCK_BYTES = 1 << 20
_LOCK_NOT_AVAILABLE = "55P03"
_UNDEFINED_TABLE = "42P01"


def _scrub(text: str, uri: str) -> str:
    """``text`` without the password that ``uri`` carries (the user name stays readable)."""
    from urllib.parse import unquote, urlparse

    from olake_cli.core.redact import remove_secrets

    parts = urlparse(uri)
    return remove_secrets(text, [unquote(parts.password or "")], keep=[unquote(parts.username or "")])
