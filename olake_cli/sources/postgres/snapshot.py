"""The coordinating transaction whose exported snapshot every chunk task reads under."""

from __future__ import annotations

from psycopg import sql

from olake_cli.core.errors import SourceChangedError
from olake_cli.sources.postgres.connection import PostgresSettings, connect
from olake_cli.sources.postgres.lock_watch import LockWatch

# Every lock request of a load waits at most ``lock_timeout`` seconds before the load stops. A table
# being loaded cannot be altered, rewritten or dropped (the exporting transaction holds ACCESS SHARE on
# it); when another session asks to, its ACCESS EXCLUSIVE request queues every later lock request on
# the table, the next chunk scan's included, and without a timeout the load and that session would
# wait for each other forever (no deadlock is detected: the exporting session is idle).
BEING_ALTERED = ("{label} is being altered or dropped by another session (it waits for a lock this "
                 "load holds); the load stopped so that session is not blocked; committed chunks are "
                 "kept, run again to continue")


def rewritten_query(qualified: str) -> sql.Composable:
    """Counts the leaves of table ``qualified`` whose storage changed since the transaction's snapshot:
    ``pg_class`` read under the snapshot against ``pg_relation_filenode`` (the catalog now). Run it
    while holding a lock on the table; a rewrite (VACUUM FULL, CLUSTER, TRUNCATE, a rewriting ALTER
    TABLE) makes an older snapshot see the table empty, or its rows at other ctids."""
    return sql.SQL(
        """SELECT count(*) FROM (SELECT relid FROM pg_partition_tree({q}::regclass) WHERE isleaf
           UNION SELECT {q}::regclass) t JOIN pg_class c ON c.oid = t.relid
           WHERE c.relkind IN ('r', 'm') AND c.relfilenode <> pg_relation_filenode(c.oid)""").format(
        q=sql.Literal(qualified))


class ExportedSnapshot:
    """Holds a REPEATABLE READ transaction open and exports its snapshot id for the chunk tasks.

    It also records the snapshot's transaction horizon (``pg_current_snapshot()``: xmin, xmax and
    the transactions in progress) and the WAL insert position read just after it. Every transaction
    the snapshot sees committed before that position, so change capture can decide, per replayed
    transaction below it, whether the full load already contains it.
    """

    def __init__(self, settings: PostgresSettings) -> None:
        self.settings = settings
        self.conn = None
        self.snapshot_id: str | None = None
        self.txns: str | None = None  # pg_current_snapshot() text: 'xmin:xmax:xip,...'
        self.lsn_after: int | None = None  # WAL insert position read just after the snapshot
        self._held: set[tuple[str, str]] = set()
        self._watch: LockWatch | None = None

    def __enter__(self) -> ExportedSnapshot:
        import psycopg

        self.conn = connect(self.settings, autocommit=False)
        self.conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        self.conn.read_only = True
        self.conn.execute(f"SET lock_timeout = '{int(self.settings.lock_timeout)}s'")
        self.snapshot_id = self.conn.execute("SELECT pg_export_snapshot()").fetchone()[0]
        self.txns, lsn = self.conn.execute(
            "SELECT pg_current_snapshot()::text, (pg_current_wal_insert_lsn() - '0/0'::pg_lsn)::text").fetchone()
        self.lsn_after = int(lsn)
        # a second more than a chunk's own timeout: a chunk waiting on its table reports it first
        self._watch = LockWatch(self.settings, self.conn.info.backend_pid, self._release,
                                self.settings.lock_timeout + 1)
        self._watch.start()
        return self

    def _release(self) -> None:
        """End the exporting transaction (the lock watch found a session waiting for its locks)."""
        import psycopg

        try:
            self.conn.rollback()
        except psycopg.Error:
            pass

    def hold(self, schema: str, table: str, label: str) -> None:
        """Lock ``schema.table`` (ACCESS SHARE, until the load ends: with a view its tables, with a
        partitioned table its partitions) so no other session alters, rewrites or drops it mid-load.

        SourceChangedError if another session is altering it now, or rewrote it (new relfilenode)
        after the snapshot was taken and before this lock: the snapshot would see it empty or moved.
        """
        import psycopg

        self._raise_if_released()
        if (schema, table) in self._held:
            return
        name = sql.SQL("{}.{}").format(sql.Identifier(schema), sql.Identifier(table))
        try:
            self.conn.execute(sql.SQL("SELECT FROM {} LIMIT 0").format(name))
            rewritten = self.conn.execute(rewritten_query(name.as_string(self.conn))).fetchone()[0]
        except psycopg.errors.LockNotAvailable:
            raise SourceChangedError(BEING_ALTERED.format(label=label)) from None
        except psycopg.errors.UndefinedTable:
            raise SourceChangedError(f"{label} was dropped while the run started; run again "
                                     "(run discover again if it is gone for good)") from None
        if rewritten:
            raise SourceChangedError(f"{label} was rewritten (VACUUM FULL, CLUSTER, TRUNCATE or a rewriting "
                                     "ALTER TABLE) while the run started; run again")
        self._held.add((schema, table))

    def _raise_if_released(self) -> None:
        """SourceChangedError once the lock watch has ended the transaction for a waiting session."""
        if self._watch is not None and self._watch.blocked is not None:
            raise SourceChangedError(BEING_ALTERED.format(label=self._watch.blocked))

    def __exit__(self, *exc) -> None:
        import psycopg

        if self._watch is not None:
            self._watch.stop()
        if self.conn is not None:
            try:
                self.conn.rollback()  # read only: nothing to keep; a lost connection ended it already
            except psycopg.Error:
                pass
            finally:
                self.conn.close()
                self.conn = None
        if exc[0] is None:
            self._raise_if_released()  # the chunks that failed since name only the lost snapshot


class SnapshotHorizon:
    """Which transactions a snapshot sees as committed, from its ``pg_current_snapshot()`` text.

    pgoutput reports 32-bit transaction ids; they are widened to 64 bits next to the snapshot's xmax,
    which is exact for every transaction within 2^31 ids of the snapshot (all that can matter: the
    filter applies only to transactions committed before ``snapshot_upto``).
    """

    def __init__(self, text: str) -> None:
        xmin, xmax, xip = text.split(":")
        self.xmin, self.xmax = int(xmin), int(xmax)
        self.in_progress = frozenset(int(x) for x in xip.split(",") if x)

    def contains(self, xid32: int) -> bool:
        """Whether the transaction ``xid32`` had committed when the snapshot was taken."""
        xid = widen_xid(xid32, self.xmax)
        return xid < self.xmin or (xid < self.xmax and xid not in self.in_progress)


def widen_xid(xid32: int, near: int) -> int:
    """The 64-bit transaction id whose low 32 bits are ``xid32``, within 2^31 ids of ``near`` (a 64-bit id)."""
    xid = (near & ~0xFFFFFFFF) | xid32
    if xid > near + (1 << 31):
        xid -= 1 << 32
    elif xid < near - (1 << 31):
        xid += 1 << 32
    return xid
