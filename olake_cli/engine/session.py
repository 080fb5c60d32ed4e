"""Builds the SparkSession olake runs its chunk jobs on (the only place, with engine/, importing pyspark)."""

from __future__ import annotations

import os
import re
import socket
import sys

from olake_cli.core.errors import ConfigError
from olake_cli.engine import class_archive

_SESSION = None
_LOCAL = re.compile(r"local(\[(\*|\d+)(,\d+)?\])?")
_OTHER_SCHEMES = ("yarn", "k8s://", "mesos://")


def check_master(master: str, timeout_s: float = 5.0) -> None:
    """Refuse a master URL Spark would hang on: an unknown form, or a spark:// master nobody answers at.

    Raises ConfigError with one line saying what to check (Spark itself retries for about a minute).
    """
    if _LOCAL.fullmatch(master) or master.startswith(_OTHER_SCHEMES):
        return
    if not master.startswith("spark://"):
        raise ConfigError(f"spark master '{master}' is not a Spark master URL (local[*], local[N], "
                          f"spark://host:port, yarn, k8s://...); check --spark-master or OLAKE_SPARK_MASTER")
    problems = []
    for address in master[len("spark://"):].split(","):
        host, _, port = address.rpartition(":")
        if not host or not port.isdigit():
            raise ConfigError(f"spark master '{master}': '{address}' is not host:port")
        try:
            socket.create_connection((host, int(port)), timeout=timeout_s).close()
            return
        except OSError as exc:
            problems.append(f"{address}: {exc.strerror or exc}")
    raise ConfigError(f"cannot reach the Spark master ({'; '.join(problems)}); check --spark-master or "
                      f"OLAKE_SPARK_MASTER and that the master runs")


def spark_session(master: str | None = None, app_name: str = "olake", java_options: list[str] | None = None):
    """Return the process-wide SparkSession, starting it on ``master`` (default ``local[*]``) if needed.

    The driver JVM gets ``java_options``, by default the class archive's (see class_archive) and C1
    compilation only, then whatever ``OLAKE_SPARK_JAVA_OPTIONS`` adds.
    """
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
    if java_options is None:
        java_options = [*class_archive.java_options(), "-XX:TieredStopAtLevel=1"]
    options = " ".join([f"-Dlog4j.configurationFile=file:{log4j}", *java_options,
                        os.environ.get("OLAKE_SPARK_JAVA_OPTIONS", "")]).strip()
    builder = (SparkSession.builder.master(master).appName(app_name)
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.execution.arrow.pyspark.enabled", "true")
               .config("spark.driver.memory", os.environ.get("OLAKE_SPARK_DRIVER_MEMORY", "2g"))
               .config("spark.python.worker.reuse", "true")
               .config("spark.scheduler.mode", "FAIR")
               .config("spark.driver.extraJavaOptions", options))
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
