"""One stream's commit: the rows a STATE covers and that STATE go into one Iceberg metadata commit.

Order: data and delete files are written (invisible until referenced), then one transaction adds
them in a snapshot (``snapshot.RowDelta``) and sets the table properties holding the state, the
highest applied operation id and any staged load; that metadata swap is the commit point. A process
killed before it leaves only unreferenced files; killed after it, the next run finds the newer state
in the table and skips what it replays: full-load rows of chunks the table's state already marks
done, changes at or below its highest operation id.

Full loads: a stream's first load (or any load into an empty table) is appended chunk by chunk. A
later load (``full_refresh`` run, re-sync, new load after a catalog change) is staged: its data files
are written and listed in ``olake.staged-load`` with each chunk's state, and the commit of its last
chunk removes every old file and adds all staged ones in one snapshot, so readers see the old
contents until the new ones are complete. A re-sync marker (``core.resync``) names no load: its
commit keeps the table's contents, which the next run's load replaces. A STATE that continues a
load the table does not hold (the table was dropped and created again) commits a marker instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import orjson
import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.io import FileIO
from pyiceberg.manifest import DataFile

from olake_cli.core.faults import crash_point
from olake_cli.core.load_progress import load_complete, load_id_of, merged_stream_state, newly_done_chunks
from olake_cli.core.resync import is_resync_marker, lost_load, marker_replacing
from olake_cli.core.state import StreamState
from olake_cli.destinations.iceberg.buffer import StreamBuffer
from olake_cli.destinations.iceberg.files import data_file_of, write_position_deletes, write_rows
from olake_cli.destinations.iceberg.maintenance import maintain
from olake_cli.destinations.iceberg.merge import TOAST, plan_changes
from olake_cli.destinations.iceberg.retype import check_pending_rows, make_current
from olake_cli.destinations.iceberg.rewrite import rewrite
from olake_cli.destinations.iceberg.schema import table_arrow_schema
from olake_cli.destinations.iceberg.snapshot import RowDelta
from olake_cli.destinations.iceberg.tables import PROP_MAX_OP, PROP_STAGED, PROP_STATE, dumps, has_rows


@dataclass
class CommitOptions:
    """Destination-wide settings a commit needs."""

    soft_delete: bool
    compression: str
    log: Callable[[str], None]
    sink_files: bool = False  # ``olake sync``: full-load chunks arrive as files Spark tasks wrote


def commit_stream(buf: StreamBuffer, ss: StreamState, options: CommitOptions) -> StreamState:
    """Commit the rows buffered for ``buf``'s stream together with its state ``ss``; returns the state
    committed: ``ss``, or a re-sync marker when the table holds none of the load ``ss`` continues
    (then the rows are dropped, and the next run loads the stream anew)."""
    ss = _marker_if_lost(buf, ss, options)
    table, txn = buf.table, buf.table.transaction()
    load_id = (ss.extra or {}).get("load_id") or buf.load_id
    if buf.rewrite:  # columns change type in place: this commit converts the rows (rewrite.py)
        rewrite(txn, buf, options.compression)
        buf.replacement, buf.rewrite = None, False
    if buf.replacement is not None:
        check_pending_rows(buf, load_id_of(buf.committed) != load_id or (buf.staged or {}).get("load_id") == load_id)
    delta = RowDelta(txn)
    staged, watermark = _add_load(buf, ss, load_id, txn, delta, options)
    if buf.truncated:
        delta.remove_all()
        options.log(f"{buf.stream.label}: truncated at the source; the table is emptied")
    had_changes = bool(buf.change_rows or buf.change_tables)
    watermark = _apply_changes(buf, delta, txn, options, watermark)
    merged = merged_stream_state(buf.committed, ss)
    properties = {PROP_STATE: dumps(merged)}
    if watermark is not None:
        properties[PROP_MAX_OP] = watermark
    if delta.has_changes or staged != buf.staged or txn.table_metadata is not table.metadata \
            or any(table.properties.get(k) != v for k, v in properties.items()):
        crash_point("iceberg-files-written")
        if delta.has_changes:
            delta.snapshot_properties = {"olake.state": properties[PROP_STATE]}
            delta.commit()
        _set_properties(txn, table.properties, properties, staged)
        buf.table = txn.commit_transaction()
        crash_point("iceberg-committed")
        buf.committed, buf.watermark, buf.staged = merged, watermark, staged
        if buf.replacement is not None and buf.table.schema().schema_id == buf.replacement.current_schema_id:
            buf.replacement = None  # swapped in with the new load
    buf.truncated, buf.replayed, buf.load_id = False, 0, load_id
    if had_changes and delta.has_changes:
        buf.table = maintain(buf.table, options.compression, options.log)
    return ss


def _marker_if_lost(buf: StreamBuffer, ss: StreamState, options: CommitOptions) -> StreamState:
    """``ss``, or a re-sync marker (the buffered rows dropped) when the table holds none of its load."""
    lost = lost_load(ss, buf.committed)
    if lost is None:
        return ss
    _delete_quietly(buf.table.io, buf.discard())
    marker = marker_replacing(ss)
    if marker.to_dict() != buf.committed:
        options.log(f"{buf.stream.label}: {lost}; the stream is loaded anew on the next run")
    return marker


def _add_load(buf: StreamBuffer, ss: StreamState, load_id: str, txn: Any, delta: RowDelta,
              options: CommitOptions) -> tuple[dict | None, str | None]:
    """Add (or stage) the full-load rows this STATE covers; returns (staged load, highest op id).

    A re-sync marker names no load: the table keeps its contents (and any staged load) until the
    next run's load replaces them."""
    if is_resync_marker(ss.to_dict()):
        return buf.staged, buf.watermark
    new_load = load_id_of(buf.committed) != load_id
    swaps = new_load or (buf.staged or {}).get("load_id") == load_id
    if buf.replacement is not None and swaps and load_complete(ss):  # its columns change type with it
        make_current(txn, buf.replacement)
    metadata, io = txn.table_metadata, buf.table.io
    if buf.replacement is not None and metadata.current_schema_id != buf.replacement.current_schema_id:
        metadata = buf.replacement  # rows of the coming load take the replacement schema until it swaps in
    newly = newly_done_chunks(buf.committed, ss, load_id)
    load_files = _load_files(buf, metadata, io, options)
    if not new_load and not newly and load_files:
        options.log(f"{buf.stream.label}: skipped {sum(f.record_count for f in load_files)} full-load row(s) "
                    f"of a chunk the table already holds (a replay)")
        _delete_quietly(io, load_files)
        load_files = []
    elif newly and options.sink_files:
        load_files += _sink_files(io, metadata, buf.table.location(), load_id, newly)
    op_key = (ss.extra or {}).get("load_op_key") or buf.load_op_key
    staged, watermark = _staged_for(buf, load_id, new_load, ss, load_files), buf.watermark
    if staged is not None:
        staged["files"] += [f.file_path for f in load_files]
        if load_complete(ss):  # the new load replaces the table's contents in this one snapshot
            delta.remove_all().add_data([data_file_of(io, metadata, p) for p in staged["files"]])
            staged, watermark = None, op_key
    else:
        delta.add_data(load_files)
        if new_load and (load_files or ss.sync_type == "full-load"):
            watermark = op_key
        elif op_key and (watermark is None or op_key > watermark):
            watermark = op_key
    return staged, watermark


