"""olake's Spark data source in PySpark jobs of their own on the standalone cluster (a master and two
workers, tests/support/spark_cluster.py) and through its Spark Connect server, compared value by value
with the source.

Classic: the job is a driver process of its own (its own JVM, ``spark://...``), as a user's job is: the
read is planned in the driver's Python workers (the venv's Python, where olake is installed) and its
keeper process holds the exported snapshot on the driver machine, while the chunks are read by the
executors, whose Python (``spark.sql.execution.pyspark.python``: ``bare_python``, without olake) takes
olake from the ``olake pack`` archive given as ``spark.archives`` with ``spark.executorEnv.PYTHONPATH``,
as docs/spark.md says. It batch-reads the edge-value table and a table a writer then changes, and runs
a streaming query on that table twice (availableNow) from one checkpoint, the writer busy during the
load: the copy ends equal to the table, no change arrives twice, the slot is never confirmed past the
committed offset. With ``OLAKE_TEST_LONG=1`` the driver of such a query (every second, small
micro-batches, a writer busy) is SIGKILLed twice and started again from its checkpoint, then a last
availableNow run: the same checks (about 1.5 minutes).

Spark Connect: every Python worker (planning on the server, reading on its executors) runs a Python
without olake; ``register(spark, archive)`` ships it. The same batch reads by default, and with
``OLAKE_TEST_LONG=1`` the same stream (into a Parquet sink, since ``foreachBatch`` runs on the server in
a Python that needs Spark Connect's client libraries).
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
from tests.support.spark_cluster import cluster_spark_config
from tests.support.verify import assert_table_matches
from tests.test_e2e_edge_values import EDGE_DDL, EDGE_VALUES
from tests.test_spark_datasource import discovered
from tests.test_spark_datasource_stream import AccountWriter, assert_slot_within, committed_offset

DRIVER = '''
import json, os, sys
import pyarrow as pa, pyarrow.parquet as pq
from pyspark.sql.functions import spark_partition_id
from olake_cli.engine.session import spark_session
from olake_cli.spark import register

master, src, out, conf, archive = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4]), sys.argv[5]
connect = master.startswith("sc://")
if connect:  # Spark Connect: olake comes to the server's Python workers in the archive
    from pyspark.sql import SparkSession
    spark = SparkSession.builder.remote(master).create()
    register(spark, archive)
else:
    spark = spark_session(master, conf=conf)
    register(spark)
COPY, BATCHES, SINK = (os.path.join(out, name) for name in ("copy.parquet", "batches", "sink"))
os.makedirs(BATCHES, exist_ok=True)

def apply(rows, batch_id, current):
    """Rows by id in operation order onto ``current``, written to COPY; their change ids to BATCHES."""
    rows = sorted(rows, key=lambda r: r["_olake_op_id"] or "")
    for row in rows:
        if row["_olake_op"] == "d":
            current.pop(row["id"], None)
        else:
            current[row["id"]] = {k: row[k] for k in ("id", "v", "note")}
    pq.write_table(pa.Table.from_pylist(list(current.values()), pa.schema(
        [("id", pa.int32()), ("v", pa.int32()), ("note", pa.string())])), COPY + ".tmp")
    os.replace(COPY + ".tmp", COPY)
    with open(os.path.join(BATCHES, f"{batch_id}.tmp"), "w") as f:
        json.dump([r["_olake_op_id"] for r in rows if r["_olake_op"] != "r"], f)
    os.replace(os.path.join(BATCHES, f"{batch_id}.tmp"), os.path.join(BATCHES, str(batch_id)))

def apply_batch(frame, batch_id):
    current = {r["id"]: r for r in pq.read_table(COPY).to_pylist()} if os.path.exists(COPY) else {}
    apply(frame.toArrow().to_pylist(), batch_id, current)

def executor_python(batches):
    import sys, olake_cli
    import pyarrow as pa
    for _ in batches:
        yield pa.RecordBatch.from_pylist([{"python": sys.executable, "olake": olake_cli.__file__}])

def run(command):
    if command == "executors":
        rows = spark.range(1).mapInArrow(executor_python, "python string, olake string").collect()
        return [row.asDict() for row in rows]
    if command.startswith("batch "):
        stream = command.split()[1]
        frame = spark.read.format("olake").option("config", src).option("stream", stream) \\
            .option("driver_host", "127.0.0.1").load()
        data = frame.withColumn("_partition", spark_partition_id()).toArrow()
        pq.write_table(data.drop_columns(["_partition"]), os.path.join(out, stream + ".parquet"))
        return len(set(data.column("_partition").to_pylist()))
    reader = spark.readStream.format("olake").option("config", src).option("stream", "public.acc") \\
        .option("driver_host", "127.0.0.1")
    if command == "follow":  # small micro-batches, every second, until the driver is killed
        reader = reader.option("max_rows_per_batch", "50")
    writer = reader.load().writeStream.option("checkpointLocation", os.path.join(out, "checkpoint"))
    if command == "follow":
        writer.trigger(processingTime="1 second").foreachBatch(apply_batch).start()
        return "started"
    writer = writer.trigger(availableNow=True)
    # over Connect, foreachBatch would run on the server in a Python with Spark Connect's client
    # libraries, which the test's bare Python has not: the query writes Parquet files, applied here
    query = writer.format("parquet").option("path", SINK).start() if connect else writer.foreachBatch(apply_batch).start()
    query.awaitTermination(300)
    if query.exception() is not None:
        raise RuntimeError(str(query.exception()))
    if connect:  # every row the query wrote, applied anew
        apply(pq.read_table(SINK).to_pylist(), 0, {})
    return "ok"

for line in sys.stdin:
    print(json.dumps(run(line.strip())), flush=True)
'''


class Driver:
    """The job's driver process; ``ask`` sends it one command and waits for its JSON answer."""

    def __init__(self, tmp_path: Path, master: str, src: str, conf: dict, archive: str = "") -> None:
        script = tmp_path / "driver.py"
        script.write_text(DRIVER)
        self.log = tmp_path / "driver.log"
        env = {**olake_env(), "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
        self.process = subprocess.Popen([sys.executable, str(script), master, src, str(tmp_path), json.dumps(conf),
                                         archive],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=open(self.log, "ab"),
                                        env=env, text=True, start_new_session=True)

    def ask(self, command: str):
        self.process.stdin.write(command + "\n")
        self.process.stdin.flush()
        answer = self.process.stdout.readline()
        assert answer, f"the driver ended on '{command}': {self.log.read_text()[-3000:]}"
        return json.loads(answer)

    def close(self) -> None:
        self.process.stdin.close()
        assert self.process.wait(timeout=120) == 0, self.log.read_text()[-3000:]


def executors_conf(archive: str, python: str) -> dict:
    """The job's Spark settings: the test cluster's, olake's archive for the executors, their Python."""
    conf = {k: str(v) for k, v in cluster_spark_config()["conf"].items()}
    return {**conf, "spark.archives": f"{archive}#olake-env", "spark.executorEnv.PYTHONPATH": "olake-env",
            "spark.sql.execution.pyspark.python": python}


def seed(dsn: str) -> None:
    """The edge-value table and ``acc`` (300 rows), which the writer changes."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(EDGE_DDL)
        conn.execute(f"INSERT INTO edge VALUES {EDGE_VALUES}")
        conn.execute("CREATE TABLE acc (id int PRIMARY KEY, v int, note text)")
        conn.execute("INSERT INTO acc SELECT g, g, 'seed ' || g FROM generate_series(1, 300) g")


def assert_batch_reads(dsn: str, config: dict, out: Path, tables: tuple[str, ...]) -> None:
    """The tables the driver read equal the source value by value, every row a load row."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        for table in tables:
            json_schema = discovered(config, f"public.{table}")
            data = pq.read_table(out / f"public.{table}.parquet")
            assert data.column("_olake_op").to_pylist() == ["r"] * data.num_rows
            assert_table_matches(conn, "public", table, json_schema, data.select(list(json_schema["properties"])))


def stream_runs(driver: Driver, dsn: str, config: dict, out: Path, busy_runs: int) -> None:
    """``busy_runs`` availableNow runs of the query on ``acc`` with the writer busy (the first holds the
    load), one more once it stopped; the copy ends equal to the table, no change twice, the slot never
    past the committed offset."""
    slot, writer = config["replication_slot"], AccountWriter(dsn)
    writer.start()
    try:
        for _ in range(busy_runs):
            driver.ask("stream")
            assert_slot_within(dsn, committed_offset(str(out / "checkpoint")), slot)
    finally:
        writer.stop()
    assert writer.transactions > 0
    last_run_equals_the_table(driver, dsn, config, out)


def last_run_equals_the_table(driver: Driver, dsn: str, config: dict, out: Path) -> None:
    """A last availableNow run: the copy ends equal to the table, no change twice, the slot within."""
    slot = config["replication_slot"]
    driver.ask("stream")
    assert_slot_within(dsn, committed_offset(str(out / "checkpoint")), slot)
    changes = [op for path in (out / "batches").glob("[0-9]*") for op in json.loads(path.read_text())]
    assert changes and len(changes) == len(set(changes)), "a change arrived twice"
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert_table_matches(conn, "public", "acc", discovered(config, "public.acc"), pq.read_table(out / "copy.parquet"))
        conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))


