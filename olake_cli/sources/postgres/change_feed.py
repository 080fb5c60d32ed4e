"""PostgreSQL change feed: read a pgoutput logical slot and yield committed changes, in commit order.

The slot is read over the streaming replication protocol (``replication.py``: a logical walsender,
``START_REPLICATION``): the server sends each transaction as soon as it has decoded it, so rows flow
while the rest of the range is decoded. A bounded read stops at ``upto`` (a WAL position captured
by the caller): it delivers exactly the transactions whose commit lies before it, like
``pg_logical_slot_peek_binary_changes(slot, upto, ...)`` did, then ends its replication session cleanly.

Reading does not consume: the slot's confirmed position moves only to what the caller says the
destination committed (``confirm_lsn``, reported as the walsender's flush position, never further),
or by :func:`advance_slot`. Positions, as PostgreSQL defines them:

* confirming a transaction's ``end_lsn`` (:attr:`ChangeStream.last_end_lsn`) skips it;
* confirming its ``commit_lsn`` (``OpId.commit``) delivers it again on the next read, which is
  what a resume from a destination's max OpId needs: the pipeline then drops events ``<=`` that
  OpId (seeds/000), so a transaction cut in the middle is completed, never lost.

A transaction whose Origin message (sent by pgoutput for a transaction applied under a replication
origin) names an origin in ``FeedRouting.skip_origins`` is left out; the positions still move past it.
"""

from __future__ import annotations

import operator
import struct
from typing import Any
from collections.abc import Callable, Iterator

import numpy as np
import psycopg
from psycopg import sql

from olake_cli.core.errors import (ConfigError, OlakeError, PositionLostError, SourceError,
                                   TransientError)
from olake_cli.sources.postgres.feed_routing import FeedRouting, RelationView
from olake_cli.sources.postgres.lsn import format_lsn
from olake_cli.sources.postgres.feed_runs import (ChangeEvent, FeedRun, PendingRun, add_stretch, seq_after,
                                                  truncate_run)
from olake_cli.sources.postgres.pgoutput import Begin, Commit, Origin, Relation, Truncate, decode
from olake_cli.sources.postgres.replication import (Batch, Idle, ReplicationConnection, StreamReader, Waiting,
                                                    replication_conninfo, session_statements, wait_released)

ConnectionSource = psycopg.Connection | Callable[[], psycopg.Connection]

_IS_ROW_CHANGE = np.zeros(256, bool)  # by a message's first byte: Insert, Update, Delete
_IS_ROW_CHANGE[list(b"IUD")] = True
_FIRST = operator.itemgetter(0)
_COMMIT = ord("C")
_U32 = struct.Struct(">I").unpack_from
SLOT_BUSY_WAIT_S = 5.0  # a slot another process holds is awaited this long, then the run fails (transient)
RUN_ROWS = 5000  # a run is cut at the first commit after this many rows, and anywhere at twice as many
_PY_ENCODINGS = {"UTF8": "utf-8", "SQL_ASCII": "utf-8", "LATIN1": "latin-1", "WIN1252": "cp1252",
                 "EUC_JP": "euc_jp", "SJIS": "shift_jis", "GBK": "gbk", "BIG5": "big5"}


def slot_info(conn: psycopg.Connection, slot: str) -> dict[str, Any] | None:
    """The slot's plugin, confirmed_flush_lsn / restart_lsn (ints or None), wal_status, active, database."""
    row = conn.execute(
        "SELECT plugin, (confirmed_flush_lsn - '0/0'::pg_lsn)::text, (restart_lsn - '0/0'::pg_lsn)::text,"
        " wal_status, active, database, slot_type FROM pg_replication_slots WHERE slot_name = %s",
        (slot,)).fetchone()
    if row is None:
        return None
    return {"plugin": row[0], "confirmed_flush_lsn": _int_or_none(row[1]),
            "restart_lsn": _int_or_none(row[2]), "wal_status": row[3], "active": row[4],
            "database": row[5], "slot_type": row[6]}


def current_wal_lsn(conn: psycopg.Connection) -> int:
    """The WAL insert position: every commit visible now lies before it.

    ``pg_current_wal_insert_lsn()``, not ``pg_current_wal_lsn()``: the latter is the *write*
    position, which lags behind visible commits when ``synchronous_commit = off``.
    """
    return _lsn_query(conn, "pg_current_wal_insert_lsn()")


def current_flush_lsn(conn: psycopg.Connection) -> int:
    """The WAL position known to be on disk; logical decoding never reads past it."""
    return _lsn_query(conn, "pg_current_wal_flush_lsn()")


