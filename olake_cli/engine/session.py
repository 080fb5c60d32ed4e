"""Builds the SparkSession olake runs its chunk jobs on (the only place, with engine/, importing pyspark)."""

from __future__ import annotations

import os
import sys

_SESSION = None


def spark_session(master: str | None = None, app_name: str = "olake"):
    """Return the process-wide SparkSession, starting it on ``master`` (default ``local[*]``) if needed."""
    global _SESSION
    if _SESSION is not None:
        return _SESSION
    # Spark's Python workers run `python3` from PATH unless told otherwise: use our interpreter.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    master = master or os.environ.get("OLAKE_SPARK_MASTER") or "local[*]"
    builder = (SparkSession.builder.master(master).appName(app_name)
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.execution.arrow.pyspark.enabled", "true")
               .config("spark.driver.memory", os.environ.get("OLAKE_SPARK_DRIVER_MEMORY", "2g"))
               .config("spark.python.worker.reuse", "true")
               .config("spark.scheduler.mode", "FAIR"))
    _SESSION = builder.getOrCreate()
    _SESSION.sparkContext.setLogLevel("ERROR")
    return _SESSION


def stop_spark_session() -> None:
    """Stop the process-wide session if one was started."""
    global _SESSION
    if _SESSION is not None:
        _SESSION.stop()
        _SESSION = None
