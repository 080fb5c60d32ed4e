"""Beyond one machine: the same full load on local[2], on a standalone cluster and through a warm Spark
Connect server; and the passes a cron job repeats (an empty cdc pass, a 10k-row incremental pass),
through Connect and locally.

    .venv/bin/python bench/bench_cluster.py --rows 200000

Starts a throwaway PostgreSQL and, from the pyspark package, a standalone master with two workers
(2 cores, 1 GB each) and a Spark Connect server on it (tests/support/spark_cluster.py); every
application gets at most 2 cores, so the three full loads use the same parallelism. Each figure is
one cold ``olake sync`` process timed end to end (interpreter, Spark session and all), into Parquet.
The Connect server is started (and its executors are up) before anything is timed: that is "warm".
Prints a Markdown table on stdout; logs go to the work folder.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.bench_full_load import CREATE  # noqa: E402
from bench.common import timed  # noqa: E402
from tests.support.pgcluster import create_database, start_cluster  # noqa: E402
from tests.support.spark_cluster import cluster_spark_config, start_spark_cluster  # noqa: E402

INCREMENTAL = """
CREATE TABLE events (id bigint PRIMARY KEY, updated_at timestamptz NOT NULL, payload text);
INSERT INTO events SELECT g, '2024-01-01'::timestamptz + g * interval '1 s', md5(g::text)
FROM generate_series(1, 10000) g;
"""


class Bench:
    """The servers, the work folder and the timed runs."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.work = Path(tempfile.mkdtemp(prefix="olake-bench-cluster-"))
        self.pg = start_cluster()
        self.spark = None
        self.env = dict(os.environ, PGPASSWORD=self.pg.password)
        self.olake = f"{sys.executable} -m olake_cli"
        self.rows: list[tuple[str, str, float]] = []

    def config(self, name: str, obj: dict) -> str:
        (self.work / name).write_text(json.dumps(obj))
        return name

    def sync(self, what: str, where: str, spark_args: str, src: str, dst: str, state: str) -> float:
        """One timed ``olake sync``; recorded under ``what`` and ``where``."""
        log = re.sub(r"[^A-Za-z0-9.-]+", "_", f"{what}-{where}") + ".log"
        seconds = timed(f"{self.olake} sync --source {src} --destination {dst} --catalog {src}.cat --state {state} "
                        f"{spark_args} > /dev/null 2>{log}", self.work, self.env)
        print(f"[bench] {what} on {where}: {seconds:.2f} s", file=sys.stderr)
        self.rows.append((what, where, seconds))
        return seconds

    def discover(self, src: str, modes: dict[str, str]) -> None:
        timed(f"{self.olake} discover --config {src} > {src}.cat", self.work, self.env)
        catalog = json.loads((self.work / f"{src}.cat").read_text())
        for stream in catalog["catalog"]["streams"]:
            stream["sync_mode"] = modes.get(stream["name"], "full_refresh")
            stream["selected"] = stream["name"] in modes
            if stream["sync_mode"] == "incremental":
                stream["cursor_field"] = ["updated_at"]
        (self.work / f"{src}.cat").write_text(json.dumps(catalog))


def full_loads(b: Bench, targets: dict[str, str]) -> None:
    import psycopg

    create_database(b.pg, "bench")
    with psycopg.connect(b.pg.dsn("bench"), autocommit=True) as conn:
        conn.execute(CREATE.replace("%(rows)s", str(b.args.rows)))
    src = b.config("full.json", {**b.pg.source_config("bench", chunk_rows=b.args.chunk_rows),
                                 "spark": cluster_spark_config()})
    b.discover(src, {"bench": "full_refresh"})
    for where, spark_args in targets.items():
        for attempt in (1, 2):
            name = re.sub(r"[^A-Za-z0-9]+", "_", f"{where}-{attempt}")
            dst = b.config(f"{name}.dst.json", {"type": "parquet", "path": str(b.work / name), "shared_path": True})
            b.sync("full load", f"{where} (run {attempt})", spark_args, src, dst, f"{name}.state")
            shutil.rmtree(b.work / name)


def cron_passes(b: Bench, targets: dict[str, str]) -> None:
    """An empty cdc pass and a 10k-row incremental pass, each after its own first full load."""
    import psycopg

    create_database(b.pg, "cron")
    with psycopg.connect(b.pg.dsn("cron"), autocommit=True) as conn:
        conn.execute(INCREMENTAL)
        conn.execute("CREATE TABLE feed (id bigint PRIMARY KEY, v text)")
        conn.execute("INSERT INTO feed SELECT g, md5(g::text) FROM generate_series(1, 10000) g")
    for where, spark_args in targets.items():
        slot = "bench_" + re.sub(r"[^a-z0-9]+", "_", where.lower())
        src = b.config(f"cron-{slot}.json", {**b.pg.source_config("cron", replication_slot=slot,
                                                                  publication=f"{slot}_pub",
                                                                  create_slot_and_publication=True),
                                             "spark": cluster_spark_config()})
        b.discover(src, {"feed": "cdc", "events": "incremental"})
        dst = b.config(f"cron-{slot}.dst.json", {"type": "parquet", "path": str(b.work / f"cron-{slot}"),
                                                 "shared_path": True})
        state = f"cron-{slot}.state"
        timed(f"{b.olake} sync --source {src} --destination {dst} --catalog {src}.cat --state {state} {spark_args}"
              f" > /dev/null 2>{slot}-first.log", b.work, b.env)
        b.sync("empty cdc + incremental pass", where, spark_args, src, dst, state)
    with psycopg.connect(b.pg.dsn("cron"), autocommit=True) as conn:
        conn.execute("INSERT INTO events SELECT g, '2025-01-01'::timestamptz + g * interval '1 s', md5(g::text) "
                     "FROM generate_series(10001, 20000) g")
    for where, spark_args in targets.items():
        slot = "bench_" + re.sub(r"[^a-z0-9]+", "_", where.lower())
        src, dst, state = f"cron-{slot}.json", f"cron-{slot}.dst.json", f"cron-{slot}.state"
        b.sync("10k-row incremental + empty cdc pass", where, spark_args, src, dst, state)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--chunk-rows", type=int, default=25_000)
    args = parser.parse_args()
    b = Bench(args)
    try:
        b.spark = start_spark_cluster(workers=2)
        b.spark.start_connect(python=sys.executable)
        targets = {"local[2]": "--spark-master 'local[2]'", "standalone": f"--spark-master {b.spark.master}",
                   "Connect": f"--spark-remote {b.spark.remote}"}
        if args.rows:
            full_loads(b, targets)
        cron_passes(b, {"local[2]": targets["local[2]"], "Connect": targets["Connect"]})
        load = os.getloadavg()[0]
        print(f"`bench/bench_cluster.py --rows {args.rows}` ({os.cpu_count()} cores, load {load:.1f} at the end; "
              f"chunk_rows {args.chunk_rows:,}, 2 cores per application)\n")
        print("| run | where | wall s |\n| --- | --- | ---: |")
        for what, where, seconds in b.rows:
            print(f"| {what} | {where} | {seconds:.2f} |")
    finally:
        if b.spark is not None:
            b.spark.stop()
        b.pg.stop()
        shutil.rmtree(b.work, ignore_errors=True)


if __name__ == "__main__":
    main()