def advance_slot(conn: psycopg.Connection, slot: str, lsn: int) -> None:
    """Move the slot's confirmed position to ``lsn``; a no-op when it is already there or beyond."""
    try:
        info = _require_slot(conn, slot)
        if info["confirmed_flush_lsn"] is not None and info["confirmed_flush_lsn"] >= lsn:
            return
        conn.execute("SELECT pg_replication_slot_advance(%s, %s::pg_lsn)", (slot, format_lsn(lsn)))
    except psycopg.Error as exc:
        raise classify_error(exc, slot) from None


def read_changes(source: ConnectionSource, slot: str, publication: str, upto_lsn: int | None,
                 batch_size: int = 10000, routing: FeedRouting | None = None, run_rows: int = RUN_ROWS,
                 waiting: Waiting | None = None, confirm_lsn: int | None = None,
                 between: Callable[[], None] | None = None) -> ChangeStream:
    """Stream committed changes of ``slot`` (pgoutput, ``publication``) up to ``upto_lsn``, in commit order.

    ``source`` is an open connection (left open) or a factory (its connection is closed at the end):
    it checks the slot, and its session's text formats and decoding memory are given to the
    replication connection opened beside it. ``confirm_lsn``: what the destination committed; the
    read starts there and the slot's confirmed position moves there (never backwards). The returned
    :class:`ChangeStream` gives :class:`FeedRun`s (``runs()``) or, iterated, one :class:`ChangeEvent`
    per change; it also reports the last commit seen and, once exhausted, the position the whole
    range was read to. ``waiting`` is told how long the feed has waited for the server, every
    ``waiting.every_s`` seconds. ``batch_size``: at most this many messages are decoded at once.

    Without ``upto_lsn`` the read follows the slot until closed: ``runs()`` then also yields None
    whenever the server is idle between transactions, with :attr:`ChangeStream.idle_lsn` saying how far
    everything has been delivered, and :meth:`ChangeStream.confirm` moves the slot on the way; ``between``
    is called between transactions (after each commit and at each idle moment), and what it raises ends
    the read.
    """
    return ChangeStream(source, slot, publication, upto_lsn, batch_size, routing or FeedRouting(),
                        max(1, run_rows), waiting, confirm_lsn, between)


