"""``sync --follow`` of DynamoDB tables found by their tags (moto's server): a tagged table created while
following is found within a discovery interval, loaded and followed, and each Parquet copy equals its table
item by item. (Changes while following, stops and restarts: tests/test_source_conformance.py; SIGKILLs:
tests/test_follow_faults_mongo_dynamo.py.)"""

from __future__ import annotations

import json
import subprocess
import time

from tests.support.cli import write_json
from tests.support.follow import start_olake, stop, wait_until
from tests.support.dynamo import ItemWriter, assert_equals_table, discovered_catalog, parquet_current


def test_a_tagged_table_created_while_following_is_found_loaded_and_followed(moto_server, dynamo_table, tmp_path):
    from tests.support.dynamo import create_table, put_items

    client = moto_server.client()
    env = f"env-{dynamo_table}"  # this test's tag value: other tests' tables never match
    tags = {"olake-ingest": "yes", "olake-env": env}
    first, later = f"{dynamo_table}_first", f"{dynamo_table}_later"
    create_table(client, first, tags=tags)
    put_items(client, first, [{"pk": {"S": f"p{i % 13}"}, "sk": {"N": str(i)}, "v": {"N": f"{i}.5"},
                               "note": {"S": f"n{i}"}} for i in range(60)])
    src = write_json(tmp_path / "src.json", moto_server.config(segments=2, checkpoint_items=40, page_items=20, tags={
        "ingestion_key": "olake-ingest", "environment_key": "olake-env", "environment_value": env}))
    catalog = discovered_catalog(tmp_path, src, "cdc")
    catalog.write_text(json.dumps({**json.loads(catalog.read_text()), "new_streams": "cdc"}))
    root = tmp_path / "lake"
    dst = write_json(tmp_path / "dst.json", {"type": "parquet", "path": str(root)})
    args = ["sync", "--source", src, "--destination", dst, "--catalog", str(catalog), "--state",
            str(tmp_path / "state.json"), "--follow", "--commit-interval", "1", "--discovery-interval", "2"]
    log = tmp_path / "sync.log"
    run = start_olake(args, log, stdout=subprocess.DEVNULL)
    writers = [ItemWriter(moto_server, first, 60, pause=0.02)]
    try:
        wait_until(lambda: "following the change log" in log.read_text(), "the change phase starts", run=run)
        writers[0].start()
        create_table(client, later, tags=tags)
        put_items(client, later, [{"pk": {"S": f"p{i % 13}"}, "sk": {"N": str(i)}, "v": {"N": f"{i}.5"},
                                  "note": {"S": f"n{i}"}} for i in range(80)])
        wait_until(lambda: f"dynamodb.{later}: new stream found" in log.read_text(), "discovery finds the table",
                   timeout=30, run=run)
        writers.append(ItemWriter(moto_server, later, 80, seed=4, pause=0.02))
        writers[1].start()
        wait_until(lambda: log.read_text().count("following the change log") >= 2, "the run follows again",
                   run=run)
        time.sleep(3.0)
    finally:
        for writer in writers:
            writer.stop()
    assert all(writer.ops > 20 for writer in writers) and run.poll() is None, log.read_text()[-3000:]
    schemas = {s["name"]: s["json_schema"] for s in json.loads(catalog.read_text())["streams"]}

    def converged(table: str, schema: dict) -> bool:
        try:
            assert_equals_table(parquet_current(root, table), moto_server, table, schema)
        except (AssertionError, OSError):
            return False
        return True

    wait_until(lambda: converged(first, schemas[first]) and converged(later, schemas[first]),
               "both Parquet copies equal their tables", run=run)
    took = stop(run)
    text = log.read_text()
    assert run.returncode == 0 and took < 10 and "Traceback" not in text, text[-3000:]
