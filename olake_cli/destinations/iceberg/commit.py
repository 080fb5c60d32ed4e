"""One stream's commit: the rows a STATE covers and that STATE go into one Iceberg metadata commit.

Order: data and delete files are written (invisible until referenced), then one transaction adds
them in a snapshot (``snapshot.RowDelta``) and sets the table properties holding the state, the
highest applied operation id and any staged load; that metadata swap is the commit point. A process
killed before it leaves only unreferenced files; killed after it, the next run finds the newer state
in the table, and the pipeline's stream buffer drops what the run replays: full-load rows of chunks the
table's state already marks done, changes at or below its highest operation id.

Full loads: a stream's first load (or any load into an empty table) is appended chunk by chunk. A
later load (``full_refresh`` run, re-sync, new load after a catalog change) is staged: its data files
are written and listed in ``olake.staged-load`` with each chunk's state, and the commit of its last
chunk removes every old file and adds all staged ones in one snapshot, so readers see the old
contents until the new ones are complete. A re-sync marker (``core.resync``) names no load: its
commit keeps the table's contents, which the next run's load replaces.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from collections.abc import Callable

import orjson
import pyarrow as pa
from pyiceberg.io import FileIO
from pyiceberg.manifest import DataFile

from olake_cli.core.contracts import CommitBatch
from olake_cli.core.faults import crash_point
from olake_cli.core.load_progress import load_complete
from olake_cli.destinations.iceberg.files import data_file_of, delete_quietly, write_position_deletes, write_rows
from olake_cli.destinations.iceberg.maintenance import maintain
from olake_cli.destinations.iceberg.merge import TOAST, plan_changes
from olake_cli.destinations.iceberg.retype import check_pending_rows, make_current
from olake_cli.destinations.iceberg.rewrite import rewrite
from olake_cli.destinations.iceberg.schema import table_arrow_schema
from olake_cli.destinations.iceberg.snapshot import RowDelta
from olake_cli.destinations.iceberg.stream import IcebergStream
from olake_cli.destinations.iceberg.tables import PROP_MAX_OP, PROP_STAGED, PROP_STATE, dumps, has_rows


@dataclass
class CommitOptions:
    """Destination-wide settings a commit needs."""

    soft_delete: bool
    compression: str
    log: Callable[[str], None]
    sink_files: bool = False  # ``olake sync``: full-load chunks arrive as files Spark tasks wrote


def commit_stream(target: IcebergStream, batch: CommitBatch, options: CommitOptions) -> None:
    """Commit ``batch``'s rows into ``target``'s table together with its stream state."""
    table, txn = target.table, target.table.transaction()
    if target.rewrite:  # columns change type in place: this commit converts the rows (rewrite.py)
        rewrite(txn, target, options.compression)
        target.replacement, target.rewrite = None, False
    if target.replacement is not None:
        check_pending_rows(target, batch)
    delta = RowDelta(txn)
    staged = _add_load(target, batch, txn, delta, options)
    if batch.truncated:
        delta.remove_all()
    _apply_changes(target, batch, delta, txn, options)
    properties = {PROP_STATE: dumps(batch.merged)}
    if batch.watermark is not None:
        properties[PROP_MAX_OP] = batch.watermark
    if delta.has_changes or staged != target.staged or txn.table_metadata is not table.metadata \
            or any(table.properties.get(k) != v for k, v in properties.items()):
        crash_point("iceberg-files-written")
        if delta.has_changes:
            delta.snapshot_properties = {"olake.state": properties[PROP_STATE]}
            delta.commit()
        _set_properties(txn, table.properties, properties, staged)
        target.table = txn.commit_transaction()
        crash_point("iceberg-committed")
        target.staged = staged
        if target.replacement is not None and target.table.schema().schema_id == target.replacement.current_schema_id:
            target.replacement = None  # swapped in with the new load
    if batch.changes is not None and delta.has_changes:
        target.table = maintain(target.table, options.compression, options.log)


def _add_load(target: IcebergStream, batch: CommitBatch, txn: Any, delta: RowDelta,
              options: CommitOptions) -> dict | None:
    """Add (or stage) the full-load rows this commit covers; returns the staged load after it.

    A re-sync marker names no load: the table keeps its contents (and any staged load) until the
    next run's load replaces them."""
    if batch.marker:
        return target.staged
    swaps = batch.new_load or (target.staged or {}).get("load_id") == batch.load_id
    if target.replacement is not None and swaps and load_complete(batch.state):  # its columns change type with it
        make_current(txn, target.replacement)
    metadata, io = txn.table_metadata, target.table.io
    if target.replacement is not None and metadata.current_schema_id != target.replacement.current_schema_id:
        metadata = target.replacement  # rows of the coming load take the replacement schema until it swaps in
    load_files = _load_files(target, batch, metadata, io, options)
    if batch.newly_done and options.sink_files:
        load_files += _sink_files(io, metadata, target.table.location(), batch.load_id, batch.newly_done)
    staged = _staged_for(target, batch, load_files)
    if staged is None:
        delta.add_data(load_files)
        return None
    staged["files"] += [f.file_path for f in load_files]
    if load_complete(batch.state):  # the new load replaces the table's contents in this one snapshot
        delta.remove_all().add_data([data_file_of(io, metadata, p) for p in staged["files"]])
        return None
    return staged


