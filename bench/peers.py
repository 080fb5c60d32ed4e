"""The peers ``bench/run.py`` measures olake against, and how to get them.

Imported by run.py for setup (``ensure_peers_venv``, ``ensure_jdbc_jar``, the commands), and run as a
script for the peer runs themselves, each in its own process so the timer sees only that tool:

    bench/.venv-peers/bin/python bench/peers.py dlt --backend connectorx --uri URI --table bench --out DIR
    .venv/bin/python bench/peers.py spark-jdbc --jdbc-url URL --user U --password P --table bench --out DIR

dlt lives in a virtual environment of its own (``bench/.venv-peers``, from
``bench/requirements-peers.txt``) so its dependencies never touch olake's ``.venv``; Spark's JDBC
reader runs on the pyspark olake already depends on, with the PostgreSQL JDBC driver of the Debian
package ``libpostgresql-jdbc-java``. Nothing at module level imports anything outside the standard
library, so either interpreter can load this file.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent
PEERS_VENV = BENCH / ".venv-peers"
PEERS_REQUIREMENTS = BENCH / "requirements-peers.txt"
JDBC_JAR = "/usr/share/java/postgresql.jar"
JDBC_PACKAGE = "libpostgresql-jdbc-java"


class Unavailable(Exception):
    """A peer cannot run here; the message is one line saying why."""


def _last_line(text: str) -> str:
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    return lines[-1] if lines else "(no output)"


def peers_python() -> Path:
    return PEERS_VENV / "bin" / "python"


def ensure_peers_venv(log=sys.stderr) -> Path:
    """Create ``bench/.venv-peers`` and install the peers into it, once (again if the list changes)."""
    marker = PEERS_VENV / ".installed"
    wanted = hashlib.sha256(PEERS_REQUIREMENTS.read_bytes()).hexdigest()
    if marker.exists() and marker.read_text().strip() == wanted and peers_python().exists():
        return peers_python()
    if not peers_python().exists():
        print(f"creating {PEERS_VENV} ...", file=log)
        base = getattr(sys, "_base_executable", None) or sys.executable
        done = subprocess.run([base, "-m", "venv", str(PEERS_VENV)], capture_output=True, text=True)
        if done.returncode != 0:
            raise Unavailable(f"python -m venv failed: {_last_line(done.stderr or done.stdout)}")
        (PEERS_VENV / ".gitignore").write_text("*\n")
    print(f"installing {PEERS_REQUIREMENTS.name} into {PEERS_VENV.name} (pip) ...", file=log)
    done = subprocess.run([str(peers_python()), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                           "-r", str(PEERS_REQUIREMENTS)], capture_output=True, text=True)
    if done.returncode != 0:
        raise Unavailable(f"pip install -r {PEERS_REQUIREMENTS.name} failed: "
                          f"{_last_line(done.stderr or done.stdout)}")
    marker.write_text(wanted + "\n")
    return peers_python()


def ensure_jdbc_jar(log=sys.stderr) -> str:
    """The PostgreSQL JDBC driver jar; installs ``libpostgresql-jdbc-java`` with apt-get when missing (as root)."""
    if os.path.exists(JDBC_JAR):
        return JDBC_JAR
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        raise Unavailable(f"{JDBC_JAR} missing; install it with: apt-get install -y {JDBC_PACKAGE}")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    install = ["apt-get", "install", "-y", "-q", "--no-install-recommends", JDBC_PACKAGE]
    print(f"installing {JDBC_PACKAGE} (apt-get) ...", file=log)
    done = subprocess.run(install, capture_output=True, text=True, env=env)
    if done.returncode != 0:  # the package lists may be missing or stale: update once and retry
        subprocess.run(["apt-get", "update", "-q"], capture_output=True, text=True, env=env)
        done = subprocess.run(install, capture_output=True, text=True, env=env)
    if done.returncode != 0 or not os.path.exists(JDBC_JAR):
        raise Unavailable(f"apt-get install {JDBC_PACKAGE} failed: {_last_line(done.stderr or done.stdout)}")
    return JDBC_JAR


# --- the peer runs (executed as a script) -------------------------------------------------------


def run_dlt(args: argparse.Namespace) -> None:
    """dlt's ``sql_table`` with ``--backend``: filesystem destination and Parquet files, or with
    ``--dest-uri`` dlt's postgres destination; all defaults else."""
    os.environ.setdefault("RUNTIME__DLTHUB_TELEMETRY", "false")
    import dlt
    from dlt.sources.sql_database import sql_table

    resource = sql_table(credentials=args.uri, table=args.table, schema=args.schema, backend=args.backend)
    destination = dlt.destinations.postgres(credentials=args.dest_uri) if args.dest_uri else \
        dlt.destinations.filesystem(bucket_url=Path(args.out).as_uri())
    pipeline = dlt.pipeline(pipeline_name=f"bench_{args.backend}", pipelines_dir=args.pipelines_dir,
                            destination=destination, dataset_name=args.dataset,
                            progress="log" if args.verbose else None)
    info = pipeline.run(resource, loader_file_format=None if args.dest_uri else "parquet")
    info.raise_on_failed_jobs()
    print(f"dlt {dlt.__version__} backend={args.backend}: {info}", file=sys.stderr)


