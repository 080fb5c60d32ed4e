"""Change capture for PostgreSQL streams: safe-zone checks, slot confirm, and the bounded slot read.

Positions are operation ids (commit LSN, sequence within the transaction), stored in a stream state
as ``cursor_field`` (the LSN's text form) and ``op_seq``. A stream's position says every operation at
or below it is durable in the destination; ``(end of a commit, 0)`` marks a whole transaction done.
The slot is advanced only to the minimum committed position of all its streams (the semi-synchronous
confirm of seeds/004); the pipeline drops operations at or below each stream's own position, so a
run that resumes inside a transaction replays exactly the rest.
"""

from __future__ import annotations

from typing import Any
from collections.abc import Callable, Iterator

import psycopg

from olake_cli.core.catalog import CatalogStream
from olake_cli.core.contracts import ChangeBatch
from olake_cli.core.errors import ConfigError, PositionLostError, SourceChangedError, StateError
from olake_cli.core.follow import CHECKPOINT_EVERY, Follow
from olake_cli.core.opid import OpId
from olake_cli.core.pipeline_identity import PipelineIdentity
from olake_cli.core.position_lost import handle_lost_position
from olake_cli.core.state import State, StreamState
from olake_cli.sources.postgres.connection import PostgresSettings, connect
from olake_cli.sources.postgres.lsn import format_lsn, parse_lsn
from olake_cli.sources.postgres.live_checks import actions_problem, moved_tables, publication_gaps, slot_problem
from olake_cli.sources.postgres.publication import PUBLICATION_ROWS, Membership
from olake_cli.sources.postgres.replica_identity import ResolvedTable