def _set_properties(txn: Any, current: dict[str, str], properties: dict[str, str], staged: dict | None) -> None:
    """Set the olake properties of this commit (and remove those it no longer has)."""
    txn.set_properties({**properties, **({PROP_STAGED: dumps(staged)} if staged is not None else {})})
    stale = [k for k in (PROP_MAX_OP, PROP_STAGED) if k in current and k not in properties
             and not (k == PROP_STAGED and staged is not None)]
    if stale:
        txn.remove_properties(*stale)


def _apply_changes(target: IcebergStream, batch: CommitBatch, delta: RowDelta, txn: Any,
                   options: CommitOptions) -> None:
    """Merge (keyed) or append (keyless) the batch's changes."""
    changes = batch.changes
    if changes is None:
        return
    metadata, io = txn.table_metadata, target.table.io
    if target.keyed:
        schema = table_arrow_schema(metadata.schema()).remove_metadata()
        schema = pa.schema([f.remove_metadata() for f in schema])
        empty = batch.truncated or not has_rows(target.table)
        plan = plan_changes(changes, target.key_columns, metadata, io, schema, options.soft_delete,
                            batch.base_watermark, empty)
        if plan.stale:
            options.log(f"{target.stream.label}: {plan.stale} change(s) older than the table's version of "
                        f"their key were ignored")
        delta.add_data(write_rows(metadata, io, plan.append, options.compression))
        delta.add_deletes(_delete_files(plan, io, target.table.location(), options.compression))
    else:
        delta.add_data(write_rows(metadata, io, changes.drop_columns([TOAST]), options.compression))


def _delete_files(plan: Any, io: FileIO, location: str, compression: str) -> list[DataFile]:
    """One position-delete file per partition holding deleted rows."""
    groups: dict[tuple, dict[str, list[int]]] = {}
    for path, positions in plan.deletes.items():
        data_file = plan.tasks[path].file
        groups.setdefault((data_file.spec_id, data_file.partition), {})[path] = positions
    return [write_position_deletes(io, f"{location}/data", spec_id, partition, positions, compression)
            for (spec_id, partition), positions in groups.items()]


def _load_files(target: IcebergStream, batch: CommitBatch, metadata: Any, io: FileIO,
                options: CommitOptions) -> list[DataFile]:
    """Data files of the full-load rows of this commit (written now or put before; none for a replay)."""
    files, target.written = target.written, []
    if batch.load_replayed:
        delete_quietly(io, files)
        return []
    if batch.load is not None:
        files += write_rows(metadata, io, batch.load.drop_columns([TOAST]), options.compression)
    return files


def _staged_for(target: IcebergStream, batch: CommitBatch, load_files: list) -> dict | None:
    """The staged load this commit adds to (a copy), or None when rows go straight into the table."""
    if target.staged is not None and target.staged.get("load_id") == batch.load_id:
        return {"load_id": batch.load_id, "files": list(target.staged["files"])}
    # a staged load of another load id is abandoned: its files stay unreferenced (never part of the table)
    if batch.new_load and (load_files or batch.state.sync_type == "full-load") and has_rows(target.table):
        return {"load_id": batch.load_id, "files": []}
    return None


def _sink_files(io: FileIO, metadata: Any, location: str, load_id: str, chunks: list[int]) -> list[DataFile]:
    """The data files Spark tasks of ``olake sync`` wrote for these chunks (from each chunk's index)."""
    from olake_cli.destinations.iceberg.chunk_sink import chunk_index_path

    files = []
    for chunk in chunks:
        index = io.new_input(chunk_index_path(location, load_id, chunk))
        if not index.exists():
            continue
        with index.open() as stream:
            listed = orjson.loads(stream.read())
        files += [data_file_of(io, metadata, path) for path in listed["files"]]
    return files
