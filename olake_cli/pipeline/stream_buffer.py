"""Each stream's rows between two commits, for every destination, and the commit loop over a STATE's
streams (the Singer SDK's framework-owned sink buffer is the model).

Decoded rows (``pipeline/write``: a block or a batch of records at a time, with their wire ``_olake_*``
columns) are routed on arrival: rows without an operation id are full-load rows, the others changes
(inserts, updates, deletes, incremental rows). A change at or below the destination's watermark (the
highest operation id it applied) is a replay and is dropped at once, and so is a truncate; a truncate
drops what came before it since the last commit, and the stream is emptied at the next commit. Rows
get the stored ``_olake_*`` columns (``row_metadata.stored``: full-load rows rank at their load's
``load_op_key``). A destination that spills (``SpillingTarget``) takes full-load rows ``spill_rows`` at a
time ahead of their commit (changes too, if it appends them: ``ChangeAppender``); the rest waits for
its STATE.

Each STATE commits one :class:`~olake_cli.core.contracts.CommitBatch` per stream it names. A state
that continues a load the destination holds none of (``core.resync.lost_load``) becomes a re-sync
marker, its rows dropped; full-load rows of chunks the destination already holds are a replay and are
dropped. The watermark after the commit is decided here, once for every destination: a new load's rows
rank at its position (``load_op_key``) whatever the destination held; otherwise it only grows, with the
load's position and the newest change.
"""

from __future__ import annotations

from collections.abc import Callable

import pyarrow as pa
import pyarrow.compute as pc

from olake_cli.core import row_metadata
from olake_cli.core.catalog import Catalog, CatalogStream
from olake_cli.core.contracts import ChangeAppender, CommitBatch, Destination, SpillingTarget, StreamTarget
from olake_cli.core.load_progress import UNKNOWN_LOAD, load_id_of, merged_stream_state, newly_done_chunks
from olake_cli.core.resync import is_resync_marker, lost_load, marker_replacing
from olake_cli.core.row_metadata import OP, OP_ID
from olake_cli.core.state import State, StreamState

_CHANGE_OPS = pa.array(["c", "u", "d"])  # what a replay filter drops (incremental rows are kept)


