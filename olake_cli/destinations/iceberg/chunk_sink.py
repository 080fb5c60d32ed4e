"""The fast path of ``olake sync``: a Spark task writes its full-load chunk as Iceberg data files.

The task converts its Arrow batches to the destination types (``codec.scanned.to_destination``), adds the
_olake_* columns, casts to the table's schema (with Iceberg field ids), splits by partition and
writes ``<table>/data/olake-load/<load>/c<chunk>-<attempt>-<n>.parquet`` through the catalog's
FileIO, then the chunk's index ``c<chunk>.json`` listing them (written last: a retried task's index
replaces the earlier attempt's, whose files stay unreferenced). The driver's commit of the chunk's
STATE adds the listed files to the table (or to the staged load) with that state; no row crosses
the pipe or the JVM.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import orjson
import pyarrow as pa

from olake_cli.core import row_metadata
from olake_cli.core.codec.scanned import to_destination
from olake_cli.core.errors import DestinationError
from olake_cli.core.load_progress import UNKNOWN_LOAD
from olake_cli.destinations.iceberg.files import write_parquet
from olake_cli.destinations.iceberg.schema import METADATA_FIELDS, conform


def chunk_index_path(location: str, load_id: str, chunk_index: int) -> str:
    """Where the index of one chunk's data files lives."""
    return f"{location}/data/olake-load/{load_id}/c{chunk_index:06d}.json"


@dataclass(frozen=True)
class SinkTable:
    """What a task needs to know about one stream's table (JSON forms of pyiceberg objects)."""

    location: str
    schema_json: str
    spec_json: str


@dataclass
class IcebergChunkSink:
    """Picklable: the catalog's FileIO properties and each stream's table (filled when it opens)."""

    catalog_properties: dict[str, str]
    compression: str = "zstd"
    tables: dict[tuple, SinkTable] = field(default_factory=dict)

    @property
    def writes_local_files(self) -> bool:
        """Whether tasks write on their own filesystem: a local warehouse (``file:`` or a path; a
        non-local Spark master then needs ``shared_path``), not one on object storage (``s3://...``)."""
        warehouse = self.catalog_properties.get("warehouse", "")
        return warehouse.startswith(("file:", "/")) or "://" not in warehouse

    def write(self, namespace: str | None, stream: str, load_id: str | None, chunk_index: int,
              load_op_key: str | None, json_schema: dict, batches: list[Any],
              key_columns: tuple[str, ...] = ()) -> tuple[int, list[str]]:
        """Convert and write one chunk's (batch, wire columns) pairs; returns (rows, warnings)."""
        from pyiceberg.io import load_file_io
        from pyiceberg.partitioning import PartitionSpec
        from pyiceberg.schema import Schema

        from olake_cli.destinations.iceberg.schema import table_arrow_schema

        target = self.tables.get((namespace, stream))
        if target is None:
            raise DestinationError(f"iceberg: no table was opened for stream '{namespace}.{stream}'")
        label = f"{namespace}.{stream}" if namespace else stream
        table, warnings = self._convert(batches, json_schema, label, key_columns, load_op_key)
        schema = Schema.model_validate_json(target.schema_json)
        spec = PartitionSpec.model_validate_json(target.spec_json)
        io = load_file_io(properties=self.catalog_properties, location=target.location)
        load_id, attempt = load_id or UNKNOWN_LOAD, uuid.uuid4().hex[:12]
        folder = f"{target.location}/data/olake-load/{load_id}"
        paths, rows = [], 0 if table is None else table.num_rows
        parts = [] if table is None else _partitions(conform(table, table_arrow_schema(schema)), spec, schema)
        for number, part in enumerate(parts):
            path = f"{folder}/c{chunk_index:06d}-{attempt}-{number:04d}.parquet"
            write_parquet(io, path, part, self.compression)
            paths.append(path)
        # written even for an empty chunk: this attempt's index replaces any earlier attempt's
        index = io.new_output(chunk_index_path(target.location, load_id, chunk_index))
        with index.create(overwrite=True) as out:
            out.write(orjson.dumps({"files": paths, "rows": rows}))
        return rows, warnings

    @staticmethod
    def _convert(batches: list[Any], json_schema: dict, label: str, key_columns: tuple[str, ...],
                 load_op_key: str | None) -> tuple[pa.Table | None, list[str]]:
        tables, warnings = [], []
        for batch, wire_columns in batches:
            table, batch_warnings = to_destination(batch, json_schema, label, key_columns, wire_columns)
            tables.append(table)
            warnings += [w for w in batch_warnings if w not in warnings]
        if not tables:
            return None, warnings
        table = pa.concat_tables(tables)
        values = row_metadata.of_load(table.num_rows, load_op_key).columns(int(time.time() * 1_000_000))
        for meta, column in zip(METADATA_FIELDS, values[:len(METADATA_FIELDS)]):  # all but TOAST
            table = table.append_column(meta, column)
        return table, warnings


def _partitions(table: pa.Table, spec: Any, schema: Any) -> list[pa.Table]:
    """``table`` split into one table per partition of ``spec`` (itself when unpartitioned)."""
    if spec.is_unpartitioned():
        return [table]
    from pyiceberg.io.pyarrow import _determine_partitions

    return [part.arrow_table_partition.cast(table.schema) for part in _determine_partitions(spec, schema, table)]
