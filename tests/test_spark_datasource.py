"""olake as a Spark data source: ``spark.read.format("olake")`` against the real servers.

Every value of the PostgreSQL edge-value tables (BC dates, years past 9999, infinities, 2-D and 3-D
arrays) read through the data source equals the source value by value, one Spark partition per
planned chunk; MongoDB and DynamoDB tables likewise; bad options fail with one clear error.
"""

from __future__ import annotations

import datetime
import json

import psycopg
import pytest

from olake_cli.core.registry import make_source
from olake_cli.spark import register
from tests.support.cli import write_json
from tests.support.verify import assert_table_matches
from tests.test_e2e_edge_values import EDGE_DDL, EDGE_VALUES, GRID_VALUES


def olake_frame(spark, config: str, stream: str, **options: str):
    """The stream read through the data source."""
    register(spark)
    reader = spark.read.format("olake").option("config", config).option("stream", stream)
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader.load()


def discovered(config: dict, label: str) -> dict:
    """The json_schema discover gives the stream."""
    catalog = make_source(config["type"], config).discover()
    return next(s["json_schema"] for s in catalog["streams"]
                if f"{s.get('namespace')}.{s['name']}" == label or s["name"] == label)


def test_batch_read_of_the_edge_values_equals_the_source(spark, pg_cluster, pg_db, tmp_path):
    dsn = pg_cluster.dsn(pg_db)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(EDGE_DDL)
        conn.execute(f"INSERT INTO edge VALUES {EDGE_VALUES}")
        conn.execute(f"INSERT INTO grid VALUES {GRID_VALUES}")
        conn.execute("CREATE TABLE wide (id int PRIMARY KEY, u uuid, j jsonb, n numeric, d numeric(10,2), "
                     "t time, iv interval, b bytea, s smallint, f real, tx text)")
        conn.execute("INSERT INTO wide SELECT g, md5(g::text)::uuid, jsonb_build_object('g', g), g / 7.0, g / 3.0, "
                     "'12:34:56'::time + g * interval '1 s', g * interval '1 day 1 us', int4send(g), g, g / 4.0, "
                     "repeat('x', g) FROM generate_series(1, 40) g")
        conn.execute("INSERT INTO wide (id) VALUES (0)")
    config = pg_cluster.source_config(pg_db, chunk_rows=10, chunk_strategy="primary_key")
    src = write_json(tmp_path / "src.json", config)
    with psycopg.connect(dsn, autocommit=True) as conn:
        for table in ("edge", "grid", "wide"):
            frame = olake_frame(spark, src, f"public.{table}")
            json_schema = discovered(config, f"public.{table}")
            data = frame.toArrow()
            assert data.column("_olake_op").to_pylist() == ["r"] * data.num_rows
            assert_table_matches(conn, "public", table, json_schema, data.select(list(json_schema["properties"])))
        # 41 rows, chunks of 10 (planned, never run: its snapshot is let go after a second)
        assert olake_frame(spark, src, "public.wide", snapshot_idle_s="1").rdd.getNumPartitions() == 5


def test_batch_read_of_a_mongodb_collection_equals_its_documents(spark, mongo_server, mongo_db, tmp_path):
    from bson import Decimal128, ObjectId

    from tests.support.mongo import connect

    ids = [ObjectId() for _ in range(30)]
    docs = [{"_id": i, "v": i * 2**40, "note": f"n{i}-é", "dec": Decimal128(f"{i}.10"), "ref": ids[i],
             "at": datetime.datetime(2024, 1, 1, tzinfo=datetime.UTC) + datetime.timedelta(milliseconds=i),
             "sub": {"x": i, "y": f"s{i}"}} for i in range(30)]
    with connect(mongo_server.uri) as client:
        client[mongo_db]["things"].insert_many(docs)
    src = write_json(tmp_path / "mongo.json", {"type": "mongodb", "uri": mongo_server.uri, "database": mongo_db,
                                                "chunk_documents": 7})
    rows = {r["_id"]: r for r in olake_frame(spark, src, f"{mongo_db}.things").toArrow().to_pylist()}
    assert sorted(rows) == list(range(30))
    for doc in docs:
        row = rows[doc["_id"]]
        assert (row["v"], row["note"], row["dec"], row["ref"]) == (doc["v"], doc["note"], str(doc["dec"]), str(doc["ref"]))
        assert row["at"] == doc["at"] and row["sub"] == doc["sub"] and row["_olake_op"] == "r"


def test_batch_read_of_a_dynamodb_table_equals_its_items(spark, moto_server, dynamo_table, tmp_path):
    from tests.support.dynamo import NAMESPACE, assert_equals_table, create_table, dynamo_source, every_type_items, put_items

    create_table(moto_server.client(), dynamo_table)
    put_items(moto_server.client(), dynamo_table, every_type_items(120))
    src = dynamo_source(tmp_path, moto_server, dynamo_table)  # 2 segments, each stops after 40 items and goes on
    config = json.loads(open(src).read())
    frame = olake_frame(spark, src, f"{NAMESPACE}.{dynamo_table}")
    assert olake_frame(spark, src, f"{NAMESPACE}.{dynamo_table}", snapshot_idle_s="1").rdd.getNumPartitions() == 2
    assert_equals_table(frame.toArrow().to_pylist(), moto_server, dynamo_table,
                        discovered(config, f"{NAMESPACE}.{dynamo_table}"))


@pytest.mark.parametrize("options, message", [
    ({"stream": "public.t"}, "option 'config' is required"),
    ({"config": "SRC"}, "option 'stream' is required"),
    ({"config": "SRC", "stream": "public.nope"}, "stream 'public.nope' is not in the source; its streams: public.t"),
    ({"config": "/no/such/src.json", "stream": "public.t"}, "/no/such/src.json"),
    ({"config": "SRC", "stream": "public.t", "colour": "red"}, "unknown option(s) colour"),
    ({"config": "SRC", "stream": "public.t", "max_rows_per_batch": "many"},
     "option 'max_rows_per_batch' must be a positive integer (got 'many')"),
])
def test_bad_options_give_one_clear_error(spark, pg_cluster, pg_db, tmp_path, options, message):
    with psycopg.connect(pg_cluster.dsn(pg_db), autocommit=True) as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY)")
    src = write_json(tmp_path / "src.json", pg_cluster.source_config(pg_db))
    register(spark)
    reader = spark.read.format("olake")
    for name, value in options.items():
        reader = reader.option(name, src if value == "SRC" else value)
    with pytest.raises(Exception) as failed:
        reader.load().collect()
    assert message in str(failed.value)


def test_a_chunk_read_after_the_snapshot_was_let_go_fails_with_one_line(pg_cluster, pg_db, tmp_path):
    import socket
    import time

    from olake_cli.core.errors import SourceError
    from olake_cli.pipeline.spark_provider import OlakeScans

    with psycopg.connect(pg_cluster.dsn(pg_db), autocommit=True) as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY)")
    src = write_json(tmp_path / "src.json", pg_cluster.source_config(pg_db))
    scan = OlakeScans().batch({"config": src, "stream": "public.t", "snapshot_idle_s": "0.5"})
    host, port, _ = scan.keeper
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # the keeper lets the snapshot go with no chunk reading, and ends
        try:
            socket.create_connection((host, port), timeout=1).close()
        except OSError:
            break
        time.sleep(1.0)  # longer than snapshot_idle_s: a probe is no chunk reading
    with pytest.raises(SourceError, match="cannot reach the process holding the read's snapshot"):
        list(scan.read(scan.partitions()[0]))
