"""Key columns in a form Arrow can group, join and turn into Python values (shared by destinations)."""

from __future__ import annotations

import pyarrow as pa


def key_storage(table: pa.Table) -> pa.Table:
    """Key columns as plain values that can be joined, grouped and turned into Python values:
    extension types (uuid) as their storage, dates and times as their integer counts."""
    columns = []
    for column in table.columns:
        kind = column.type
        if isinstance(kind, pa.BaseExtensionType):
            column = column.cast(kind.storage_type)
        elif pa.types.is_date32(kind):
            column = column.cast(pa.int32())
        elif pa.types.is_timestamp(kind) or pa.types.is_time64(kind):
            column = column.cast(pa.int64())
        columns.append(column)
    return pa.Table.from_arrays(columns, names=table.column_names)
