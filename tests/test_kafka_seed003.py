"""Seed 003 end to end: DynamoDB tables found by their tags go through Kafka, one topic per table, and
come back as the tables. ``sync --follow`` from DynamoDB into the Kafka destination scans each table
(INIT_SYNC) and then carries its Streams (SYNC); a tagged table created while it follows is found by the
next discovery and gets its own topic; a writer changes the tables meanwhile. Then ``sync`` from the
Kafka source rebuilds each table into Parquet and into Iceberg: item by item, value by value, against
the DynamoDB table (every attribute type in one of them).
"""

from __future__ import annotations

import json
import re
import subprocess

from tests.support.cli import run_olake, write_json
from tests.support.current_view import iceberg_rows
from tests.support.dynamo import (
    NAMESPACE, ItemWriter, assert_equals_table, create_table, discovered_catalog, every_type_items, parquet_current,
    put_items,
)
from tests.support.follow import start_olake, stop, wait_until

FOLLOW = ["--follow", "--commit-interval", "0.5", "--discovery-interval", "2"]


def test_dynamodb_tables_by_tags_through_kafka_rebuild_in_parquet_and_iceberg(moto_server, dynamo_table,
                                                                              kafka_broker, kafka_prefix, tmp_path):
    client = moto_server.client()
    env = f"env-{dynamo_table}"  # this test's tag value: other tests' tables never match
    tags = {"olake-ingest": "yes", "olake-env": env}
    typed, counted = f"{dynamo_table}_types", f"{dynamo_table}_counted"
    create_table(client, typed, tags=tags)
    put_items(client, typed, every_type_items(40))
    src = write_json(tmp_path / "src.json", moto_server.config(segments=2, checkpoint_items=20, page_items=10, tags={
        "ingestion_key": "olake-ingest", "environment_key": "olake-env", "environment_value": env}))
    dynamo_catalog = discovered_catalog(tmp_path, src, "cdc")
    dynamo_streams = json.loads(dynamo_catalog.read_text())
    dynamo_catalog.write_text(json.dumps({**dynamo_streams, "new_streams": "cdc"}))
    into_kafka = write_json(tmp_path / "into_kafka.json", kafka_broker.config(topic_prefix=kafka_prefix))
    log = tmp_path / "capture.log"
    capture = start_olake(["sync", "--source", src, "--destination", into_kafka, "--catalog", str(dynamo_catalog),
                           *FOLLOW], log, stdout=subprocess.DEVNULL)
    writer = None
    try:
        wait_until(lambda: "following the change log" in log.read_text(), "the capture follows", run=capture)
        create_table(client, counted, tags=tags)
        put_items(client, counted, [{"pk": {"S": f"p{i % 13}"}, "sk": {"N": str(i)}, "v": {"N": f"{i}.5"},
                                    "note": {"S": f"n{i}"}} for i in range(50)])
        _change_typed(client, typed)
        wait_until(lambda: f"{NAMESPACE}.{counted}: new stream found" in log.read_text(), "discovery finds the table",
                   run=capture)
        writer = ItemWriter(moto_server, counted, 50, seed=7, pause=0.02)
        writer.start()
        wait_until(lambda: log.read_text().count("following the change log") >= 2, "the capture follows both",
                   run=capture)
        wait_until(lambda: writer.ops >= 60, "the writer has changed the new table", run=capture)
        writer.stop()
        from_kafka = write_json(tmp_path / "from_kafka.json", kafka_broker.config(
            topic_prefix=kafka_prefix, topic_pattern=re.escape(f"{kafka_prefix}{NAMESPACE}.") + ".*"))
        (tmp_path / "kafka").mkdir()
        kafka_catalog = discovered_catalog(tmp_path / "kafka", from_kafka, "cdc")
        schemas = {s["name"]: s["json_schema"] for s in json.loads(kafka_catalog.read_text())["streams"]}
        assert sorted(schemas) == sorted([typed, counted]), "one topic per table"
        assert schemas[typed] == dynamo_streams["streams"][0]["json_schema"], \
            "the original types come back"
        lake = tmp_path / "lake"
        into_lake = write_json(tmp_path / "lake.json", {"type": "parquet", "path": str(lake)})

        def lake_equals_tables() -> bool:
            _synced(from_kafka, into_lake, kafka_catalog, tmp_path / "lake_state.json")
            return all(_equal(lambda t=table: parquet_current(lake, t), moto_server, table, schemas[table])
                       for table in (typed, counted))

        wait_until(lake_equals_tables, "kafka -> parquet rebuilds both tables", timeout=120, run=capture)
        ice = tmp_path / "ice"
        into_ice = write_json(tmp_path / "ice.json", {"type": "iceberg", "path": str(ice)})
        _synced(from_kafka, into_ice, kafka_catalog, tmp_path / "ice_state.json")
        for table in (typed, counted):
            assert_equals_table(iceberg_rows(ice, NAMESPACE, table).to_pylist(), moto_server, table, schemas[table])
            assert_equals_table(parquet_current(lake, table), moto_server, table, schemas[table])
        assert stop(capture) < 30 and capture.returncode == 0, log.read_text()[-3000:]
    finally:
        if writer is not None:
            writer.stop_event.set()
        if capture.poll() is None:
            capture.kill()
            capture.wait()


def _change_typed(client, table: str) -> None:
    """Puts (new items of every type), updates and deletes on the table of every type."""
    put_items(client, table, every_type_items(46)[40:])
    for i in (1, 2, 7):
        key = {"pk": {"S": f"user#{i % 17}"}, "sk": {"N": str(i)}}
        client.update_item(TableName=table, Key=key, UpdateExpression="SET s = :s, price = :p",
                           ExpressionAttributeValues={":s": {"S": f"changed ✓ {i}"}, ":p": {"N": "-1.125"}})
    for i in (3, 10):
        sk = str(10**37 + i) if i % 5 == 0 else str(i)
        client.delete_item(TableName=table, Key={"pk": {"S": f"user#{i % 17}"}, "sk": {"N": sk}})


def _synced(src: str, dst: str, catalog, state) -> None:
    result = run_olake("sync", "--source", src, "--destination", dst, "--catalog", str(catalog), "--state", str(state))
    assert result.returncode == 0, result.stderr.decode()[-3000:]


def _equal(rows, moto_server, table: str, schema: dict) -> bool:
    """Whether the copy ``rows()`` gives equals the table (False while it does not, or is not there yet)."""
    try:
        assert_equals_table(rows(), moto_server, table, schema)
    except (AssertionError, OSError):
        return False
    return True
