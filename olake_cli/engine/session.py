"""Builds the SparkSession olake runs its chunk jobs on: a classic one (local, standalone, YARN,
Kubernetes) started here, or a Spark Connect client of a running server."""

from __future__ import annotations

import os
import re
import socket
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from olake_cli.core.errors import ConfigError, OlakeError
from olake_cli.engine import class_archive

_SESSION = None
SPARK_LOG_ENV = "OLAKE_SPARK_LOG"
SPARK_LOG_MAX_BYTES = 10 << 20
_LOCAL = re.compile(r"local(\[(\*|\d+)(,\d+)?\])?")
_OTHER_SCHEMES = ("yarn", "k8s://", "mesos://")
_CONNECT_PORT = 15002  # Spark Connect's default


@dataclass(frozen=True)
class SparkTarget:
    """Where a run's chunk jobs go: a classic ``master`` or a Spark Connect ``remote``, the session
    settings (``conf``) and the environment shipped to the executors (``archive``, see ``olake pack``)."""

    master: str | None = None
    remote: str | None = None
    conf: dict[str, Any] = field(default_factory=dict)
    archive: str | None = None
    on_this_machine: bool = False  # the remote is the server ``olake spark-server start`` runs here
    session_id: str | None = None  # the server session runs share (that server's, see spark_server)
    slots: int | None = None  # its task slots, when known without asking the cluster

    @property
    def local(self) -> bool:
        """Whether the tasks run on this machine (and see its disk)."""
        return self.on_this_machine or (self.remote is None and (self.master or "").startswith("local"))

    @property
    def label(self) -> str:
        """The URL for messages."""
        return self.remote or self.master or "local[*]"

    @property
    def archive_name(self) -> str | None:
        """The folder name the archive unpacks to on the executors (None: nothing shipped)."""
        return os.path.basename(self.archive) if self.archive and not self.local else None


def resolve_target(master: str | None, remote: str | None, section: dict[str, Any] | None) -> SparkTarget:
    """The run's target from ``--spark-master``/``--spark-remote`` (else ``OLAKE_SPARK_MASTER``/
    ``OLAKE_SPARK_REMOTE``) and the config's ``spark`` section; checked, so a wrong URL fails now."""
    section = section or {}
    if master and remote:
        raise ConfigError("give --spark-master or --spark-remote, not both")
    if not master and not remote:
        remote = os.environ.get("OLAKE_SPARK_REMOTE") or None
        master = None if remote else os.environ.get("OLAKE_SPARK_MASTER") or None
    archive = section.get("archive")
    if archive:
        archive = os.path.abspath(os.path.expanduser(archive))
        if not os.path.isfile(archive):
            raise ConfigError(f"spark.archive '{archive}' is not a file; build it with 'olake pack --output FILE'")
    if remote:
        check_remote(remote)
    else:
        check_master(master or "local[*]")
    return SparkTarget(master=None if remote else (master or "local[*]"), remote=remote,
                       conf={k: str(v) for k, v in (section.get("conf") or {}).items()}, archive=archive)


def check_remote(url: str, timeout_s: float = 5.0) -> None:
    """Refuse a Spark Connect URL that is malformed or where no server answers (one line)."""
    if not url.startswith("sc://"):
        raise ConfigError(f"spark remote '{url}' is not a Spark Connect URL (sc://host:port); check "
                          f"--spark-remote or OLAKE_SPARK_REMOTE")
    address = url[len("sc://"):].split("/", 1)[0]
    host, _, port = address.rpartition(":") if ":" in address else (address, "", str(_CONNECT_PORT))
    if not host or not port.isdigit():
        raise ConfigError(f"spark remote '{url}': '{address}' is not host:port")
    problem = unreachable(host, int(port), timeout_s)
    if problem:
        raise ConfigError(f"cannot reach the Spark Connect server ({address}: {problem}); check "
                          f"--spark-remote or OLAKE_SPARK_REMOTE and that the server runs")


