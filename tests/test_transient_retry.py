"""A chunk whose connection the server terminates mid-read (pg_terminate_backend: SQLSTATE 57P01) is
retried under the same exported snapshot, and the copy is still exact."""

from __future__ import annotations

import json
import threading
import time

import psycopg
import pytest

from tests.support.cli import read_into_write, run_olake, write_json
from tests.support.verify import assert_table_matches, read_parquet


class ChunkKiller(threading.Thread):
    """Terminates the first chunk scan it sees running (the coordinator's snapshot connection is idle)."""

    def __init__(self, dsn: str) -> None:
        super().__init__(daemon=True)
        self.dsn, self.killed, self.stop = dsn, 0, threading.Event()

    def run(self) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            while not self.stop.is_set() and not self.killed:
                row = conn.execute("SELECT pid FROM pg_stat_activity WHERE state = 'active' AND "
                                   "application_name = 'olake' AND pid <> pg_backend_pid() AND "
                                   "query LIKE 'COPY (SELECT %%FROM \"public\".\"big\"%%' LIMIT 1").fetchone()
                if row:
                    self.killed += conn.execute("SELECT pg_terminate_backend(%s)", row).fetchone()[0]
                time.sleep(0.01)


def test_terminated_chunk_connection_is_retried(pg_cluster, pg_db, tmp_path):
    dsn = pg_cluster.dsn(pg_db)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE big (id int PRIMARY KEY, a text, b text)")
        conn.execute("INSERT INTO big SELECT g, md5(g::text), repeat(md5(g::text), 8) FROM generate_series(1, 200000) g")
    src = write_json(tmp_path / "src.json", pg_cluster.source_config(pg_db, chunk_rows=50_000))
    dst = write_json(tmp_path / "dst.json", {"type": "parquet", "path": str(tmp_path / "lake")})
    disc = run_olake("discover", "--config", src)
    (tmp_path / "cat.json").write_bytes(disc.stdout)
    killer = ChunkKiller(dsn)
    killer.start()
    try:
        result = read_into_write(["--config", src, "--catalog", str(tmp_path / "cat.json")], ["--config", dst])
    finally:
        killer.stop.set()
        killer.join()
    assert killer.killed == 1, "no chunk scan was caught running"
    assert result.read_code == 0 and result.write_code == 0, result.read_stderr.decode()[-2000:]
    assert b"retrying (attempt 2)" in result.read_stderr
    stream = json.loads(disc.stdout)["catalog"]["streams"][0]
    with psycopg.connect(dsn) as conn:
        assert_table_matches(conn, "public", "big", stream["json_schema"], read_parquet(str(tmp_path / "lake" / "public" / "big")))


def test_a_chunk_that_cannot_reconnect_is_transient(pg_cluster, pg_db):
    """A server restarting refuses the chunk's new connection ('Failed to connect', no SQLSTATE through
    ADBC): planning already reached it, so the run stops with a transient error, not a system error."""
    import socket

    from olake_cli.core.errors import TransientError
    from olake_cli.sources.postgres.scan import PostgresChunkReader

    with socket.socket() as probe:  # a port nothing listens on: what a restarting server looks like
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    uri = pg_cluster.uri(pg_db).replace(f":{pg_cluster.port}/", f":{port}/")
    reader = PostgresChunkReader("public.big", 0, "SELECT 1", uri, None)
    with pytest.raises(TransientError, match="chunk 0 of public.big"):
        list(reader.read_batches())
