"""Values a key update did not send, fetched from the table by the row's new key.

PostgreSQL sends an update that moves a row to another primary key with the old key only (REPLICA
IDENTITY DEFAULT or USING INDEX) and, for each large (TOASTed) column the update did not touch, only
"unchanged". Every destination carries an unchanged value forward from the previous version of the
same key, but the new key has no previous version: the value sits under the old key, which the update
deletes. Following a row from one key to another would have to be done by every destination, including
the Parquet current-table query users run themselves; instead the change feed fetches those values
from the table, by the new keys, with one set-based query per feed run that holds such an update.
Nothing is queried otherwise. Under REPLICA IDENTITY FULL the old row carries the values and nothing
is fetched either.

The fetched value is the row's current one, which may be newer than the update: the row may have been
changed, moved or deleted again since. Each such later change is in the log after the update and is
applied after it (in this run, or in the next one when it committed after this run's bound), so the
destination converges to the source; until then that row may hold a value newer than the run's bound.
A key no longer in the table leaves the column unchanged (as PostgreSQL sent it): the row was deleted
or moved again since, and that later change removes it from the destination.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np
import psycopg
import pyarrow as pa
import pyarrow.compute as pc
from psycopg import sql

from olake_cli.core.errors import SourceError, TransientError
from olake_cli.sources.postgres.feed_runs import FeedRun
from olake_cli.sources.postgres.pgoutput_columns import NULL, OLD_TUPLE, TEXT, TOAST, TupleColumn

_LIVE_COLUMNS_SQL = ("SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute"
                     " WHERE attrelid = to_regclass(%s) AND attnum > 0 AND NOT attisdropped AND attname = ANY(%s)")


class MovedRowValues:
    """Fills the unchanged TOAST values of key updates from the table (a connection opened on first use)."""

    def __init__(self, connect: Callable[[], psycopg.Connection]) -> None:
        self._connect = connect
        self._conn: psycopg.Connection | None = None

    def fill(self, table, run: FeedRun, keep: np.ndarray) -> FeedRun:
        """``run`` with the unchanged TOAST values of its kept key updates taken from ``table`` (a TableInfo)."""
        wanted = _unsent_values(run, keep, {c.name for c in table.columns})
        if not wanted:
            return run
        names, key = run.relation.names, run.relation.stream_key
        rows = np.unique(np.concatenate(list(wanted.values())))
        keys = [run.new[names.index(k)].texts.take(pa.array(rows)).to_pylist() for k in key]
        try:
            fetched = self._fetch(table.schema, table.table, key, keys, [names[i] for i in wanted])
        except psycopg.Error as exc:
            kind = TransientError if isinstance(exc, psycopg.OperationalError) else SourceError
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise kind(f"postgres: fetching the values key updates of {table.schema}.{table.table} did not send "
                       f"failed ({first})") from None
        new = list(run.new)
        for i, at in wanted.items():
            if names[i] in fetched:
                new[i] = _with_values(new[i], at, np.searchsorted(rows, at), fetched[names[i]])
        return dataclasses.replace(run, new=new)

    def close(self) -> None:
        """Close the connection, if one was opened."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _fetch(self, schema: str, name: str, key: tuple[str, ...], keys: list[list[str]],
               columns: list[str]) -> dict[str, list[str | None | bool]]:
        """Per column still in the table: per requested key, its text, None (NULL) or False (no such row)."""
        if self._conn is None:
            self._conn = self._connect()
        conn = self._conn
        table = sql.Identifier(schema, name)
        types = dict(conn.execute(_LIVE_COLUMNS_SQL, (table.as_string(conn), [*key, *columns])).fetchall())
        columns = [c for c in columns if c in types]
        if not columns or any(k not in types for k in key):
            return {}
        query = sql.SQL("SELECT w.n, {values} FROM unnest({arrays}) WITH ORDINALITY AS w({aliases}, n) "
                        "JOIN {table} t ON {match}").format(
            values=sql.SQL(", ").join(sql.SQL("t.{}").format(sql.Identifier(c)) for c in columns),
            arrays=sql.SQL(", ").join(sql.SQL("%s::text[]") for _ in key),
            aliases=sql.SQL(", ").join(sql.Identifier(f"k{i}") for i in range(len(key))), table=table,
            match=sql.SQL(" AND ").join(sql.SQL("t.{} = w.{}::{}").format(
                sql.Identifier(k), sql.Identifier(f"k{i}"), sql.SQL(types[k])) for i, k in enumerate(key)))
        out: dict[str, list[str | None | bool]] = {c: [False] * len(keys[0]) for c in columns}
        with conn.cursor() as cur:  # the raw text output, exactly as pgoutput prints values
            cur.execute(query, keys)
            result, encoding = cur.pgresult, conn.info.encoding
            for row in range(result.ntuples):
                at = int(result.get_value(row, 0)) - 1
                for col, column in enumerate(columns, 1):
                    raw = result.get_value(row, col)
                    out[column][at] = None if raw is None else raw.decode(encoding)
        return out


def _unsent_values(run: FeedRun, keep: np.ndarray, columns: set[str]) -> dict[int, np.ndarray]:
    """Per column index of the stream: the kept key updates that left it unchanged and whose old row
    does not hold it (rows, ascending)."""
    if run.moved is None:
        return {}
    moving = run.moved & keep
    if not moving.any():
        return {}
    whole_old = run.old_markers == OLD_TUPLE
    wanted = {}
    for i, name in enumerate(run.relation.names):
        old = run.old[i]
        unsent = moving & (run.new[i].kinds == TOAST) & ~(whole_old & ((old.kinds == TEXT) | (old.kinds == NULL)))
        if name in columns and unsent.any():
            wanted[i] = np.flatnonzero(unsent)
    return wanted


def _with_values(column: TupleColumn, at: np.ndarray, slots: np.ndarray, values: list) -> TupleColumn:
    """``column`` with rows ``at`` set to ``values[slots]`` (False: no row found, left unchanged)."""
    found = np.array([values[s] is not False for s in slots], bool)
    at, slots = at[found], slots[found]
    if not len(at):
        return column
    texts = [values[s] for s in slots]
    kinds = column.kinds.copy()
    kinds[at] = np.where([t is None for t in texts], NULL, TEXT)
    mask = np.zeros(len(kinds), bool)
    mask[at] = True
    return TupleColumn(kinds, pc.replace_with_mask(column.texts, pa.array(mask), pa.array(texts, pa.string())))