def unreachable(host: str, port: int, timeout_s: float) -> str | None:
    """Why nothing answers a TCP connection at ``host:port`` within ``timeout_s`` (None: something does)."""
    try:
        socket.create_connection((host, port), timeout=timeout_s).close()
    except OSError as exc:
        return str(exc.strerror or exc)
    return None


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
        problem = unreachable(host, int(port), timeout_s)
        if problem is None:
            return
        problems.append(f"{address}: {problem}")
    raise ConfigError(f"cannot reach the Spark master ({'; '.join(problems)}); check --spark-master or "
                      f"OLAKE_SPARK_MASTER and that the master runs")


def start_session(target: SparkTarget):
    """The process-wide session for ``target``, with its archive added (started on first use)."""
    if _SESSION is not None:
        return _SESSION
    if target.remote:
        session = connect_session(target.remote, target.conf, target.session_id)
    else:
        session = spark_session(target.master, conf=target.conf)
    if target.archive_name:
        session.addArtifacts(target.archive, archive=True)
    return session


def connect_session(remote: str, conf: dict[str, str] | None = None, session_id: str | None = None):
    """Return the process-wide session as a Spark Connect client of ``remote`` (no JVM here); with
    ``session_id``, that server session (whose Python workers earlier runs left warm)."""
    global _SESSION
    if _SESSION is not None:
        return _SESSION
    from pyspark.sql import SparkSession

    url = f"{remote.rstrip('/')}/;session_id={session_id}" if session_id else remote
    try:
        _SESSION = SparkSession.builder.remote(url).config(map=dict(conf or {})).create()
    except Exception as exc:  # grpc and pyspark errors of many types; the first line says why
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
        raise OlakeError(f"cannot open a Spark Connect session at {remote} ({reason})") from None
    return _SESSION


def is_connect(spark) -> bool:
    """Whether ``spark`` is a Spark Connect client session (no SparkContext, no RDD)."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def local_cores(master: str) -> int | None:
    """The task slots of a local master URL (``local``, ``local[N]``, ``local[*]``), None for any other."""
    match = _LOCAL.fullmatch(master)
    if match is None:
        return None
    slots = match.group(2)
    return 1 if slots is None else (os.cpu_count() or 1) if slots == "*" else int(slots)


def cluster_cores(spark) -> int:
    """How many tasks the cluster runs at once (Spark's default parallelism)."""
    if not is_connect(spark):
        return spark.sparkContext.defaultParallelism
    # Spark Connect has no SparkContext: a range without a partition count is split that many ways
    from pyspark.sql import functions as F

    row = spark.range(0, 1 << 16).select(F.spark_partition_id().alias("p")).agg(F.countDistinct("p")).first()
    return int(row[0])


def spark_session(master: str | None = None, app_name: str = "olake", java_options: list[str] | None = None,
                  conf: dict[str, str] | None = None):
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
    spark_conf = _spark_conf(master, app_name, java_options)
    for key, value in (conf or {}).items():
        spark_conf.set(key, value)
    context = SparkContext(conf=spark_conf, gateway=_launch_gateway(spark_conf, master))
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


def stop_spark_session() -> None:
    """Stop the process-wide session if one was started."""
    global _SESSION
    if _SESSION is not None:
        _SESSION.stop()  # a Connect client only closes its session; the server keeps running
        _SESSION = None


def process_tag() -> str:
    """The tag every chunk job of this process carries."""
    return f"olake-{os.getpid()}"


def cancel_spark_jobs() -> None:
    """Cancel every running Spark job, without waiting, and log nothing more: for a run that ends at
    once. Its JVM then stops itself (Spark's own shutdown hooks) when this process is gone."""
    if _SESSION is not None and is_connect(_SESSION):
        _SESSION.interruptTag(process_tag())  # this process's jobs (other runs may share the session)
    elif _SESSION is not None:
        _SESSION.sparkContext.setLogLevel("OFF")
        _SESSION.sparkContext.cancelAllJobs()
