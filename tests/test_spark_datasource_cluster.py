"""olake's Spark data source in a PySpark job of its own on the standalone cluster (a master and two
workers, tests/support/spark_cluster.py), compared value by value with the source.

The job is a driver process of its own (its own JVM, ``.master(spark://...)``), as a user's job is: the
read is planned in the driver's Python workers (the venv's Python, where olake is installed) and its
keeper process holds the exported snapshot on the driver machine, while the chunks are read by the
executors, whose Python (``spark.sql.execution.pyspark.python``: ``bare_python``, without olake) takes
olake from the ``olake pack`` archive given as ``spark.archives`` with ``spark.executorEnv.PYTHONPATH``,
as docs/spark.md says. The job batch-reads the edge-value table and a table a writer then changes, and
runs a streaming query on that table three times (availableNow) from one checkpoint while the writer
works: the copy ends equal to the table, no change arrives twice, the slot is never confirmed past the
committed offset.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import psycopg
import pyarrow.parquet as pq

from tests.support.cli import olake_env, write_json
from tests.support.spark_cluster import cluster_spark_config
from tests.support.verify import assert_table_matches
from tests.test_e2e_edge_values import EDGE_DDL, EDGE_VALUES, GRID_VALUES
from tests.test_spark_datasource import discovered
from tests.test_spark_datasource_stream import AccountWriter, assert_slot_within, committed_offset

DRIVER = '''
import json, os, sys
import pyarrow.parquet as pq
from pyspark.sql.functions import spark_partition_id
from olake_cli.engine.session import spark_session
from olake_cli.spark import register
from tests.test_spark_datasource_stream import ParquetApply

master, src, out, conf, archive = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4]), sys.argv[5]
if master.startswith("sc://"):  # Spark Connect: olake comes to the server's Python workers in the archive
    from pyspark.sql import SparkSession
    spark = SparkSession.builder.remote(master).create()
    register(spark, archive)
else:
    spark = spark_session(master, conf=conf)
    register(spark)
apply = ParquetApply(os.path.join(out, "copy.parquet"))

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
    frame = spark.readStream.format("olake").option("config", src).option("stream", "public.acc") \\
        .option("driver_host", "127.0.0.1").load()
    query = frame.writeStream.foreachBatch(apply).option("checkpointLocation", os.path.join(out, "checkpoint")) \\
        .trigger(availableNow=True).start()
    query.awaitTermination(300)
    if query.exception() is not None:
        raise RuntimeError(str(query.exception()))
    return apply.change_ids

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
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=open(self.log, "wb"),
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


def test_a_job_on_the_cluster_reads_a_table_and_its_changes(pg_cluster, pg_db, spark_cluster, olake_archive,
                                                            bare_python, tmp_path):
    dsn = pg_cluster.dsn(pg_db)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(EDGE_DDL)
        conn.execute(f"INSERT INTO edge VALUES {EDGE_VALUES}")
        conn.execute("CREATE TABLE acc (id int PRIMARY KEY, v int, note text)")
        conn.execute("INSERT INTO acc SELECT g, g, 'seed ' || g FROM generate_series(1, 300) g")
    config = pg_cluster.source_config(pg_db, replication_slot="cluster_slot", publication="cluster_pub",
                                      create_slot_and_publication=True, chunk_rows=100, chunk_strategy="primary_key")
    src = write_json(tmp_path / "src.json", config)
    driver = Driver(tmp_path, spark_cluster.master, src, executors_conf(olake_archive, bare_python))
    writer = AccountWriter(dsn)
    try:
        executors = driver.ask("executors")
        assert executors and all(e["python"] == bare_python and "/olake-env/" in e["olake"] for e in executors), \
            executors  # olake came from the archive on the executors
        assert driver.ask("batch public.acc") == 3
        driver.ask("batch public.edge")
        with psycopg.connect(dsn, autocommit=True) as conn:
            for table in ("acc", "edge"):
                json_schema = discovered(config, f"public.{table}")
                data = pq.read_table(tmp_path / f"public.{table}.parquet")
                assert data.column("_olake_op").to_pylist() == ["r"] * data.num_rows
                assert_table_matches(conn, "public", table, json_schema, data.select(list(json_schema["properties"])))
        writer.start()
        for _ in range(2):  # the load (the writer busy meanwhile), then the changes so far
            driver.ask("stream")
            assert_slot_within(dsn, committed_offset(str(tmp_path / "checkpoint")), "cluster_slot")
        writer.stop()
        change_ids = driver.ask("stream")  # the rest of the changes
        assert_slot_within(dsn, committed_offset(str(tmp_path / "checkpoint")), "cluster_slot")
        driver.close()
    finally:
        writer.stop_event.set()
        if driver.process.poll() is None:
            os.killpg(driver.process.pid, signal.SIGKILL)
    assert writer.transactions > 0 and change_ids
    assert len(change_ids) == len(set(change_ids)), "a change arrived twice"
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert_table_matches(conn, "public", "acc", discovered(config, "public.acc"),
                             pq.read_table(tmp_path / "copy.parquet"))
        conn.execute("SELECT pg_drop_replication_slot('cluster_slot')")



def test_a_batch_read_through_spark_connect_equals_the_source(pg_cluster, pg_db, spark_connect, olake_archive,
                                                              bare_python, tmp_path):
    """Through the Connect server, whose Python workers (planning on the server, reading on its executors)
    run ``bare_python``: ``register(spark, archive)`` ships olake to them."""
    dsn = pg_cluster.dsn(pg_db)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(EDGE_DDL)
        conn.execute(f"INSERT INTO edge VALUES {EDGE_VALUES}")
        conn.execute(f"INSERT INTO grid VALUES {GRID_VALUES}")
    config = pg_cluster.source_config(pg_db, chunk_rows=3, chunk_strategy="primary_key")
    src = write_json(tmp_path / "src.json", config)
    driver = Driver(tmp_path, spark_connect.remote, src, {}, olake_archive)
    try:
        assert driver.ask("batch public.edge") == 3
        driver.ask("batch public.grid")
        driver.close()
    finally:
        if driver.process.poll() is None:
            os.killpg(driver.process.pid, signal.SIGKILL)
    with psycopg.connect(dsn, autocommit=True) as conn:
        for table in ("edge", "grid"):
            json_schema = discovered(config, f"public.{table}")
            data = pq.read_table(tmp_path / f"public.{table}.parquet")
            assert_table_matches(conn, "public", table, json_schema, data.select(list(json_schema["properties"])))
