"""Column types changed in place: a table's rows rewritten under a wider type, in the commit that makes
that type current.

Iceberg promotes only int -> long, float -> double and a decimal's precision. A column whose values
convert by value to a type Iceberg cannot promote to (a decimal whose scale grows, a decimal into
decimal text; within lists and structs too: DynamoDB numbers widening in place, a PostgreSQL numeric
whose scale grows) takes it without a new load: the replacement schema (retype.py) becomes current in
the next commit, and that commit also replaces every live data file (its position deletes applied), and
every file written for rows not committed yet (spilled or staged), by one holding the converted values.
Readers see the old files with the old type until that commit, the new ones after it. It costs one
read and one write of the table per such change; a value the new type cannot hold (more integer digits
than it keeps) fails the commit, which changes nothing.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.io import FileIO
from pyiceberg.table import DataScan, Table, Transaction
from pyiceberg.table.metadata import TableMetadata

from olake_cli.core.catalog import CatalogStream
from olake_cli.destinations.iceberg.files import write_rows
from olake_cli.destinations.iceberg.lookup import DeleteCache, live_rows
from olake_cli.destinations.iceberg.retype import make_current
from olake_cli.destinations.iceberg.schema import converts_by_value, stream_iceberg_schema
from olake_cli.destinations.iceberg.snapshot import RowDelta


def converts(table: Table, stream: CatalogStream, replaced: list[str]) -> bool:
    """Whether the values of every ``replaced`` column convert to the stream's type of it (see the module)."""
    current, wanted = table.schema(), stream_iceberg_schema(stream)
    return all(converts_by_value(current.find_field(name).field_type, wanted.find_field(name).field_type)
               for name in replaced)


def rewrite(txn: Transaction, buf: Any, compression: str) -> None:
    """In ``txn``: make ``buf.replacement`` current, with the table's live rows and ``buf``'s uncommitted
    files (``written``, ``staged``) converted to it (``buf``: the stream's IcebergStream)."""
    target: TableMetadata = buf.replacement
    committed, io = txn.table_metadata, buf.table.io
    make_current(txn, target)
    if committed.current_snapshot() is not None:
        delta, deletes = RowDelta(txn).remove_all(), DeleteCache(io)
        for task in DataScan(table_metadata=committed, io=io).plan_files():
            delta.add_data(write_rows(target, io, live_rows(io, task, committed.schema(), deletes), compression))
        delta.commit()
    buf.written = [f for old in buf.written for f in write_rows(target, io, _by_name(io, old.file_path), compression)]
    if buf.staged is not None:
        files = [f for path in buf.staged["files"] for f in write_rows(target, io, _by_name(io, path), compression)]
        buf.staged = {**buf.staged, "files": [f.file_path for f in files]}


def _by_name(io: FileIO, path: str) -> pa.Table:
    """Every column of a data file not committed yet, by name (it was written by this destination under
    the table's schema or an earlier replacement of it)."""
    with io.new_input(path).open() as stream:
        return pq.read_table(stream)
