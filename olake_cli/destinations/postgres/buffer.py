"""What one stream holds between two commits: its target table, its committed progress, buffered rows.

Records are split on arrival: full-load rows (no ``_olake_op_id``) and changes (inserts, updates,
deletes, truncates and incremental rows). Changes at or below the highest operation id the target
applied are replays and are dropped at once; a truncate drops what came before it in the batch and
empties the table at the next commit. Rows are decoded to the destination's Arrow types in blocks;
a commit takes them all.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Callable

import pyarrow as pa
import pyarrow.compute as pc

from olake_cli.core import row_metadata
from olake_cli.core.catalog import CatalogStream
from olake_cli.core.codec_decode import decode_rows
from olake_cli.core.row_metadata import COMMIT_TS, OP, OP_ID, TOAST, WIRE_NAMES
from olake_cli.destinations.postgres.tables import TargetTable

DECODE_EVERY = 20_000
CHANGE_OPS = ("c", "u", "d", "t")
UNKNOWN_LOAD = "0"


@dataclass
class StreamBuffer:
    """One stream of the destination during a run."""

    stream: CatalogStream
    table: TargetTable
    committed: dict | None = None  # the stream state the target holds
    max_op_id: str | None = None  # highest operation id applied to the target
    committed_at: datetime | None = None  # when this destination last wrote rows into the table
    load_id: str = UNKNOWN_LOAD
    load_op_key: str | None = None
    resumed_load: str | None = None  # a load an earlier run began: its chunks may repeat keys
    load_rows: list[dict] = field(default_factory=list)
    change_rows: list[dict] = field(default_factory=list)
    load_tables: list[pa.Table] = field(default_factory=list)
    change_tables: list[pa.Table] = field(default_factory=list)
    truncated: bool = False
    replayed: int = 0
    warned: set[str] = field(default_factory=set)

    def has_rows(self) -> bool:
        """Whether rows arrived that no commit has covered yet."""
        return bool(self.load_rows or self.change_rows or self.load_tables or self.change_tables or self.truncated)

    def add(self, data: dict, log: Callable[[str], None]) -> None:
        """Route one record's data (a replayed change is dropped; a truncate resets the batch)."""
        op_id = data.get(OP_ID)
        if op_id is None:
            self.load_rows.append(data)
            if len(self.load_rows) >= DECODE_EVERY:
                self.decode(log)
            return
        if data.get(OP) in CHANGE_OPS and self._replayed(row_metadata.format_op_id(op_id)):
            self.replayed += 1
            return
        if data.get(OP) == "t":
            self.discard()
            self.truncated = True
            return
        self.change_rows.append(data)
        if len(self.change_rows) >= DECODE_EVERY:
            self.decode(log)

    def discard(self) -> None:
        """Drop every row (and truncate) buffered since the last commit."""
        self.load_rows, self.change_rows, self.load_tables, self.change_tables = [], [], [], []
        self.truncated = False

    def _replayed(self, op_key: str) -> bool:
        return self.max_op_id is not None and op_key <= self.max_op_id

    def add_table(self, table: pa.Table, warnings: list[str], log: Callable[[str], None]) -> None:
        """Rows already decoded to the destination types with their ``_olake_*`` wire columns
        (``record_block``; no truncate among them): rows without an operation id are full-load rows,
        the others changes, of which replays are dropped."""
        self.decode(log)  # rows added one by one before these keep their place
        self.warn(warnings, log)
        load = pc.is_null(table.column(OP_ID))
        if pc.any(load).as_py():
            self.load_tables.append(table.filter(load).drop_columns(list(WIRE_NAMES)))
        changes = table.filter(pc.invert(load))
        if changes.num_rows and self.max_op_id is not None:
            replay = pc.and_(pc.is_in(changes.column(OP), pa.array(CHANGE_OPS)),
                             pc.less_equal(changes.column(OP_ID), self.max_op_id))
            self.replayed += pc.sum(replay).as_py() or 0
            changes = changes.filter(pc.invert(replay))
        if changes.num_rows:
            self.change_tables.append(_normalised(changes))

    def decode(self, log: Callable[[str], None]) -> None:
        """Decode the records added one by one into Arrow tables."""
        if self.load_rows:
            self.load_tables.append(self._decode(self.load_rows, log))
            self.load_rows = []
        if self.change_rows:
            table = self._decode(self.change_rows, log)
            meta = row_metadata.of_rows(self.change_rows, None)
            for name, column in ((OP, meta.ops), (OP_ID, meta.op_ids), (COMMIT_TS, meta.commit_ts),
                                 (TOAST, meta.unchanged)):
                table = table.append_column(name, column)
            self.change_tables.append(_normalised(table))
            self.change_rows = []

    def _decode(self, rows: list[dict], log: Callable[[str], None]) -> pa.Table:
        table, warnings = decode_rows(rows, self.stream.json_schema, all_nullable=True,
                                            stream=self.stream.label, key_columns=self.table.key)
        self.warn(warnings, log)
        return table

    def take_load(self, log: Callable[[str], None]) -> pa.Table | None:
        """Every full-load row since the last take, or None."""
        self.decode(log)
        tables, self.load_tables = self.load_tables, []
        return pa.concat_tables(tables, promote_options="permissive") if tables else None

    def take_changes(self, log: Callable[[str], None]) -> pa.Table | None:
        """Every change since the last commit, in arrival order, or None."""
        self.decode(log)
        tables, self.change_tables = self.change_tables, []
        return pa.concat_tables(tables, promote_options="permissive") if tables else None

    def warn(self, warnings: list[str], log: Callable[[str], None]) -> None:
        """Log each decoder warning once per stream."""
        for warning in warnings:
            if warning not in self.warned:
                self.warned.add(warning)
                log(f"{self.stream.label}: {warning}")


def _normalised(table: pa.Table) -> pa.Table:
    """Change rows with uniform ``_olake_*`` columns: op and op id as text (an incremental row sent
    without an op is ``r``, as ``row_metadata`` reads it), commit time as int64 µs."""
    commit = table.column(COMMIT_TS)
    if pa.types.is_timestamp(commit.type):
        commit = commit.cast(pa.timestamp("us", tz="UTC")).cast(pa.int64())
    table = table.set_column(table.schema.get_field_index(OP), OP, pc.fill_null(table.column(OP), "r"))
    return table.set_column(table.schema.get_field_index(COMMIT_TS), COMMIT_TS, commit.cast(pa.int64()))
