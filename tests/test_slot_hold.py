"""The slot waits for a stream new in the run. A following run hears of each commit as the writer makes
it; the first may hold only the streams that were there before (a stream's own STATE at the run's start)
and not yet the new stream whose load starts at the slot's position read at the run's start. Moving
the slot past that position then made the next run find the new stream's position lost and load it
all again (seen in the suite: a SIGTERM in the middle of a load beside the others)."""

from __future__ import annotations

import psycopg

from olake_cli.core.catalog import parse_catalog
from olake_cli.core.state import State
from olake_cli.sources.postgres.capture import PostgresChangeCapture
from olake_cli.sources.postgres.connection import PostgresSettings
from olake_cli.sources.postgres.lsn import parse_lsn
from tests.support.states import stream_state


def _stream(name: str) -> dict:
    return {"name": name, "namespace": "public", "sync_mode": "cdc", "primary_key": [["id"]],
            "json_schema": {"type": "object", "properties": {
                "id": {"type": ["null", "integer"], "x-olake-type": "int32", "x-pg-type": "integer"}}}}


def test_a_stream_the_committed_state_does_not_hold_yet_keeps_the_slot_at_the_runs_start(pg_cluster, pg_db):
    slot = f"hold_{pg_db}"
    with psycopg.connect(pg_cluster.dsn(pg_db), autocommit=True) as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY)")
        conn.execute("CREATE TABLE fresh (id int PRIMARY KEY)")
        conn.execute(f"CREATE PUBLICATION {slot}_pub FOR TABLE t, fresh")
        conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (slot,))
        conn.execute("INSERT INTO t SELECT generate_series(1, 100)")
        ahead = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()[0]  # t's committed position
    settings = PostgresSettings.from_config(pg_cluster.source_config(pg_db, replication_slot=slot,
                                                                     publication=f"{slot}_pub"))
    streams = parse_catalog({"streams": [_stream("t"), _stream("fresh")]}).streams
    try:
        capture = PostgresChangeCapture(settings, streams, lambda line: None)
        capture.preflight(State(streams=[stream_state("cdc", "t", "public", ahead, None, op_seq=0)]))
        start = capture.start_position().commit  # where the new stream's load ranks
        assert parse_lsn(ahead) > start
        first_commit = State(level="stream", streams=[stream_state("cdc", "t", "public", ahead, None, op_seq=0)])
        assert capture.release(first_commit) <= start
    finally:
        with psycopg.connect(pg_cluster.dsn(pg_db), autocommit=True) as conn:
            conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
