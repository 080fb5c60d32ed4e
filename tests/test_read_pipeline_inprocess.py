"""The read pipeline in-process on the shared Spark session, with results returned through the JVM
in pieces (the path a cluster takes, where tasks cannot spool to the driver's disk)."""

from __future__ import annotations

import io

import orjson
import psycopg

from olake_cli.core.catalog import parse_catalog
from olake_cli.core.messages import MessageWriter
from olake_cli.core.state import State
from olake_cli.engine import task_entry
from olake_cli.engine.chunk_runner import SparkChunkRunner
from olake_cli.pipeline.read import ReadPipeline
from olake_cli.sources.postgres.source import PostgresSource


def test_chunks_come_back_through_spark_when_tasks_cannot_spool(pg_cluster, pg_db, spark, monkeypatch):
    monkeypatch.setattr(task_entry, "PIECE_BYTES", 16 << 10)  # many pieces per chunk
    with psycopg.connect(pg_cluster.dsn(pg_db), autocommit=True) as conn:
        conn.execute("CREATE TABLE t (id bigint PRIMARY KEY, v numeric(10,3), s text);"
                     "INSERT INTO t SELECT g, g / 8.0, repeat('x', g % 7) FROM generate_series(1, 5000) g;")
    source = PostgresSource(pg_cluster.source_config(pg_db, chunk_strategy="primary_key", chunk_rows=1000))
    catalog = parse_catalog(source.discover())
    out = io.BytesIO()
    runner = SparkChunkRunner(lambda: spark, max_parallel=2, local=False)
    assert runner.spool_dir is None
    logs: list[str] = []
    state = State()
    ReadPipeline(source, catalog, state, MessageWriter(out), runner, logs.append).run()

    lines = [orjson.loads(line) for line in out.getvalue().splitlines()]
    assert lines[0]["type"] == "CATALOG"
    records = [m["record"]["data"] for m in lines if m["type"] == "RECORD"]
    assert sorted(r["id"] for r in records) == list(range(1, 5001))
    assert {r["id"]: (r["v"], r["s"]) for r in records}[4999] == ("624.875", "x")  # 4999 % 7 == 1
    states = [m["state"] for m in lines if m["type"] == "STATE"]
    assert states[-1]["level"] == "global"
    chunk_states = [s for s in states if s["level"] == "stream" and s["streams"][0]["stream_state"].get("chunks")]
    assert len(chunk_states[0]["streams"][0]["stream_state"]["chunks"]) == 5
    assert state.find("public", "t").chunks is None  # all done: chunks dropped
    assert any("chunk 5/5" in line for line in logs)
