"""``spark.readStream.format("olake")`` on PostgreSQL: the full load, then the slot's changes, with the
query's position in Spark's checkpoint.

A writer keeps changing the table while the query runs three times from one checkpoint (the first
run holds the load, the others the changes); ``foreachBatch`` applies each micro-batch to a Parquet
copy by key in operation order. The copy ends equal to the table value by value, no change arrives
twice, and the slot's confirmed position is never past the offset Spark committed.
"""

from __future__ import annotations

import json
import os

import psycopg
import pytest
import pyarrow as pa
import pyarrow.parquet as pq

from olake_cli.spark import register
from tests.support.cli import write_json
from tests.support.verify import assert_table_matches
from tests.support.writer_thread import WriterThread
from tests.test_spark_datasource import discovered


class AccountWriter(WriterThread):
    """Inserts, updates (text and ints) and deletes rows of ``acc``, one small transaction at a time."""

    def __init__(self, dsn: str) -> None:
        super().__init__(seed=41)
        self.dsn, self.next_id = dsn, 1000

    def write(self) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            while not self.stop_event.wait(0.01):
                self.step(conn)

    def step(self, conn: psycopg.Connection) -> None:
        """One transaction of one to three changes."""
        with conn.transaction():
            for _ in range(self.rng.randint(1, 3)):
                kind, key = self.rng.random(), self.rng.randint(1, self.next_id)
                if kind < 0.4:
                    self.next_id += 1
                    conn.execute("INSERT INTO acc VALUES (%s, %s, %s)", (self.next_id, key, f"new {key}"))
                elif kind < 0.8:
                    conn.execute("UPDATE acc SET v = v + 1, note = note || '+' WHERE id = %s", (key,))
                else:
                    conn.execute("DELETE FROM acc WHERE id = %s", (key,))
        self.transactions += 1


class ParquetApply:
    """The foreachBatch function: applies a micro-batch to ``path`` by ``id`` in operation order."""

    def __init__(self, path: str) -> None:
        self.path, self.change_ids, self.batches = path, [], 0

    def __call__(self, frame, batch_id: int) -> None:
        rows = sorted(frame.toArrow().to_pylist(), key=lambda r: (r["_olake_op_id"] or ""))
        current = {r["id"]: r for r in pq.read_table(self.path).to_pylist()} if os.path.exists(self.path) else {}
        for row in rows:
            if row["_olake_op"] != "r":
                self.change_ids.append(row["_olake_op_id"])
            if row["_olake_op"] == "d":
                current.pop(row["id"], None)
            else:
                current[row["id"]] = {k: row[k] for k in ("id", "v", "note")}
        pq.write_table(pa.Table.from_pylist(list(current.values()), pa.schema(
            [("id", pa.int32()), ("v", pa.int32()), ("note", pa.string())])), self.path + ".tmp")
        os.replace(self.path + ".tmp", self.path)
        self.batches += 1


def committed_offset(checkpoint: str) -> dict:
    """The source offset of the last batch Spark committed."""
    last = max(int(name) for name in os.listdir(f"{checkpoint}/commits") if name.isdigit())
    with open(f"{checkpoint}/offsets/{last}") as lines:
        return json.loads(lines.read().splitlines()[-1])


def run_query(spark, src: str, checkpoint: str, apply: ParquetApply) -> None:
    """One run of the query from the checkpoint, until what was there when it started is applied."""
    register(spark)
    frame = spark.readStream.format("olake").option("config", src).option("stream", "public.acc").load()
    query = frame.writeStream.foreachBatch(apply).option("checkpointLocation", checkpoint) \
        .trigger(availableNow=True).start()
    query.awaitTermination(300)
    assert query.exception() is None, query.exception()


