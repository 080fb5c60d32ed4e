"""The change feed's unit: a run of consecutive row changes of one relation version, by column.

A run may span transactions (each row carries its commit LSN, commit time and transaction id). Its
messages are decoded at once (``pgoutput_columns``); an update that moves a row to another primary
key becomes a delete of the old key followed by the update, and every row gets its operation id
``(commit LSN, 1-based sequence within the transaction)``.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Any
from collections.abc import Generator

import numpy as np
import pyarrow.compute as pc

from olake_cli.core.opid import OpId
from olake_cli.core.values import UNCHANGED_TOAST
from olake_cli.sources.postgres.pgoutput import Value
from olake_cli.sources.postgres.pgoutput_columns import (DELETE, INSERT, KEY_TUPLE, OLD_TUPLE, TEXT, TOAST, UPDATE,
                                                         TupleColumn, decode_run)

ColumnInfo = tuple[str, int, int]  # (name, type_oid, typmod)
_OP_CODES = np.zeros(256, np.uint8)
_OP_CODES[[INSERT, UPDATE, DELETE]] = [ord("c"), ord("u"), ord("d")]
_D, _T = ord("d"), ord("t")
_OID_BYTES = operator.itemgetter(slice(1, 5))  # a row change message's relation id


@dataclass(slots=True)
class ChangeEvent:
    """One committed row change (or one truncated relation): the per-row view of a :class:`FeedRun`.

    ``new`` maps every column to its text value, ``None`` (NULL) or ``UNCHANGED_TOAST``; ``old`` is
    the whole old row for REPLICA IDENTITY FULL, only the key columns for a key ('K') old tuple,
    and ``None`` when the server sent no old tuple (inserts, updates that kept the key).
    """

    op: str  # 'c' insert, 'u' update, 'd' delete, 't' truncate
    namespace: str
    table: str
    op_id: OpId  # (commit LSN of the transaction, 1-based sequence within it)
    commit_ts_us: int  # Unix epoch microseconds
    new: dict[str, Value] | None
    old: dict[str, Value] | None
    columns: list[ColumnInfo]  # shared per relation version; a new Relation message gives a new list
    lsn: int  # LSN of the change's WAL record
    xid: int = 0  # the transaction's id (32 bits, as pgoutput sends it)
    partition: str | None = None  # the leaf partition it came from, when routed to its root stream


@dataclass(slots=True)
class FeedRun:
    """Row changes of one relation version in log order; per row arrays, per column tuples.

    ``ops`` holds the codes of ``c``/``u``/``d``/``t``; a delete's data is its old tuple (``old_markers``
    says ``K``: key columns only, or ``O``: the whole row). ``ends_at`` is the end of the commit that
    follows the last row, when the run ends with its transaction (a checkpoint may be placed there).
    ``moved`` marks the updates that moved a row to another key (each follows the delete of its old
    key); None when the run holds none.
    """

    relation: Any  # change_feed._RelationView
    ops: np.ndarray
    commit: np.ndarray
    seq: np.ndarray
    commit_ts: np.ndarray
    xid: np.ndarray
    lsn: np.ndarray
    old_markers: np.ndarray
    new: list[TupleColumn]
    old: list[TupleColumn]
    ends_at: int | None = None
    moved: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.ops)

    def split(self, at: int) -> tuple[FeedRun, FeedRun]:
        """The rows before ``at`` and the rest (only the rest may end with a transaction)."""
        def part(start: int, stop: int | None, ends_at: int | None) -> FeedRun:
            cut = slice(start, stop)
            return FeedRun(self.relation, self.ops[cut], self.commit[cut], self.seq[cut], self.commit_ts[cut],
                           self.xid[cut], self.lsn[cut], self.old_markers[cut],
                           [c.rows(start, stop) for c in self.new], [c.rows(start, stop) for c in self.old], ends_at,
                           None if self.moved is None else self.moved[cut])
        return part(0, at, None), part(at, None, self.ends_at)

    def op_id(self, row: int) -> OpId:
        """The operation id of a row."""
        return OpId(int(self.commit[row]), int(self.seq[row]))

    def events(self) -> list[ChangeEvent]:
        """The run as one ChangeEvent per row."""
        rel = self.relation
        new = [_python_values(c) for c in self.new]
        old = [_python_values(c) for c in self.old]
        events = []
        for i in range(len(self)):
            op = chr(self.ops[i])
            marker = self.old_markers[i]
            old_row = None if not marker else {name: col[i] for name, col, key in zip(rel.names, old, rel.key_flags)
                                               if marker == OLD_TUPLE or key}
            new_row = None if op in "dt" else dict(zip(rel.names, (col[i] for col in new)))
            events.append(ChangeEvent(op, rel.namespace, rel.name, self.op_id(i), int(self.commit_ts[i]), new_row,
                                      old_row, rel.columns, int(self.lsn[i]), int(self.xid[i]), rel.partition))
        return events


def _python_values(column: TupleColumn) -> list[Value]:
    texts = column.texts.to_pylist()
    for i in np.flatnonzero(column.kinds == TOAST):
        texts[i] = UNCHANGED_TOAST
    return texts


class PendingRun:
    """Messages of one relation version collected until the feed cuts the run (the feed appends to
    ``messages`` and ``lsns`` directly, and clears ``ends_at``: its hot path; it calls ``begin`` at each
    transaction's Begin, so nothing per message is a tuple)."""

    def __init__(self, relation: Any, seq_base: int, commit: int, commit_ts: int, xid: int) -> None:
        self.relation, self.seq_base = relation, seq_base
        self.messages: list[bytes] = []
        self.lsns: list[int] = []
        self.transactions: list[tuple[int, int, int, int]] = [(0, commit, commit_ts, xid)]  # (first message, ...)
        self.ends_at: int | None = None

    def __len__(self) -> int:
        return len(self.messages)

    def begin(self, commit: int, commit_ts: int, xid: int) -> None:
        """The messages that follow belong to this transaction."""
        self.transactions.append((len(self.messages), commit, commit_ts, xid))

    def finish(self, encoding: str) -> FeedRun:
        """Decode the run; key updates become a delete then the update; number the rows."""
        rel = self.relation
        tuples = decode_run(self.messages, len(rel.names), encoding)
        firsts = np.array([t[0] for t in self.transactions] + [len(self.messages)], np.int64)
        per_transaction = np.array([t[1:] for t in self.transactions], np.int64).reshape(-1, 3)
        per_row = np.empty((len(self.messages), 4), np.int64)
        per_row[:, :3] = np.repeat(per_transaction, np.diff(firsts), axis=0)
        per_row[:, 3] = np.fromiter(self.lsns, np.int64, len(self.lsns))
        repeat = 1 + _key_changed(tuples, rel)
        rows = np.repeat(np.arange(len(self.messages)), repeat)
        first = np.ones(len(rows), bool)
        first[1:] = rows[1:] != rows[:-1]
        ops = _OP_CODES[tuples.kinds[rows]]
        ops[first & (repeat[rows] == 2)] = _D
        commit = per_row[rows, 0]
        new, old, moved = tuples.new, tuples.old, None
        if len(rows) != len(self.messages):
            new, old, moved = [c.take(rows) for c in new], [c.take(rows) for c in old], ~first
        return FeedRun(rel, ops, commit, _sequence(commit, self.seq_base), per_row[rows, 1], per_row[rows, 2],
                       per_row[rows, 3], tuples.old_markers[rows], new, old, self.ends_at, moved)


def add_stretch(datas: list[bytes], lsns: list[int], relations: dict[int, Any], pending: PendingRun | None,
                seq: int, transaction: tuple[int, int, int], cap: int,
                encoding: str) -> Generator[FeedRun, None, tuple[PendingRun | None, int]]:
    """Row change messages that follow each other in the feed added to the pending run, which is cut
    where the relation changes and at ``cap`` messages; yields the runs completed, returns the pending
    run and the sequence reached. ``transaction``: the current (commit, commit_ts, xid)."""
    oids = np.frombuffer(b"".join(map(_OID_BYTES, datas)), ">u4")
    cuts = [0] + (np.flatnonzero(oids[1:] != oids[:-1]) + 1).tolist() + [len(oids)]
    for first, end in zip(cuts, cuts[1:]):  # one relation each
        rel, i = relations[int(oids[first])], first
        while i < end:
            if pending is not None and (pending.relation is not rel or len(pending.messages) >= cap):
                run = pending.finish(encoding)
                seq, pending = seq_after(run, transaction[0], seq), None
                yield run
            if pending is None:
                pending = PendingRun(rel, seq, *transaction)
            taken = min(end - i, cap - len(pending.messages))
            pending.messages.extend(datas[i:i + taken])
            pending.lsns.extend(lsns[i:i + taken])
            pending.ends_at = None
            i += taken
    return pending, seq


def seq_after(run: FeedRun, commit_lsn: int, seq: int) -> int:
    """The sequence reached in the current transaction once ``run`` is numbered."""
    return int(run.seq[-1]) if run.commit[-1] == commit_lsn else seq


def truncate_run(relation: Any, commit: int, seq: int, commit_ts: int, xid: int, lsn: int) -> FeedRun:
    """A one-row run for a truncated relation."""
    one = lambda value: np.array([value], np.int64)  # noqa: E731
    return FeedRun(relation, np.array([_T], np.uint8), one(commit), one(seq), one(commit_ts), one(xid), one(lsn),
                   np.zeros(1, np.uint8), [], [])


def _sequence(commit: np.ndarray, base: int) -> np.ndarray:
    """1-based positions within each transaction (the first one continues from ``base``)."""
    counter = np.arange(1, len(commit) + 1)
    starts = np.ones(len(commit), bool)
    starts[1:] = commit[1:] != commit[:-1]
    before = np.maximum.accumulate(np.where(starts, counter - 1, 0))
    return counter - before + np.where(commit == commit[0], base, 0)


def _key_changed(tuples, rel) -> np.ndarray:
    """Per message: an update that moved the row to another primary key (a key not sent did not change)."""
    undecided = (tuples.kinds == UPDATE) & (tuples.old_markers != 0)
    changed = np.zeros(len(undecided), np.int64)
    if not rel.stream_key or not undecided.any():
        return changed
    index = {name: i for i, name in enumerate(rel.names)}
    for name in rel.stream_key:
        i = index.get(name)
        if i is None:
            break
        before, after = tuples.old[i], tuples.new[i]
        sent = (tuples.old_markers == OLD_TUPLE) | ((tuples.old_markers == KEY_TUPLE) & rel.key_flags[i])
        usable = sent & (before.kinds != TOAST) & (after.kinds != TOAST) & (before.kinds != 0)
        texts_differ = pc.fill_null(pc.not_equal(before.texts, after.texts), False).to_numpy(zero_copy_only=False)
        differ = (before.kinds != after.kinds) | ((before.kinds == TEXT) & texts_differ)
        changed |= undecided & usable & differ
        undecided &= usable & ~differ
    return changed

