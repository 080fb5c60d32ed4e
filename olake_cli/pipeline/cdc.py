"""Change capture for PostgreSQL streams: safe-zone checks, slot confirm, bounded read, per-stream skipping.

Positions are operation ids (commit LSN, sequence within the transaction). A stream's position says
every operation at or below it is durable in the destination; ``(end of a commit, 0)`` marks a whole
transaction done. The slot is advanced only to the minimum committed position of all its streams
(the semi-synchronous confirm of seeds/004), and operations at or below a stream's own position are
dropped here, in the pipeline, so a run that resumes inside a transaction replays exactly the rest.
"""

from __future__ import annotations

import os
import time
from typing import Any, Callable

import orjson
import psycopg

from olake_cli.core import messages
from olake_cli.core.catalog import CatalogStream
from olake_cli.core.errors import ConfigError, PositionLostError, StateError
from olake_cli.core.position import OpId, format_lsn, parse_lsn
from olake_cli.core.state import State, StreamState

# Changes between checkpoints (at transaction ends; inside one huge transaction every 5x as many).
# OLAKE_CDC_CHECKPOINT_EVERY overrides it (tests use a small value to checkpoint mid-transaction).
CHECKPOINT_EVERY = max(1, int(os.environ.get("OLAKE_CDC_CHECKPOINT_EVERY", "20000")))


def position_of(ss: StreamState | None) -> OpId | None:
    """The operation id a stream's state says is committed (None if it holds no change position).

    A state left by another sync mode (an incremental cursor, or the full load it started) holds a
    cursor value, not a change position: the stream simply starts a new full load.
    """
    if ss is None or not isinstance(ss.cursor_field, str) or ss.sync_type == "incremental":
        return None
    try:
        lsn = parse_lsn(ss.cursor_field)
    except StateError:
        if ss.sync_type == "cdc":
            raise
        return None
    return OpId(lsn, int((ss.extra or {}).get("op_seq", 0)))


def with_position(ss: StreamState, op: OpId) -> StreamState:
    """A copy of ``ss`` positioned at ``op``."""
    new = ss.copy()
    new.cursor_field = format_lsn(op.commit_lsn)
    new.extra = {**(new.extra or {}), "op_seq": op.seq}
    return new


