"""Applying a stream's reduced changes to its target table with set-based statements.

A batch is first encoded as COPY data (``encode``: no server, so a commit can encode its batch while
the server applies the one before; binary when every column allows it, as for full loads). The apply
then COPYs it into a temporary table shaped like the target (``ON COMMIT DELETE ROWS``, made once per
session) and, inside the caller's transaction: unsent TOAST values are read from the target rows that
hold them; one ``DELETE ... USING`` removes deleted keys (or marks them, with ``soft_delete``); one
``INSERT ... ON CONFLICT (key) DO UPDATE`` writes the rest. Never a round trip per row. When conflicts
are detected (two-way replication), ``conflicts.TwoWayApply`` decides each change against the row's
version, atomically with the write.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from datetime import datetime
from collections.abc import Callable

import orjson
import pyarrow as pa
import pyarrow.compute as pc
from psycopg import sql

from olake_cli.core.row_metadata import COMMIT_TS, OP, OP_ID, TOAST
from olake_cli.destinations.postgres.change_plan import ReducedChanges
from olake_cli.destinations.postgres.copy_binary import HEADER, TRAILER, binary_fits, copy_binary_rows
from olake_cli.destinations.postgres.conflicts import TEMP_COLUMNS, ConflictRule, TwoWayApply, match_keys
from olake_cli.destinations.postgres.copy_text import copy_text
from olake_cli.destinations.postgres.tables import TargetTable

LOGGED_CONFLICTS = 100  # log lines per commit; every conflict is a row of _olake.conflicts
_META_TYPES = {OP: ("string", "text"), OP_ID: ("string", "text"),
               COMMIT_TS: ("timestamptz", "timestamp with time zone"),
               TOAST: ("json", "jsonb")}  # the names of the columns left unsent, as a JSON array


@dataclass(frozen=True)
class EncodedChanges:
    """A reduced batch as COPY data for the temporary table, and what the apply must read back."""

    names: list[str]  # the temporary table's columns the data fills, in order
    binary: bool
    data: bytes
    unsent: list[str]  # columns some update left unsent (read from the target rows that hold them)
    unsent_rows: int  # rows with such columns


@dataclass
class Applied:
    """What one apply did."""

    upserted: int = 0
    deleted: int = 0
    conflicts: int = 0
    kept_target: int = 0  # conflicts the target's newer row won
    conflict_lines: list[str] = field(default_factory=list)


class ChangeApplier:
    """Applies reduced changes within the caller's transaction (one temporary table per target table)."""

    def __init__(self, conn, rule: ConflictRule | None, soft_delete: bool, log: Callable[[str], None]) -> None:
        self.conn, self.rule, self.soft_delete, self.log = conn, rule, soft_delete, log
        self.temp_tables: dict[tuple[str, str], str] = {}
        self._numbers = itertools.count()

    def encode(self, table: TargetTable, changes: ReducedChanges) -> EncodedChanges:
        """The COPY data of ``changes`` for ``table``'s temporary table: the data, and the ``_olake_*``
        columns the statements of this apply read (the others stay NULL). Pure work, no server: a
        commit encodes its batch while the server still applies the one before."""
        rows = changes.rows
        meta = [name for name, wanted in ((OP, True), (OP_ID, table.metadata or self.soft_delete or self.rule is not None),
                                          (COMMIT_TS, table.metadata or self.soft_delete or self.rule is not None),
                                          (TOAST, changes.unresolved)) if wanted]
        names = [c.name for c in table.columns] + meta
        types = [c.olake_type for c in table.columns] + [_META_TYPES[n][0] for n in meta]
        sql_types = [c.sql_type for c in table.columns] + [_META_TYPES[n][1] for n in meta]
        props = [c.prop for c in table.columns] + [None] * len(meta)
        columns = [rows.column(c.name) for c in table.columns] + [_meta_column(rows, n) for n in meta]
        unsent: list[str] = []
        wanted = 0
        if changes.unresolved:
            toast = rows.column(TOAST)
            unsent = sorted(pc.unique(pc.list_flatten(toast)).to_pylist())
            wanted = pc.sum(pc.greater(pc.list_value_length(toast), 0)).as_py() or 0
        binary = all(binary_fits(t, s) for t, s in zip(types, sql_types))
        data = HEADER + copy_binary_rows(columns, types, sql_types) + TRAILER if binary \
            else copy_text(columns, types, names, props)
        return EncodedChanges(names, binary, data, unsent, wanted)

    def apply(self, table: TargetTable, changes: EncodedChanges, since: datetime | None = None) -> Applied:
        """Apply encoded ``changes`` to ``table``; ``since``: when this direction last wrote rows into
        it (a target row written after that by someone else is a conflict)."""
        temp = self._temp_table(table)
        listed = sql.SQL(", ").join(sql.Identifier(n) for n in changes.names)
        statement = sql.SQL("COPY {} ({}) FROM STDIN{}").format(temp, listed,
                                                                  sql.SQL(" (FORMAT binary)" if changes.binary else ""))
        with self.conn.cursor().copy(statement) as copy:
            copy.write(changes.data)
        result = Applied()
        if self.rule is not None and table.key:
            self._apply_two_way(table, temp, changes, result, since)
            return result
        if changes.unsent:
            self._read_unsent(table, temp, changes)
        if table.key:
            result.deleted = self._deletes(table, temp)
        result.upserted = self._upserts(table, temp)
        return result

    def _apply_two_way(self, table: TargetTable, temp: sql.Identifier, changes: EncodedChanges, result: Applied,
                       since: datetime | None) -> None:
        """Decide every change against its key's version and write the winners, rows locked throughout."""
        two_way = TwoWayApply(self.conn, self.rule, table, temp, since)
        two_way.lock()
        if changes.unsent:
            self._read_unsent(table, temp, changes)
        decided = [two_way.decide(1, LOGGED_CONFLICTS)]
        result.deleted = self._deletes(table, temp, sql.SQL(" AND s._olake_xmin IS NOT NULL"))
        names, selected = self._written_columns(table)
        assignments = [sql.SQL("{} = {}").format(sql.Identifier(n), v) for n, v in zip(names, selected)
                       if n not in table.key]
        setting = sql.SQL(", ").join(assignments) if assignments else None
        columns = sql.SQL(", ").join(map(sql.Identifier, names))
        result.upserted = two_way.update_locked(1, setting) + two_way.insert_missing(columns, sql.SQL(", ").join(selected))
        if two_way.second_pass_needed():
            decided.append(two_way.decide(2, LOGGED_CONFLICTS - len(decided[0].lines)))
            result.upserted += two_way.update_locked(2, setting)
        two_way.record_versions()
        for one in decided:
            result.conflicts += one.conflicts
            result.kept_target += one.kept_target
            result.conflict_lines += one.lines

    def forget(self, ident: tuple[str, str]) -> None:
        """Drop the temporary table of a target table whose columns changed (made again on next use)."""
        name = self.temp_tables.pop(ident, None)
        if name is not None:
            self.conn.execute(sql.SQL("DROP TABLE IF EXISTS pg_temp.{}").format(sql.Identifier(name)))

    def _temp_table(self, table: TargetTable) -> sql.Identifier:
        name = self.temp_tables.get(table.ident)
        if name is None:
            name = self.temp_tables[table.ident] = f"olake_apply_{next(self._numbers)}"
            columns = [sql.SQL("{} {}").format(sql.Identifier(c.name), sql.SQL(c.sql_type)) for c in table.columns]
            columns += [sql.SQL("{} {}").format(sql.Identifier(n), sql.SQL(t)) for n, (_, t) in _META_TYPES.items()]
            columns += [sql.SQL("{} {}").format(sql.Identifier(n), sql.SQL(t)) for n, t in TEMP_COLUMNS]
            self.conn.execute(sql.SQL("CREATE TEMP TABLE {} ({}) ON COMMIT DELETE ROWS").format(
                sql.Identifier(name), sql.SQL(", ").join(columns)))
        return sql.Identifier(name)

    def _read_unsent(self, table: TargetTable, temp: sql.Identifier, changes: EncodedChanges) -> None:
        """Columns an update did not send take the value of the target row they belong to."""
        assignments = sql.SQL(", ").join(
            sql.SQL("{c} = CASE WHEN s.{toast} ? {n} THEN t.{c} ELSE s.{c} END").format(
                c=sql.Identifier(name), n=sql.Literal(name), toast=sql.Identifier(TOAST))
            for name in changes.unsent)
        match = match_keys(table)
        found = self.conn.execute(sql.SQL("UPDATE {temp} s SET {a} FROM {target} t WHERE {m} AND s.{toast} IS NOT NULL")
                                  .format(temp=temp, a=assignments, target=table.qualified, m=match,
                                          toast=sql.Identifier(TOAST))).rowcount
        if found < changes.unsent_rows:
            self.log(f"{table.label}: {changes.unsent_rows - found} update(s) left large values unsent and the "
                     f"target has no row to take them from; those columns are NULL")

    def _deletes(self, table: TargetTable, temp: sql.Identifier, only: sql.Composable = sql.SQL("")) -> int:
        """Delete (or mark) the rows of the batch's deleted keys (``only``: a further condition on ``s``)."""
        if self.soft_delete:
            statement = sql.SQL("UPDATE {target} t SET _olake_op = s._olake_op, _olake_op_id = s._olake_op_id, "
                                "_olake_commit_ts = s._olake_commit_ts, _olake_synced_at = now() FROM {temp} s "
                                "WHERE {m} AND s._olake_op = 'd'{only}")
        else:
            statement = sql.SQL("DELETE FROM {target} t USING {temp} s WHERE {m} AND s._olake_op = 'd'{only}")
        return self.conn.execute(statement.format(target=table.qualified, temp=temp, m=match_keys(table),
                                                  only=only)).rowcount

    @staticmethod
    def _written_columns(table: TargetTable) -> tuple[list[str], list[sql.Composable]]:
        """The target columns a change writes, and what each takes (from the temporary table ``s``)."""
        names = [c.name for c in table.columns]
        selected: list[sql.Composable] = [sql.SQL("s.{}").format(sql.Identifier(n)) for n in names]
        if table.metadata:
            names += ["_olake_op", "_olake_op_id", "_olake_commit_ts", "_olake_synced_at"]
            selected += [sql.SQL("s._olake_op"), sql.SQL("s._olake_op_id"), sql.SQL("s._olake_commit_ts"),
                         sql.SQL("now()")]
        return names, selected

    def _upserts(self, table: TargetTable, temp: sql.Identifier) -> int:
        names, selected = self._written_columns(table)
        statement = sql.SQL("INSERT INTO {target} ({cols}) SELECT {sel} FROM {temp} s WHERE s._olake_op <> 'd'").format(
            target=table.qualified, cols=sql.SQL(", ").join(sql.Identifier(n) for n in names),
            sel=sql.SQL(", ").join(selected), temp=temp)
        if table.key:
            updated = [n for n in names if n not in table.key]
            action = sql.SQL("DO UPDATE SET {}").format(sql.SQL(", ").join(
                sql.SQL("{n} = EXCLUDED.{n}").format(n=sql.Identifier(n)) for n in updated)) if updated \
                else sql.SQL("DO NOTHING")
            statement = sql.SQL("{} ON CONFLICT ({}) {}").format(
                statement, sql.SQL(", ").join(sql.Identifier(k) for k in table.key), action)
        return self.conn.execute(statement).rowcount


def _meta_column(rows: pa.Table, name: str) -> pa.Array | pa.ChunkedArray:
    """An ``_olake_*`` column as the temporary table takes it."""
    column = rows.column(name)
    return _micros(column) if name == COMMIT_TS else _json_lists(column) if name == TOAST else column


def _json_lists(column: pa.ChunkedArray | pa.Array) -> pa.Array:
    """Lists of names as JSON array texts (null stays null)."""
    if column.null_count == len(column):
        return pa.nulls(len(column), pa.string())
    return pa.array([None if names is None else orjson.dumps(names).decode() for names in column.to_pylist()],
                    pa.string())


def _micros(column: pa.ChunkedArray | pa.Array) -> pa.Array:
    """Commit times (µs since 1970, or timestamps) as timestamp[us, UTC] for the COPY text."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    if pa.types.is_timestamp(column.type):
        return column.cast(pa.timestamp("us", tz="UTC"))
    return column.cast(pa.int64()).view(pa.timestamp("us", tz="UTC"))
