"""A warm engine: a Spark Connect server on this machine that ``olake spark-server start`` leaves running,
so the runs that use it (``--spark-remote``) start no JVM of their own.

The server is pyspark's own ``SparkConnectServer`` on a local master, listening on 127.0.0.1 only, its
Python workers running the interpreter that started it (the one olake is installed in). Its process id
and port are kept in ``spark-server.json`` beside the Spark log (``$XDG_STATE_HOME/olake``); a run whose
``--spark-remote`` names that server knows its tasks run on this machine, so they see its disk as a
local master's do (no ``shared_path``, and small loads still skip Spark), and joins the one server
session the record names, whose Python workers (and the modules they imported) earlier runs left warm.
The server's own output goes to ``spark-server.log`` in the same folder.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import asdict, dataclass

from olake_cli.core.errors import ConfigError, OlakeError
from olake_cli.core.state import atomic_write_bytes
from olake_cli.engine.session import spark_log_path, unreachable
from olake_cli.shared.spool import process_alive

DEFAULT_PORT = 15002
START_TIMEOUT_S = 180.0
STOP_TIMEOUT_S = 30.0
JAVA_OPTIONS = "-XX:TieredStopAtLevel=1"  # the server's JVM only plans and schedules; Python does the work
SESSION_TIMEOUT = "3650d"  # the shared session must outlive idle hours (a closed session id is refused)


@dataclass(frozen=True)
class ServerRecord:
    """A started server: its process (the leader of its own process group), port and master."""

    pid: int
    port: int
    master: str
    started_at: float
    session_id: str  # the server session every run shares, so its Python workers stay warm between runs

    @property
    def remote(self) -> str:
        """The URL runs give as ``--spark-remote``."""
        return f"sc://127.0.0.1:{self.port}"


def record_path() -> str:
    """Where the running server is recorded (beside the Spark log)."""
    return os.path.join(os.path.dirname(spark_log_path()), "spark-server.json")


def running() -> ServerRecord | None:
    """The server ``olake spark-server start`` left running, or None (a stale record is removed)."""
    try:
        with open(record_path(), encoding="utf-8") as handle:
            record = ServerRecord(**json.load(handle))
    except (OSError, ValueError, TypeError):
        return None
    if process_alive(record.pid) and _answers(record.port):
        return record
    _forget()
    return None


def serving(remote: str) -> ServerRecord | None:
    """The server running on this machine if ``remote`` names it (its tasks see this machine's disk)."""
    record = running()
    return record if record is not None and remote.rstrip("/") == record.remote else None


def start(port: int, master: str, memory: str) -> tuple[ServerRecord, bool]:
    """Start the server and wait until it answers; or find the one running (then False)."""
    record = running()
    if record is not None:
        return record, False
    if _answers(port):
        raise ConfigError(f"port {port} is taken by another process; give spark-server start another --port")
    import pyspark

    spark_home = os.path.dirname(os.path.abspath(pyspark.__file__))
    log4j = os.path.join(os.path.dirname(os.path.abspath(__file__)), "log4j2.properties")
    argv = [os.path.join(spark_home, "bin", "spark-submit"),
            "--class", "org.apache.spark.sql.connect.service.SparkConnectServer", "--master", master,
            "--conf", f"spark.connect.grpc.binding.port={port}",
            "--conf", "spark.connect.grpc.binding.address=127.0.0.1",
            "--conf", "spark.ui.enabled=false", "--conf", f"spark.driver.memory={memory}",
            "--conf", "spark.python.worker.reuse=true",
            "--conf", f"spark.connect.session.manager.defaultSessionTimeout={SESSION_TIMEOUT}",
            "--driver-java-options", f"-Dlog4j.configurationFile=file:{log4j} {JAVA_OPTIONS}", "spark-internal"]
    env = dict(os.environ, SPARK_HOME=spark_home, PYSPARK_PYTHON=sys.executable, SPARK_LOCAL_IP="127.0.0.1")
    log_path = os.path.join(os.path.dirname(record_path()), "spark-server.log")
    os.makedirs(os.path.dirname(log_path), exist_ok=True)
    with open(log_path, "ab") as out:
        process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                   env=env, start_new_session=True)
    record = ServerRecord(process.pid, port, master, time.time(), str(uuid.uuid4()))
    _wait_until_up(process, port, log_path)
    _warm_up(record)
    atomic_write_bytes(record_path(), json.dumps(asdict(record)).encode())
    return record, True


def _warm_up(record: ServerRecord) -> None:
    """Open the shared session and run one chunk job in it, so the first run finds the server's planning
    warm (its first session and job take several seconds more than the next)."""
    import pickle

    from olake_cli.engine.session import connect_session
    from olake_cli.engine.task_entry import chunk_frame

    spark = connect_session(record.remote, session_id=record.session_id)  # never stopped: that would close it
    chunk_frame(spark, pickle.dumps((abs, -1)), False, None).collect()


def stop() -> ServerRecord | None:
    """Stop the running server (SIGTERM to its process group, SIGKILL after 30 s); None if none ran."""
    record = running()
    if record is None:
        _forget()
        return None
    _end_group(record.pid)
    _forget()
    return record


def _wait_until_up(process: subprocess.Popen, port: int, log_path: str) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise OlakeError(f"the Spark Connect server exited ({process.returncode}) before it answered; see "
                             f"{log_path} for why")
        if _answers(port):
            return
        time.sleep(0.3)
    _end_group(process.pid)
    raise OlakeError(f"the Spark Connect server did not answer on port {port} within {START_TIMEOUT_S:.0f} s; "
                     f"see {log_path}")


def _end_group(pid: int) -> None:
    """SIGTERM the process group led by ``pid``, then SIGKILL what is left after the timeout."""
    for sig, wait_s in ((signal.SIGTERM, STOP_TIMEOUT_S), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            try:
                os.waitpid(pid, os.WNOHANG)  # reaps it when this process started it
            except ChildProcessError:
                pass
            if not process_alive(pid):
                return
            time.sleep(0.2)


def _answers(port: int) -> bool:
    return unreachable("127.0.0.1", port, 1.0) is None


def _forget() -> None:
    try:
        os.remove(record_path())
    except FileNotFoundError:
        pass
