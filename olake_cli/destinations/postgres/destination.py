"""PostgreSQL destination: one table per stream, each STATE committed with its rows in one transaction.

Tables are ``<schema>.<table_prefix><stream>`` (``schema`` defaults to the stream's namespace),
created with the source's exact types and key or checked before anything is written (tables.py).
Full loads go in by COPY (commit.py; from Spark tasks under ``sync``, chunk_sink.py), changes by
set-based statements (apply.py), and each stream's state lives in ``_olake.streams`` beside its rows
(bookkeeping.py), so ``state recover`` reads it back. Every write runs under the configured
replication origin (session.py), which is what two-way replication builds on.
"""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import replace
from typing import Any
from collections.abc import Callable

from olake_cli.core.catalog import Catalog, CatalogStream
from olake_cli.core.contracts import CommitBatch
from olake_cli.core.errors import ConfigError
from olake_cli.core.locks import host_lock_path
from olake_cli.destinations.postgres import bookkeeping
from olake_cli.destinations.postgres.apply import Applied, ChangeApplier
from olake_cli.destinations.postgres.chunk_sink import PostgresChunkSink
from olake_cli.destinations.postgres.commit import CommitContext, StreamCommit, prepare_commit, send_commit
from olake_cli.destinations.postgres.commit_queue import CommitQueue
from olake_cli.destinations.postgres.config import TargetSettings
from olake_cli.destinations.postgres.conflicts import ConflictRule, keep_versions, prepare_table
from olake_cli.destinations.postgres.load_copy import passthrough_casts
from olake_cli.destinations.postgres.session import classify, commit_under_origin, ensure_origin, open_connection
from olake_cli.destinations.postgres.stream import PostgresStream
from olake_cli.destinations.postgres.tables import (TargetTable, check_table, create_table, evolve,
                                                    existing_columns, plan_table, retyped_columns, unique_keys)

_MIN_CONFLICT_VERSION = 140000  # pg_xact_commit_timestamp_origin


