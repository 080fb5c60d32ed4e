"""Where a cold Spark path spends the time before its first chunk scans, one step after the other, in
a fresh process (run by ``bench_spark_path.py --breakdown N``, or alone: ``python bench/spark_start.py``).

Steps: importing pyspark and olake's session module; the driver JVM (``launch_gateway``: the
``spark-submit`` script, Spark's launcher and the JVM with olake's class archive); the SparkContext; the
first DataFrame job (Spark SQL's session state, planning, code generation); the first chunk job's Python
worker (the time until the task's function runs); olake's chunk modules imported in that worker (a
PostgreSQL to Parquet chunk's); the next chunk job's overhead (a job that does nothing); stopping the
session. Prints one JSON object of seconds.
"""

from __future__ import annotations

import json
import pickle
import sys
import time


def probe(started: float) -> dict[str, float]:
    """Runs in the task: when it ran, and how long importing a chunk's modules took."""
    ran = time.time()
    import adbc_driver_postgresql.dbapi  # noqa: F401
    import olake_cli.destinations.parquet.chunk_sink  # noqa: F401
    import olake_cli.pipeline.chunk_job  # noqa: F401
    import olake_cli.sources.postgres.source  # noqa: F401

    return {"worker": ran - started, "imports": time.time() - ran}


def main() -> None:
    """Time each step once; print the seconds as JSON on stdout."""
    steps: dict[str, float] = {}
    mark = time.perf_counter()

    def step(name: str) -> None:
        nonlocal mark
        now = time.perf_counter()
        steps[name] = round(now - mark, 3)
        mark = now

    import os

    from olake_cli.engine import session as olake_session
    from olake_cli.engine.task_entry import chunk_frame

    step("imports")
    from pyspark import SparkContext, cloudpickle
    from pyspark.sql import SparkSession

    master = sys.argv[1] if len(sys.argv) > 1 else "local[2]"
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    conf = olake_session._spark_conf(master, "olake-bench", None)
    gateway = olake_session._launch_gateway(conf, master)
    step("driver JVM")
    context = SparkContext(conf=conf, gateway=gateway)
    context.setLogLevel("ERROR")
    step("SparkContext")
    spark = SparkSession(context)
    spark.range(0, 1, 1, 1).count()
    step("first DataFrame job")
    submitted = time.time()
    rows = list(chunk_frame(spark, cloudpickle.dumps((probe, submitted)), False, None).toLocalIterator())
    task = pickle.loads(rows[-1][1])
    step("first chunk job")
    steps["  of which Python worker start"] = round(task["worker"], 3)
    steps["  of which olake's chunk imports"] = round(task["imports"], 3)
    list(chunk_frame(spark, pickle.dumps((abs, -1)), False, None).toLocalIterator())
    step("next chunk job (overhead)")
    spark.stop()
    step("stop")
    print(json.dumps(steps))


if __name__ == "__main__":
    main()
