"""The fast path of ``olake sync``: a Spark task writes its chunk's Parquet file itself.

The rows never become JSON lines: the scanned Arrow batches are converted to the destination types
in the task (``codec_decode.to_destination``) batch by batch as the scan yields them, and written under the
chunk's deterministic staged names in the load's directory (``_staged.part-<load>-c<chunk>-<part>.parquet``,
parts of at most ``rows_per_file`` rows), so a retried task replaces its own files. The task returns only counts; the driver's commit of the chunk's STATE makes the file live.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

from olake_cli.core import codec_decode, row_metadata
from olake_cli.destinations.parquet.paths import StreamPaths, chunk_file_name, staged_name
from olake_cli.destinations.parquet.writer import UNKNOWN_LOAD, StagedFile, append_metadata, conform, file_schema


@dataclass(frozen=True)
class ParquetChunkSink:
    """Picklable: where and how a task writes a chunk (staged files of at most ``rows_per_file`` rows)."""

    root: str
    compression: str | None = "zstd"
    rows_per_file: int = 1_000_000

    def write(self, namespace: str | None, stream: str, load_id: str | None, chunk_index: int,
              load_op_key: str | None, json_schema: dict, batches: Iterable[Any],
              key_columns: tuple[str, ...] = ()) -> tuple[int, list[str]]:
        """Convert and stage one chunk's (batch, wire columns) pairs as they are scanned (memory holds
        one batch and one open file); returns (rows, warnings)."""
        warnings: list[str] = []
        label = f"{namespace}.{stream}" if namespace else stream
        load_id = load_id or UNKNOWN_LOAD
        folder = StreamPaths.of(self.root, namespace, stream).load_dir(load_id)
        # rows that rank at an operation id are a cdc stream's load: changes will share these files
        schema = file_schema(json_schema, key_columns, with_changes=load_op_key is not None)
        rows, part, staged = 0, 0, None
        try:
            for batch, wire_columns in batches:
                table, batch_warnings = codec_decode.to_destination(batch, json_schema, label, key_columns, wire_columns)
                warnings += [w for w in batch_warnings if w not in warnings]
                table = append_metadata(table, row_metadata.of_load(table.num_rows, load_op_key), json_schema)
                table = conform(table, schema, label)
                while table.num_rows:
                    if staged is None:
                        name = staged_name(chunk_file_name(load_id, chunk_index, part))
                        staged, in_part = StagedFile(folder, name, table.schema, self.compression), 0
                    piece = table.slice(0, self.rows_per_file - in_part)
                    staged.write(piece)
                    in_part, rows, table = in_part + piece.num_rows, rows + piece.num_rows, table.slice(piece.num_rows)
                    if in_part == self.rows_per_file:
                        staged.close()
                        staged, part = None, part + 1
            if staged is not None:
                staged.close()
                staged = None
        finally:
            if staged is not None:
                staged.abort()
        return rows, warnings
