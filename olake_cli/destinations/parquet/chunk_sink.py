"""The fast path of ``olake sync``: a Spark task writes its chunk's Parquet file itself.

The rows never become JSON lines: the scanned Arrow batches are converted to the destination types
in the task (``codec.scanned.to_destination``) batch by batch as the scan yields them, gathered into row
groups of ``file_schema.ROW_GROUP_ROWS`` rows, and written
under the chunk's deterministic names in the load's directory (parts of at most ``rows_per_file`` rows), so a retried
task replaces its own files: on a local path staged names (``_staged.part-<load>-c<chunk>-<part>.parquet``),
in a bucket the final names (``part-<load>-c<chunk>-<part>.parquet``; parts an earlier attempt wrote
beyond this one's are deleted). The task returns only counts; the driver's commit of the chunk's STATE
(the manifest) makes the files live. A chunk the manifest already held when the destination opened (a
run replaying after a kill between the destination's commit and the state file's write) is not written
again: rewriting live
files in place would let a reader see two attempts' parts, or lose a part a shorter attempt drops.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from collections.abc import Iterable

from olake_cli.core import row_metadata
from olake_cli.core.codec.scanned import to_destination
from olake_cli.core.load_progress import UNKNOWN_LOAD
from olake_cli.destinations.parquet.commit_plan import chunk_listed
from olake_cli.destinations.parquet.paths import StreamPaths, chunk_file_name
from olake_cli.shared.object_store import S3Options
from olake_cli.destinations.parquet.storage import Store
from olake_cli.destinations.parquet.file_schema import FileParts, append_metadata, conform, file_schema


@dataclass(frozen=True)
class ParquetChunkSink:
    """Picklable: where and how a task writes a chunk (files of at most ``rows_per_file`` rows)."""

    root: str  # the destination's ``path``: a folder, or s3://bucket/prefix with ``s3`` set
    compression: str | None = "zstd"
    rows_per_file: int = 1_000_000
    s3: S3Options | None = None
    # per stream, the files its manifest listed when the destination opened (filled by the writer; a task
    # never reads the manifest itself, which the driver may be replacing at that moment)
    committed: dict[tuple, frozenset[str]] = field(default_factory=dict, hash=False, compare=False)
    # per stream, (load id, its directory) where that is not the load id (a load whose files were rewritten)
    dirs: dict[tuple, tuple[str, str]] = field(default_factory=dict, hash=False, compare=False)

    @property
    def writes_local_files(self) -> bool:
        """Whether tasks write on their own filesystem (a non-local Spark master needs ``shared_path``)."""
        return self.s3 is None

    def store(self) -> Store:
        """The store the task writes into."""
        from olake_cli.destinations.parquet.local_store import LocalStore
        from olake_cli.destinations.parquet.s3_store import S3Store

        return LocalStore(self.root) if self.s3 is None else S3Store(self.root, self.s3)

    def write(self, namespace: str | None, stream: str, load_id: str | None, chunk_index: int,
              load_op_key: str | None, json_schema: dict, batches: Iterable[Any],
              key_columns: tuple[str, ...] = ()) -> tuple[int, list[str]]:
        """Convert and stage one chunk's (batch, wire columns) pairs as they are scanned (memory holds
        one row group and one open file); returns (rows, warnings)."""
        warnings: list[str] = []
        label = f"{namespace}.{stream}" if namespace else stream
        load_id = load_id or UNKNOWN_LOAD
        store = self.store()
        paths = StreamPaths.of(store.root, namespace, stream)
        if chunk_listed(self.committed.get((namespace, stream), frozenset()), load_id, chunk_index):
            # a replay (killed after the commit, before the state file): its live files stay as they are
            return 0, [f"chunk {chunk_index} is already in the destination (committed by an earlier run); skipped"]
        # rows that rank at an operation id are a cdc stream's load: changes will share these files
        schema = file_schema(json_schema, key_columns, with_changes=load_op_key is not None)
        dir_load, dir_id = self.dirs.get((namespace, stream), (load_id, load_id))
        dir_id = dir_id if dir_load == load_id else load_id
        parts = FileParts(lambda part: store.new_file(paths, dir_id, chunk_file_name(load_id, chunk_index, part),
                                                      schema, self.compression), self.rows_per_file)
        try:
            for batch, wire_columns in batches:
                table, batch_warnings = to_destination(batch, json_schema, label, key_columns, wire_columns)
                warnings += [w for w in batch_warnings if w not in warnings]
                table = append_metadata(table, row_metadata.of_load(table.num_rows, load_op_key), json_schema)
                parts.add(conform(table, schema, label))
            store.drop_stale_parts(paths, dir_id, load_id, chunk_index, parts.close())
        finally:
            parts.abort()
        return parts.rows, warnings

