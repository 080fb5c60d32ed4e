"""The fast path of ``olake sync``: a Spark task writes its chunk's Parquet file itself.

The rows never become JSON lines: the scanned Arrow batches are converted to the destination types
in the task (``codec.to_destination``) and written under the stream's current load id, so the file
is indistinguishable from one ``olake write`` would have made.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from olake_cli.core import codec
from olake_cli.destinations.parquet.writer import METADATA_FIELDS, append_metadata, write_parquet_file


@dataclass(frozen=True)
class ParquetChunkSink:
    """Picklable: where and how a task writes a chunk (one file per chunk)."""

    root: str
    compression: str | None = "zstd"

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> "ParquetChunkSink":
        """The sink for a validated parquet destination config."""
        compression = config.get("compression", "zstd")
        return cls(config["path"], None if compression == "none" else compression)

    def write(self, namespace: str | None, stream: str, load_id: str, snapshot_key: str | None,
              json_schema: dict, batches: list[Any]) -> tuple[str | None, int, list[str]]:
        """Convert and write the batches of one chunk; returns (file, rows, warnings)."""
        tables, warnings = [], []
        for batch in batches:
            table, batch_warnings = codec.to_destination(batch, json_schema)
            tables.append(table)
            warnings += [w for w in batch_warnings if w not in warnings]
        if not tables:
            return None, 0, warnings
        table = pa.concat_tables(tables)
        rows = table.num_rows
        table = append_metadata(table, ["r"] * rows, [snapshot_key] * rows, [None] * rows, [None] * rows,
                                int(time.time() * 1_000_000))
        folder = os.path.join(self.root, namespace or "default", stream)
        schema = pa.schema(list(table.schema)[: -len(METADATA_FIELDS)] + METADATA_FIELDS)
        return write_parquet_file(folder, load_id, table.cast(schema), self.compression), rows, warnings
