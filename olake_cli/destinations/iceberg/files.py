"""Data and position-delete files of the Iceberg destination, and their manifest descriptions.

Data files are Parquet with Iceberg field ids, one per partition per write; their ``DataFile``
entries carry pyiceberg's column statistics, except that dates, times and timestamps take their
bounds from the raw Parquet statistics (pyiceberg turns them into Python dates, which cannot hold
PostgreSQL's infinities or years beyond 9999). Position-delete files follow the Iceberg v2 spec
(``file_path``, ``pos``, sorted; field ids 2147483546 and 2147483545) and carry ``file_path`` bounds,
so readers (pyiceberg, Spark, Trino, DuckDB) apply each one only to the data files it names.
"""

from __future__ import annotations

import uuid
from dataclasses import replace

import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.conversions import to_bytes
from pyiceberg.io import FileIO
from pyiceberg.io.pyarrow import (MetricModeTypes, MetricsMode, StatsAggregator, _determine_partitions,
                                  compute_statistics_plan, data_file_statistics_from_parquet_metadata,
                                  parquet_path_to_id_mapping)
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.schema import Schema
from pyiceberg.table.locations import load_location_provider
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.typedef import Record
from pyiceberg.types import DateType, LongType, StringType, TimestampType, TimestamptzType, TimeType

from olake_cli.destinations.iceberg.schema import conform, table_arrow_schema

PATH_FIELD_ID, POS_FIELD_ID = 2147483546, 2147483545
DELETE_SCHEMA = pa.schema([
    pa.field("file_path", pa.string(), nullable=False, metadata={"PARQUET:field_id": str(PATH_FIELD_ID)}),
    pa.field("pos", pa.int64(), nullable=False, metadata={"PARQUET:field_id": str(POS_FIELD_ID)}),
])
_TEMPORAL = (DateType, TimeType, TimestampType, TimestamptzType)
_COUNTS = MetricsMode(MetricModeTypes.COUNTS)


def write_rows(metadata: TableMetadata, io: FileIO, table: pa.Table, compression: str) -> list[DataFile]:
    """Write ``table`` (columns by name, compatible types) as data files of the table, one per partition."""
    if table.num_rows == 0:
        return []
    schema, spec = metadata.schema(), metadata.spec()
    data = conform(table, table_arrow_schema(schema))
    provider = load_location_provider(table_location=metadata.location, table_properties=metadata.properties)
    parts = [(None, data)] if spec.is_unpartitioned() else \
        [(p.partition_key, p.arrow_table_partition.cast(data.schema)) for p in _determine_partitions(spec, schema, data)]
    files = []
    for key, part in parts:
        path = provider.new_data_location(f"olake-{uuid.uuid4().hex}.parquet", key)
        write_parquet(io, path, part, compression)
        files.append(data_file_of(io, metadata, path, key.partition if key is not None else Record()))
    return files


def write_parquet(io: FileIO, path: str, table: pa.Table, compression: str) -> int:
    """Write ``table`` to ``path`` through the catalog's FileIO; returns the file's size in bytes."""
    output = io.new_output(path)
    with output.create(overwrite=True) as stream:
        pq.write_table(table, stream, compression=None if compression == "none" else compression)
    return len(output)