def run_spark_jdbc(args: argparse.Namespace) -> None:
    """Spark's own JDBC reader, partitioned on the key over min/max, writing Parquet."""
    import warnings

    warnings.filterwarnings("ignore", category=FutureWarning)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master(args.master).appName("bench-spark-jdbc")
             .config("spark.jars", args.jar)
             .config("spark.driver.memory", args.driver_memory)
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    options = {"url": args.jdbc_url, "user": args.user, "password": args.password,
               "driver": "org.postgresql.Driver"}
    bounds = (spark.read.format("jdbc").options(**options)
              .option("query", f"SELECT min({args.key}) AS lo, max({args.key}) AS hi FROM {args.table}")
              .load().collect()[0])
    partitions = args.partitions or os.cpu_count() or 1
    frame = (spark.read.format("jdbc").options(**options)
             .option("dbtable", args.table)
             .option("partitionColumn", args.key)
             .option("lowerBound", str(bounds["lo"]))
             .option("upperBound", str(bounds["hi"]))
             .option("numPartitions", str(partitions))
             .option("fetchsize", str(args.fetchsize))
             .load())
    frame.write.mode("overwrite").parquet(args.out)
    version = spark.version
    spark.stop()
    print(f"spark {version} jdbc: {partitions} partitions over "
          f"{args.key} [{bounds['lo']}, {bounds['hi']}], fetchsize {args.fetchsize}", file=sys.stderr)


def main() -> None:
    parser = argparse.ArgumentParser(description="Run one peer of bench/run.py.")
    sub = parser.add_subparsers(dest="peer", required=True)
    dlt_p = sub.add_parser("dlt")
    dlt_p.add_argument("--backend", required=True, choices=["connectorx", "pyarrow", "sqlalchemy", "pandas"])
    dlt_p.add_argument("--uri", required=True)
    dlt_p.add_argument("--table", required=True)
    dlt_p.add_argument("--schema", default="public")
    dlt_p.add_argument("--out", required=True)
    dlt_p.add_argument("--dest-uri", default=None, help="load into this PostgreSQL instead of Parquet files")
    dlt_p.add_argument("--dataset", default="bench")
    dlt_p.add_argument("--pipelines-dir", required=True)
    dlt_p.add_argument("--verbose", action="store_true")
    spark_p = sub.add_parser("spark-jdbc")
    spark_p.add_argument("--jdbc-url", required=True)
    spark_p.add_argument("--user", required=True)
    spark_p.add_argument("--password", required=True)
    spark_p.add_argument("--table", required=True)
    spark_p.add_argument("--key", default="id")
    spark_p.add_argument("--out", required=True)
    spark_p.add_argument("--jar", default=JDBC_JAR)
    spark_p.add_argument("--master", default="local[*]")
    spark_p.add_argument("--driver-memory", default="2g")
    spark_p.add_argument("--partitions", type=int, default=0, help="default: the machine's cores")
    spark_p.add_argument("--fetchsize", type=int, default=10000)
    args = parser.parse_args()
    {"dlt": run_dlt, "spark-jdbc": run_spark_jdbc}[args.peer](args)


if __name__ == "__main__":
    main()
