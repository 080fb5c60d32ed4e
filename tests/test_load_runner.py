"""Small full loads are scanned in the olake process (pipeline/load_runner.py); larger ones, and loads of
unknown size, go to Spark. Either way the destination holds the source's rows, value by value."""

from __future__ import annotations

import io

import psycopg
import pytest

from olake_cli.core.catalog import parse_catalog
from olake_cli.core.messages import MessageWriter
from olake_cli.core.registry import make_destination
from olake_cli.core.state import FileStateStore
from olake_cli.engine.chunk_runner import SparkChunkRunner
from olake_cli.pipeline.load_runner import LoadRunner
from olake_cli.pipeline.sync import run_in_process
from olake_cli.sources.postgres.source import PostgresSource
from tests.support.verify import assert_table_matches, read_parquet

ROWS = {"orders": 700, "parts": 300}  # 1,000 rows in all, 100-row chunks


def _tables(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        for table, rows in ROWS.items():
            conn.execute(f"""CREATE TABLE {table} (id int PRIMARY KEY, label text, amount numeric(12,2),
                                                   at timestamptz);
                             INSERT INTO {table} SELECT g, 'row ' || g, g * 1.25, '2024-01-01'::timestamptz + g * '1 minute'::interval
                             FROM generate_series(1, {rows}) g;
                             ANALYZE {table};""")


def _sync(pg_cluster, pg_db, tmp_path, limit: int, spark_factory) -> tuple[list[str], object]:
    """One ``sync`` of both tables to Parquet through a LoadRunner with ``limit``; its log and the catalog."""
    source = PostgresSource(pg_cluster.source_config(pg_db, chunk_rows=100))
    catalog = parse_catalog(source.discover())
    for stream in catalog.streams:
        stream.sync_mode = "full_refresh"
    logs: list[str] = []
    engine = SparkChunkRunner(spark_factory, max_parallel=2, local=True, log=logs.append)
    runner = LoadRunner(engine, local=True, in_process_rows=limit, max_parallel=2, max_connections=8,
                        log=logs.append)
    store = FileStateStore(str(tmp_path / "st.json"))
    destination = make_destination("parquet", {"type": "parquet", "path": str(tmp_path / "lake")}, logs.append)
    try:
        run_in_process(source, destination, catalog, store.load(), store, destination.chunk_sink(), runner,
                       MessageWriter(io.BytesIO()), logs.append)
    finally:
        runner.close()
    return logs, catalog


def _assert_copied(pg_cluster, pg_db, tmp_path, catalog) -> None:
    with psycopg.connect(pg_cluster.dsn(pg_db)) as conn:
        for stream in catalog.streams:
            assert_table_matches(conn, "public", stream.name, stream.json_schema,
                                 read_parquet(str(tmp_path / "lake" / "public" / stream.name)))


def test_loads_within_the_limit_never_start_spark(pg_cluster, pg_db, tmp_path):
    _tables(pg_cluster.dsn(pg_db))
    logs, catalog = _sync(pg_cluster, pg_db, tmp_path, 5_000, lambda: pytest.fail("a small load started Spark"))
    assert any("scanned in this process on 2 thread(s), without Spark" in line for line in logs), logs
    _assert_copied(pg_cluster, pg_db, tmp_path, catalog)


def test_loads_over_the_limit_run_as_spark_tasks(pg_cluster, pg_db, tmp_path, spark):
    _tables(pg_cluster.dsn(pg_db))
    started: list[object] = []

    def factory():
        started.append(spark)
        return spark

    # the first table (700 rows) fits under 800; the second takes the run over it: both go to Spark
    logs, catalog = _sync(pg_cluster, pg_db, tmp_path, 800, factory)
    assert started and not any("without Spark" in line for line in logs), logs
    assert "full loads of about 1,000 row(s) in all, more than in_process_rows (800): they go to Spark" in logs
    assert "full-load chunks run as Spark tasks on local[*], 2 at a time" in logs
    _assert_copied(pg_cluster, pg_db, tmp_path, catalog)


def test_a_load_of_unknown_size_goes_to_spark_and_the_decision_sticks(spark):
    started: list[object] = []
    logs: list[str] = []
    engine = SparkChunkRunner(lambda: started.append(spark) or spark, local=True, label="local[2]")
    runner = LoadRunner(engine, local=True, in_process_rows=10_000, max_parallel=None, max_connections=None,
                        log=logs.append)
    try:
        runner.expect_load(10)
        assert sorted(runner.run(abs, [-1, -2, -3])) == [1, 2, 3] and not started  # in process so far
        runner.expect_load(None)  # a resumed load: its size is unknown
        runner.expect_load(10)
        assert sorted(runner.run(abs, [-1, -2, -3])) == [1, 2, 3] and started
        assert ("full loads of at least 20 row(s) in all (a resumed load's size is unknown), more than "
                "in_process_rows (10,000): they go to Spark") in logs
    finally:
        runner.close()
