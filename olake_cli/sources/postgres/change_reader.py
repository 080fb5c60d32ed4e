"""Turns a PostgreSQL change feed's runs into ChangeBatches: the rows each stream keeps (above its
committed position, outside its full load's snapshot), checkpoints, widened relations, truncated
partitions; bounded (``batches``) or following the slot (``follow``, see ``core.follow``).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from olake_cli.core.catalog import CatalogStream
from olake_cli.core.contracts import ChangeBatch
from olake_cli.core.follow import CHECKPOINT_EVERY, INSIDE_FACTOR, Follow
from olake_cli.core.opid import OpId
from olake_cli.core.state import State, StreamState
from olake_cli.sources.postgres.lsn import parse_lsn

BATCH_CHANGES = 1000
_TRUNCATE = ord("t")


class ChangeReader:
    """Turns the slot's runs into ChangeBatches: kept rows as columns, checkpoints, schema changes."""

    def __init__(self, capture, active: dict[tuple, CatalogStream], state: State,
                 watch, moved, typed: bool) -> None:
        self.capture, self.active, self.watch, self.moved = capture, dict(active), watch, moved
        self.typed = typed
        self.positions = {k: capture.position_of(state.find(*k)) for k in active}
        self.horizons = {k: _load_horizon(state.find(*k)) for k in active}
        self.records = {k: self._records(s) for k, s in active.items()}
        self.relation_seen: dict[tuple, int] = {}
        self.since = self.size = 0  # changes since the last checkpoint, and in the batch being built

    def _records(self, stream: CatalogStream):
        """The run converter of a stream; its errors name the stream, the column and the row's key."""
        from olake_cli.sources.postgres.run_records import RunRecords

        return RunRecords(stream, tuple(self.capture.tables[stream.key].primary_key), self.typed)

    def batches(self, feed) -> Iterator[ChangeBatch]:
        """The feed's runs as batches of about BATCH_CHANGES changes, checkpoints at their ends."""
        batch, self.since, self.size = ChangeBatch(), 0, 0
        for run in feed.runs():
            key = (run.relation.namespace, run.relation.name)
            keep = self._keep(run, key) if key in self.active else np.zeros(len(run), bool)
            inside = INSIDE_FACTOR * CHECKPOINT_EVERY - self.since  # a huge transaction: checkpoint inside it
            while 0 < inside < keep.sum():
                at = int(np.flatnonzero(keep)[inside - 1]) + 1
                head, run = run.split(at)
                batch = yield from self._add(key, head, keep[:at], batch)
                keep, inside = keep[at:], INSIDE_FACTOR * CHECKPOINT_EVERY
                batch.position, self.since = head.op_id(at - 1), 0
                yield batch
                batch, self.size = ChangeBatch(), 0
            batch = yield from self._add(key, run, keep, batch)
            if run.ends_at is not None and self.since >= CHECKPOINT_EVERY:
                batch.position, self.since = OpId(run.ends_at, 0), 0
            elif self.since >= INSIDE_FACTOR * CHECKPOINT_EVERY:
                batch.position, self.since = run.op_id(len(run) - 1), 0
            if batch.position is not None or self.size >= BATCH_CHANGES:
                yield batch
                batch, self.size = ChangeBatch(), 0
        if feed.resume_lsn:
            batch.position = OpId(feed.resume_lsn, 0)
        yield batch

    def follow(self, feed, follow: Follow) -> Iterator[ChangeBatch]:
        """The feed's runs as batches, checkpointing where ``follow.policy`` says one is due at the safe
        points this source has (a transaction's end, a change inside a transaction, an idle moment), and
        once more when ``follow.stop`` is set, then ending (the runtime moves the slot: ``capture.release``)."""
        batch, self.since, self.size = ChangeBatch(), 0, 0
        policy, last = follow.policy, None
        for run in feed.runs():
            if run is None:  # idle between transactions: everything before idle_lsn was delivered
                position = OpId(feed.idle_lsn, 0)
                due = policy.idle(self.since, moved=last is None or position > last)
            else:
                key = (run.relation.namespace, run.relation.name)
                keep = self._keep(run, key) if key in self.active else np.zeros(len(run), bool)
                batch = yield from self._add(key, run, keep, batch)
                position = run.op_id(len(run) - 1) if run.ends_at is None else OpId(run.ends_at, 0)
                due = policy.inside(self.since) or (run.ends_at is not None and policy.at_end(self.since))
            if due or follow.stop.is_set():
                batch.position, self.since, last = position, 0, position
                policy.checkpointed()
            if batch.position is not None or self.size >= BATCH_CHANGES:
                yield batch
                batch, self.size = ChangeBatch(), 0
            if follow.stop.is_set():
                return

    def _add(self, key: tuple, run, keep: np.ndarray, batch: ChangeBatch):
        """Add the run's kept rows to the batch (after announcing a widened stream); returns the batch."""
        if not keep.any():
            return batch
        if self.relation_seen.get(key) != id(run.relation.columns):
            batch = yield from self._check_relation(key, run, batch)
        if run.ops[0] == _TRUNCATE and run.relation.partition is not None:
            del self.active[key]
            batch.resync[key] = (f"partition {run.relation.partition} was truncated; the destination cannot "
                                 f"remove just that partition's rows, so the stream is loaded anew on the next run")
        else:
            if run.moved is not None:  # key updates: values they did not send come from the table
                run = self.moved.fill(self.capture.tables[key], run, keep)
            batch.runs.append(self.records[key].change_run(run, keep))
            kept = int(keep.sum())
            self.since, self.size = self.since + kept, self.size + kept
        return batch

    def _keep(self, run, key: tuple) -> np.ndarray:
        """Rows above the stream's committed position that its full load's snapshot did not hold."""
        keep = np.ones(len(run), bool)
        held = self.positions[key]
        if held is not None:
            keep = (run.commit > held.commit) | ((run.commit == held.commit) & (run.seq > held.seq))
        horizon = self.horizons[key]
        if horizon is not None:
            below = run.commit < horizon[1]
            seen = [x for x in np.unique(run.xid[below]).tolist() if horizon[0].contains(x)]
            if seen:  # the full load's snapshot already holds these transactions
                keep &= ~(below & np.isin(run.xid, seen))
        return keep

    def _check_relation(self, key: tuple, run, batch: ChangeBatch):
        """Announce a widened stream before its rows (the batch so far goes out first)."""
        self.relation_seen[key] = id(run.relation.columns)
        widened = self.watch.check(self.active[key], run.relation.columns)
        if widened is None:
            return batch
        self.active[key] = widened
        self.records[key] = self._records(widened)
        if batch.runs:
            yield batch
            batch = ChangeBatch()
        batch.widened.append(widened)
        return batch


def _load_horizon(ss: StreamState | None):
    """(snapshot horizon, WAL position after it) of the stream's full load, or None.

    A replayed transaction below that position that the load's snapshot already saw is skipped: the
    full-load rows hold it, and an older image replayed over them could be incomplete. Everything else
    ranks above the full-load rows (they carry the slot's start position as their operation id).
    """
    from olake_cli.sources.postgres.snapshot import SnapshotHorizon

    keys = ss.source if ss is not None else {}
    if not keys.get("snapshot_txns") or not keys.get("snapshot_upto"):
        return None
    return SnapshotHorizon(keys["snapshot_txns"]), parse_lsn(keys["snapshot_upto"])
