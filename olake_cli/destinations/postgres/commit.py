"""One stream's commit: the rows a STATE covers and that STATE go into one target transaction.

Inside it: full-load rows by COPY (into the table, or into the staging table of a load that replaces
the table's rows), a source TRUNCATE, the changes (``apply``), the swap of a completed staged load,
and the stream's row in ``_olake.streams`` (state and highest applied operation id); then one commit
under the replication origin. A process killed before that commit leaves nothing; killed after it,
the next run starts from an older state file and replays, and the target skips what it holds:
full-load rows of chunks its committed state marks done, changes at or below its operation id.

A re-sync marker (``core.resync``) names no load: its commit leaves the table's rows and any staged
load alone, and the next run's load replaces them in one step. A STATE that continues a load the
target holds none of (no committed state: the table was dropped, or ``_olake`` lost) commits a
marker instead, its rows dropped.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import pyarrow.compute as pc
from psycopg import sql

from olake_cli.core.load_progress import load_complete, load_id_of, merged_stream_state, newly_done_chunks
from olake_cli.core.resync import is_resync_marker, lost_load, marker_replacing
from olake_cli.core.row_metadata import COMMIT_TS, OP_ID
from olake_cli.core.state import StreamState
from olake_cli.destinations.postgres import bookkeeping
from olake_cli.destinations.postgres.apply import Applied, ChangeApplier
from olake_cli.destinations.postgres.buffer import StreamBuffer
from olake_cli.destinations.postgres.change_plan import reduce_changes
from olake_cli.destinations.postgres.load_copy import copy_load
from olake_cli.destinations.postgres.session import commit_under_origin


@dataclass
class CommitContext:
    """Destination-wide things a commit needs."""

    conn: object
    origin: str | None
    applier: ChangeApplier
    log: Callable[[str], None]


def commit_stream(buf: StreamBuffer, ss: StreamState, ctx: CommitContext) -> tuple[StreamState, Applied | None]:
    """Commit the rows buffered for ``buf``'s stream together with its state ``ss``; returns the state
    committed (``ss``, or a re-sync marker when the target holds none of the load ``ss`` continues)
    and what the changes did."""
    ss = _marker_if_lost(buf, ss, ctx.log)
    marker = is_resync_marker(ss.to_dict())
    conn, table = ctx.conn, buf.table
    load_id = (ss.extra or {}).get("load_id") or buf.load_id
    new_load = load_id_of(buf.committed) != load_id
    watermark, wrote = (buf.max_op_id, False) if marker else _load_rows(buf, ss, load_id, new_load, ctx)
    wrote = wrote or buf.truncated
    if buf.truncated:
        conn.execute(sql.SQL("TRUNCATE {}").format(table.qualified))
        ctx.log(f"{buf.stream.label}: truncated at the source; the table is emptied")
    applied, source_commit = None, None
    changes = buf.take_changes(ctx.log)
    if buf.replayed:
        ctx.log(f"{buf.stream.label}: skipped {buf.replayed} change(s) the target already holds (a replay)")
    if changes is not None:
        wrote = True
        applied = ctx.applier.apply(table, reduce_changes(changes, list(table.key)), buf.committed_at)
        top = pc.max(changes.column(OP_ID)).as_py()
        watermark = top if watermark is None or top > watermark else watermark
        source_commit = (int(top[:16], 16), pc.max(changes.column(COMMIT_TS)).as_py() or 0)
    if not marker and load_complete(ss) and bookkeeping.finish_load(conn, table.ident, load_id, table.column_list()):
        ctx.log(f"{buf.stream.label}: the new load replaced the table's rows")
        wrote = True
    merged = merged_stream_state(buf.committed, ss)
    committed_at = bookkeeping.save_state(conn, table.ident, buf.stream.key, merged, watermark, wrote)
    commit_under_origin(conn, ctx.origin, source_commit)
    buf.committed, buf.max_op_id, buf.load_id, buf.committed_at = merged, watermark, load_id, committed_at
    buf.truncated, buf.replayed = False, 0
    return ss, applied


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
               ctx: CommitContext) -> tuple[str | None, bool]:
    """COPY the full-load rows this STATE covers (or skip a replay); the operation id watermark after
    them, and whether rows were copied."""
    table = buf.table
    rows = buf.take_load(ctx.log)
    newly = newly_done_chunks(buf.committed, ss, load_id)
    if rows is not None and not new_load and not newly:
        ctx.log(f"{buf.stream.label}: skipped {rows.num_rows} full-load row(s) of a chunk the target already "
                f"holds (a replay)")
        rows = None
    op_key = (ss.extra or {}).get("load_op_key") or buf.load_op_key
    if rows is not None or (new_load and ss.sync_type == "full-load"):
        staged = bookkeeping.register_load(ctx.conn, table.ident, load_id, table.column_list())
        if rows is not None:
            copy_load(ctx.conn, bookkeeping.load_rows_target(table.ident, staged), table, [rows], op_key)
    if new_load and (rows is not None or ss.sync_type == "full-load"):
        return op_key, rows is not None  # a new load: its rows rank at its position, whatever the table held
    watermark = buf.max_op_id
    return (op_key if op_key and (watermark is None or op_key > watermark) else watermark), rows is not None
