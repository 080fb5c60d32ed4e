"""A streaming query whose driver is SIGKILLed mid-stream, started again from its checkpoint, ends equal
to the source with no change given twice, and the slot is never confirmed past the committed offset.

Opt-in (``OLAKE_TEST_LONG=1``): each driver is a process of its own with its own JVM (about a minute).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psycopg
import pyarrow.parquet as pq
import pytest

from tests.support.cli import olake_env, write_json
from tests.support.matrix import LONG
from tests.support.verify import assert_table_matches
from tests.test_spark_datasource import discovered
from tests.test_spark_datasource_stream import AccountWriter, assert_slot_within, committed_offset

pytestmark = pytest.mark.skipif(not LONG, reason="opt-in: OLAKE_TEST_LONG=1 (a minute of separate drivers)")

DRIVER = '''
import json, os, sys
import pyarrow as pa, pyarrow.parquet as pq
from olake_cli.engine.session import spark_session
from olake_cli.spark import register

src, out, mode = sys.argv[1:4]
spark = spark_session("local[2]")
register(spark)
COPY = os.path.join(out, "copy.parquet")

def apply(frame, batch_id):
    rows = sorted(frame.toArrow().to_pylist(), key=lambda r: r["_olake_op_id"] or "")
    current = {r["id"]: r for r in pq.read_table(COPY).to_pylist()} if os.path.exists(COPY) else {}
    for row in rows:
        if row["_olake_op"] == "d":
            current.pop(row["id"], None)
        else:
            current[row["id"]] = {k: row[k] for k in ("id", "v", "note")}
    pq.write_table(pa.Table.from_pylist(list(current.values()), pa.schema(
        [("id", pa.int32()), ("v", pa.int32()), ("note", pa.string())])), COPY + ".tmp")
    os.replace(COPY + ".tmp", COPY)
    with open(os.path.join(out, "batches", f"{batch_id}.tmp"), "w") as f:
        json.dump([r["_olake_op_id"] for r in rows if r["_olake_op"] != "r"], f)
    os.replace(os.path.join(out, "batches", f"{batch_id}.tmp"), os.path.join(out, "batches", str(batch_id)))

frame = spark.readStream.format("olake").option("config", src).option("stream", "public.acc") \\
    .option("max_rows_per_batch", "50").load()
writer = frame.writeStream.foreachBatch(apply).option("checkpointLocation", os.path.join(out, "checkpoint"))
query = (writer.trigger(availableNow=True) if mode == "finish" else writer.trigger(processingTime="1 second")).start()
query.awaitTermination()
'''


def start_driver(script: Path, src: str, out: Path, mode: str) -> subprocess.Popen:
    """A driver process of its own (its own session, so a kill takes its JVM with it)."""
    env = {**olake_env(), "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    return subprocess.Popen([sys.executable, str(script), src, str(out), mode], env=env, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=open(out / f"driver-{mode}.log", "ab"))


def wait_for_batches(out: Path, count: int, driver: subprocess.Popen) -> None:
    """Until ``count`` micro-batches were applied (the driver must not end first)."""
    deadline = time.monotonic() + 180
    while len(list((out / "batches").glob("[0-9]*"))) < count:
        assert driver.poll() is None, (out / "driver-run.log").read_text()[-3000:]
        assert time.monotonic() < deadline, "no progress"
        time.sleep(0.5)


def test_a_killed_driver_restarts_from_its_checkpoint_with_nothing_lost_or_twice(pg_cluster, pg_db, tmp_path):
    dsn = pg_cluster.dsn(pg_db)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE acc (id int PRIMARY KEY, v int, note text)")
        conn.execute("INSERT INTO acc SELECT g, g, 'seed ' || g FROM generate_series(1, 500) g")
    config = pg_cluster.source_config(pg_db, replication_slot="kill_slot", publication="kill_pub",
                                      create_slot_and_publication=True, chunk_rows=200, chunk_strategy="primary_key")
    src = write_json(tmp_path / "src.json", config)
    (tmp_path / "batches").mkdir()
    script = tmp_path / "driver.py"
    script.write_text(DRIVER)
    writer = AccountWriter(dsn)
    writer.start()
    try:
        for wanted in (4, 8):  # killed twice mid-stream, each time started again from the checkpoint
            driver = start_driver(script, src, tmp_path, "run")
            wait_for_batches(tmp_path, wanted, driver)
            os.killpg(driver.pid, signal.SIGKILL)
            driver.wait()
            assert_slot_within(dsn, committed_offset(str(tmp_path / "checkpoint")), "kill_slot")
    finally:
        writer.stop()
    final = start_driver(script, src, tmp_path, "finish")
    assert final.wait(timeout=300) == 0, (tmp_path / "driver-finish.log").read_text()[-3000:]
    changes = [op for path in (tmp_path / "batches").glob("[0-9]*") for op in json.loads(path.read_text())]
    assert changes and len(changes) == len(set(changes)), "a change was given in two micro-batches"
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert_table_matches(conn, "public", "acc", discovered(config, "public.acc"),
                             pq.read_table(tmp_path / "copy.parquet"))
        conn.execute("SELECT pg_drop_replication_slot('kill_slot')")
