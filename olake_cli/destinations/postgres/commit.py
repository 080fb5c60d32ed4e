"""One stream's commit: the rows a STATE covers and that STATE go into one target transaction.

Inside it: full-load rows by COPY (into the table, or into the staging table of a load that replaces
the table's rows), a source TRUNCATE, the changes (``apply``), the swap of a completed staged load,
and the stream's row in ``_olake.streams`` (state and highest applied operation id); then one commit
under the replication origin. A process killed before that commit leaves nothing; killed after it,
the next run starts from an older state file and replays, and the target skips what it holds:
full-load rows of chunks its committed state marks done, changes at or below its operation id.

A commit has two halves: ``prepare_commit`` takes the rows from the stream's buffer and encodes them
(no server), ``send_commit`` writes them and the state and commits. The destination sends on a
thread of its own, in order, so the next batch is prepared while the server applies this one.

A re-sync marker (``core.resync``) names no load: its commit leaves the table's rows and any staged
load alone, and the next run's load replaces them in one step. A STATE that continues a load the
target holds none of (no committed state: the table was dropped, or ``_olake`` lost) commits a
marker instead, its rows dropped.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import pyarrow as pa
import pyarrow.compute as pc
from psycopg import sql

from olake_cli.core.load_progress import load_complete, load_id_of, merged_stream_state, newly_done_chunks
from olake_cli.core.resync import is_resync_marker, lost_load, marker_replacing
from olake_cli.core.row_metadata import COMMIT_TS, OP_ID
from olake_cli.core.state import StreamState
from olake_cli.destinations.postgres import bookkeeping
from olake_cli.destinations.postgres.apply import Applied, ChangeApplier, EncodedChanges
from olake_cli.destinations.postgres.buffer import StreamBuffer
from olake_cli.destinations.postgres.change_plan import reduce_changes
from olake_cli.destinations.postgres.load_copy import copy_load, replacing_keys
from olake_cli.destinations.postgres.session import commit_under_origin


@dataclass
class CommitContext:
    """Destination-wide things a commit needs."""

    conn: object
    origin: str | None
    applier: ChangeApplier
    log: Callable[[str], None]


@dataclass
class StreamCommit:
    """One stream's commit, prepared on the caller's thread and waiting to be sent (``send``)."""

    buf: StreamBuffer
    state: StreamState  # the state committed (the one given, or a re-sync marker)
    merged: dict  # the stream state the target holds after this commit
    load_id: str
    register_load: bool  # the load is recorded (and its staging table made) in this commit
    load_rows: pa.Table | None
    op_key: str | None
    truncate: bool
    changes: EncodedChanges | None
    source_commit: tuple[int, int] | None  # the newest change's (LSN, commit time in µs)
    finish_load: bool  # a complete load: a staged one replaces the table's rows
    watermark: str | None


def prepare_commit(buf: StreamBuffer, ss: StreamState, ctx: CommitContext) -> StreamCommit:
    """Everything of a stream's commit that needs no server: the rows taken from ``buf``, the changes
    reduced and encoded, the state and watermark to record. ``buf`` moves on to the state committed,
    so the next commit can be prepared while the server still applies this one."""
    ss = _marker_if_lost(buf, ss, ctx.log)
    marker = is_resync_marker(ss.to_dict())
    load_id = (ss.extra or {}).get("load_id") or buf.load_id
    new_load = load_id_of(buf.committed) != load_id
    register, rows, op_key, watermark = False, None, None, buf.max_op_id
    if not marker:
        register, rows, op_key, watermark = _load_rows(buf, ss, load_id, new_load, ctx.log)
    changes, source_commit = buf.take_changes(ctx.log), None
    if buf.replayed:
        ctx.log(f"{buf.stream.label}: skipped {buf.replayed} change(s) the target already holds (a replay)")
    encoded = None
    if changes is not None:
        encoded = ctx.applier.encode(buf.table, reduce_changes(changes, list(buf.table.key)))
        top = pc.max(changes.column(OP_ID)).as_py()
        watermark = top if watermark is None or top > watermark else watermark
        source_commit = (int(top[:16], 16), pc.max(changes.column(COMMIT_TS)).as_py() or 0)
    work = StreamCommit(buf, ss, merged_stream_state(buf.committed, ss), load_id, register, rows, op_key,
                        buf.truncated, encoded, source_commit, not marker and load_complete(ss), watermark)
    buf.committed, buf.max_op_id, buf.load_id = work.merged, watermark, load_id
    buf.truncated, buf.replayed = False, 0
    return work


def send_commit(work: StreamCommit, ctx: CommitContext) -> Applied | None:
    """Write a prepared commit into the target in one transaction under the origin; what the changes
    did. Commits are sent in the order they were prepared, one at a time."""
    conn, buf, table = ctx.conn, work.buf, work.buf.table
    wrote = work.load_rows is not None or work.truncate
    if work.register_load:
        staged = bookkeeping.register_load(conn, table.ident, work.load_id, table.column_list())
        if work.load_rows is not None:
            target = bookkeeping.load_rows_target(table.ident, staged)
            load = lambda conn, into: copy_load(conn, into, table, [work.load_rows], work.op_key)  # noqa: E731
            if work.load_id == buf.resumed_load and table.key:  # an earlier run's snapshot: keys may repeat
                replacing_keys(conn, target, table, load)
            else:
                load(conn, target)
    if work.truncate:
        conn.execute(sql.SQL("TRUNCATE {}").format(table.qualified))
        bookkeeping.forget_versions(conn, table.ident)
        ctx.log(f"{buf.stream.label}: truncated at the source; the table is emptied")
    applied = None
    if work.changes is not None:
        wrote = True
        applied = ctx.applier.apply(table, work.changes, buf.committed_at)
    if work.finish_load and bookkeeping.finish_load(conn, table.ident, work.load_id, table.column_list()):
        ctx.log(f"{buf.stream.label}: the new load replaced the table's rows")
        wrote = True
    committed_at = bookkeeping.save_state(conn, table.ident, ctx.origin, buf.stream.key, work.merged, work.watermark,
                                          wrote)
    commit_under_origin(conn, ctx.origin, work.source_commit)
    buf.committed_at = committed_at
    return applied


def _marker_if_lost(buf: StreamBuffer, ss: StreamState, log: Callable[[str], None]) -> StreamState:
    """``ss``, or a re-sync marker (the buffered rows dropped) when the target holds none of its load."""
    lost = lost_load(ss, buf.committed)
    if lost is None:
        return ss
    buf.discard()
    marker = marker_replacing(ss)
    if marker.to_dict() != buf.committed:
        log(f"{buf.stream.label}: {lost}; the stream is loaded anew on the next run")
    return marker


def _load_rows(buf: StreamBuffer, ss: StreamState, load_id: str, new_load: bool,
               log: Callable[[str], None]) -> tuple[bool, pa.Table | None, str | None, str | None]:
    """The full-load rows this STATE covers (None for a replay): whether the load is registered in
    this commit, the rows, their operation id key, and the operation id watermark after them."""
    rows = buf.take_load(log)
    newly = newly_done_chunks(buf.committed, ss, load_id)
    if rows is not None and not new_load and not newly:
        log(f"{buf.stream.label}: skipped {rows.num_rows} full-load row(s) of a chunk the target already "
            f"holds (a replay)")
        rows = None
    op_key = (ss.extra or {}).get("load_op_key") or buf.load_op_key
    register = rows is not None or (new_load and ss.sync_type == "full-load")
    if new_load and register:
        return register, rows, op_key, op_key  # a new load: its rows rank at its position, whatever the table held
    watermark = buf.max_op_id
    return register, rows, op_key, (op_key if op_key and (watermark is None or op_key > watermark) else watermark)
