"""The fast path of ``olake sync``: a Spark task writes its chunk's Parquet file itself.

The rows never become JSON lines: the scanned Arrow batches are converted to the destination types
in the task (``codec.to_destination``) and written under the chunk's deterministic staged name in the
load's directory (``_staged.part-<load>-c<chunk>-<part>.parquet``, parts of at most ``rows_per_file`` rows),
so a retried task replaces its own files. The task returns only counts; the driver's commit of the chunk's STATE makes the file live.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from olake_cli.core import codec, row_metadata
from olake_cli.destinations.parquet.paths import StreamPaths, chunk_file_name, staged_name
from olake_cli.destinations.parquet.writer import (METADATA_FIELDS, UNKNOWN_LOAD, append_metadata,
                                                   file_parts, write_staged)


@dataclass(frozen=True)
class ParquetChunkSink:
    """Picklable: where and how a task writes a chunk (staged files of at most ``rows_per_file`` rows)."""

    root: str
    compression: str | None = "zstd"
    rows_per_file: int = 1_000_000

    def write(self, namespace: str | None, stream: str, load_id: str | None, chunk_index: int,
              load_op_key: str | None, json_schema: dict, batches: list[Any],
              key_columns: tuple[str, ...] = ()) -> tuple[int, list[str]]:
        """Convert and stage one chunk's (batch, wire columns) pairs; returns (rows, warnings)."""
        tables, warnings = [], []
        label = f"{namespace}.{stream}" if namespace else stream
        for batch, wire_columns in batches:
            table, batch_warnings = codec.to_destination(batch, json_schema, label, key_columns, wire_columns)
            tables.append(table)
            warnings += [w for w in batch_warnings if w not in warnings]
        if not tables:
            return 0, warnings
        table = pa.concat_tables(tables)
        rows = table.num_rows
        table = append_metadata(table, row_metadata.of_load(rows, load_op_key))
        schema = pa.schema(list(table.schema)[: -len(METADATA_FIELDS)] + METADATA_FIELDS)
        load_id = load_id or UNKNOWN_LOAD
        folder = StreamPaths.of(self.root, namespace, stream).load_dir(load_id)
        for part, piece in enumerate(file_parts(table.cast(schema), self.rows_per_file)):
            write_staged(folder, staged_name(chunk_file_name(load_id, chunk_index, part)), piece, self.compression)
        return rows, warnings