class StreamBuffer:
    """One stream of a destination between two commits."""

    def __init__(self, stream: CatalogStream, target: StreamTarget, log: Callable[[str], None],
                 floor: str | None = None) -> None:
        self.stream, self.target, self.log = stream, target, log
        self.spiller = target if isinstance(target, SpillingTarget) else None
        self.appender = target if self.spiller is not None and isinstance(target, ChangeAppender) else None
        # ``floor``: the operation id the destination's committed position covers, for one that keeps no
        # watermark but may be sent changes it holds (one of several destinations: ``pipeline.fan_out``)
        self.committed, self.watermark = target.committed, _newer(target.watermark, floor)
        inner = (self.committed or {}).get("stream_state") or {}
        self.load_id: str = inner.get("load_id") or UNKNOWN_LOAD
        self.load_op_key: str | None = inner.get("load_op_key")
        self.load: list[pa.Table] = []  # full-load rows, stored columns
        self.changes: list[pa.Table] = []
        self.load_rows = self.change_rows = 0
        self.put_rows = self.put_changes = 0  # rows handed to the target since the last commit
        self.truncated = False
        self.truncated_at: int | None = None  # the source commit time (µs) of that truncate
        self.replayed = 0  # changes dropped as replays since the last commit
        self.warned: set[str] = set()

    def has_rows(self) -> bool:
        """Whether rows (or a truncate) arrived that no commit has covered yet."""
        return bool(self.load or self.changes or self.put_rows or self.put_changes or self.truncated)

    def add(self, table: pa.Table, warnings: list[str]) -> None:
        """Decoded rows with their wire ``_olake_*`` columns, routed (replayed changes dropped)."""
        self._warn(warnings)
        is_load = pc.is_null(table.column(OP_ID))
        loads = pc.sum(is_load).as_py() or 0
        load = table if loads == table.num_rows else table.filter(is_load) if loads else None
        changes = None if loads == table.num_rows else table if not loads else table.filter(pc.invert(is_load))
        if changes is not None and self.watermark is not None:
            changes = self._not_replayed(changes)
        if load is not None:
            self.load.append(row_metadata.stored(load, self.load_op_key))
            self.load_rows += load.num_rows
        if changes is not None and changes.num_rows:
            self.changes.append(row_metadata.stored(changes, self.load_op_key))
            self.change_rows += changes.num_rows
        self._spill(whole_only=True)

    def truncate(self, op_key: str | None, commit_ts: int | None = None) -> None:
        """The source emptied the stream (at operation ``op_key``, committed at ``commit_ts`` µs): what came
        before it is dropped."""
        if op_key is not None and self.watermark is not None and op_key <= self.watermark:
            self.replayed += 1
            return
        self._drop(truncated=True)
        self.truncated_at = commit_ts
        self.log(f"{self.stream.label}: truncated at the source; the stream is emptied at the next commit")

    def observe(self, ss: StreamState) -> None:
        """Learn which load the rows that follow belong to (rows of an earlier one stay with it)."""
        if ss.load_id and ss.load_id != self.load_id:
            self._spill(whole_only=False)
            self.load_id = ss.load_id
        if ss.load_op_key:
            self.load_op_key = ss.load_op_key

    def widen(self, stream: CatalogStream) -> None:
        """Later rows follow ``stream``'s wider schema. A destination that appends rows as they come
        (``ChangeAppender``) first takes those gathered, in the schema they came in (its files keep the
        type they were written with); others convert them at the commit."""
        if self.appender is not None:
            self._spill(whole_only=False)
        self.stream = stream

    def take(self, ss: StreamState) -> CommitBatch:
        """The batch committing the rows gathered so far with ``ss``; the buffer moves on to its state."""
        ss = self._marker_if_lost(ss)
        marker = is_resync_marker(ss.to_dict())
        load_id = ss.load_id or self.load_id
        new_load = load_id_of(self.committed) != load_id
        newly = newly_done_chunks(self.committed, ss, load_id)
        op_key = ss.load_op_key or self.load_op_key
        load, load_replayed, has_load = None, False, False
        if not marker:  # (a marker names no load: rows of one wait for the state that does)
            load, load_replayed, has_load = self._take_load(new_load, newly)
        changes = _concat(self.changes)
        if self.replayed:
            self.log(f"{self.stream.label}: skipped {self.replayed} change(s) {self.target.holder} already holds "
                     f"(a replay)")
        base = self.watermark
        if not marker:  # a new load's rows rank at its position, whatever the destination held
            base = op_key if new_load and (has_load or ss.sync_type == "full-load") else _newer(base, op_key)
        top = base if changes is None else _newer(base, pc.max(changes.column(OP_ID)).as_py())
        batch = CommitBatch(ss, marker, merged_stream_state(self.committed, ss), load_id, new_load, newly, load,
                            load_replayed, changes, self.truncated, op_key, base, top, self.truncated_at)
        self.committed, self.watermark, self.load_id = batch.merged, top, load_id
        self.changes, self.change_rows, self.put_changes = [], 0, 0
        self.truncated, self.truncated_at, self.replayed = False, None, 0
        return batch

    def _marker_if_lost(self, ss: StreamState) -> StreamState:
        """``ss``, or a re-sync marker (the rows dropped) when the destination holds none of its load."""
        lost = lost_load(ss, self.committed)
        if lost is None:
            return ss
        self._drop(truncated=False)
        marker = marker_replacing(ss)
        if marker.to_dict() != self.committed:
            self.log(f"{self.stream.label}: {lost}; the stream is loaded anew on the next run")
        return marker

    def _take_load(self, new_load: bool, newly: list[int]) -> tuple[pa.Table | None, bool, bool]:
        """The full-load rows not put yet, whether the load's rows were a replay, whether it has rows."""
        count, table = self.load_rows + self.put_rows, _concat(self.load)
        self.load, self.load_rows, self.put_rows = [], 0, 0
        if count and not new_load and not newly:
            self.log(f"{self.stream.label}: skipped {count} full-load row(s) of a chunk {self.target.holder} "
                     f"already holds (a replay)")
            return None, True, False
        return table, False, count > 0

    def _not_replayed(self, changes: pa.Table) -> pa.Table:
        replay = pc.and_(pc.is_in(changes.column(OP), _CHANGE_OPS), pc.less_equal(changes.column(OP_ID), self.watermark))
        count = pc.sum(replay).as_py() or 0
        if not count:
            return changes
        self.replayed += count
        return changes.filter(pc.invert(replay))

    def _spill(self, whole_only: bool) -> None:
        """Hand gathered rows to the target ahead of their commit, ``spill_rows`` at a time (``whole_only``:
        only whole parts of that size; else all of them)."""
        spiller, appender = self.spiller, self.appender
        if spiller is None:
            return
        size = spiller.spill_rows
        if self.load_rows and (self.load_rows >= size or not whole_only):
            self.load, self.load_rows, put = _hand_over(self.load, self.load_rows, size, whole_only,
                                                        lambda t: spiller.put_load(t, self.load_id))
            self.put_rows += put
        if appender is not None and self.change_rows and (self.change_rows >= size or not whole_only):
            self.changes, self.change_rows, put = _hand_over(self.changes, self.change_rows, size, whole_only,
                                                             lambda t: appender.put_changes(t, self.load_id))
            self.put_changes += put

    def _drop(self, truncated: bool) -> None:
        """Forget every row since the last commit (``truncated``: a source TRUNCATE, emptying the stream)."""
        self.load, self.changes, self.load_rows, self.change_rows = [], [], 0, 0
        self.put_rows = self.put_changes = 0
        self.truncated = truncated
        if self.spiller is not None:
            self.spiller.discard(self.load_id, truncated)

    def _warn(self, warnings: list[str]) -> None:
        for warning in warnings:
            if warning not in self.warned:
                self.warned.add(warning)
                self.log(f"{self.stream.label}: {warning}")


