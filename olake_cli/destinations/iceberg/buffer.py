"""What one stream holds between two commits: its table, its committed progress, buffered rows.

Records are split on arrival: full-load rows (no ``_olake_op_id``: appended, chunk by chunk) and
changes (inserts, updates, deletes and incremental rows: merged by key). Changes at or below the
table's highest applied operation id are replays and are dropped at once; a truncate drops what came
before it in the batch and empties the table at the next commit.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.manifest import DataFile
from pyiceberg.table import Table

from olake_cli.core import codec_decode, row_metadata
from olake_cli.core.catalog import CatalogStream
from olake_cli.destinations.iceberg.merge import TOAST

DECODE_EVERY = 20_000
CHANGE_OPS = ("c", "u", "d", "t")
UNKNOWN_LOAD = "0"


@dataclass
class StreamBuffer:
    """One stream of the destination during a run."""

    stream: CatalogStream
    identifier: tuple[str, str]
    table: Table
    key_columns: list[str]
    committed: dict | None = None  # the stream state the table holds
    watermark: str | None = None  # highest operation id applied to the table
    staged: dict | None = None  # {"load_id", "files"}: a load waiting to replace the table
    load_id: str = UNKNOWN_LOAD
    load_op_key: str | None = None  # operation id of the current load's rows (cdc streams)
    load_rows: list[dict] = field(default_factory=list)
    change_rows: list[dict] = field(default_factory=list)
    load_tables: list[pa.Table] = field(default_factory=list)
    change_tables: list[pa.Table] = field(default_factory=list)
    load_table_rows: int = 0
    written: list[DataFile] = field(default_factory=list)  # load rows already written, not committed
    truncated: bool = False
    replayed: int = 0  # changes dropped as replays since the last commit
    warned: set[str] = field(default_factory=set)
    replacement: Any = None  # TableMetadata whose schema the coming load's rows take (retype.py)
    rewrite: bool = False  # the replacement becomes current at the next commit, the rows converted (rewrite.py)

    @property
    def write_metadata(self) -> Any:
        """The metadata full-load rows are written with: the replacement's while one is pending."""
        return self.table.metadata if self.replacement is None else self.replacement

    @property
    def keyed(self) -> bool:
        """Whether changes merge by key (keyless streams append every row)."""
        return bool(self.key_columns)

    def has_rows(self) -> bool:
        """Whether rows arrived that no commit has covered yet."""
        return bool(self.load_rows or self.change_rows or self.load_tables or self.change_tables
                    or self.written or self.truncated)

    def add(self, data: dict[str, Any]) -> None:
        """Route one record's data (a replayed change is dropped; a truncate resets the batch)."""
        op_id = data.get("_olake_op_id")
        if op_id is None:
            self.load_rows.append(data)
            return
        key = row_metadata.format_op_id(op_id)
        if data.get("_olake_op") in CHANGE_OPS and self.watermark is not None and key <= self.watermark:
            self.replayed += 1
            return
        if data.get("_olake_op") == "t":
            self.change_rows, self.change_tables = [], []
            self.load_rows, self.load_tables, self.load_table_rows = [], [], 0
            self.truncated = True
            return
        self.change_rows.append(data)

    def decode_load(self, log: Callable[[str], None]) -> None:
        """Decode buffered full-load rows into an Arrow table (every DECODE_EVERY rows)."""
        if self.load_rows:
            table = self._decode(self.load_rows, log)
            self.load_tables.append(table)
            self.load_table_rows += table.num_rows
            self.load_rows = []

    def add_table(self, table: pa.Table, warnings: list[str], log: Callable[[str], None]) -> None:
        """Rows already decoded to the destination types with their _olake_* columns (``record_block``;
        no truncate among them), routed as ``add`` routes records: rows without an operation id are
        full-load rows, the others changes, of which replays are dropped."""
        self.decode_load(log)  # rows added one by one before these keep their place
        self.decode_changes(log)
        self._warn(warnings, log)
        op_ids = table.column(row_metadata.OP_ID)
        load = pc.is_null(op_ids)
        changes = table.filter(pc.invert(load))
        if changes.num_rows and self.watermark is not None:
            replay = pc.and_(pc.is_in(changes.column(row_metadata.OP), pa.array(CHANGE_OPS)),
                             pc.less_equal(changes.column(row_metadata.OP_ID), self.watermark))
            self.replayed += pc.sum(replay).as_py() or 0
            changes = changes.filter(pc.invert(replay))
        for part, target in ((table.filter(load), self.load_tables), (changes, self.change_tables)):
            if part.num_rows:
                metadata = row_metadata.of_block(part, self.load_op_key)
                target.append(with_metadata(part.drop_columns(list(row_metadata.WIRE_NAMES)), metadata))
        self.load_table_rows += pc.sum(load).as_py() or 0

    def decode_changes(self, log: Callable[[str], None]) -> None:
        """Decode buffered changes into an Arrow table."""
        if self.change_rows:
            self.change_tables.append(self._decode(self.change_rows, log))
            self.change_rows = []

    def take_load(self, log: Callable[[str], None]) -> pa.Table | None:
        """Every decoded full-load row since the last take (or None)."""
        self.decode_load(log)
        if not self.load_tables:
            return None
        table = pa.concat_tables(self.load_tables, promote_options="permissive")
        self.load_tables, self.load_table_rows = [], 0
        return table

    def take_changes(self, log: Callable[[str], None]) -> pa.Table | None:
        """Every decoded change since the last commit (or None)."""
        self.decode_changes(log)
        if not self.change_tables:
            return None
        table = pa.concat_tables(self.change_tables, promote_options="permissive")
        self.change_tables = []
        return table

    def _decode(self, rows: list[dict], log: Callable[[str], None]) -> pa.Table:
        table, warnings = codec_decode.decode_rows(rows, self.stream.json_schema, all_nullable=True,
                                            stream=self.stream.label, key_columns=tuple(self.key_columns))
        self._warn(warnings, log)
        return with_metadata(table, row_metadata.of_rows(rows, self.load_op_key))

    def discard(self) -> list[DataFile]:
        """Drop every row buffered since the last commit; returns the data files already written for them."""
        self.load_rows, self.change_rows, self.load_tables, self.change_tables = [], [], [], []
        written, self.written, self.load_table_rows, self.truncated = self.written, [], 0, False
        return written

    def _warn(self, warnings: list[str], log: Callable[[str], None]) -> None:
        for warning in warnings:
            if warning not in self.warned:
                self.warned.add(warning)
                log(f"{self.stream.label}: {warning}")


def with_metadata(table: pa.Table, metadata: row_metadata.RowMetadata) -> pa.Table:
    """``table`` with the _olake_* columns appended (full-load rows rank at the load's position)."""
    names = (row_metadata.OP, row_metadata.OP_ID, row_metadata.COMMIT_TS, row_metadata.SYNCED_AT, TOAST)
    for name, column in zip(names, metadata.columns(int(time.time() * 1_000_000))):
        table = table.append_column(name, column)
    return table
