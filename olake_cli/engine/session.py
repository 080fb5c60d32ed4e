"""Builds the SparkSession olake runs its chunk jobs on (the only place, with engine/, importing pyspark)."""

from __future__ import annotations

import os
import re
import socket
import sys
import time

from olake_cli.core.errors import ConfigError, OlakeError
from olake_cli.engine import class_archive

_SESSION = None
SPARK_LOG_ENV = "OLAKE_SPARK_LOG"
SPARK_LOG_MAX_BYTES = 10 << 20
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
    compilation only, then whatever ``OLAKE_SPARK_JAVA_OPTIONS`` adds. What the JVM and its Python
    workers print themselves goes to :func:`spark_log_path`, never to olake's stderr.
    """
    global _SESSION
    if _SESSION is not None:
        return _SESSION
    # Spark's Python workers run `python3` from PATH unless told otherwise: use our interpreter.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    import warnings

    warnings.filterwarnings("ignore", category=FutureWarning, module="pyspark")
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    master = master or os.environ.get("OLAKE_SPARK_MASTER") or "local[*]"
    if master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    conf = _spark_conf(master, app_name, java_options)
    context = SparkContext(conf=conf, gateway=_launch_gateway(conf, master))
    context.setLogLevel("ERROR")
    _SESSION = SparkSession(context)
    return _SESSION


def _spark_conf(master: str, app_name: str, java_options: list[str] | None):
    """The SparkConf olake starts its session with."""
    from pyspark import SparkConf

    log4j = os.path.join(os.path.dirname(os.path.abspath(__file__)), "log4j2.properties")
    if java_options is None:
        java_options = [*class_archive.java_options(), "-XX:TieredStopAtLevel=1"]
    options = " ".join([f"-Dlog4j.configurationFile=file:{log4j}", *java_options,
                        os.environ.get("OLAKE_SPARK_JAVA_OPTIONS", "")]).strip()
    return (SparkConf().setMaster(master).setAppName(app_name)
            .set("spark.ui.enabled", "false")
            .set("spark.ui.showConsoleProgress", "false")
            .set("spark.sql.execution.arrow.pyspark.enabled", "true")
            .set("spark.driver.memory", os.environ.get("OLAKE_SPARK_DRIVER_MEMORY", "2g"))
            .set("spark.python.worker.reuse", "true")
            .set("spark.scheduler.mode", "FAIR")
            .set("spark.driver.extraJavaOptions", options))


def spark_log_path() -> str:
    """Where the Spark JVM's own output goes: ``$OLAKE_SPARK_LOG``, else ``spark.log`` in
    ``$XDG_STATE_HOME/olake`` (``~/.local/state/olake``)."""
    configured = os.environ.get(SPARK_LOG_ENV)
    if configured:
        return os.path.abspath(os.path.expanduser(configured))
    state_home = os.environ.get("XDG_STATE_HOME") or os.path.expanduser("~/.local/state")
    return os.path.join(state_home, "olake", "spark.log")


def _launch_gateway(conf, master: str):
    """Start the driver JVM with its stdout and stderr appended to the Spark log (a run's lines under
    a header naming its process); a JVM that does not start is an OlakeError naming the log."""
    from pyspark.java_gateway import launch_gateway

    path = spark_log_path()
    log = _open_spark_log(path)
    try:
        os.write(log, f"--- {time.strftime('%Y-%m-%d %H:%M:%S')} olake (pid {os.getpid()}) starts Spark, "
                      f"master {master}\n".encode())
        return launch_gateway(conf, popen_kwargs={"stdout": log, "stderr": log})
    except Exception as exc:  # pyspark raises its own error types; the log holds the JVM's reason
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise OlakeError(f"Spark did not start ({reason}); see {path} for why") from None
    finally:
        os.close(log)


def _open_spark_log(path: str) -> int:
    """The Spark log opened for appending (begun anew once it exceeds 10 MB, the old one kept as .1)."""
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        if os.path.exists(path) and os.path.getsize(path) > SPARK_LOG_MAX_BYTES:
            os.replace(path, path + ".1")
        return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    except OSError as exc:
        raise ConfigError(f"cannot write the Spark log '{path}': {exc.strerror or exc}; set {SPARK_LOG_ENV} "
                          f"to a file olake may write") from None


def stop_spark_session(quiet: bool = False) -> None:
    """Stop the process-wide session if one was started (``quiet``: Spark logs nothing while it stops)."""
    global _SESSION
    if _SESSION is not None:
        if quiet:
            _SESSION.sparkContext.setLogLevel("OFF")
            _SESSION.sparkContext.cancelAllJobs()
        _SESSION.stop()
        _SESSION = None
