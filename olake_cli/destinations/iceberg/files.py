"""Data and position-delete files of the Iceberg destination, and their manifest descriptions.

Data files are Parquet with Iceberg field ids; their ``DataFile`` entries carry pyiceberg's own
statistics (so scans prune by key ranges). Position-delete files follow the Iceberg v2 spec
(``file_path``, ``pos``, sorted; field ids 2147483546 and 2147483545) and carry ``file_path`` bounds,
so readers (pyiceberg, Spark, Trino, DuckDB) apply each one only to the data files it names.
"""

from __future__ import annotations

import uuid
from typing import Iterable

import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.conversions import to_bytes
from pyiceberg.io import FileIO
from pyiceberg.io.pyarrow import (_dataframe_to_data_files, compute_statistics_plan,
                                  data_file_statistics_from_parquet_metadata, parquet_path_to_id_mapping,
                                  schema_to_pyarrow)
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.typedef import Record
from pyiceberg.types import LongType, StringType

from olake_cli.destinations.iceberg.schema import conform

PATH_FIELD_ID, POS_FIELD_ID = 2147483546, 2147483545
DELETE_SCHEMA = pa.schema([
    pa.field("file_path", pa.string(), nullable=False, metadata={"PARQUET:field_id": str(PATH_FIELD_ID)}),
    pa.field("pos", pa.int64(), nullable=False, metadata={"PARQUET:field_id": str(POS_FIELD_ID)}),
])


def write_rows(metadata: TableMetadata, io: FileIO, table: pa.Table) -> list[DataFile]:
    """Write ``table`` (any column order and compatible types) as data files of the table."""
    if table.num_rows == 0:
        return []
    target = schema_to_pyarrow(metadata.schema(), include_field_ids=False)
    files = list(_dataframe_to_data_files(metadata, conform(table, target), io, uuid.uuid4()))
    return [with_spec(f, metadata.default_spec_id) for f in files]


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


def data_file_of(io: FileIO, metadata: TableMetadata, path: str) -> DataFile:
    """The manifest description of a Parquet data file written elsewhere (a Spark task's chunk file)."""
    schema = metadata.schema()
    input_file = io.new_input(path)
    with input_file.open() as stream:
        parquet = pq.ParquetFile(stream)
        footer = parquet.metadata
        partition = _partition_of(parquet, metadata) if not metadata.spec().is_unpartitioned() else Record()
    statistics = data_file_statistics_from_parquet_metadata(
        parquet_metadata=footer, stats_columns=compute_statistics_plan(schema, metadata.properties),
        parquet_column_mapping=parquet_path_to_id_mapping(schema))
    return with_spec(DataFile.from_args(
        content=DataFileContent.DATA, file_path=path, file_format=FileFormat.PARQUET, partition=partition,
        file_size_in_bytes=len(input_file), sort_order_id=None, equality_ids=None, key_metadata=None,
        **statistics.to_serialized_dict()), metadata.default_spec_id)


def _partition_of(parquet: pq.ParquetFile, metadata: TableMetadata) -> Record:
    """The partition of a single-partition data file, computed from its first row."""
    from pyiceberg.io.pyarrow import _determine_partitions

    spec, schema = metadata.spec(), metadata.schema()
    columns = sorted({schema.find_column_name(f.source_id).split(".")[0] for f in spec.fields})
    first = parquet.read_row_group(0, columns=columns).slice(0, 1)
    return next(iter(_determine_partitions(spec, schema, first))).partition_key.partition


def with_spec(data_file: DataFile, spec_id: int) -> DataFile:
    """``data_file`` with its partition spec id set (``DataFile.from_args`` does not keep it)."""
    data_file.spec_id = spec_id
    return data_file


def partition_groups(files: Iterable[DataFile]) -> dict[tuple[int, Record], list[DataFile]]:
    """Data files grouped by (spec id, partition)."""
    groups: dict[tuple[int, Record], list[DataFile]] = {}
    for data_file in files:
        groups.setdefault((data_file.spec_id, data_file.partition), []).append(data_file)
    return groups