def test_stream_load_then_changes_across_restarts_equals_the_table(spark, pg_cluster, pg_db, tmp_path):
    dsn = pg_cluster.dsn(pg_db)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE acc (id int PRIMARY KEY, v int, note text)")
        conn.execute("INSERT INTO acc SELECT g, g, 'seed ' || g FROM generate_series(1, 1000) g")
    config = pg_cluster.source_config(pg_db, replication_slot="spark_slot", publication="spark_pub",
                                      create_slot_and_publication=True, chunk_rows=300, chunk_strategy="primary_key")
    src = write_json(tmp_path / "src.json", config)
    checkpoint, apply = str(tmp_path / "checkpoint"), ParquetApply(str(tmp_path / "copy.parquet"))
    writer = AccountWriter(dsn)
    writer.start()
    try:
        for _ in range(2):  # the load (the writer busy meanwhile), then the changes so far
            run_query(spark, src, checkpoint, apply)
            assert_slot_within(dsn, committed_offset(checkpoint))
        first_change_offset = committed_offset(checkpoint)
    finally:
        writer.stop()
    run_query(spark, src, checkpoint, apply)  # the rest of the changes
    assert_slot_within(dsn, committed_offset(checkpoint))
    with psycopg.connect(dsn, autocommit=True) as conn:  # released as Spark committed (not held at the load)
        moved, = conn.execute("SELECT confirmed_flush_lsn >= %s::pg_lsn FROM pg_replication_slots WHERE "
                              "slot_name = 'spark_slot'", (first_change_offset["state"]["stream_state"]["cursor_field"],)).fetchone()
    assert moved, "the slot was not released up to the offsets Spark committed"
    assert writer.transactions > 0 and apply.batches >= 3
    assert len(apply.change_ids) == len(set(apply.change_ids)), "a change arrived twice"
    with psycopg.connect(dsn, autocommit=True) as conn:
        json_schema = discovered(config, "public.acc")
        assert_table_matches(conn, "public", "acc", json_schema, pq.read_table(apply.path))
        conn.execute("SELECT pg_drop_replication_slot('spark_slot')")


