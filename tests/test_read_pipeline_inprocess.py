"""The read pipeline in-process on the shared Spark session, run as on a cluster: the tasks cannot spool
to the driver's disk, so results come back through the JVM in pieces, or through the source's
``spark.spool`` (a folder both sides see, or a bucket on moto's S3 server), where nothing but the
result goes through Spark."""

from __future__ import annotations

import io
import os

import orjson
import psycopg
import pytest

from olake_cli.core.catalog import parse_catalog
from olake_cli.core.messages import MessageWriter
from olake_cli.core.state import State
from olake_cli.engine import task_entry
from olake_cli.engine.chunk_runner import SparkChunkRunner
from olake_cli.pipeline.read import ReadPipeline
from olake_cli.shared.spool import Spool
from olake_cli.sources.postgres.source import PostgresSource
from tests.support.object_store import ACCESS_KEY_ID, REGION, SECRET_ACCESS_KEY, create_bucket, keys


def test_chunks_come_back_through_spark_when_tasks_cannot_spool(pg_cluster, pg_db, spark, monkeypatch):
    monkeypatch.setattr(task_entry, "PIECE_BYTES", 16 << 10)  # many pieces per chunk
    with psycopg.connect(pg_cluster.dsn(pg_db), autocommit=True) as conn:
        conn.execute("CREATE TABLE t (id bigint PRIMARY KEY, v numeric(10,3), s text);"
                     "INSERT INTO t SELECT g, g / 8.0, repeat('x', g % 7) FROM generate_series(1, 5000) g;")
    source = PostgresSource(pg_cluster.source_config(pg_db, chunk_strategy="primary_key", chunk_rows=1000))
    catalog = parse_catalog(source.discover())
    out = io.BytesIO()
    logs: list[str] = []
    runner = SparkChunkRunner(lambda: spark, max_parallel=2, local=False, log=logs.append)
    assert not runner.spool.shared
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
    assert [line for line in logs if line.startswith("chunk lines come back")] == [
        "chunk lines come back through Spark, whose JVMs hold a chunk's lines until they are taken; name a "
        "shared folder or a bucket as the source's spark.spool to keep memory bounded whatever the chunk size"]


@pytest.mark.parametrize("place", ["folder", "bucket"])
def test_chunks_come_back_through_the_spool_the_source_names(pg_cluster, pg_db, spark, moto_server, tmp_path,
                                                              monkeypatch, place):
    """With ``spark.spool`` the tasks write their lines there and ship nothing back through Spark (no
    piece could carry a line here), the driver streams each file out and deletes it."""
    monkeypatch.setattr(task_entry, "PIECE_BYTES", 0)  # pieces would carry nothing: lines only via the spool
    with psycopg.connect(pg_cluster.dsn(pg_db), autocommit=True) as conn:
        conn.execute("CREATE TABLE t (id bigint PRIMARY KEY, s text);"
                     "INSERT INTO t SELECT g, repeat('y', g % 11) FROM generate_series(1, 4000) g;")
    spark_section = {"spool": str(tmp_path / "shared")}
    if place == "bucket":
        bucket = create_bucket(moto_server, f"spool-{os.getpid()}")
        spark_section = {"spool": f"s3://{bucket}/spool", "s3.endpoint": moto_server.endpoint, "s3.region": REGION,
                         "s3.access-key-id": ACCESS_KEY_ID, "s3.secret-access-key": SECRET_ACCESS_KEY}
    else:
        (tmp_path / "shared").mkdir()
    source = PostgresSource(pg_cluster.source_config(pg_db, chunk_strategy="primary_key", chunk_rows=1000))
    catalog = parse_catalog(source.discover())
    out = io.BytesIO()
    logs: list[str] = []
    runner = SparkChunkRunner(lambda: spark, max_parallel=2, local=False, spool=Spool.of(spark_section),
                              log=logs.append)
    assert runner.spool.shared
    ReadPipeline(source, catalog, State(), MessageWriter(out), runner, logs.append).run()

    records = [m["record"]["data"] for m in map(orjson.loads, out.getvalue().splitlines()) if m["type"] == "RECORD"]
    assert sorted(r["id"] for r in records) == list(range(1, 4001))
    assert {r["id"]: r["s"] for r in records}[4000] == "y" * (4000 % 11)
    assert any(line.startswith("chunk lines come back through the spool") for line in logs), logs
    left = keys(moto_server, bucket, "spool") if place == "bucket" else os.listdir(tmp_path / "shared")
    assert [k for k in left if not k.endswith("/")] == [], "every spool file is deleted once its lines are out"
    assert SECRET_ACCESS_KEY not in " ".join(logs)
