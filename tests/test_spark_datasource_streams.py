"""``spark.readStream.format("olake")`` on MongoDB (SecantusDB) and DynamoDB (moto) in a real Spark query.

A writer changes the collection or table during the query's first run (availableNow, on the local
session: the full load, then the changes so far); the second run, from the same checkpoint, reads the
rest. Each
micro-batch is applied by key in operation order (``foreachBatch``); the copy ends equal to the source
value by value, and no change arrives twice.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import pytest

from olake_cli.spark import register
from tests.support.cli import write_json
from tests.test_spark_datasource import discovered


@dataclass
class KeyedApply:
    """The foreachBatch function: applies each micro-batch to ``rows`` by ``keys``, in operation order."""

    keys: tuple[str, ...]
    rows: dict = field(default_factory=dict)
    change_ids: list[str] = field(default_factory=list)
    batches: int = 0

    def __call__(self, frame, batch_id: int) -> None:
        for row in sorted(frame.toArrow().to_pylist(), key=lambda r: r["_olake_op_id"] or ""):
            key = tuple(row[k] for k in self.keys)
            if row["_olake_op"] != "r":
                self.change_ids.append(row["_olake_op_id"])
            if row["_olake_op"] == "d":
                self.rows.pop(key, None)
            else:
                self.rows[key] = {k: v for k, v in row.items() if not k.startswith("_olake_")}
        self.batches += 1


def run_query(spark, src: str, stream: str, checkpoint: str, apply: KeyedApply) -> None:
    """One availableNow run of the query from the checkpoint."""
    register(spark)
    frame = spark.readStream.format("olake").option("config", src).option("stream", stream).load()
    query = frame.writeStream.foreachBatch(apply).option("checkpointLocation", checkpoint) \
        .trigger(availableNow=True).start()
    query.awaitTermination(300)
    assert query.exception() is None, query.exception()


def two_runs(spark, src: str, stream: str, checkpoint: str, apply: KeyedApply, writer) -> None:
    """A run with ``writer`` busy (the load and the changes so far), then one once it stopped."""
    writer.start()
    try:
        run_query(spark, src, stream, checkpoint, apply)
    finally:
        writer.stop()
    run_query(spark, src, stream, checkpoint, apply)
    assert apply.batches >= 2 and apply.change_ids
    assert len(apply.change_ids) == len(set(apply.change_ids)), "a change arrived twice"


@pytest.mark.parametrize("source", ["mongodb", "dynamodb"])
def test_a_stream_query_over_load_and_changes_ends_equal_to_the_source(spark, source, request, tmp_path):
    checkpoint = str(tmp_path / "checkpoint")
    if source == "mongodb":
        from tests.support.mongo import MongoWriter, collection_rows, seed_documents

        server, db = request.getfixturevalue("mongo_server"), request.getfixturevalue("mongo_db")
        seed_documents(server.uri, db, "things", 200)
        src = write_json(tmp_path / "m.json", {"type": "mongodb", "uri": server.uri, "database": db,
                                                "chunk_documents": 70})
        apply = KeyedApply(("_id",))
        two_runs(spark, src, f"{db}.things", checkpoint, apply, MongoWriter(server.uri, db, "things", 200, pause=0.01))
        assert {k[0]: (r["v"], r["note"]) for k, r in apply.rows.items()} == collection_rows(server.uri, db, "things")
    else:
        from tests.support.dynamo import NAMESPACE, ItemWriter, assert_equals_table, dynamo_source, seed_accounts

        server, table = request.getfixturevalue("moto_server"), request.getfixturevalue("dynamo_table")
        seed_accounts(server, table, 150)
        src = dynamo_source(tmp_path, server, table)
        apply = KeyedApply(("pk", "sk"))
        two_runs(spark, src, f"{NAMESPACE}.{table}", checkpoint, apply, ItemWriter(server, table, 150, pause=0.01))
        schema = discovered(json.loads(open(src).read()), f"{NAMESPACE}.{table}")
        assert_equals_table(list(apply.rows.values()), server, table, schema)


def test_an_available_now_run_after_a_crash_reads_past_the_batch_it_runs_again(spark, pg_cluster, pg_db, tmp_path):
    """A query stopped after Spark planned a micro-batch and before it committed it (its commit file
    gone, as after a SIGKILL): the next availableNow run runs that batch again, then reads on to what is
    there now, as every availableNow run does."""
    import os

    import psycopg

    from tests.support.verify import assert_table_matches

    dsn = pg_cluster.dsn(pg_db)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY, v text)")
        conn.execute("INSERT INTO t SELECT g, 'v' || g FROM generate_series(1, 20) g")
    config = pg_cluster.source_config(pg_db, replication_slot="again_slot", publication="again_pub",
                                      create_slot_and_publication=True)
    src, checkpoint = write_json(tmp_path / "src.json", config), str(tmp_path / "checkpoint")
    apply = KeyedApply(("id",))
    for first, last in ((21, 25), (26, 30)):  # the load, then changes in every run
        run_query(spark, src, "public.t", checkpoint, apply)
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("INSERT INTO t SELECT g, 'new ' || g FROM generate_series(%s::int, %s::int) g", (first, last))
    run_query(spark, src, "public.t", checkpoint, apply)
    last = max(int(name) for name in os.listdir(f"{checkpoint}/commits") if name.isdigit())
    for name in (str(last), f".{last}.crc"):  # planned, never committed
        os.remove(f"{checkpoint}/commits/{name}")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE t SET v = 'late' WHERE id <= 3")
        conn.execute("DELETE FROM t WHERE id = 30")
    run_query(spark, src, "public.t", checkpoint, apply)
    with psycopg.connect(dsn, autocommit=True) as conn:
        import pyarrow as pa

        copy = pa.Table.from_pylist(list(apply.rows.values()))
        assert_table_matches(conn, "public", "t", discovered(config, "public.t"), copy)
        conn.execute("SELECT pg_drop_replication_slot('again_slot')")