def assert_slot_within(dsn: str, offset: dict, slot: str = "spark_slot") -> None:
    """The slot's confirmed position is at or below the committed offset's position."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        ok, confirmed = conn.execute(
            "SELECT confirmed_flush_lsn <= %s::pg_lsn, confirmed_flush_lsn::text FROM pg_replication_slots "
            "WHERE slot_name = %s", (offset["state"]["stream_state"]["cursor_field"], slot)).fetchone()
    assert ok, f"slot confirmed at {confirmed}, past the committed offset {offset['state']['stream_state']['cursor_field']}"


def test_a_restarted_query_gets_the_same_changes_and_a_lost_load_is_refused(pg_cluster, pg_db, tmp_path):
    from olake_cli.core.errors import ConfigError
    from olake_cli.pipeline.spark_provider import OlakeScans
    from olake_cli.pipeline.spark_stream import START

    dsn = pg_cluster.dsn(pg_db)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY, v text)")
        conn.execute("INSERT INTO t SELECT g, 'v' || g FROM generate_series(1, 5) g")
    src = write_json(tmp_path / "src.json", pg_cluster.source_config(
        pg_db, replication_slot="again_slot", publication="again_pub", create_slot_and_publication=True))
    options = {"config": src, "stream": "public.t"}

    def rows(scan, start, end):
        return [row for part in scan.partitions(start, end) for table in scan.read(part) for row in table.to_pylist()]

    scan = OlakeScans().stream(options)
    loaded = scan.latest_offset(START)
    load = rows(scan, START, loaded)
    assert sorted((r["id"], r["_olake_op"]) for r in load) == [(i, "r") for i in range(1, 6)]
    assert {r["_olake_op_id"] for r in load} == {loaded["state"]["stream_state"]["load_op_key"]}  # as in sync
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO t VALUES (6, 'six')")
        conn.execute("UPDATE t SET v = 'two' WHERE id = 2")
        conn.execute("DELETE FROM t WHERE id = 3")
    end = scan.latest_offset(loaded)
    first = rows(scan, loaded, end)
    assert [(r["_olake_op"], r["id"], r["v"]) for r in first] == [("c", 6, "six"), ("u", 2, "two"), ("d", 3, None)]
    with psycopg.connect(dsn, autocommit=True) as conn:  # after the range: not in it when read again
        conn.execute("INSERT INTO t VALUES (7, 'seven')")
    restarted = OlakeScans().stream(options)  # nothing read ahead: the range is read again from the slot
    assert rows(restarted, loaded, end) == first
    with pytest.raises(ConfigError, match="stopped during its initial load"):
        restarted.partitions(START, loaded)
    restarted.commit(end)
    later = restarted.latest_offset(end)
    assert [r["id"] for r in rows(restarted, end, later)] == [7]
    assert_slot_within(dsn, end, "again_slot")
    with psycopg.connect(dsn, autocommit=True) as conn:  # a new column waits for a restart (discover), as in sync
        conn.execute("ALTER TABLE t ADD COLUMN w int")
        conn.execute("INSERT INTO t VALUES (8, 'eight', 8)")
    assert [(r["id"], r["v"], "w" in r) for r in rows(restarted, later, restarted.latest_offset(later))] == \
        [(8, "eight", False)]
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT pg_drop_replication_slot('again_slot')")


def test_a_mongodb_stream_gives_its_load_then_its_changes_and_the_same_range_again(mongo_server, mongo_db, tmp_path):
    from olake_cli.pipeline.spark_provider import OlakeScans
    from olake_cli.pipeline.spark_stream import START
    from tests.support.mongo import connect

    with connect(mongo_server.uri) as client:
        client[mongo_db]["things"].insert_many([{"_id": i, "v": i} for i in range(5)])
    options = {"config": write_json(tmp_path / "m.json", {"type": "mongodb", "uri": mongo_server.uri,
                                                           "database": mongo_db}), "stream": f"{mongo_db}.things"}

    def rows(scan, start, end):
        return [(r["_id"], r["_olake_op"], r["v"]) for part in scan.partitions(start, end)
                for table in scan.read(part) for r in table.to_pylist()]

    scan = OlakeScans().stream(options)
    loaded = scan.latest_offset(START)
    assert sorted(rows(scan, START, loaded)) == [(i, "r", i) for i in range(5)]
    with connect(mongo_server.uri) as client:
        client[mongo_db]["things"].insert_one({"_id": 9, "v": 9})
        client[mongo_db]["things"].update_one({"_id": 1}, {"$set": {"v": 100}})
        client[mongo_db]["things"].delete_one({"_id": 2})
    end = scan.latest_offset(loaded)
    assert rows(scan, loaded, end) == [(9, "c", 9), (1, "u", 100), (2, "d", None)]
    assert rows(OlakeScans().stream(options), loaded, end) == [(9, "c", 9), (1, "u", 100), (2, "d", None)]


def test_a_dynamodb_stream_gives_its_load_then_its_changes(moto_server, dynamo_table, tmp_path):
    from olake_cli.core.errors import SourceError
    from olake_cli.pipeline.spark_provider import OlakeScans
    from olake_cli.pipeline.spark_stream import START
    from tests.support.dynamo import NAMESPACE, dynamo_source, put_items, seed_accounts

    seed_accounts(moto_server, dynamo_table, 60)
    options = {"config": dynamo_source(tmp_path, moto_server, dynamo_table), "stream": f"{NAMESPACE}.{dynamo_table}"}

    def rows(scan, start, end):
        return [(r["pk"], r["sk"], r["_olake_op"], r["note"]) for part in scan.partitions(start, end)
                for table in scan.read(part) for r in table.to_pylist()]

    scan = OlakeScans().stream(options)
    loaded = scan.latest_offset(START)
    assert len(rows(scan, START, loaded)) == 60  # 2 segments that stop every 40 items and go on
    client = moto_server.client()
    put_items(client, dynamo_table, [{"pk": {"S": "new"}, "sk": {"N": "1"}, "note": {"S": "fresh"}}])
    client.delete_item(TableName=dynamo_table, Key={"pk": {"S": "p0"}, "sk": {"N": "0"}})
    end = scan.latest_offset(loaded)
    assert [(pk, op) for pk, _, op, _ in rows(scan, loaded, end)] == [("new", "c"), ("p0", "d")]
    # its checkpoints rank below its records: a range is not read again after a restart, it is refused
    with pytest.raises(SourceError, match="stopped before Spark committed a micro-batch"):
        OlakeScans().stream(options).partitions(loaded, end)
