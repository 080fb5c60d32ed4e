"""The coordinating transaction whose exported snapshot every chunk task reads under."""

from __future__ import annotations

from olake_cli.sources.postgres.connection import PostgresSettings, connect


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

    def __enter__(self) -> "ExportedSnapshot":
        import psycopg

        self.conn = connect(self.settings, autocommit=False)
        self.conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        self.conn.read_only = True
        self.snapshot_id = self.conn.execute("SELECT pg_export_snapshot()").fetchone()[0]
        self.txns, lsn = self.conn.execute(
            "SELECT pg_current_snapshot()::text, (pg_current_wal_insert_lsn() - '0/0'::pg_lsn)::text").fetchone()
        self.lsn_after = int(lsn)
        return self

    def __exit__(self, *exc) -> None:
        import psycopg

        if self.conn is not None:
            try:
                self.conn.rollback()  # read only: nothing to keep; a lost connection ended it already
            except psycopg.Error:
                pass
            finally:
                self.conn.close()
                self.conn = None


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
        xid = (self.xmax & ~0xFFFFFFFF) | xid32
        if xid > self.xmax + (1 << 31):
            xid -= 1 << 32
        elif xid < self.xmax - (1 << 31):
            xid += 1 << 32
        return xid < self.xmin or (xid < self.xmax and xid not in self.in_progress)