def write_position_deletes(io: FileIO, folder: str, spec_id: int, partition: Record,
                           positions: dict[str, list[int]], compression: str) -> DataFile:
    """One position-delete file for ``positions`` (data file path -> row positions) of one partition."""
    paths, pos = [], []
    for path in sorted(positions):
        rows = sorted(set(positions[path]))
        paths += [path] * len(rows)
        pos += rows
    table = pa.Table.from_arrays([pa.array(paths, pa.string()), pa.array(pos, pa.int64())], schema=DELETE_SCHEMA)
    location = f"{folder}/olake-deletes-{uuid.uuid4().hex}.parquet"
    size = write_parquet(io, location, table, compression)
    return with_spec(DataFile.from_args(
        content=DataFileContent.POSITION_DELETES, file_path=location, file_format=FileFormat.PARQUET,
        partition=partition, record_count=len(pos), file_size_in_bytes=size,
        column_sizes={}, value_counts={PATH_FIELD_ID: len(pos), POS_FIELD_ID: len(pos)},
        null_value_counts={PATH_FIELD_ID: 0, POS_FIELD_ID: 0}, nan_value_counts={},
        lower_bounds={PATH_FIELD_ID: to_bytes(StringType(), paths[0]), POS_FIELD_ID: to_bytes(LongType(), min(pos))},
        upper_bounds={PATH_FIELD_ID: to_bytes(StringType(), paths[-1]), POS_FIELD_ID: to_bytes(LongType(), max(pos))},
        split_offsets=None, equality_ids=None, sort_order_id=None, key_metadata=None), spec_id)


def data_file_of(io: FileIO, metadata: TableMetadata, path: str, partition: Record | None = None) -> DataFile:
    """The manifest description of a Parquet data file of the table (its footer's statistics)."""
    input_file = io.new_input(path)
    with input_file.open() as stream:
        parquet = pq.ParquetFile(stream)
        footer = parquet.metadata
        if partition is None:
            partition = _partition_of(parquet, metadata) if not metadata.spec().is_unpartitioned() else Record()
    statistics = file_statistics(footer, metadata.schema(), metadata.properties)
    return with_spec(DataFile.from_args(
        content=DataFileContent.DATA, file_path=path, file_format=FileFormat.PARQUET, partition=partition,
        file_size_in_bytes=len(input_file), sort_order_id=None, equality_ids=None, key_metadata=None,
        **statistics.to_serialized_dict()), metadata.default_spec_id)


def file_statistics(footer: pq.FileMetaData, schema: Schema, properties: dict[str, str]):
    """pyiceberg's statistics of a Parquet footer, temporal bounds taken from the raw values."""
    plan = compute_statistics_plan(schema, properties)
    temporal = {fid: c for fid, c in plan.items()
                if isinstance(c.iceberg_type, _TEMPORAL) and c.mode.type in (MetricModeTypes.FULL,
                                                                             MetricModeTypes.TRUNCATE)}
    for fid, collector in temporal.items():
        plan[fid] = replace(collector, mode=_COUNTS)
    mapping = parquet_path_to_id_mapping(schema)
    statistics = data_file_statistics_from_parquet_metadata(footer, plan, mapping)
    for group in range(footer.num_row_groups):
        row_group = footer.row_group(group)
        for index in range(footer.num_columns):
            column = row_group.column(index)
            fid = mapping.get(column.path_in_schema)
            if fid not in temporal or not column.is_stats_set or not column.statistics.has_min_max:
                continue
            aggregator = statistics.column_aggregates.setdefault(
                fid, StatsAggregator(temporal[fid].iceberg_type, column.statistics.physical_type))
            aggregator.update_min(column.statistics.min_raw)
            aggregator.update_max(column.statistics.max_raw)
    return statistics


def _partition_of(parquet: pq.ParquetFile, metadata: TableMetadata) -> Record:
    """The partition of a single-partition data file, computed from its first row."""
    spec, schema = metadata.spec(), metadata.schema()
    columns = sorted({schema.find_column_name(f.source_id).split(".")[0] for f in spec.fields})
    first = parquet.read_row_group(0, columns=columns).slice(0, 1)
    return next(iter(_determine_partitions(spec, schema, first))).partition_key.partition


def with_spec(data_file: DataFile, spec_id: int) -> DataFile:
    """``data_file`` with its partition spec id set (``DataFile.from_args`` does not keep it)."""
    data_file.spec_id = spec_id
    return data_file


def delete_quietly(io: FileIO, files: list) -> None:
    """Delete data files (or paths) no commit references (best effort: a leftover is harmless)."""
    for item in files:
        try:
            io.delete(item if isinstance(item, str) else item.file_path)
        except OSError:
            pass
