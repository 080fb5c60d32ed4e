"""Find where the live rows of given keys are: (data file, row position), without scanning the table.

A commit of changes must delete the current version of every key it touches. Candidate data files
are chosen from the table's manifests: a file whose key-column bounds (Iceberg column statistics)
hold none of the batch's keys is skipped unread. In the others only the key columns are read (and
the operation ids, when the batch may hold older versions), rows already deleted by earlier
position-delete files are dropped, and the rest are joined with the batch's keys.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyiceberg.conversions import from_bytes
from pyiceberg.io import FileIO
from pyiceberg.io.pyarrow import _read_deletes
from pyiceberg.manifest import DataFile
from pyiceberg.schema import Schema
from pyiceberg.table import DataScan, FileScanTask
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.types import DateType, IntegerType, LongType, StringType

from olake_cli.core.key_columns import key_storage
from olake_cli.destinations.iceberg.schema import conform

POS, PATH = "__olake_pos", "__olake_path"
_PRUNABLE = (IntegerType, LongType, StringType, DateType)


@dataclass
class LiveRows:
    """Live rows of the batch's keys: key columns, POS, PATH (and ``_olake_op_id`` when asked)."""

    rows: pa.Table
    files: dict[str, FileScanTask] = field(default_factory=dict)  # data file path -> its scan task
    files_read: int = 0
    files_skipped: int = 0


class DeleteCache:
    """Positions deleted by position-delete files, each delete file read once per commit."""

    def __init__(self, io: FileIO) -> None:
        self.io = io
        self.by_file: dict[str, dict[str, pa.ChunkedArray]] = {}

    def deleted(self, task: FileScanTask) -> pa.Array | None:
        """The deleted positions of ``task``'s data file, or None."""
        arrays = []
        for delete_file in task.delete_files:
            if delete_file.file_path not in self.by_file:
                self.by_file[delete_file.file_path] = _read_deletes(self.io, delete_file)
            found = self.by_file[delete_file.file_path].get(task.file.file_path)
            if found is not None:
                arrays += found.chunks
        return pa.concat_arrays(arrays) if arrays else None


def locate(metadata: TableMetadata, io: FileIO, key_columns: list[str], keys: pa.Table, target: pa.Schema,
           with_op_ids: bool, deletes: DeleteCache) -> LiveRows:
    """The live rows of the table whose key is one of ``keys`` (distinct key rows, as ``target``: the
    table's current Arrow schema)."""
    schema = metadata.schema()
    tasks = list(DataScan(table_metadata=metadata, io=io).plan_files()) if metadata.current_snapshot() else []
    keep = _bounds_filter(schema, key_columns, keys)
    wanted = key_storage(keys.select(key_columns))
    read_as = pa.schema([target.field(n) for n in key_columns + (["_olake_op_id"] if with_op_ids else [])])
    found, result = [], LiveRows(pa.table({}))
    for task in tasks:
        if not keep(task.file):
            result.files_skipped += 1
            continue
        result.files_read += 1
        result.files[task.file.file_path] = task
        rows = _read_keys(io, task, schema, read_as, deletes)
        matched = rows.join(wanted, keys=key_columns, join_type="inner")
        if matched.num_rows:
            found.append(matched.append_column(PATH, pa.array([task.file.file_path] * matched.num_rows)))
    result.rows = pa.concat_tables(found) if found else _empty(wanted, with_op_ids)
    return result


def _empty(wanted: pa.Table, with_op_ids: bool) -> pa.Table:
    table = wanted.slice(0, 0).append_column(POS, pa.array([], pa.int64()))
    if with_op_ids:
        table = table.append_column("_olake_op_id", pa.array([], pa.string()))
    return table.append_column(PATH, pa.array([], pa.string()))


def _read_keys(io: FileIO, task: FileScanTask, schema: Schema, read_as: pa.Schema, deletes: DeleteCache) -> pa.Table:
    """The ``read_as`` columns (keys, maybe op ids) of one data file, in the table's current types (a file
    written before a column was widened holds the narrower type), with a POS column, deleted rows removed."""
    table = _read_columns(io, task.file, schema, read_as.names)
    out = key_storage(conform(table, read_as)).append_column(POS, pa.array(range(table.num_rows), pa.int64()))
    deleted = deletes.deleted(task)
    if deleted is not None and len(deleted):
        out = out.filter(pc.invert(pc.is_in(out.column(POS), value_set=deleted)))
    return out


def live_rows(io: FileIO, task: FileScanTask, schema: Schema, deletes: DeleteCache) -> pa.Table:
    """Every column of one data file's live rows (its position deletes applied), as ``schema`` names them."""
    table = _read_columns(io, task.file, schema, [field.name for field in schema.fields])
    deleted = deletes.deleted(task)
    if deleted is not None and len(deleted):
        table = table.filter(pc.invert(pc.is_in(pa.array(range(table.num_rows), pa.int64()), value_set=deleted)))
    return table


def _read_columns(io: FileIO, data_file: DataFile, schema: Schema, names: list[str]) -> pa.Table:
    """The columns ``names`` (table column names) a data file holds, found by field id, named as the table
    names them now (a column the file lacks is left out)."""
    with io.new_input(data_file.file_path).open() as stream:
        parquet = pq.ParquetFile(stream)
        by_id = file_columns(parquet.schema_arrow)
        present = {n: by_id[schema.find_field(n).field_id] for n in names if schema.find_field(n).field_id in by_id}
        table = parquet.read(columns=list(present.values()))
    by_file_name = {file_name: name for name, file_name in present.items()}
    return table.rename_columns([by_file_name[c] for c in table.column_names])


def file_columns(arrow_schema: pa.Schema) -> dict[int, str]:
    """Field id -> column name of a Parquet file's top-level columns."""
    out = {}
    for item in arrow_schema:
        raw = (item.metadata or {}).get(b"PARQUET:field_id")
        if raw is not None:
            out[int(raw)] = item.name
    return out


def read_rows(io: FileIO, data_file: DataFile, schema: Schema, target: pa.Schema, positions: list[int],
              columns: list[str]) -> pa.Table:
    """The rows at ``positions`` of one data file, as ``target`` (the table's current Arrow schema)."""
    table = _read_columns(io, data_file, schema, columns).take(pa.array(positions, pa.int64()))
    return conform(table, pa.schema([target.field(n) for n in columns]))


def _bounds_filter(schema: Schema, key_columns: list[str], keys: pa.Table):
    """A test of a data file: may it hold one of ``keys``? (By the first key column's bounds.)"""
    key_field = schema.find_field(key_columns[0])
    if not isinstance(key_field.field_type, _PRUNABLE):
        return lambda data_file: True
    column = keys.column(key_columns[0])
    if isinstance(key_field.field_type, DateType):
        column = column.cast(pa.int32())  # days: also dates Python cannot hold
    values = sorted(v for v in column.to_pylist() if v is not None)

    def may_hold(data_file: DataFile) -> bool:
        """Whether the first key column's bounds of ``data_file`` hold one of the keys."""
        low = (data_file.lower_bounds or {}).get(key_field.field_id)
        high = (data_file.upper_bounds or {}).get(key_field.field_id)
        if not values:
            return False
        if low is None or high is None:
            return True
        low_value, high_value = from_bytes(key_field.field_type, low), from_bytes(key_field.field_type, high)
        index = bisect.bisect_left(values, low_value)
        return index < len(values) and values[index] <= high_value

    return may_hold
