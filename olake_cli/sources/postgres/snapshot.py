"""The coordinating transaction whose exported snapshot every chunk task reads under."""

from __future__ import annotations

from olake_cli.sources.postgres.connection import PostgresSettings, connect


class ExportedSnapshot:
    """Holds a REPEATABLE READ transaction open and exports its snapshot id for the chunk tasks."""

    def __init__(self, settings: PostgresSettings) -> None:
        self.settings = settings
        self.conn = None
        self.snapshot_id: str | None = None
        self.lsn_before: int | None = None  # WAL insert position read just before the snapshot

    def __enter__(self) -> "ExportedSnapshot":
        import psycopg

        with connect(self.settings) as probe:  # before the snapshot: every later commit lies above it
            self.lsn_before = probe.execute(
                "SELECT (pg_current_wal_insert_lsn() - '0/0'::pg_lsn)::text").fetchone()[0]
            self.lsn_before = int(self.lsn_before)
        self.conn = connect(self.settings, autocommit=False)
        self.conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        self.conn.read_only = True
        self.snapshot_id = self.conn.execute("SELECT pg_export_snapshot()").fetchone()[0]
        return self

    def __exit__(self, *exc) -> None:
        if self.conn is not None:
            try:
                self.conn.rollback()
            finally:
                self.conn.close()
                self.conn = None
