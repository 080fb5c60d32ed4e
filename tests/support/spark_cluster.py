"""A real Spark standalone cluster (one master, two workers) and a Spark Connect server against it,
started from the pyspark package's own scripts (``bin/spark-class``, ``bin/spark-submit``).

Every application (the Connect server, each classic ``olake`` run) gets one executor of 2 cores
(``spark.cores.max`` = ``spark.executor.cores``): one executor JVM to start, one archive to unpack and
one Python worker pool per run, which is what a 2-core machine can afford. The workers offer 4 cores
each, so a classic run gets an executor while the server holds its own, and a run whose worker is
killed gets a new executor on the other one. Every process runs in its own process group, keeps its
files (logs, work and local folders) in the cluster's folder, and :meth:`SparkCluster.stop` removes both.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field

import pyspark

SPARK_HOME = os.path.dirname(os.path.abspath(pyspark.__file__))
APP_CORES = 2  # spark.cores.max of every application on the cluster
EXECUTOR_MEMORY = "512m"
# Every JVM of the test cluster compiles with C1 only and one GC thread: on 2 cores, a JVM that starts,
# runs a few small tasks and stops spends less CPU that way (the driver's JVM does the same).
JAVA_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def free_port() -> int:
    """A TCP port nobody listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for_port(port: int, process: subprocess.Popen, log: str, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"process exited ({process.returncode}); see {log}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.3)
    raise RuntimeError(f"nothing listens on {port} after {timeout_s} s; see {log}")


@dataclass
class SparkCluster:
    """A running standalone master with its workers (and, once started, a Connect server)."""

    folder: str
    master_port: int
    env: dict[str, str]
    processes: dict[str, subprocess.Popen] = field(default_factory=dict)
    connect_port: int | None = None

    @property
    def master(self) -> str:
        """The master URL (spark://127.0.0.1:PORT)."""
        return f"spark://127.0.0.1:{self.master_port}"

    @property
    def remote(self) -> str:
        """The Connect server URL (sc://127.0.0.1:PORT)."""
        return f"sc://127.0.0.1:{self.connect_port}"

    def _start(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> tuple[subprocess.Popen, str]:
        log = os.path.join(self.folder, f"{name}.log")
        with open(log, "ab") as out:
            process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                       env=env or self.env, cwd=self.folder, start_new_session=True)
        self.processes[name] = process
        return process, log

    def start_master(self) -> None:
        process, log = self._start("master", [f"{SPARK_HOME}/bin/spark-class", "org.apache.spark.deploy.master.Master",
                                              "--host", "127.0.0.1", "--port", str(self.master_port),
                                              "--webui-port", str(free_port())])
        _wait_for_port(self.master_port, process, log)

    def start_worker(self, index: int) -> None:
        """Start (or start again) worker ``index``; it registers with the master by itself."""
        work_dir = os.path.join(self.folder, f"worker{index}")
        os.makedirs(work_dir, exist_ok=True)
        port = free_port()
        process, log = self._start(f"worker{index}", [
            f"{SPARK_HOME}/bin/spark-class", "org.apache.spark.deploy.worker.Worker", self.master,
            "--host", "127.0.0.1", "--port", str(port), "--webui-port", str(free_port()),
            "--cores", str(2 * APP_CORES), "--memory", "1g", "--work-dir", work_dir])
        _wait_for_port(port, process, log)

    def kill(self, name: str) -> None:
        """SIGKILL a process of the cluster and everything it started (a worker's executors too)."""
        process = self.processes.pop(name)
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        process.wait()

    def start_connect(self, python: str) -> None:
        """Start a Spark Connect server on this cluster whose Python workers run ``python``."""
        self.connect_port = free_port()
        env = dict(self.env, PYSPARK_PYTHON=python)
        process, log = self._start("connect", [
            f"{SPARK_HOME}/bin/spark-submit", "--class", "org.apache.spark.sql.connect.service.SparkConnectServer",
            "--master", self.master, "--conf", f"spark.connect.grpc.binding.port={self.connect_port}",
            "--conf", f"spark.cores.max={APP_CORES}", "--conf", f"spark.executor.cores={APP_CORES}",
            "--conf", f"spark.executor.memory={EXECUTOR_MEMORY}", "--driver-java-options", JAVA_OPTIONS,
            "--conf", f"spark.executor.extraJavaOptions={JAVA_OPTIONS}", "--conf", "spark.ui.enabled=false", "--conf", "spark.driver.memory=1g", "spark-internal"], env)
        _wait_for_port(self.connect_port, process, log, timeout_s=180)

    def stop(self) -> None:
        """Kill every process (the cluster keeps nothing worth a graceful stop) and remove its folder."""
        for name in list(self.processes):
            self.kill(name)
        shutil.rmtree(self.folder, ignore_errors=True)


def start_spark_cluster(workers: int = 2) -> SparkCluster:
    """A master and ``workers`` workers on loopback, in a temporary folder."""
    folder = tempfile.mkdtemp(prefix="olake-spark-cluster-")
    env = dict(os.environ, SPARK_HOME=SPARK_HOME, SPARK_LOCAL_IP="127.0.0.1", SPARK_LOG_DIR=folder,
               SPARK_WORKER_DIR=folder, SPARK_LOCAL_DIRS=os.path.join(folder, "local"),
               PYSPARK_PYTHON=sys.executable,
               SPARK_DAEMON_MEMORY="512m", SPARK_DAEMON_JAVA_OPTS=JAVA_OPTIONS)
    cluster = SparkCluster(folder, free_port(), env)
    try:
        cluster.start_master()
        for index in range(workers):
            cluster.start_worker(index)
    except BaseException:
        cluster.stop()
        raise
    return cluster


def cluster_spark_config(archive: str | None = None, **extra: object) -> dict:
    """The ``spark`` section of a source config for runs on the test cluster (``archive``: olake shipped)."""
    section: dict = {"conf": {"spark.cores.max": APP_CORES, "spark.executor.cores": APP_CORES,
                              "spark.executor.memory": EXECUTOR_MEMORY, "spark.executor.extraJavaOptions": JAVA_OPTIONS,
                              **extra}}
    if archive:
        section["archive"] = archive
    return section


ARROW_WORKER_PACKAGES = ("pyarrow", "numpy", "numpy.libs", "pandas", "dateutil", "tzdata")


def make_bare_python(folder: str) -> str:
    """A virtual environment with only what every PySpark Arrow worker has (pyarrow, pandas, numpy,
    linked from this interpreter's site-packages) and no olake; returns its python."""
    import site
    import venv

    venv.EnvBuilder(with_pip=False, symlinks=True).create(folder)
    python = os.path.join(folder, "bin", "python")
    packages = os.path.join(folder, "arrow-packages")
    os.makedirs(packages)
    here = next(p for p in site.getsitepackages() if os.path.isdir(os.path.join(p, "pyarrow")))
    for name in ARROW_WORKER_PACKAGES:
        if os.path.exists(os.path.join(here, name)):
            os.symlink(os.path.join(here, name), os.path.join(packages, name))
    site_packages = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                   capture_output=True, text=True, check=True).stdout.strip()
    with open(os.path.join(site_packages, "arrow-packages.pth"), "w") as pth:
        pth.write(packages + "\n")
    return python


def python_imports(python: str, module: str) -> bool:
    """Whether ``python`` can import ``module`` (outside this project's folder)."""
    return subprocess.run([python, "-c", f"import {module}"], capture_output=True, cwd="/").returncode == 0