class PostgresDestination:
    """Each STATE commits the rows before it with that state, one transaction per stream, on a commit
    thread of its own."""

    follow_commit_interval_s = 1.0  # --follow's default cadence: a commit is one transaction per stream

    def __init__(self, config: dict[str, Any], log: Callable[[str], None]) -> None:
        self.settings = TargetSettings.from_config(config)
        self.log = log
        self._conn: Any = None
        self._context: CommitContext | None = None
        self.streams: dict[tuple, PostgresStream] = {}
        self.sink: PostgresChunkSink | None = None
        self.totals = Applied()
        self._commits: CommitQueue | None = None

    # -- connection ----------------------------------------------------------------------------

    @property
    def context(self) -> CommitContext:
        """The driver's connection and what commits need, opened on first use."""
        if self._context is None:
            self._conn = open_connection(self.settings)
            try:
                bookkeeping.ensure_bookkeeping(self._conn)
                origin_id = ensure_origin(self._conn, self.settings.origin)
                rule = self._conflict_rule(origin_id)
            except Exception as exc:
                raise classify(exc, self.settings, "preparing the target") from None
            applier = ChangeApplier(self._conn, rule, self.settings.soft_delete, self.log)
            self._context = CommitContext(self._conn, self.settings.origin, applier, self.log)
        return self._context

    def _conflict_rule(self, origin_id: int | None) -> ConflictRule | None:
        """Conflicts are decided when writes carry an origin and the target keeps commit timestamps."""
        conn = self._conn
        tracked = conn.execute("SELECT current_setting('track_commit_timestamp') = 'on', "
                               "current_setting('server_version_num')::int").fetchone()
        conn.commit()
        if origin_id is None or not tracked[0] or tracked[1] < _MIN_CONFLICT_VERSION:
            return None
        return ConflictRule(origin_id, self.settings.origin, self.settings.local_origin)

    def check(self) -> str:
        """Connect, and verify what writing needs: CREATE for new schemas and tables, the origin functions."""
        from olake_cli.destinations.postgres.checks import check_target

        conn = open_connection(self.settings)
        try:
            return check_target(conn, self.settings)
        except Exception as exc:
            raise classify(exc, self.settings, "checking the target") from None
        finally:
            conn.close()

    def lock_path(self) -> str:
        """The lock file runs writing into this database's tables take (``core.locks``): a file on this
        host, as a database offers no folder every host would see."""
        s = self.settings
        return host_lock_path("postgres", f"{s.host}:{s.port}/{s.database}|{s.schema or ''}|{s.table_prefix}")

    def chunk_sink(self) -> PostgresChunkSink:
        """Spark tasks of ``sync`` COPY their full-load chunks into the target themselves."""
        if self.sink is None:
            self.sink = PostgresChunkSink(self.settings)
            for buf in self.streams.values():
                self.sink.tables[buf.stream.key] = buf.table
        return self.sink

    # -- tables --------------------------------------------------------------------------------

    def open(self, catalog: Catalog) -> None:
        """Create or check every selected stream's table (all are checked before any is created)."""
        streams = [s for s in catalog.selected_streams() if s.key not in self.streams]
        self._settle()
        conn = self.context.conn
        try:
            plans = [self._plan(conn, stream) for stream in streams]
            conn.rollback()
            for stream, (plan, existing) in zip(streams, plans):
                self._prepare(conn, stream, plan, existing)
        except Exception as exc:
            _rollback_quietly(conn)
            raise classify(exc, self.settings, "preparing the tables") from None

    def _plan(self, conn, stream: CatalogStream) -> tuple[TargetTable, dict | None]:
        if stream.sync_mode == "cdc" and not stream.primary_key_columns:
            raise ConfigError(f"postgres destination: stream {stream.label} has no primary key; its changes "
                              f"cannot be applied to a table by key (copy it with full_refresh instead)")
        ident = self.settings.table_of(stream.namespace, stream.name)
        taken = [b.stream.label for b in self.streams.values() if b.table.ident == ident]
        if taken:
            raise ConfigError(f"postgres destination: streams {taken[0]} and {stream.label} would both write "
                              f"table {ident[0]}.{ident[1]}; set 'schema' and 'table_prefix' apart")
        plan = plan_table(conn, stream, ident, self.settings.metadata_columns, self.log)
        existing = existing_columns(conn, ident)
        if existing is not None:  # a table olake writes already is widened with its source
            plan = check_table(plan, existing, unique_keys(conn, ident), widen=bookkeeping.is_managed(conn, ident))
        elif self._dropped_in_two_way(conn, stream, ident):
            raise ConfigError(f"postgres destination: table {ident[0]}.{ident[1]} (stream {stream.label}) was dropped "
                              f"after olake wrote into it, and this database is the source of another direction (it "
                              f"has a logical replication slot): DROP TABLE is not replicated, and a table made anew "
                              f"here would be loaded or changed apart from the other node's copy. Drop it on the "
                              f"other node as well and deselect the stream in both directions, or restore it here "
                              f"with the other node's rows")
        return plan, existing

    def _dropped_in_two_way(self, conn, stream: CatalogStream, ident: tuple[str, str]) -> bool:
        """Whether a missing table is one olake wrote into and that was dropped in a two-way setup: conflicts
        are decided, the stream keeps its rows between runs, and a logical slot reads this database."""
        if self.context.applier.rule is None or stream.sync_mode == "full_refresh" \
                or not bookkeeping.is_managed(conn, ident):
            return False
        return conn.execute("SELECT EXISTS (SELECT FROM pg_replication_slots WHERE database = current_database() "
                            "AND slot_type = 'logical')").fetchone()[0]

    def _prepare(self, conn, stream: CatalogStream, plan: TargetTable, existing: dict | None) -> None:
        kept = False
        if existing is None:
            create_table(conn, plan)
            bookkeeping.forget_table(conn, plan.ident)  # what a table dropped outside olake had committed
            self.log(f"{stream.label}: created table {plan.describe()}")
        else:
            changed, kept = self._evolve(conn, plan, existing)
            if changed:
                self.log(f"{stream.label}: added or widened column(s) {', '.join(changed)} of table "
                         f"{plan.describe()}")
        plan = replace(plan, copy_casts=passthrough_casts(conn, plan))
        if self.context.applier.rule is not None and plan.key:
            prepare_table(conn, plan, self.settings.tombstone_hours)
        committed = bookkeeping.committed_state(conn, plan.ident, self.settings.origin)
        self._commit_ddl(conn, kept)
        target = PostgresStream(stream, plan, committed.state, committed.max_op_id, committed.at)
        inner = (committed.state or {}).get("stream_state") or {}
        if any(c.get("status") == "succeed" for c in inner.get("chunks") or []):
            target.resumed_load = inner.get("load_id")
        self.streams[stream.key] = target
        if self.sink is not None:
            self.sink.tables[stream.key] = plan

    def _evolve(self, conn, plan: TargetTable, existing: dict) -> tuple[list[str], bool]:
        """``tables.evolve``; where conflicts are decided, the rows' versions are kept first when a column
        changes type (``conflicts.keep_versions``). The columns changed, and whether versions were kept."""
        rule = self.context.applier.rule
        kept = rule is not None and bool(plan.key) and bool(retyped_columns(plan, existing))
        if kept:
            keep_versions(conn, plan, rule)
        return evolve(conn, plan, existing), kept

    def _commit_ddl(self, conn, kept: bool) -> None:
        """Commit a table's preparation; after rows' versions were kept, under the origin, so that a row
        the rewrite touched and whose version was unknown counts as this destination's write."""
        if kept:
            commit_under_origin(conn, self.settings.origin, step="postgres-ddl")
        else:
            conn.commit()

    def stream_target(self, key: tuple) -> PostgresStream | None:
        """An opened stream."""
        return self.streams.get(key)

    def widen(self, stream: CatalogStream) -> None:
        """Later records of ``stream`` follow its wider schema: columns are added or widened in place."""
        buf = self.streams[stream.key]
        self._settle()
        conn = self.context.conn
        try:
            plan = plan_table(conn, stream, buf.table.ident, self.settings.metadata_columns, self.log)
            keys, existing = unique_keys(conn, plan.ident), existing_columns(conn, plan.ident) or {}
            changed, kept = self._evolve(conn, check_table(plan, existing, keys, widen=True), existing)
            plan = check_table(plan, existing_columns(conn, plan.ident) or {}, keys)
            self.context.applier.forget(plan.ident)
            self._commit_ddl(conn, kept)
        except Exception as exc:
            _rollback_quietly(conn)
            raise classify(exc, self.settings, f"widening table {buf.table.describe()}") from None
        if changed:  # (a catalog change that leaves every column's type, such as a bound on digits: none)
            self.log(f"{stream.label}: table {plan.describe()} gained or widened columns")
        buf.stream, buf.table = stream, plan
        if self.sink is not None:
            self.sink.tables[stream.key] = plan

    # -- commits --------------------------------------------------------------------------------

    def commit(self, batches: list[CommitBatch]) -> None:
        """Commit each batch's rows with its stream state, one transaction each."""
        self.begin_commit(batches, lambda: None).result()

    def begin_commit(self, batches: list[CommitBatch], on_commit: Callable[[], None]) -> Future:
        """Prepare the commit of ``batches`` here and send it on the commit thread, which then calls
        ``on_commit``; a Future done after ``on_commit`` returns. Commits are made in the order begun;
        none after one that fails (or whose ``on_commit`` fails)."""
        context, works = self.context, []
        for batch in batches:
            buf = self.streams[batch.state.key]
            try:
                works.append(prepare_commit(buf, batch, context))
            except Exception as exc:
                raise classify(exc, self.settings, f"preparing the commit of {buf.stream.label}") from None
        if self._commits is None:
            self._commits = CommitQueue("olake-postgres-commit")
        return self._commits.submit(lambda: self._send(works, on_commit))

    def _send(self, works: list[StreamCommit], on_commit: Callable[[], None]) -> None:
        """On the commit thread: each stream's prepared commit, its errors as one line; then ``on_commit``."""
        context = self.context
        for work in works:
            try:
                applied = send_commit(work, context)
            except Exception as exc:
                _rollback_quietly(context.conn)
                raise classify(exc, self.settings, f"committing {work.buf.stream.label} into "
                                                   f"{work.buf.table.describe()}") from None
            if applied is not None:
                self._count(applied)
        on_commit()

    def _settle(self) -> None:
        """Wait for the commits under way (the connection is free for other statements after)."""
        if self._commits is not None:
            self._commits.settle()

    def _count(self, applied: Applied) -> None:
        for line in applied.conflict_lines:
            self.log(line)
        if applied.conflicts > len(applied.conflict_lines):
            self.log(f"... and {applied.conflicts - len(applied.conflict_lines)} more conflict(s) in this commit "
                     f"(every conflict is a row of _olake.conflicts)")
        totals = self.totals
        totals.upserted += applied.upserted
        totals.deleted += applied.deleted
        totals.conflicts += applied.conflicts
        totals.kept_target += applied.kept_target

    def summary(self) -> str:
        """The run's changes and conflicts, for the closing log line."""
        self._settle()
        t = self.totals
        return (f"postgres: {t.upserted} row(s) inserted or updated and {t.deleted} deleted by changes; "
                f"{t.conflicts} conflict(s), {t.kept_target} kept the target's newer row")

    def committed_state(self, stream: CatalogStream) -> dict | None:
        """The stream state this destination's origin committed in ``_olake.streams`` with the stream's
        table, or None."""
        ident = self.settings.table_of(stream.namespace, stream.name)
        conn = open_connection(self.settings)
        try:
            return bookkeeping.committed_state(conn, ident, self.settings.origin).state
        except Exception as exc:
            raise classify(exc, self.settings, "reading the committed state") from None
        finally:
            conn.close()


def _rollback_quietly(conn) -> None:
    """Roll back after a failure (a connection the failure broke has nothing to roll back)."""
    if not (conn.closed or conn.broken):
        try:
            conn.rollback()
        except Exception:  # it broke meanwhile: the server rolled back
            pass
