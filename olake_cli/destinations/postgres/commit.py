"""One stream's commit: the rows a STATE covers and that STATE go into one target transaction.

Inside it: full-load rows by COPY (into the table, or into the staging table of a load that replaces
the table's rows), a source TRUNCATE (in two-way setups, rows written here after it stay), the changes (``apply``), the swap of a completed staged load,
and the stream's row in ``_olake.streams`` (state and highest applied operation id); then one commit
under the replication origin. A process killed before that commit leaves nothing; killed after it,
the next run starts from an older state file and replays, and the pipeline's stream buffer drops what
the target holds: full-load rows of chunks its committed state marks done, changes at or below its
operation id.

A commit has two halves: ``prepare_commit`` encodes a stream's batch (no server), ``send_commit``
writes it and the state and commits. The destination sends on a thread of its own, in order, so the
next batch is prepared while the server applies this one.

A re-sync marker (``core.resync``) names no load: its commit leaves the table's rows and any staged
load alone, and the next run's load replaces them in one step.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from collections.abc import Callable

import pyarrow as pa
import pyarrow.compute as pc
from psycopg import sql

from olake_cli.core.contracts import CommitBatch
from olake_cli.core.load_progress import load_complete
from olake_cli.core.row_metadata import COMMIT_TS, OP_ID, STORED_NAMES
from olake_cli.core.state import StreamState
from olake_cli.destinations.postgres import bookkeeping
from olake_cli.destinations.postgres.apply import Applied, ChangeApplier, EncodedChanges
from olake_cli.destinations.postgres.change_plan import reduce_changes
from olake_cli.destinations.postgres.load_copy import copy_load, replacing_keys
from olake_cli.destinations.postgres.session import commit_under_origin
from olake_cli.destinations.postgres.stream import PostgresStream, for_apply
from olake_cli.destinations.postgres.tombstones import apply_truncate

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


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

    buf: PostgresStream
    state: StreamState  # the state committed (the one given, or a re-sync marker)
    merged: dict  # the stream state the target holds after this commit
    load_id: str
    register_load: bool  # the load is recorded (and its staging table made) in this commit
    load_rows: pa.Table | None
    op_key: str | None
    truncate: bool
    truncated_at: int | None  # the source commit time of that TRUNCATE (µs since 1970), when known
    changes: EncodedChanges | None
    source_commit: tuple[int, int] | None  # the newest change's (LSN, commit time in µs)
    finish_load: bool  # a complete load: a staged one replaces the table's rows
    watermark: str | None


def prepare_commit(buf: PostgresStream, batch: CommitBatch, ctx: CommitContext) -> StreamCommit:
    """Everything of a stream's commit that needs no server: the load rows in the table's columns, the
    changes reduced and encoded, the state and watermark to record (so the next commit can be prepared
    while the server still applies this one)."""
    register = not batch.marker and (batch.load is not None or (batch.new_load and batch.state.sync_type == "full-load"))
    rows = None if batch.load is None else batch.load.drop_columns(list(STORED_NAMES))
    encoded, source_commit = None, None
    if batch.changes is not None:
        changes = for_apply(batch.changes)
        encoded = ctx.applier.encode(buf.table, reduce_changes(changes, list(buf.table.key)))
        top = pc.max(changes.column(OP_ID)).as_py()
        source_commit = (int(top[:16], 16), pc.max(changes.column(COMMIT_TS)).as_py() or 0)
    return StreamCommit(buf, batch.state, batch.merged, batch.load_id, register, rows, batch.op_key, batch.truncated,
                        batch.truncated_at, encoded, source_commit, not batch.marker and load_complete(batch.state), batch.watermark)


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
        _truncate(work, ctx)
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


def _truncate(work: StreamCommit, ctx: CommitContext) -> None:
    """Empty the table as the source did. Where conflicts are decided, rows written here after the
    source's TRUNCATE stay (``tombstones.apply_truncate``); otherwise ``TRUNCATE`` (which forgets the
    rows' versions)."""
    conn, table, rule = ctx.conn, work.buf.table, ctx.applier.rule
    if rule is None or not table.key or work.truncated_at is None:
        conn.execute(sql.SQL("TRUNCATE {}").format(table.qualified))
        bookkeeping.forget_versions(conn, table.ident)
        return
    at = _EPOCH + timedelta(microseconds=work.truncated_at)
    deleted, kept = apply_truncate(conn, table, rule.origin, rule.local_origin, at)
    if kept:
        ctx.log(f"{work.buf.stream.label}: the source's TRUNCATE (committed {at.isoformat()}) deleted {deleted} "
                f"row(s) and kept {kept} written here after it")
