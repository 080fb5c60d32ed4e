"""The pass a cron job repeats most: a ``cdc`` run with nothing to copy, end to end.

    .venv/bin/python bench/bench_empty_pass.py --runs 10

Starts a throwaway PostgreSQL, loads a 1,000-row table in ``cdc`` mode into Parquet (slot and
publication created by olake), then times ``--runs`` empty passes of each of ``olake sync`` and
``olake read | olake write`` (one process tree each, interpreter start included) and prints the min,
median and max wall seconds. The import time of each olake module tree is in ``python -X importtime``;
this measures what a user's cron job waits for. Nothing here is a test: it measures.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import psycopg  # noqa: E402

from tests.support.pgcluster import create_database, start_cluster  # noqa: E402

OLAKE = str(ROOT / ".venv" / "bin" / "olake")


def _catalog(src: Path, out: Path) -> None:
    """The discovered catalog with every stream selected in ``cdc`` mode."""
    found = subprocess.run([OLAKE, "discover", "--config", str(src)], capture_output=True, check=True).stdout
    catalog = next(json.loads(line)["catalog"] for line in found.splitlines() if b'"CATALOG"' in line)
    for stream in catalog["streams"]:
        stream.update(sync_mode="cdc", selected=True)
    out.write_text(json.dumps(catalog))


def _times(command: list[str] | str, runs: int) -> list[float]:
    """Wall seconds of ``runs`` runs of a command (a list) or a shell pipeline (a string)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}  # as a user runs it
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run(command, shell=isinstance(command, str), check=True, env=env,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        times.append(time.perf_counter() - started)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    cluster = start_cluster({"wal_level": "logical"})
    try:
        create_database(cluster, "bench")
        with psycopg.connect(cluster.dsn("bench"), autocommit=True) as conn:
            conn.execute("CREATE TABLE t (id int PRIMARY KEY, v text)")
            conn.execute("INSERT INTO t SELECT g, 'row ' || g FROM generate_series(1, 1000) g")
        work = Path(tempfile.mkdtemp(prefix="olake-empty-"))
        src = work / "src.json"
        src.write_text(json.dumps(cluster.source_config("bench", replication_slot="bench_slot", publication="bench_pub",
                                                        create_slot_and_publication=True)))
        (work / "dst.json").write_text(json.dumps({"type": "parquet", "path": str(work / "lake")}))
        _catalog(src, work / "cat.json")
        sync = [OLAKE, "sync", "--source", str(src), "--destination", str(work / "dst.json"),
                "--catalog", str(work / "cat.json"), "--state", str(work / "state.json")]
        pipe = (f"{OLAKE} read --config {src} --catalog {work / 'cat.json'} --state {work / 'state.json'} | "
                f"{OLAKE} write --config {work / 'dst.json'} --state {work / 'state.json'}")
        _times(sync, 1)  # the first load
        for name, command in (("olake sync", sync), ("olake read | olake write", pipe)):
            times = _times(command, args.runs)
            print(f"empty cdc pass, {name}: min {min(times):.2f} s, median {statistics.median(times):.2f} s, "
                  f"max {max(times):.2f} s over {args.runs} runs")
    finally:
        cluster.stop()


if __name__ == "__main__":
    main()