def _set_properties(txn: Any, current: dict[str, str], properties: dict[str, str], staged: dict | None) -> None:
    """Set the olake properties of this commit (and remove those it no longer has)."""
    txn.set_properties({**properties, **({PROP_STAGED: dumps(staged)} if staged is not None else {})})
    stale = [k for k in (PROP_MAX_OP, PROP_STAGED) if k in current and k not in properties
             and not (k == PROP_STAGED and staged is not None)]
    if stale:
        txn.remove_properties(*stale)


def _apply_changes(buf: StreamBuffer, delta: RowDelta, txn: Any, options: CommitOptions,
                   watermark: str | None) -> str | None:
    """Merge (keyed) or append (keyless) the buffered changes; returns the new highest op id."""
    changes = buf.take_changes(options.log)
    if buf.replayed:
        options.log(f"{buf.stream.label}: skipped {buf.replayed} change(s) the table already holds (a replay)")
    if changes is None:
        return watermark
    metadata, io = txn.table_metadata, buf.table.io
    top = pc.max(changes.column("_olake_op_id")).as_py()
    if buf.keyed:
        target = table_arrow_schema(metadata.schema()).remove_metadata()
        target = pa.schema([f.remove_metadata() for f in target])
        empty = buf.truncated or not has_rows(buf.table)
        plan = plan_changes(changes, buf.key_columns, metadata, io, target, options.soft_delete, watermark, empty)
        if plan.stale:
            options.log(f"{buf.stream.label}: {plan.stale} change(s) older than the table's version of "
                        f"their key were ignored")
        delta.add_data(write_rows(metadata, io, plan.append, options.compression))
        delta.add_deletes(_delete_files(plan, io, buf.table.location(), options.compression))
    else:
        delta.add_data(write_rows(metadata, io, changes.drop_columns([TOAST]), options.compression))
    return top if watermark is None or (top is not None and top > watermark) else watermark


def _delete_files(plan: Any, io: FileIO, location: str, compression: str) -> list[DataFile]:
    """One position-delete file per partition holding deleted rows."""
    groups: dict[tuple, dict[str, list[int]]] = {}
    for path, positions in plan.deletes.items():
        data_file = plan.tasks[path].file
        groups.setdefault((data_file.spec_id, data_file.partition), {})[path] = positions
    return [write_position_deletes(io, f"{location}/data", spec_id, partition, positions, compression)
            for (spec_id, partition), positions in groups.items()]


def _load_files(buf: StreamBuffer, metadata: Any, io: FileIO, options: CommitOptions) -> list[DataFile]:
    """Data files of the full-load rows of this commit (written now or spilled before)."""
    files, buf.written = buf.written, []
    table = buf.take_load(options.log)
    if table is not None:
        files += write_rows(metadata, io, table.drop_columns([TOAST]), options.compression)
    return files


def _staged_for(buf: StreamBuffer, load_id: str, new_load: bool, ss: StreamState,
                load_files: list) -> dict | None:
    """The staged load this commit adds to (a copy), or None when rows go straight into the table."""
    if buf.staged is not None and buf.staged.get("load_id") == load_id:
        return {"load_id": load_id, "files": list(buf.staged["files"])}
    # a staged load of another load id is abandoned: its files stay unreferenced (never part of the table)
    if new_load and (load_files or ss.sync_type == "full-load") and has_rows(buf.table):
        return {"load_id": load_id, "files": []}
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


def _delete_quietly(io: FileIO, files: list) -> None:
    """Delete files no commit references (best effort: a leftover is harmless)."""
    for item in files:
        try:
            io.delete(item if isinstance(item, str) else item.file_path)
        except OSError:
            pass