class PostgresChangeCapture:
    """Drives one replication slot for the run's ``cdc`` streams (see ``core.contracts.ChangeCapture``)."""

    def __init__(self, settings: PostgresSettings, streams: list[CatalogStream], log: Callable[[str], None]) -> None:
        if not settings.replication_slot or not settings.publication:
            raise ConfigError("source config: cdc streams need 'replication_slot' and 'publication' "
                              "(run 'olake check' for the SQL that creates them)")
        self.settings, self.streams, self.log = settings, streams, log
        self.tables: dict = {}
        self._start: OpId | None = None
        self._members: dict[tuple, Membership] = {}  # stream key -> the publication rows last seen
        self._resolved: dict[tuple, ResolvedTable] = {}  # stream key -> its table as first found (its oid)
        self._session_settings: dict[str, str] = {}  # set on the feed's connection (decoding memory)
        self._committed: State | None = None  # following: the state the destination last committed
        self._feed = None  # following: the slot read under way, which :meth:`release` moves

    # -- positions ---------------------------------------------------------------------------

    def position_of(self, ss: StreamState | None) -> OpId | None:
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
        return OpId(lsn, int(ss.source.get("op_seq", 0)))

    def with_position(self, ss: StreamState, op: OpId) -> StreamState:
        """A copy of ``ss`` positioned at ``op``, with the publication rows last seen publishing its table."""
        new = ss.copy()
        new.cursor_field = format_lsn(op.commit)
        new.source["op_seq"] = op.seq
        if ss.key in self._members:
            new.source[PUBLICATION_ROWS] = self._members[ss.key].rows()
        return new

    def position_op(self, position: OpId) -> OpId:
        """A PostgreSQL position is an operation id already."""
        return position

    def start_position(self) -> OpId:
        """The slot's confirmed position, read by :meth:`preflight` before any full load."""
        assert self._start is not None, "preflight() runs first"
        return self._start

    def load_marks(self, session) -> dict[str, Any]:
        """The load snapshot's transaction horizon and the WAL position after it (see :func:`_load_horizon`)."""
        snap = session.snapshot
        return {"snapshot_txns": snap.txns, "snapshot_upto": format_lsn(snap.lsn_after)}

    # -- preflight ---------------------------------------------------------------------------

    def preflight(self, state: State, pipeline: PipelineIdentity | None = None) -> None:
        """Refuse a slot another pipeline claimed, create what is allowed, detect lost positions (re-sync
        or fail), capture the start position and say how much WAL the slot retains.

        Without create_slot_and_publication a missing slot or publication is a config error first and
        alone: a typo in a name must not read as a lost position (and mark nothing in the state).
        """
        from olake_cli.sources.postgres.cdc_setup import require_publication_ready, require_usable_slot
        from olake_cli.sources.postgres.change_feed import slot_info
        from olake_cli.sources.postgres.session import resolve_tables
        from olake_cli.sources.postgres.slot_claim import claim_slot

        slot = self.settings.replication_slot
        with connect(self.settings) as conn:
            self.tables = resolve_tables(conn, self.settings, self.streams)
            table_names = [(t.schema, t.table) for t in self.tables.values()]
            if not self.settings.create_slot_and_publication:
                require_usable_slot(slot_info(conn, slot), slot)
                require_publication_ready(conn, self.settings, table_names)
            claim_slot(conn, self.settings, pipeline, self.log)
            self._check_existing_slot(conn, slot_info(conn, slot), state)
            self._check_publication(conn, state)  # before olake adds a table back
            self._create_missing(conn, table_names)
            require_publication_ready(conn, self.settings, table_names)
            self._check_publication(conn, state)  # and the rows publishing each table now
            info = slot_info(conn, slot)
            require_usable_slot(info, slot)
            self._report_retained_wal(conn)
        confirmed = info["confirmed_flush_lsn"]
        for stream in self.streams:
            pos = self.position_of(state.find(stream.namespace, stream.name))
            if pos is not None and pos.commit < confirmed:
                self._lost(state, stream, _past(confirmed, pos))
        self._start = OpId(confirmed, 0)

    def _create_missing(self, conn, table_names: list[tuple[str, str]]) -> None:
        """With create_slot_and_publication: the slot and publication (or the tables it lacks)."""
        from olake_cli.sources.postgres.cdc_setup import ensure_slot_and_publication

        if self.settings.create_slot_and_publication:
            for line in ensure_slot_and_publication(conn, self.settings, table_names):
                self.log(line)

    def _report_retained_wal(self, conn) -> None:
        """How much WAL the slot keeps on the source's disk, and a warning past slot_wal_warn_bytes."""
        from olake_cli.sources.postgres.slot_wal import retained_wal_bytes, retained_wal_lines

        slot = self.settings.replication_slot
        for line in retained_wal_lines(slot, retained_wal_bytes(conn, slot), self.settings.slot_wal_warn_bytes):
            self.log(line)

    def backlog_bytes(self) -> int | None:
        """The WAL the slot retains on the source (see slot_wal.py)."""
        from olake_cli.sources.postgres.slot_wal import retained_wal_bytes

        with connect(self.settings) as conn:
            return retained_wal_bytes(conn, self.settings.replication_slot)

    def _check_existing_slot(self, conn, info: dict | None, state: State) -> None:
        """A missing or invalidated slot loses every stream's position (before anything is created).

        An invalidated pgoutput slot is dropped when olake manages the slot
        (create_slot_and_publication), so that it is created again and the streams re-sync.
        """
        slot, manage = self.settings.replication_slot, self.settings.create_slot_and_publication
        problem = slot_problem(info, slot)
        if problem is not None:
            self._all_lost(state, problem + ("; creating it again" if manage and info is None else ""))
            if info is not None and manage and info["plugin"] == "pgoutput":
                from olake_cli.sources.postgres.change_feed import classify_error

                try:
                    conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
                except psycopg.Error as exc:
                    raise classify_error(exc, slot) from None
                self.log(f"dropped the invalidated replication slot '{slot}'; creating it again")

    def _all_lost(self, state: State, reason: str) -> None:
        for stream in self.streams:
            if self.position_of(state.find(stream.namespace, stream.name)) is not None:
                self._lost(state, stream, reason)

    def _lost(self, state: State, stream: CatalogStream, reason: str) -> None:
        handle_lost_position(state, stream.key, stream.label, reason, self.settings.on_position_lost, self.log)

    def _check_publication(self, conn, state: State) -> None:
        for stream, reason in self._publication_gaps(conn, self.streams, state):
            self._lost(state, stream, reason)

    def _publication_gaps(self, conn, streams: list[CatalogStream], state: State) -> list[tuple[CatalogStream, str]]:
        """Streams with a position whose table was out of the publication since (or is another table now),
        with the reason; SourceChangedError when a table was renamed or dropped since the run found it.

        Every stream with a position is checked against the publication rows its state recorded (a state
        without them only against the publication now); the rows seen now are kept for the states this
        capture positions and recorded in each state that passes.
        """
        tables = self._tables_of(conn, streams)
        lost, gone = moved_tables(conn, tables)
        if gone:
            raise SourceChangedError("; ".join(gone.values()))
        held = {s.key: ss for s in streams if self.position_of(ss := state.find(s.namespace, s.name)) is not None}
        now, gaps = publication_gaps(conn, self.settings.publication, {k: t for k, t in tables.items() if k not in lost},
                                     {k: ss.source.get(PUBLICATION_ROWS) for k, ss in held.items() if k not in lost})
        self._members.update(now)
        lost.update(gaps)
        for key, ss in held.items():
            if key not in lost:
                ss.source[PUBLICATION_ROWS] = now[key].rows()
        return [(s, lost[s.key]) for s in streams if s.key in held and s.key in lost]

    def _tables_of(self, conn, streams: list[CatalogStream]) -> dict[tuple, ResolvedTable]:
        """Each stream's table as the capture first found it (by name, then kept: its oid identifies it)."""
        from olake_cli.sources.postgres.replica_identity import resolve_tables as find_oids

        new = [s for s in streams if s.key not in self._resolved]
        found, missing = find_oids(conn, [(self.tables[s.key].schema, self.tables[s.key].table) for s in new])
        if missing:
            raise SourceChangedError(f"{'.'.join(missing[0])} was renamed or dropped")
        self._resolved.update({s.key: table for s, table in zip(new, found)})
        return {s.key: self._resolved[s.key] for s in streams}

    # -- reading -----------------------------------------------------------------------------

    def read(self, streams: list[CatalogStream], state: State, typed: bool = False) -> Iterator[ChangeBatch]:
        """Read the slot's changes up to the WAL position now (as typed runs when ``typed``), confirming
        the committed positions to the slot on the way (the walsender's flush position)."""
        return self._read(streams, state, typed, None)

    def follow(self, streams: list[CatalogStream], state: State, follow: Follow,
               typed: bool = False) -> Iterator[ChangeBatch]:
        """Read the slot's changes as they are committed, checkpointing on ``follow``'s cadence, until its
        stop request; the slot moves to what the runtime says was committed (:meth:`release`)."""
        return self._read(streams, state, typed, follow)

    def release(self, committed: State) -> int | None:
        """Following: the destination committed ``committed`` (a retried read starts from it); the slot may
        move to the lowest position of the capture's streams in it, which is returned (None: none holds
        one; see ``core.follow.ReleasesLog``)."""
        self._committed = committed
        lsn, feed = self._confirmed_lsn(committed), self._feed
        if lsn is not None and feed is not None:
            feed.confirm(lsn)
        return lsn

    def _confirmed_lsn(self, state: State) -> int | None:
        """The lowest committed position of the capture's streams in ``state`` (None: none holds one).
        A stream ``state`` holds no position for (new in this run: its load ranks at the slot's position
        read by preflight, and the writer may not have committed its first STATE yet) holds the slot there."""
        held = [self.position_of(state.find(s.namespace, s.name)) or self._start for s in self.streams]
        return min((p.commit for p in held if p is not None), default=None)

    def _read(self, streams: list[CatalogStream], state: State, typed: bool,
              follow: Follow | None) -> Iterator[ChangeBatch]:
        from olake_cli.sources.postgres.change_feed import RUN_ROWS, current_wal_lsn, read_changes
        from olake_cli.sources.postgres.change_reader import ChangeReader
        from olake_cli.sources.postgres.decoding import DecodingProgress, measure
        from olake_cli.sources.postgres.live_checks import StreamsLost
        from olake_cli.sources.postgres.moved_rows import MovedRowValues
        from olake_cli.sources.postgres.relation_watch import RelationWatch

        confirm = self._confirmed_lsn(self._committed or state)
        active = {s.key: s for s in streams}
        slot = self.settings.replication_slot
        with connect(self.settings) as conn:
            upto = current_wal_lsn(conn)
            lost = self._lost_positions(conn, streams, state)  # seen after upto: covers what is read
            if len(lost) < len(active):
                routing = self._routing(conn, {k: s for k, s in active.items() if k not in lost}, follow is not None)
                decoding = measure(conn, slot, upto, self.settings.logical_decoding_work_mem_mb)
        yield from self._give_up(lost, state, active, follow)
        if not active:
            return
        self.log(decoding.describe(following=follow is not None))
        self._session_settings = decoding.session_settings()
        watch, moved = RelationWatch(lambda: connect(self.settings), self.log), MovedRowValues(self._feed_connection)
        progress = DecodingProgress(decoding, lambda: connect(self.settings), self.log)
        checks = self._live_checks(active, follow)
        try:
            with read_changes(self._feed_connection, slot, self.settings.publication, None if follow else upto,
                              routing=routing, run_rows=min(RUN_ROWS, CHECKPOINT_EVERY), waiting=progress,
                              confirm_lsn=confirm, between=checks) as feed:
                reader = ChangeReader(self, active, state, watch, moved, typed)
                self._feed = feed if follow else None
                try:
                    yield from (reader.follow(feed, follow) if follow else reader.batches(feed))
                finally:
                    self._feed = None
            if feed.skipped_transactions:
                self.log(f"change capture: left out {feed.skipped_transactions} transaction(s) applied under "
                         f"skipped origins (skip_origins)")
        except StreamsLost as found:  # following: the read ends here (the pipeline starts the run again)
            yield from self._give_up(found.lost, state, active, follow)
        except PositionLostError:  # the slot went away under the read (or as it opened it)
            problem = self._slot_problem()
            if problem is None:
                raise
            yield from self._give_up(dict.fromkeys(active, problem), state, active, follow)
        finally:
            for opened in (progress, watch, moved, checks, routing.find_root):
                if opened is not None:
                    opened.close()

    def _slot_problem(self) -> str | None:
        """Why the slot holds no position now (see ``live_checks.slot_problem``), or None."""
        from olake_cli.sources.postgres.change_feed import slot_info

        with connect(self.settings) as conn:
            return slot_problem(slot_info(conn, self.settings.replication_slot), self.settings.replication_slot)

    def _lost_positions(self, conn, streams: list[CatalogStream], state: State) -> dict[tuple, str]:
        """The streams whose position the slot no longer holds (it is gone, invalidated, or past the
        position), whose changes the publication no longer publishes (an action switched off), or whose
        table was out of the publication since it (see :meth:`_publication_gaps`)."""
        from olake_cli.sources.postgres.change_feed import slot_info

        info = slot_info(conn, self.settings.replication_slot)
        problem = slot_problem(info, self.settings.replication_slot) or actions_problem(conn, self.settings.publication)
        if problem is not None:
            return {s.key: problem for s in streams}
        lost = {s.key: reason for s, reason in self._publication_gaps(conn, streams, state)}
        for stream in streams:
            pos = self.position_of(state.find(stream.namespace, stream.name))
            if pos is not None and pos.commit < info["confirmed_flush_lsn"]:
                lost.setdefault(stream.key, _past(info["confirmed_flush_lsn"], pos))
        return lost

    def _give_up(self, lost: dict[tuple, str], state: State, active: dict[tuple, CatalogStream],
                 follow: Follow | None) -> Iterator[ChangeBatch]:
        """Lost positions as at a start: on_position_lost = fail raises; resync ends the streams' reading
        and yields them to re-sync (on the next run; following, the pipeline starts the run again)."""
        for key, reason in lost.items():
            if self.settings.on_position_lost == "fail":
                self._lost(state, active[key], reason)
            del active[key]
        if lost:
            when = "" if follow else " on the next run"
            yield ChangeBatch(resync={key: f"change position lost: {reason}; loading it anew{when}"
                                      for key, reason in lost.items()})

    def _live_checks(self, active: dict[tuple, CatalogStream], follow: Follow | None):
        """Following: the looks at the tables and the publication between transactions (live_checks.py)."""
        from olake_cli.sources.postgres.live_checks import LiveChecks, check_every

        if follow is None:
            return None
        return LiveChecks(lambda: connect(self.settings), self.settings.publication,
                          {key: self._resolved[key] for key in active}, self._members,
                          check_every(follow.policy))

    def _feed_connection(self):
        """A connection for the slot read: the scan's text formats, and the decoding memory (see decoding.py)."""
        from olake_cli.sources.postgres.types import SCAN_SESSION_SETTINGS

        conn = connect(self.settings)
        for name, value in {**SCAN_SESSION_SETTINGS, **self._session_settings}.items():
            conn.execute(f"SET {name} = '{value}'")
        return conn

    def _routing(self, conn, active: dict[tuple, CatalogStream], following: bool):
        """Leaf partitions of partitioned streams map to their root (by oid and by name; following, a
        partition created later by asking the catalog); each stream's key (key updates)."""
        from olake_cli.sources.postgres.change_feed import FeedRouting
        from olake_cli.sources.postgres.live_checks import NewPartitions
        from olake_cli.sources.postgres.partitions import partition_roots

        infos = [self.tables[key] for key in active]
        roots = partition_roots(conn, [(t.schema, t.table) for t in infos])
        oids = {self._resolved[key].oid: (self.tables[key].schema, self.tables[key].table) for key in active}
        relations = {oid: (oids[root], oid != root) for root, oid in conn.execute(_RELATIONS_SQL, {"oids": list(oids)})}
        return FeedRouting(roots=roots, keys={(t.schema, t.table): tuple(t.primary_key) for t in infos},
                           skip_origins=self.settings.skip_origins, relations=relations,
                           find_root=NewPartitions(lambda: connect(self.settings), oids) if following else None)


_RELATIONS_SQL = """
SELECT r.root, r.root FROM unnest(%(oids)s::oid[]) AS r(root)
UNION ALL SELECT r.root, t.relid FROM unnest(%(oids)s::oid[]) AS r(root), pg_partition_tree(r.root::regclass) t
WHERE t.relid <> r.root
"""


def _past(confirmed: int, position: OpId) -> str:
    return (f"the slot is at {format_lsn(confirmed)}, past the stream's committed position "
            f"{format_lsn(position.commit)} (it was advanced by someone else, or created again)")