def stream_config(pg_cluster, db: str, slot: str, chunk_rows: int) -> dict:
    """The source config: key-range chunks, a slot and publication the query creates."""
    return pg_cluster.source_config(db, replication_slot=slot, publication=f"{slot}_pub", chunk_rows=chunk_rows,
                                    create_slot_and_publication=True, chunk_strategy="primary_key")


def test_a_job_on_the_cluster_reads_a_table_and_its_changes(pg_cluster, pg_db, spark_cluster, olake_archive,
                                                            bare_python, tmp_path):
    dsn = pg_cluster.dsn(pg_db)
    seed(dsn)
    config = stream_config(pg_cluster, pg_db, "cluster_slot", 100)
    driver = Driver(tmp_path, spark_cluster.master, write_json(tmp_path / "src.json", config),
                    executors_conf(olake_archive, bare_python))
    try:
        executors = driver.ask("executors")
        assert executors and all(e["python"] == bare_python and "/olake-env/" in e["olake"] for e in executors), \
            executors  # olake came from the archive on the executors
        assert driver.ask("batch public.acc") == 3
        driver.ask("batch public.edge")
        assert_batch_reads(dsn, config, tmp_path, ("acc", "edge"))
        stream_runs(driver, dsn, config, tmp_path, busy_runs=1)
        driver.close()
    finally:
        if driver.process.poll() is None:
            os.killpg(driver.process.pid, signal.SIGKILL)