class ChangeCapture:
    """Drives one replication slot for the run's ``cdc`` streams."""

    def __init__(self, source, streams: list[CatalogStream], tables: dict, state: State,
                 out: messages.MessageWriter, log: Callable[[str], None]) -> None:
        settings = source.settings
        if not settings.replication_slot or not settings.publication:
            raise ConfigError("source config: cdc streams need 'replication_slot' and 'publication' "
                              "(run 'olake check' for the SQL that creates them)")
        self.source, self.settings, self.streams, self.tables = source, settings, streams, tables
        self.state, self.out, self.log = state, out, log
        self.start_position: str | None = None
        self.changes = 0

    def preflight(self) -> None:
        """Create what is allowed, detect lost positions (re-sync or fail), capture the start position."""
        from olake_cli.sources.postgres.cdc_setup import ensure_slot_and_publication, require_publication_ready
        from olake_cli.sources.postgres.change_feed import slot_info

        slot = self.settings.replication_slot
        with self._connect() as conn:
            self._check_existing_slot(conn, slot_info(conn, slot))
            table_names = [(t.schema, t.table) for t in (self.tables[s.key] for s in self.streams)]
            if self.settings.create_slot_and_publication:
                for line in ensure_slot_and_publication(conn, self.settings, table_names):
                    self.log(line)
            require_publication_ready(conn, self.settings, table_names)
            info = slot_info(conn, slot)
        if info is None:
            raise ConfigError(f"postgres: replication slot '{slot}' does not exist; run: SELECT "
                              f"pg_create_logical_replication_slot('{slot}', 'pgoutput'); or set "
                              f"create_slot_and_publication")
        if info["plugin"] != "pgoutput":
            raise ConfigError(f"postgres: replication slot '{slot}' uses plugin '{info['plugin']}', not pgoutput")
        if info["wal_status"] == "lost":
            raise ConfigError(f"postgres: replication slot '{slot}' is invalidated; drop and recreate it: "
                              f"SELECT pg_drop_replication_slot('{slot}'); "
                              f"SELECT pg_create_logical_replication_slot('{slot}', 'pgoutput');")
        confirmed = info["confirmed_flush_lsn"]
        for stream in self.streams:
            pos = position_of(self.state.find(stream.namespace, stream.name))
            if pos is not None and pos.commit_lsn < confirmed:
                self._lost(stream, f"the slot is at {format_lsn(confirmed)}, past the stream's committed "
                                   f"position {format_lsn(pos.commit_lsn)} (it was advanced by someone else)")
        self.start_position = format_lsn(confirmed)

    def _connect(self):
        from olake_cli.sources.postgres.connection import connect

        return connect(self.settings)

    def _check_existing_slot(self, conn, info: dict | None) -> None:
        """A missing or invalidated slot loses every stream's position (before anything is created).

        An invalidated pgoutput slot is dropped when olake manages the slot
        (create_slot_and_publication), so that it is created again and the streams re-sync.
        """
        slot, manage = self.settings.replication_slot, self.settings.create_slot_and_publication
        if info is None:
            self._all_lost(f"replication slot '{slot}' does not exist (dropped?)"
                           + ("; creating it again" if manage else ""))
        elif info["wal_status"] == "lost":
            self._all_lost(f"replication slot '{slot}' was invalidated (wal_status = lost: the server "
                           f"removed WAL it still needed, see max_slot_wal_keep_size)")
            if manage and info["plugin"] == "pgoutput":
                from olake_cli.sources.postgres.change_feed import classify_error

                try:
                    conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
                except psycopg.Error as exc:
                    raise classify_error(exc, slot) from None
                self.log(f"dropped the invalidated replication slot '{slot}'; creating it again")

    def _all_lost(self, reason: str) -> None:
        for stream in self.streams:
            if position_of(self.state.find(stream.namespace, stream.name)) is not None:
                self._lost(stream, reason)

    def _lost(self, stream: CatalogStream, reason: str) -> None:
        if self.settings.on_position_lost == "fail":
            raise PositionLostError(f"{stream.label}: change position lost: {reason} "
                                    f"(on_position_lost = fail; set it to resync to re-copy the stream)")
        self.log(f"{stream.label}: change position lost: {reason}; re-syncing with a fresh full load "
                 f"(on_position_lost = resync)")
        self.state.streams = [s for s in self.state.streams if s.key != stream.key]

    def run(self) -> None:
        """Confirm committed positions to the slot, then read changes up to now and emit them."""
        from olake_cli.sources.postgres.change_feed import advance_slot, current_wal_lsn, read_changes
        from olake_cli.sources.postgres.connection import connect
        from olake_cli.sources.postgres.relation_watch import RelationWatch

        active = {s.key: s for s in self.streams
                  if (self.state.find(s.namespace, s.name) or StreamState("", "", None)).sync_type == "cdc"}
        if not active:
            return
        held = [position_of(self.state.find(s.namespace, s.name)) for s in self.streams]
        confirm = min(p.commit_lsn for p in held if p is not None)
        with connect(self.settings) as conn:
            advance_slot(conn, self.settings.replication_slot, confirm)
            upto = current_wal_lsn(conn)
            routing = self._routing(conn, active)
        started = time.monotonic()
        watch = RelationWatch(self._connect, self.log)
        try:
            with read_changes(lambda: self._feed_connection(), self.settings.replication_slot,
                              self.settings.publication, upto, routing=routing) as feed:
                self._consume(feed, active, watch)
        finally:
            watch.close()
        elapsed = max(time.monotonic() - started, 1e-6)
        self.log(f"change capture: {self.changes} change(s) up to {format_lsn(upto)} in {elapsed:.1f}s "
                 f"({self.changes / elapsed:,.0f}/s)")

    def _feed_connection(self):
        from olake_cli.sources.postgres.connection import connect
        from olake_cli.sources.postgres.types import SCAN_SESSION_SETTINGS

        conn = connect(self.settings)
        for name, value in SCAN_SESSION_SETTINGS.items():
            conn.execute(f"SET {name} = '{value}'")
        return conn

    def _routing(self, conn, active: dict[tuple, CatalogStream]):
        """Leaf partitions of partitioned streams map to their root; each stream's key (key updates)."""
        from olake_cli.sources.postgres.partitions import partition_roots
        from olake_cli.sources.postgres.change_feed import FeedRouting

        infos = [self.tables[key] for key in active]
        roots = partition_roots(conn, [(t.schema, t.table) for t in infos])
        return FeedRouting(roots=roots, keys={(t.schema, t.table): tuple(t.primary_key) for t in infos})

    def _consume(self, feed, active: dict[tuple, CatalogStream], watch) -> None:
        positions = {k: position_of(self.state.find(*k)) for k in active}
        horizons = {k: _load_horizon(self.state.find(*k)) for k in active}
        converters = {k: self._converter(s) for k, s in active.items()}
        prefixes = {k: _record_prefix(s) for k, s in active.items()}
        relation_seen: dict[tuple, int] = {}
        lines: list[bytes] = []
        since, txn, emitted_at = 0, None, b"0"
        for ev in feed:
            if ev.op_id.commit_lsn != txn:
                if txn is not None and since >= CHECKPOINT_EVERY and feed.last_end_lsn:
                    self._flush_lines(lines)
                    self._checkpoint(active, OpId(feed.last_end_lsn, 0))
                    since = 0
                txn = ev.op_id.commit_lsn
            key = (ev.namespace, ev.table)
            stream = active.get(key)
            if stream is None or ev.op_id <= positions[key]:
                continue
            horizon = horizons[key]
            if horizon is not None and ev.op_id.commit_lsn < horizon[1] and horizon[0].contains(ev.xid):
                continue  # the full load's snapshot already holds this transaction
            if relation_seen.get(key) != id(ev.columns):
                relation_seen[key] = id(ev.columns)
                widened = watch.check(stream, ev.columns)
                if widened is not None:
                    self._flush_lines(lines)
                    stream = active[key] = widened
                    converters[key] = self._converter(widened)
                    self.out.write(messages.catalog_message({"streams": [widened.to_dict()]}))
            if ev.op == "t" and ev.partition is not None:
                self._flush_lines(lines)
                self._resync(active, key, f"partition {ev.partition} was truncated")
                continue
            if not self.changes & 1023:
                emitted_at = str(int(time.time() * 1000)).encode()
            lines.append(b"".join((prefixes[key], emitted_at, b',"data":',
                                   orjson.dumps(self._data(ev, converters[key])), b"}}\n")))
            self.changes += 1
            since += 1
            if len(lines) >= 1000:
                self._flush_lines(lines)
            if since >= 5 * CHECKPOINT_EVERY:  # a huge transaction: checkpoint inside it
                self._flush_lines(lines)
                self._checkpoint(active, ev.op_id)
                since = 0
        self._flush_lines(lines)
        if feed.resume_lsn:
            self._checkpoint(active, OpId(feed.resume_lsn, 0))

    def _converter(self, stream: CatalogStream):
        """The row converter of a stream; its errors name the stream, the column and the row's key."""
        from olake_cli.core.pgtext import make_row_converter

        return make_row_converter(stream.json_schema, stream.label, tuple(self.tables[stream.key].primary_key))

    def _flush_lines(self, lines: list[bytes]) -> None:
        if lines:
            self.out.write_raw(b"".join(lines))
            lines.clear()

    def _data(self, ev, convert) -> dict[str, Any]:
        """The record data of one change: converted values plus the _olake_* metadata."""
        if ev.op == "t":
            data: dict[str, Any] = {}
        elif ev.op == "d":
            data, _ = convert(ev.old or {})
        else:
            row = ev.new
            data, unchanged = convert(row)
            if unchanged:
                data, unchanged = self._fill_unchanged(data, unchanged, ev, convert)
                if unchanged:
                    data["_olake_toast_unchanged"] = unchanged
        data["_olake_op"] = ev.op
        data["_olake_op_id"] = [ev.op_id.commit_lsn, ev.op_id.seq]
        data["_olake_commit_ts"] = ev.commit_ts_us
        return data

    @staticmethod
    def _fill_unchanged(data: dict, unchanged: list[str], ev, convert) -> tuple[dict, list[str]]:
        """Under REPLICA IDENTITY FULL the old row carries values the new row marks unchanged."""
        if not ev.old:
            return data, unchanged
        from olake_cli.core.values import UNCHANGED_TOAST

        known = {c: ev.old[c] for c in unchanged if c in ev.old and ev.old[c] is not UNCHANGED_TOAST}
        if known:
            filled, _ = convert(known)
            data.update({c: filled[c] for c in known if c in filled})
        return data, [c for c in unchanged if c not in known]

    def _resync(self, active: dict[tuple, CatalogStream], key: tuple, reason: str) -> None:
        """Stop capturing a stream and mark it for a fresh full load on the next run."""
        stream = active.pop(key)
        self.log(f"{stream.label}: {reason}; the destination cannot remove just that partition's rows, "
                 f"so the stream is loaded anew on the next run")
        ss = StreamState("full-load", stream.name, stream.namespace, None, [],
                         {"sync_mode": stream.sync_mode, "columns": stream.columns})
        self.state.upsert(ss)
        self.out.write(messages.state_message(State(level="stream", streams=[ss])))

    def _checkpoint(self, active: dict[tuple, CatalogStream], op: OpId) -> None:
        for key in active:
            ss = self.state.find(*key)
            if position_of(ss) is None or position_of(ss) < op:
                ss = with_position(ss, op)
                self.state.upsert(ss)
                self.out.write(messages.state_message(State(level="stream", streams=[ss])))


def _load_horizon(ss: StreamState | None):
    """(snapshot horizon, WAL position after it) of the stream's full load, or None.

    A replayed transaction below that position that the load's snapshot already saw is skipped: the
    full-load rows hold it, and an older image replayed over them could be incomplete. Everything else
    ranks above the full-load rows (they carry the slot's start position as their operation id).
    """
    from olake_cli.sources.postgres.snapshot import SnapshotHorizon

    extra = (ss.extra or {}) if ss is not None else {}
    if not extra.get("snapshot_txns") or not extra.get("snapshot_upto"):
        return None
    return SnapshotHorizon(extra["snapshot_txns"]), parse_lsn(extra["snapshot_upto"])


def _record_prefix(stream: CatalogStream) -> bytes:
    """The bytes every RECORD line of ``stream`` starts with, up to its emitted_at value."""
    head = orjson.dumps({"type": "RECORD", "record": {"stream": stream.name, "namespace": stream.namespace,
                                                      "emitted_at": 0}})
    return head[: head.rindex(b"0}}")]