class StreamBuffers:
    """Every stream buffer of one destination, and the commit loop over the streams a STATE names."""

    def __init__(self, destination: Destination, log: Callable[[str], None],
                 floors: dict[tuple, str] | None = None) -> None:
        self.destination, self.log = destination, log
        self.buffers: dict[tuple, StreamBuffer] = {}
        self.floors = floors if floors is not None else {}  # stream -> replay floor (``StreamBuffer``)

    def open(self, catalog: Catalog) -> None:
        """Open the destination's streams for ``catalog`` and a buffer for each stream it opened."""
        self.destination.open(catalog)
        for stream in catalog.streams:
            target = None if stream.key in self.buffers else self.destination.stream_target(stream.key)
            if target is not None:
                self.buffers[stream.key] = StreamBuffer(stream, target, self.log, self.floors.get(stream.key))

    def add(self, key: tuple, table: pa.Table, warnings: list[str]) -> None:
        """Decoded rows of a stream (see :meth:`StreamBuffer.add`)."""
        self.buffers[key].add(table, warnings)

    def truncate(self, key: tuple, op_key: str | None, commit_ts: int | None = None) -> None:
        """A source TRUNCATE of a stream (see :meth:`StreamBuffer.truncate`)."""
        self.buffers[key].truncate(op_key, commit_ts)

    def widen(self, stream: CatalogStream) -> None:
        """Later rows of ``stream`` follow its wider schema (see :meth:`StreamBuffer.widen`)."""
        if stream.key in self.buffers:
            self.buffers[stream.key].widen(stream)
        self.destination.widen(stream)

    def observe(self, state: State) -> None:
        """Learn which load the rows that follow belong to, for every stream ``state`` names."""
        for ss in state.streams:
            if ss.key in self.buffers:
                self.buffers[ss.key].observe(ss)

    def take(self, state: State) -> tuple[State, list[CommitBatch]]:
        """The batches committing ``state``'s streams, and the state they commit: ``state`` itself, or a
        copy in which a stream whose load the destination lost is a re-sync marker."""
        streams, batches = [], []
        for ss in state.streams:
            buf = self.buffers.get(ss.key)
            if buf is None:
                streams.append(ss)
                continue
            batches.append(buf.take(ss))
            streams.append(batches[-1].state)
        if any(new is not old for new, old in zip(streams, state.streams)):
            state = State(state.level, state.version, streams)
        self.observe(state)
        return state, batches

    def has_uncommitted(self) -> bool:
        """Whether rows arrived that no STATE has covered yet (they are never committed)."""
        return any(buf.has_rows() for buf in self.buffers.values())


def _concat(tables: list[pa.Table]) -> pa.Table | None:
    if not tables:
        return None
    return tables[0] if len(tables) == 1 else pa.concat_tables(tables, promote_options="permissive")


def _hand_over(tables: list[pa.Table], rows: int, size: int, whole_only: bool,
               put: Callable[[pa.Table], None]) -> tuple[list[pa.Table], int, int]:
    """``put`` the gathered rows (only whole parts of ``size`` rows if ``whole_only``); the tables and
    rows left, and the rows put."""
    count = rows - rows % size if whole_only else rows
    table = _concat(tables)
    put(table.slice(0, count))
    rest = table.slice(count)
    return ([rest] if rest.num_rows else []), rest.num_rows, count


def _newer(watermark: str | None, op_key: str | None) -> str | None:
    """The later of two operation id keys (None: none)."""
    return op_key if watermark is None or (op_key is not None and op_key > watermark) else watermark
