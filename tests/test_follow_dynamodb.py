"""``sync --follow`` of a DynamoDB table (moto's server): puts, updates and deletes made while it runs reach
Parquet; a SIGKILL at a random moment and a restart lose and double nothing; once the writer stops, the
copy equals the table item by item; SIGTERM ends the run within 10 s with exit 0."""

from __future__ import annotations

import subprocess
import time

from tests.support.cli import write_json
from tests.support.follow import kill_and_restart, start_olake, stop, wait_until
from tests.support.dynamo import (ItemWriter, assert_equals_table, discovered_catalog, dynamo_source, first_schema,
                                  parquet_current, seed_accounts)


def test_sync_follow_of_a_dynamodb_table_converges_across_a_kill_and_stops_on_sigterm(moto_server, dynamo_table,
                                                                                       tmp_path):
    seed_accounts(moto_server, dynamo_table, 100)
    src = dynamo_source(tmp_path, moto_server, dynamo_table)
    catalog = discovered_catalog(tmp_path, src, "cdc")
    schema = first_schema(catalog)
    root = tmp_path / "lake"
    dst = write_json(tmp_path / "dst.json", {"type": "parquet", "path": str(root)})
    args = ["sync", "--source", src, "--destination", dst, "--catalog", str(catalog), "--state",
            str(tmp_path / "state.json"), "--follow", "--commit-interval", "1"]
    log = tmp_path / "sync.log"
    writer = ItemWriter(moto_server, dynamo_table, 100, pause=0.02)
    run = start_olake(args, log, stdout=subprocess.DEVNULL)
    try:
        wait_until(lambda: "following the change log" in log.read_text(), "the change phase starts")
        writer.start()
        run = kill_and_restart(run, args, log, seed=9, high=3.0)
        time.sleep(3.0)
    finally:
        writer.stop()
    assert writer.ops > 50 and run.poll() is None, log.read_text()[-3000:]

    def converged() -> bool:
        try:
            assert_equals_table(parquet_current(root, dynamo_table), moto_server, dynamo_table, schema)
        except (AssertionError, OSError):
            return False
        return True

    wait_until(converged, "the Parquet copy equals the table")
    took = stop(run)
    text = log.read_text()
    assert run.returncode == 0 and took < 10, text[-3000:]
    assert "stopped by SIGTERM" in text.splitlines()[-1] and "Traceback" not in text, text[-3000:]
    assert_equals_table(parquet_current(root, dynamo_table), moto_server, dynamo_table, schema)