class ChangeStream:
    """Runs of changes (or ChangeEvents) from one bounded read; its attributes tell how far it got."""

    def __init__(self, source: ConnectionSource, slot: str, publication: str, upto_lsn: int | None, batch_size: int,
                 routing: FeedRouting, run_rows: int, waiting: Waiting | None, confirm_lsn: int | None,
                 between: Callable[[], None] | None = None) -> None:
        self.slot, self.publication, self.upto_lsn = slot, publication, upto_lsn
        self.read_upto_lsn: int | None = None  # upto_lsn clamped to the flushed WAL
        self.last_commit_lsn: int | None = None
        self.last_end_lsn: int | None = None
        self.last_commit_ts_us: int | None = None
        self.transactions = 0
        self.skipped_transactions = 0  # applied under an origin the routing skips
        self.finished = False
        self.idle_lsn = 0  # following: every transaction committed before it has been delivered
        self._replication: ReplicationConnection | None = None
        self._source, self._batch_size, self._waiting = source, batch_size, waiting
        self._routing, self._run_rows, self._confirm = routing, run_rows, confirm_lsn or 0
        self._between = between or (lambda: None)
        self._runs = self._generate()

    def runs(self) -> Iterator[FeedRun | None]:
        """The changes as runs, in log order (the fast path); following, None marks an idle moment."""
        return self._runs

    def confirm(self, lsn: int) -> None:
        """Following: the destination committed everything before ``lsn``; the slot may move there."""
        if self._replication is not None and lsn > self._replication.flush:
            self._replication.flush = lsn

    def __iter__(self) -> Iterator[ChangeEvent]:
        return (event for run in self._runs if run is not None for event in run.events())

    def __enter__(self) -> ChangeStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop early: end the replication session (and close the connection if this stream opened it)."""
        self._runs.close()

    @property
    def resume_lsn(self) -> int | None:
        """Once exhausted, where the slot may be advanced when everything yielded is durable: the end of
        the range read (or the server's position when it said it had sent everything before a later one),
        which also skips transactions with nothing published. None before (a run's ``ends_at`` tells
        where its transaction ends)."""
        if self.finished and self.read_upto_lsn is not None:
            sent = self._replication.server_end if self._replication is not None else 0
            return max(self.read_upto_lsn, self.last_end_lsn or 0, sent)
        return None

    def _generate(self) -> Iterator[FeedRun]:
        owned = not isinstance(self._source, psycopg.Connection)
        conn = self._source() if owned else self._source
        try:
            if self.upto_lsn is not None:
                self.read_upto_lsn = _flush_wal(conn, self.upto_lsn)
            encoding, confirmed = _check_ready(conn, self.slot, self.publication)
            yield from self._stream(conn, max(confirmed, self._confirm), encoding)
            self.finished = True
        except psycopg.Error as exc:
            raise classify_error(exc, self.slot) from None
        finally:
            if owned:
                conn.close()

    def _stream(self, conn: psycopg.Connection, start: int, encoding: str) -> Iterator[FeedRun]:
        """Replicate from ``start`` (also reported as flushed) up to the range's end; the walsender has
        released the slot when this returns."""
        replication = ReplicationConnection(replication_conninfo(conn))
        replication.flush, walsender = start, replication.pid
        self._replication = replication
        try:
            for statement in session_statements(conn):
                replication.execute(statement)
            wait_released(conn, self.slot, timeout_s=SLOT_BUSY_WAIT_S)  # a killed run's walsender may linger
            replication.start(self.slot, self.publication, start)
        except BaseException:
            replication.close()
            raise
        try:
            upto = None if self.upto_lsn is None else self.read_upto_lsn
            with StreamReader(replication, upto, self._batch_size, self._waiting) as batches:
                yield from self._decode_rows(batches, encoding)
        finally:
            try:
                wait_released(conn, self.slot, walsender)
            except psycopg.Error:
                pass  # the error that ended the read is the one to report

    def _decode_rows(self, batches: Iterator[Batch | Idle], encoding: str) -> Iterator[FeedRun | None]:
        """Turn batches of pgoutput messages into runs of changes stamped with (commit_lsn, seq)."""
        try:
            yield from self._stamp_runs(batches, encoding)
        except KeyError as exc:
            raise SourceError(f"pgoutput: change for relation {exc.args[0]} before its Relation message") from None
        except (IndexError, ValueError, struct.error) as exc:
            raise SourceError(f"pgoutput: malformed message: {exc}") from None

    def _stamp_runs(self, batches: Iterator[Batch | Idle], encoding: str) -> Iterator[FeedRun | None]:
        relations: dict[int, RelationView] = {}
        pending: PendingRun | None = None
        commit_lsn = seq = ts = xid = 0
        skipping = False  # the transaction came from an origin the routing skips
        inside = False  # between a Begin and its Commit
        following = self.upto_lsn is None
        for item in batches:  # the row changes between two other messages are taken a stretch at a time
            if type(item) is Idle:
                if not inside:
                    if pending is not None:
                        yield pending.finish(encoding)
                        pending = None
                    self.idle_lsn = max(self.idle_lsn, item.wal_end, self.last_end_lsn or 0)
                    self._between()
                    yield None
                continue
            lsns, datas = item
            kinds = np.frombuffer(bytes(map(_FIRST, datas)), np.uint8)
            others = np.flatnonzero(~_IS_ROW_CHANGE[kinds]).tolist()
            # following, the rows of the transactions this batch completes go on with it (a busy log
            # sends no idle moment to hand them on at, and more rows may take seconds to come)
            commits = np.flatnonzero(kinds == _COMMIT) if following else ()
            handed = int(commits[-1]) if len(commits) else -1
            start = 0
            for at in others + [len(datas)]:
                if at > start and not skipping:
                    pending, seq = yield from add_stretch(datas[start:at], lsns[start:at], relations, pending,
                                                          seq, (commit_lsn, ts, xid), 2 * self._run_rows, encoding)
                if at == len(datas):
                    break
                lsn, data, start = lsns[at], datas[at], at + 1
                msg = decode(data, encoding)
                kind = type(msg)
                if kind is Begin:
                    if self.last_commit_lsn is not None and msg.final_lsn <= self.last_commit_lsn:
                        raise SourceError(f"pgoutput: transaction at {format_lsn(msg.final_lsn)} out of commit order")
                    commit_lsn, ts, seq, xid = msg.final_lsn, msg.commit_ts_us, 0, msg.xid
                    skipping, inside = False, True
                    if pending is not None:
                        pending.begin(commit_lsn, ts, xid)
                elif kind is Origin:
                    skipping = self._routing.skips(msg.name)
                    self.skipped_transactions += skipping
                elif kind is Commit:
                    self._on_commit(msg, commit_lsn)
                    inside = False
                    if pending is not None:
                        pending.ends_at = msg.end_lsn
                        if len(pending) >= self._run_rows or at == handed:
                            yield pending.finish(encoding)
                            pending = None
                    self._between()
                elif kind is Relation:
                    relations[msg.oid] = RelationView(msg, self._routing)
                elif kind is Truncate and not skipping:
                    if pending is not None:
                        run = pending.finish(encoding)
                        seq, pending = seq_after(run, commit_lsn, seq), None
                        yield run
                    for oid in msg.rel_oids:
                        seq += 1
                        yield truncate_run(relations[oid], commit_lsn, seq, ts, xid, lsn)
                # Type and LogicalMessage carry nothing a destination needs.
        if pending is not None:
            yield pending.finish(encoding)

    def _on_commit(self, msg: Commit, begin_lsn: int) -> None:
        if msg.commit_lsn != begin_lsn:
            raise SourceError(f"pgoutput: Commit {format_lsn(msg.commit_lsn)} does not match its Begin")
        self.last_commit_lsn, self.last_end_lsn = msg.commit_lsn, msg.end_lsn
        self.last_commit_ts_us = msg.commit_ts_us
        self.transactions += 1


def classify_error(exc: psycopg.Error, slot: str) -> OlakeError:
    """Map a server error from slot functions to the olake error tree."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    if isinstance(exc, psycopg.errors.UndefinedObject) and "replication slot" in text:
        return PositionLostError(f"postgres: replication slot '{slot}' does not exist ({text})")
    if isinstance(exc, psycopg.errors.ObjectNotInPrerequisiteState) and (
            "no longer" in text or "invalidated" in text):
        return PositionLostError(f"postgres: replication slot '{slot}' lost its WAL position ({text})")
    if "replication role" in text:
        return ConfigError(f"postgres: reading slot '{slot}' needs a replication connection, which this role may "
                           f"not open: ALTER ROLE ... REPLICATION ({text})")
    if "max_wal_senders" in text:
        return TransientError(f"postgres: the server has no free walsender to read slot '{slot}'; wait for other "
                              f"replication connections to end, or raise max_wal_senders ({text})")
    if isinstance(exc, psycopg.errors.ObjectInUse):
        return TransientError(f"postgres: replication slot '{slot}' is in use by another process ({text})")
    if isinstance(exc, (psycopg.errors.UndefinedObject, psycopg.errors.InsufficientPrivilege)):
        return ConfigError(f"postgres: {text}")
    if isinstance(exc, psycopg.OperationalError):
        return TransientError(f"postgres: connection failed while reading slot '{slot}' ({text})")
    return SourceError(f"postgres: reading slot '{slot}' failed ({text})")


def _check_ready(conn: psycopg.Connection, slot: str, publication: str) -> tuple[str, int]:
    """Fail clearly before replicating; return the Python codec for the server encoding and the slot's
    confirmed position."""
    info = _require_slot(conn, slot)
    if info["slot_type"] != "logical" or info["plugin"] != "pgoutput":
        raise ConfigError(f"postgres: replication slot '{slot}' uses plugin {info['plugin']!r}, not 'pgoutput'")
    if info["database"] != conn.info.dbname:
        raise ConfigError(f"postgres: replication slot '{slot}' belongs to database "
                          f"'{info['database']}', not '{conn.info.dbname}'")
    if conn.execute("SELECT 1 FROM pg_publication WHERE pubname = %s", (publication,)).fetchone() is None:
        raise ConfigError(f"postgres: publication '{publication}' does not exist")
    server_encoding = conn.execute("SHOW server_encoding").fetchone()[0]
    return _PY_ENCODINGS.get(server_encoding.upper(), server_encoding), info["confirmed_flush_lsn"] or 0


def _require_slot(conn: psycopg.Connection, slot: str) -> dict[str, Any]:
    info = slot_info(conn, slot)
    if info is None:
        raise PositionLostError(f"postgres: replication slot '{slot}' does not exist")
    if info["wal_status"] == "lost":
        raise PositionLostError(f"postgres: replication slot '{slot}' lost the WAL it needs (wal_status=lost)")
    return info


def _flush_wal(conn: psycopg.Connection, upto_lsn: int) -> int:
    """Have the server flush its WAL now; return ``upto_lsn``, or the flush position if that is lower.

    Decoding reads only flushed WAL. A commit can be visible before its WAL is flushed
    (``synchronous_commit = off``), and the walwriter leaves a last partial page of other records
    (vacuum, page pruning) unflushed until something else flushes it. When WAL before ``upto_lsn`` is
    not flushed yet, committing a transactional logical message with ``synchronous_commit = local``
    flushes everything before it at once (no privilege needed; pgoutput sends messages only to those
    who ask, olake does not). The clamp keeps :attr:`ChangeStream.resume_lsn` honest should the commit
    not flush (a caller's open transaction).
    """
    with conn.transaction():
        if current_flush_lsn(conn) < upto_lsn:
            conn.execute("SET LOCAL synchronous_commit = local")
            conn.execute("SELECT pg_logical_emit_message(true, 'olake', 'flush')")
    return min(upto_lsn, current_flush_lsn(conn))


def _lsn_query(conn: psycopg.Connection, expression: str) -> int:
    query = sql.SQL("SELECT ({} - '0/0'::pg_lsn)::text").format(sql.SQL(expression))
    return int(conn.execute(query).fetchone()[0])


def _int_or_none(text: str | None) -> int | None:
    return None if text is None else int(text)