def test_reads_through_spark_connect_equal_the_source(pg_cluster, pg_db, spark_connect, olake_archive, tmp_path):
    """Through the Connect server, whose Python workers (planning and streaming on the server, reading on
    its executors) run a Python without olake: ``register(spark, archive)`` ships it to them."""
    dsn = pg_cluster.dsn(pg_db)
    seed(dsn)
    config = stream_config(pg_cluster, pg_db, "connect_slot", 100)
    driver = Driver(tmp_path, spark_connect.remote, write_json(tmp_path / "src.json", config), {}, olake_archive)
    try:
        assert driver.ask("batch public.acc") == 3
        driver.ask("batch public.edge")
        assert_batch_reads(dsn, config, tmp_path, ("acc", "edge"))
        if LONG:  # about 40 s more: a Connect server starts a Python worker per query, and per run
            stream_runs(driver, dsn, config, tmp_path, busy_runs=1)
        driver.close()
    finally:
        if driver.process.poll() is None:
            os.killpg(driver.process.pid, signal.SIGKILL)


@pytest.mark.skipif(not LONG, reason="opt-in: OLAKE_TEST_LONG=1 (three drivers on the cluster, about 1.5 minutes)")
def test_a_job_on_the_cluster_killed_mid_stream_goes_on_from_its_checkpoint(pg_cluster, pg_db, spark_cluster,
                                                                           olake_archive, bare_python, tmp_path):
    """The driver SIGKILLed twice while its query runs every second with a writer busy (its executors
    on the cluster lose their application), started again from the checkpoint; then a last run."""
    dsn = pg_cluster.dsn(pg_db)
    seed(dsn)
    config = stream_config(pg_cluster, pg_db, "cluster_kill_slot", 100)
    src, conf = write_json(tmp_path / "src.json", config), executors_conf(olake_archive, bare_python)
    writer = AccountWriter(dsn)
    writer.start()
    try:
        for wanted in (3, 6):
            driver = Driver(tmp_path, spark_cluster.master, src, conf)
            try:
                driver.ask("follow")
                wait_for_batches(tmp_path / "batches", wanted, driver)
            finally:
                os.killpg(driver.process.pid, signal.SIGKILL)
                driver.process.wait()
            assert_slot_within(dsn, committed_offset(str(tmp_path / "checkpoint")), "cluster_kill_slot")
    finally:
        writer.stop()
    assert writer.transactions > 0
    driver = Driver(tmp_path, spark_cluster.master, src, conf)
    try:
        last_run_equals_the_table(driver, dsn, config, tmp_path)
        driver.close()
    finally:
        if driver.process.poll() is None:
            os.killpg(driver.process.pid, signal.SIGKILL)


def wait_for_batches(folder: Path, count: int, driver: Driver) -> None:
    """Until ``count`` micro-batches were applied (the driver must not end first)."""
    deadline = time.monotonic() + 180
    while len(list(folder.glob("[0-9]*"))) < count:
        assert driver.process.poll() is None, driver.log.read_text()[-3000:]
        assert time.monotonic() < deadline, "no progress"
        time.sleep(0.5)
