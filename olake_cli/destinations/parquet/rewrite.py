"""Column types changed by value in a Parquet stream: the load's files rewritten under the new type.

Readers promote some type changes across a folder's files themselves (int32 to int64, float32 to
float64, a decimal's precision at the same scale: later files use the wider type, README "Widened
columns"). Others they cannot: a decimal whose scale grows, or a decimal that becomes decimal text
(DynamoDB numbers widening in place, a PostgreSQL numeric whose scale grows); DuckDB's
``union_by_name`` even reads ``decimal(38,1)`` beside ``decimal(38,2)`` files as ``decimal(38,1)``,
rounding. Such a change rewrites the current load: every committed file of its directory, and the
rows spilled for the next commit, are converted into a new directory (files keep their names), which
replaces the load's directory at the next commit as a truncate's does (``commit_plan.next_manifest``:
one symlink swap, the old directory retired), so the folder always holds one type per column. A value
the new type cannot hold fails the run before anything is committed.
"""

from __future__ import annotations

import os
import uuid
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from olake_cli.destinations.parquet.local_store import write_staged


def converted_by_value(old: pa.Schema, new: pa.Schema) -> list[str]:
    """The columns of ``old`` whose type in ``new`` differs by value (see the module)."""
    return [f.name for f in old if f.name in new.names and _by_value(f.type, new.field(f.name).type)]


def _by_value(old: pa.DataType, new: pa.DataType) -> bool:
    if pa.types.is_list(old) and pa.types.is_list(new):
        return _by_value(old.value_type, new.value_type)
    if pa.types.is_struct(old) and pa.types.is_struct(new):
        fields = {f.name: f.type for f in old}
        return any(f.name in fields and _by_value(fields[f.name], f.type) for f in new)
    if pa.types.is_decimal(old):
        return pa.types.is_string(new) or pa.types.is_decimal(new) and new.scale > old.scale
    return False


def rewrite_load(store: Any, buf: Any, schema: pa.Schema, compression: str | None,
                 conform: Any) -> None:
    """Convert ``buf``'s current load (committed files and spills) to ``schema`` into the directory that
    replaces the load's at the next commit (``buf.truncated_into``); ``conform(table, schema, label)``
    casts a table (``buf``: the stream's ParquetStream)."""
    label = buf.stream.label
    carried = buf.truncated_into is None  # (after a truncate, the committed files are not carried)
    old_dir = buf.manifest.dir_of(buf.load_id)
    if carried:
        buf.truncated_into = f"{buf.load_id}.w{buf.manifest.commit + 1}"
    kept = []
    for dir_id, file_load, path in buf.spills:
        if file_load == buf.load_id:  # rows of this load still waiting for their commit
            moved = _write(store, buf, conform(pq.read_table(path), schema, label), compression)
            os.remove(path)
            if path in buf.spill_names:
                buf.spill_names[moved] = buf.spill_names.pop(path)
            if path in buf.load_spills:  # (full-load rows: dropped if the commit finds them a replay)
                buf.load_spills.discard(path)
                buf.load_spills.add(moved)
            dir_id, path = buf.truncated_into, moved
        kept.append((dir_id, file_load, path))
    buf.spills = kept
    for name in buf.manifest.files(old_dir) if carried and old_dir is not None else []:
        path = _write(store, buf, conform(store.read_file(buf.paths, old_dir, name), schema, label), compression)
        buf.spills.append((buf.truncated_into, buf.load_id, path))
        buf.spill_names[path] = name


def _write(store: Any, buf: Any, table: pa.Table, compression: str | None) -> str:
    """``table`` as a spill file of the replacing directory; its path."""
    return write_staged(store.spill_folder(buf.paths, buf.truncated_into), f"_spill-{uuid.uuid4().hex}.parquet",
                        table, compression)
