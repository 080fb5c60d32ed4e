"""The shape of a Parquet stream's files: its columns, then the ``_olake_*`` columns, and the rows cut
into files of at most ``rows_per_file`` rows (shared by the destination and the tasks of ``sync``)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import pyarrow as pa

from olake_cli.core import row_metadata
from olake_cli.core.catalog import CatalogStream
from olake_cli.core.codec.types import stored_schema
from olake_cli.core.errors import DestinationError

if TYPE_CHECKING:
    from olake_cli.destinations.parquet.storage import DataFile

# rows gathered before they are written as one row group (bench/bench_parquet_settings.py: a row group per
# 10,000-row scan batch made writing 27% slower and reading the file 3-4 times slower than 100,000-row groups)
ROW_GROUP_ROWS = 100_000

METADATA_FIELDS = [
    pa.field("_olake_op", pa.string(), nullable=False),          # r (full load), c, u, d
    pa.field("_olake_op_id", pa.string()),                        # 32 hex digits: commit LSN, sequence
    pa.field("_olake_commit_ts", pa.timestamp("us", tz="UTC")),   # source commit time (changes only)
    pa.field("_olake_synced_at", pa.timestamp("us", tz="UTC"), nullable=False),
    pa.field("_olake_toast_unchanged", pa.list_(pa.string())),   # columns whose value did not change
]


def destination_schema(stream: CatalogStream) -> pa.Schema:
    """The Arrow schema of a stream's files: its columns (NOT NULL kept, see ``codec.types.stored_schema``),
    then the _olake_* columns."""
    return file_schema(stream.json_schema, stream.primary_key_columns, stream.sync_mode == "cdc")


def file_schema(json_schema: dict, key_columns: tuple | list, with_changes: bool) -> pa.Schema:
    """The Arrow schema of the files of a stream with this schema and key (``destination_schema``)."""
    columns = stored_schema(json_schema, key_columns, with_changes)
    return pa.schema(list(columns) + metadata_fields(json_schema))


def metadata_fields(json_schema: dict) -> list[pa.Field]:
    """The _olake_* columns of a stream's files (``_olake_toast_unchanged`` only where updates can
    leave values out, see ``row_metadata.carries_unchanged``)."""
    return METADATA_FIELDS if row_metadata.carries_unchanged(json_schema) else METADATA_FIELDS[:-1]


def conform(table: pa.Table, schema: pa.Schema, label: str) -> pa.Table:
    """``table`` in a stream's file ``schema``; a null in a NOT NULL column names the column."""
    for column in schema:
        if not column.nullable and table.column(column.name).null_count:
            raise DestinationError(f"stream {label!r}, column {column.name!r}: a null value, but the catalog "
                                   f"says the column is NOT NULL (run discover again if it changed)")
    return table.cast(schema)


def file_parts(table: pa.Table, rows_per_file: int) -> list[pa.Table]:
    """``table`` cut into consecutive pieces of at most ``rows_per_file`` rows (one file each)."""
    return [table.slice(start, rows_per_file) for start in range(0, table.num_rows, rows_per_file)]


def append_metadata(table: pa.Table, metadata: row_metadata.RowMetadata, json_schema: dict) -> pa.Table:
    """``table`` with the stream's _olake_* columns appended (full-load rows rank at their snapshot's
    position)."""
    for meta, column in zip(metadata_fields(json_schema), metadata.columns(int(time.time() * 1_000_000))):
        table = table.append_column(meta, column)
    return table


class FileParts:
    """Rows written as consecutive files of at most ``rows_per_file`` rows (``open_part(n)`` opens part
    ``n``) in row groups of ROW_GROUP_ROWS rows: memory holds one row group and one open file."""

    def __init__(self, open_part: Callable[[int], DataFile], rows_per_file: int) -> None:
        self.open_part, self.rows_per_file = open_part, rows_per_file
        self.parts = self.rows = self.in_part = 0
        self.file: DataFile | None = None
        self.group: list[pa.Table] = []
        self.group_rows = 0

    def add(self, table: pa.Table) -> None:
        """Append ``table``'s rows, starting a new part whenever one is full."""
        while table.num_rows:
            if self.file is None:
                self.file, self.in_part = self.open_part(self.parts), 0
            piece = table.slice(0, self.rows_per_file - self.in_part)
            self.group.append(piece)
            self.group_rows += piece.num_rows
            self.in_part += piece.num_rows
            self.rows += piece.num_rows
            table = table.slice(piece.num_rows)
            if self.in_part == self.rows_per_file:
                self._close_part()
            elif self.group_rows >= ROW_GROUP_ROWS:
                self._write_group()

    def close(self) -> int:
        """Finish the open part; the number of parts written."""
        if self.file is not None:
            self._close_part()
        return self.parts

    def abort(self) -> None:
        """Drop the part being written, if any."""
        if self.file is not None:
            self.file.abort()
            self.file = None

    def _write_group(self) -> None:
        if self.group:
            self.file.write(pa.concat_tables(self.group))
        self.group, self.group_rows = [], 0

    def _close_part(self) -> None:
        self._write_group()
        self.file.close()
        self.file, self.parts = None, self.parts + 1
