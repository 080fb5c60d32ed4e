"""COPY TO STDOUT read straight from libpq (sources/postgres/copy_out.py) gives psycopg's bytes, in
blocks of whole rows, inside the caller's transaction; errors keep their SQLSTATE."""

from __future__ import annotations

import time

import psycopg
import pytest
from psycopg import sql

from olake_cli.sources.postgres.copy_out import copy_out_blocks

COPY = sql.SQL("COPY (SELECT * FROM copied ORDER BY id) TO STDOUT (FORMAT binary)")


@pytest.fixture
def dsn(pg_cluster, pg_db):
    dsn = pg_cluster.dsn(pg_db)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("""CREATE TABLE copied AS SELECT g AS id, repeat('é', g % 40) AS s, g * 1.5 AS n,
                        CASE WHEN g % 7 = 0 THEN NULL ELSE now() END AS at FROM generate_series(1, 50000) g""")
    return dsn


def test_the_blocks_are_psycopgs_bytes_in_the_callers_snapshot(dsn):
    with psycopg.connect(dsn) as conn:
        with conn.cursor() as cur, cur.copy(COPY) as copy:
            expected = b"".join(bytes(data) for data in copy)
    with psycopg.connect(dsn) as conn:
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        conn.execute("SELECT 1")  # the snapshot is taken
        with psycopg.connect(dsn, autocommit=True) as other:
            other.execute("INSERT INTO copied VALUES (0, 'later', 0, NULL)")
        blocks = list(copy_out_blocks(conn, COPY, 64 * 1024))
        assert conn.execute("SELECT count(*) FROM copied").fetchone() == (50000,)  # same transaction, usable
    assert b"".join(blocks) == expected
    assert len(blocks) > 10 and all(64 * 1024 <= len(b) < 64 * 1024 + 200 for b in blocks[:-1])


def test_an_error_keeps_its_sqlstate_and_an_early_stop_closes_the_connection(dsn):
    with psycopg.connect(dsn) as conn:
        with pytest.raises(psycopg.errors.UndefinedTable):
            list(copy_out_blocks(conn, sql.SQL("COPY (SELECT * FROM missing) TO STDOUT"), 1024))
        assert conn.closed
    with psycopg.connect(dsn) as conn:
        blocks = copy_out_blocks(conn, COPY, 1024)
        next(blocks)
        blocks.close()
        assert conn.closed
    with psycopg.connect(dsn, autocommit=True) as conn:  # the server lets the abandoned COPY go
        deadline = time.monotonic() + 10
        while conn.execute("SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'COPY (SELECT * FROM copied%' "
                           "AND pid <> pg_backend_pid()").fetchone() != (0,):
            assert time.monotonic() < deadline, "the abandoned COPY still runs on the server"
            time.sleep(0.1)
