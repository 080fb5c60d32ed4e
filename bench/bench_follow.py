"""Follow-mode benchmark: how far behind the source ``olake sync --follow`` keeps each destination.

    .venv/bin/python bench/bench_follow.py --rates 1000,10000 --seconds 60

Starts a throwaway source and target PostgreSQL (``track_commit_timestamp = on`` on both), and for each
rate and each path: ``olake sync --follow`` into PostgreSQL, Parquet and Iceberg (default commit
intervals), and PostgreSQL's own logical replication (a subscription on the target cluster). A writer
inserts rows into ``ev`` at the rate (transactions of rate/100 rows, 100 a second) for ``--seconds``;
once the destination holds every row the run is stopped (SIGTERM) and each row's lag is measured:
from its source commit (``pg_xact_commit_timestamp`` of the inserting transaction) to the moment it
became visible in the destination (the target transaction's commit timestamp for PostgreSQL and the
subscription, the data file's modification time for Parquet, the adding snapshot's timestamp for
Iceberg). Prints p50, p99 and max lag, and the sustained rate (rows over the time from the first
source commit to the last destination commit). Nothing here is a test: it measures.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import psycopg  # noqa: E402

from tests.support.pgcluster import create_database, start_cluster  # noqa: E402

OLAKE = [sys.executable, "-m", "olake_cli"]
PATHS = ("postgres", "parquet", "iceberg", "subscription")


def _writer(dsn: str, rate: int, seconds: float, stop: threading.Event) -> None:
    """Insert ``rate`` rows a second into ``ev`` for ``seconds``, in 100 transactions a second."""
    per_tx = max(1, rate // 100)
    with psycopg.connect(dsn, autocommit=True) as conn:
        started = time.monotonic()
        n = 0
        while time.monotonic() - started < seconds and not stop.is_set():
            conn.execute("INSERT INTO ev (payload) SELECT repeat('x', 40) FROM generate_series(1, %s)", (per_tx,))
            n += 1
            ahead = started + n / 100 - time.monotonic()
            if ahead > 0:
                time.sleep(ahead)


def _source_commits(dsn: str) -> dict[int, float]:
    with psycopg.connect(dsn) as conn:
        return {i: t.timestamp() for i, t in conn.execute(
            "SELECT id, pg_xact_commit_timestamp(xmin) FROM ev").fetchall()}


def _pg_visible(dsn: str, table: str) -> dict[int, float]:
    with psycopg.connect(dsn) as conn:
        return {i: t.timestamp() for i, t in conn.execute(
            f"SELECT id, pg_xact_commit_timestamp(xmin) FROM {table}").fetchall()}


def _parquet_visible(folder: Path) -> dict[int, float]:
    import pyarrow.parquet as pq

    seen: dict[int, float] = {}
    for path in folder.rglob("*.parquet"):
        if "_staged" in str(path):
            continue
        mtime = path.stat().st_mtime
        for i in pq.read_table(path, columns=["id"])["id"].to_pylist():
            seen[i] = min(seen.get(i, mtime), mtime)
    return seen


def _iceberg_visible(root: Path) -> dict[int, float]:
    import pyarrow.parquet as pq
    from pyiceberg.catalog.sql import SqlCatalog

    catalog = SqlCatalog("olake", uri=f"sqlite:///{root}/catalog.db", warehouse=f"file://{root}/warehouse")
    table = next(catalog.load_table(ident) for ns in catalog.list_namespaces() for ident in catalog.list_tables(ns))
    times = {s.snapshot_id: s.timestamp_ms / 1000 for s in table.snapshots()}
    seen: dict[int, float] = {}
    entries = table.inspect.entries().to_pylist()
    for entry in entries:
        path = entry["data_file"]["file_path"].removeprefix("file://")
        if entry["data_file"]["content"] != 0 or not os.path.exists(path):
            continue
        at = times.get(entry["snapshot_id"], 0.0)
        for i in pq.read_table(path, columns=["id"])["id"].to_pylist():
            seen[i] = min(seen.get(i, at), at)
    return seen


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def run_path(path: str, rate: int, seconds: float, source, target, work: Path,
             commit_interval: float | None = None) -> str:
    """One path at one rate (olake with ``--commit-interval`` when given): the figures as a Markdown row."""
    name = f"f_{path}_{rate}"
    create_database(source, name)
    create_database(target, name)
    src_dsn, dst_dsn = source.dsn(name), target.dsn(name)
    with psycopg.connect(src_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE ev (id bigserial PRIMARY KEY, payload text)")
    proc, visible = None, None
    if path == "subscription":
        with psycopg.connect(src_dsn, autocommit=True) as conn:
            conn.execute("CREATE PUBLICATION bench_sub_pub FOR TABLE ev")
        with psycopg.connect(dst_dsn, autocommit=True) as conn:
            conn.execute("CREATE TABLE ev (id bigserial PRIMARY KEY, payload text)")
            conn.execute(f"CREATE SUBSCRIPTION bench_sub CONNECTION '{src_dsn}' PUBLICATION bench_sub_pub")
        visible = lambda: _pg_visible(dst_dsn, "ev")  # noqa: E731
    else:
        out = work / name
        dst = {"postgres": target.destination_config(name), "parquet": {"type": "parquet", "path": str(out)},
               "iceberg": {"type": "iceberg", "path": str(out)}}[path]
        src = source.source_config(name, replication_slot=name, publication=f"{name}_pub",
                                   create_slot_and_publication=True)
        files = {}
        for key, obj in (("src", src), ("dst", dst)):
            files[key] = work / f"{name}_{key}.json"
            files[key].write_text(json.dumps(obj))
        catalog = json.loads(subprocess.run(OLAKE + ["discover", "--config", str(files["src"])], check=True,
                                            capture_output=True).stdout)["catalog"]
        for stream in catalog["streams"]:
            stream["sync_mode"] = "cdc"
        (work / f"{name}_cat.json").write_text(json.dumps(catalog))
        log = open(work / f"{name}.log", "wb")
        proc = subprocess.Popen(OLAKE + ["sync", "--source", str(files["src"]), "--destination", str(files["dst"]),
                                         "--catalog", str(work / f"{name}_cat.json"), "--follow"]
                                + (["--commit-interval", str(commit_interval)] if commit_interval else []),
                                stdout=subprocess.DEVNULL, stderr=log)
        while b"following the change log" not in (work / f"{name}.log").read_bytes():
            if proc.poll() is not None:
                raise SystemExit((work / f"{name}.log").read_text()[-2000:])
            time.sleep(0.2)
        visible = {"postgres": lambda: _pg_visible(dst_dsn, "public.ev"),
                   "parquet": lambda: _parquet_visible(out), "iceberg": lambda: _iceberg_visible(out)}[path]
    stop = threading.Event()
    _writer(src_dsn, rate, seconds, stop)
    commits = _source_commits(src_dsn)
    deadline = time.monotonic() + 180
    seen: dict[int, float] = {}
    while time.monotonic() < deadline:
        try:
            seen = visible()
        except Exception:  # the destination is being created
            seen = {}
        if len(seen) >= len(commits):
            break
        time.sleep(1.0)
    if proc is not None:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    else:
        with psycopg.connect(dst_dsn, autocommit=True) as conn:
            conn.execute("DROP SUBSCRIPTION bench_sub")
    lags = [seen[i] - commits[i] for i in commits if i in seen]
    if len(lags) < len(commits):
        return f"| {path} | {rate:,} | only {len(lags)} of {len(commits)} rows arrived in 180 s | | | |"
    first = min(commits.values())
    by_second: dict[int, float] = {}
    for i, at in commits.items():
        by_second[int(at - first)] = max(by_second.get(int(at - first), 0.0), seen[i] - at)
    print(f"{path} at {rate:,}/s, the largest lag of the rows committed in each second: "
          + " ".join(f"{lag:.1f}" for _, lag in sorted(by_second.items())), file=sys.stderr)
    span = max(seen.values()) - first
    return (f"| {path} | {rate:,} | {_percentile(lags, 0.5):.2f} | {_percentile(lags, 0.99):.2f} | "
            f"{max(lags):.2f} | {len(commits) / span:,.0f} |")


def main() -> None:
    """Run every path at every rate and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rates", default="1000,10000", help="rows inserted per second, comma-separated")
    parser.add_argument("--seconds", type=float, default=60.0, help="how long the writer runs at each rate")
    parser.add_argument("--paths", default=",".join(PATHS), help=f"comma-separated, of {', '.join(PATHS)}")
    parser.add_argument("--commit-interval", type=float, default=None,
                        help="olake's --commit-interval (default: each destination's own)")
    args = parser.parse_args()
    source = start_cluster({"track_commit_timestamp": "on"})
    target = start_cluster({"track_commit_timestamp": "on"})
    rows = ["| path | rows/s written | p50 lag s | p99 lag s | max lag s | sustained rows/s |",
            "|---|---:|---:|---:|---:|---:|"]
    try:
        with tempfile.TemporaryDirectory(prefix="olake-bench-follow-") as work:
            for rate in (int(r) for r in args.rates.split(",")):
                for path in args.paths.split(","):
                    rows.append(run_path(path, rate, args.seconds, source, target, Path(work), args.commit_interval))
                    print(rows[-1], file=sys.stderr)
    finally:
        source.stop()
        target.stop()
    print("\n".join(rows))


if __name__ == "__main__":
    main()
