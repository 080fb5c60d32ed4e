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
    import warnings

    warnings.filterwarnings("ignore", category=FutureWarning, module="pyspark")
    from pyspark.sql import SparkSession

    master = master or os.environ.get("OLAKE_SPARK_MASTER") or "local[*]"
    if master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    log4j = os.path.join(os.path.dirname(os.path.abspath(__file__)), "log4j2.properties")
    builder = (SparkSession.builder.master(master).appName(app_name)
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.execution.arrow.pyspark.enabled", "true")
               .config("spark.driver.memory", os.environ.get("OLAKE_SPARK_DRIVER_MEMORY", "2g"))
               .config("spark.python.worker.reuse", "true")
               .config("spark.scheduler.mode", "FAIR")
               .config("spark.driver.extraJavaOptions", f"-Dlog4j.configurationFile=file:{log4j}"))
    _SESSION = builder.getOrCreate()
    _SESSION.sparkContext.setLogLevel("ERROR")
    return _SESSION


def stop_spark_session(quiet: bool = False) -> None:
    """Stop the process-wide session if one was started (``quiet``: Spark logs nothing while it stops)."""
    global _SESSION
    if _SESSION is not None:
        if quiet:
            _SESSION.sparkContext.setLogLevel("OFF")
            _SESSION.sparkContext.cancelAllJobs()
        _SESSION.stop()
        _SESSION = None
