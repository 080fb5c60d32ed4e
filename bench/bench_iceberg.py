"""Iceberg benchmark: full loads into Iceberg versus Parquet, and the cost of one change commit.

    .venv/bin/python bench/bench_iceberg.py --rows 1000000 --table-rows 1000000,10000000 --changes 10000

Part 1 starts a throwaway PostgreSQL with the table of ``bench_full_load.py`` (N rows, mixed types)
and times ``olake read | olake write`` and ``olake sync`` into Parquet and into Iceberg (embedded
catalog), printing rows/s and the Iceberg/Parquet ratios. Part 2 needs no source: for each table
size it builds an Iceberg table of that many rows (1M-row data files, as a chunked full load
leaves them), then commits batches of ``--changes`` changes (60% updates of random existing keys,
20% deletes, 20% inserts) through the destination, exactly as ``olake write`` does, and prints the
seconds per commit. Nothing here is a test: it measures.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.bench_full_load import CREATE  # noqa: E402
from bench.common import timed  # noqa: E402

STREAM = {"name": "bench", "namespace": "public", "sync_mode": "cdc", "source_defined_primary_key": [["id"]],
          "json_schema": {"type": "object", "properties": {
              "id": {"type": ["integer"], "x-olake-type": "int64"},
              "qty": {"type": ["null", "integer"], "x-olake-type": "int32"},
              "price": {"type": ["null", "string"], "x-olake-type": "decimal(12,2)"},
              "name": {"type": ["null", "string"], "x-olake-type": "string"},
              "created_at": {"type": ["null", "string"], "x-olake-type": "timestamptz"}}}}


def full_loads(rows: int, chunk_rows: int, master: str, repeat: int) -> None:
    """Part 1: read | write and sync, into Parquet and into Iceberg (best of ``repeat`` rounds, the
    four variants taking turns in each round)."""
    import psycopg

    from tests.support.pgcluster import create_database, start_cluster

    cluster = start_cluster()
    work = Path(tempfile.mkdtemp(prefix="olake-bench-ice-"))
    try:
        create_database(cluster, "bench")
        with psycopg.connect(cluster.dsn("bench"), autocommit=True) as conn:
            print(f"generating {rows:,} rows ...", file=sys.stderr)
            conn.execute(CREATE.replace("%(rows)s", str(rows)))
        env = dict(os.environ, OLAKE_SPARK_MASTER=master)
        (work / "src.json").write_text(json.dumps(cluster.source_config("bench", chunk_rows=chunk_rows)))
        olake = f"{sys.executable} -m olake_cli"
        subprocess.run(f"{olake} discover --config src.json > cat.json", shell=True, cwd=work, env=env, check=True)
        figures: dict[str, float] = {}
        for _ in range(repeat):
            for path in ("pipe", "sync"):
                for kind in ("parquet", "iceberg"):
                    name = f"{kind}-{path}"
                    shutil.rmtree(work / name, ignore_errors=True)
                    (work / f"{name}.st").unlink(missing_ok=True)
                    seconds = timed(_command(olake, kind, path, name, work), work, env)
                    figures[name] = min(seconds, figures.get(name, seconds))
        check_landed(work, rows)
        print(f"full load: {rows:,} rows (chunk_rows {chunk_rows:,}, spark {master}, {os.cpu_count()} cores, "
              f"best of {repeat})")
        for name, seconds in figures.items():
            print(f"  {name:16s}: {seconds:7.2f} s  {rows / seconds:10,.0f} rows/s")
        for path in ("pipe", "sync"):
            ratio = figures[f"iceberg-{path}"] / figures[f"parquet-{path}"]
            print(f"  ratio iceberg / parquet ({path}): {ratio:5.2f} x")
    finally:
        cluster.stop()
        shutil.rmtree(work, ignore_errors=True)


def _command(olake: str, kind: str, path: str, name: str, work: Path) -> str:
    """The shell command of one variant (a fresh destination and state each time)."""
    (work / f"{name}.json").write_text(json.dumps({"type": kind, "path": str(work / name)}))
    if path == "pipe":
        return (f"{olake} read --config src.json --catalog cat.json --state {name}.st 2>{name}-r.log"
                f" | {olake} write --config {name}.json --state {name}.st > /dev/null 2>{name}.log")
    return (f"{olake} sync --source src.json --destination {name}.json --catalog cat.json"
            f" --state {name}.st > /dev/null 2>{name}.log")


def check_landed(work: Path, rows: int) -> None:
    """Every variant holds exactly ``rows`` rows."""
    import pyarrow.dataset as ds
    from pyiceberg.catalog.sql import SqlCatalog

    for path in ("pipe", "sync"):
        landed = ds.dataset(str(work / f"parquet-{path}" / "public" / "bench")).count_rows()
        root = work / f"iceberg-{path}"
        catalog = SqlCatalog("olake", uri=f"sqlite:///{root}/catalog.db", warehouse=f"file://{root}/warehouse")
        counted = catalog.load_table(("public", "bench")).scan().count()
        assert landed == counted == rows, f"{path}: parquet {landed}, iceberg {counted}, expected {rows}"


def build_table(root: Path, rows: int):
    """An Iceberg table of ``rows`` rows in 1M-row files, committed as a finished cdc full load."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from olake_cli.core.catalog import parse_catalog
    from olake_cli.destinations.iceberg.destination import IcebergDestination
    from olake_cli.destinations.iceberg.files import write_rows
    from olake_cli.destinations.iceberg.snapshot import RowDelta
    from olake_cli.destinations.iceberg.tables import PROP_MAX_OP, PROP_STATE, dumps

    destination = IcebergDestination({"type": "iceberg", "path": str(root)}, lambda m: None)
    destination.open(parse_catalog({"streams": [STREAM]}))
    table = destination.streams[("public", "bench")].table
    files = []
    for start in range(0, rows, 1_000_000):
        ids = pa.array(range(start + 1, min(rows, start + 1_000_000) + 1), pa.int64())
        n = len(ids)
        data = pa.table({"id": ids, "qty": pc.cast(pc.bit_wise_and(ids, 1023), pa.int32()),
                         "price": pa.array([12345] * n, pa.decimal128(12, 2)),
                         "name": pa.array([f"customer-{i}" for i in range(start + 1, start + n + 1)]),
                         "created_at": pa.array(range(n), pa.int64()).cast(pa.timestamp("us", tz="UTC")),
                         "_olake_op": pa.array(["r"] * n), "_olake_op_id": pa.array(["0" * 32] * n)})
        files += write_rows(table.metadata, table.io, data, "zstd")
    state = {"sync_type": "cdc", "stream_name": "bench", "stream_namespace": "public",
             "stream_state": {"cursor_field": "p0", "load_id": "L1", "load_op_key": "0" * 32}}
    txn = table.transaction()
    RowDelta(txn).add_data(files).commit()
    txn.set_properties({PROP_STATE: dumps(state), PROP_MAX_OP: "0" * 32})
    txn.commit_transaction()


def change_commits(root: Path, rows: int, changes: int, commits: int) -> tuple[list[tuple[float, float]], int]:
    """(seconds of adding the batch, seconds of its commit) for each of ``commits`` commits of ``changes``
    changes, and the table's live row count after them. Adding decodes the records as ``olake write``
    decodes lines (20,000 at a time) and hands them to the stream buffer; the commit locates the keys,
    writes the files and commits."""
    from olake_cli.core.catalog import parse_catalog
    from olake_cli.core.state import State, StreamState
    from olake_cli.destinations.iceberg.destination import IcebergDestination
    from olake_cli.pipeline.write import BATCH_ROWS
    from tests.support.buffered import BufferedWriter

    destination = IcebergDestination({"type": "iceberg", "path": str(root)}, lambda m: None)
    writer = BufferedWriter(destination, parse_catalog({"streams": [STREAM]}))
    key, rng, next_id, seq, out = ("public", "bench"), random.Random(3), rows + 1, 0, []
    for commit in range(commits):
        batch = []
        for _ in range(changes):
            seq += 1
            pick, target = rng.random(), rng.randint(1, rows)
            op_id = [1_000 + commit, seq]
            if pick < 0.6:
                batch.append({"id": target, "qty": seq % 1000, "price": "1.25", "name": f"updated {seq}",
                              "created_at": "2024-01-01T00:00:00.000001+00:00", "_olake_op": "u",
                              "_olake_op_id": op_id})
            elif pick < 0.8:
                batch.append({"id": target, "_olake_op": "d", "_olake_op_id": op_id})
            else:
                batch.append({"id": next_id, "qty": 1, "price": "2.50", "name": "new", "_olake_op": "c",
                              "_olake_op_id": op_id})
                next_id += 1
        started = time.perf_counter()
        for start in range(0, changes, BATCH_ROWS):
            writer.add(key, batch[start:start + BATCH_ROWS])
        added = time.perf_counter()
        writer.commit(State("stream", streams=[StreamState("cdc", "bench", "public", f"p{commit + 1}", None,
                                                           load_id="L1", load_op_key="0" * 32)]))
        out.append((added - started, time.perf_counter() - added))
    return out, destination.streams[key].table.scan().count()


def upsert_baseline(root: Path, rows: int, changes: int) -> float:
    """Seconds of pyiceberg's own ``Table.upsert`` (copy-on-write) of ``changes`` updates, for comparison."""
    import pyarrow as pa
    from pyiceberg.catalog.sql import SqlCatalog

    catalog = SqlCatalog("olake", uri=f"sqlite:///{root}/catalog.db", warehouse=f"file://{root}/warehouse")
    table = catalog.load_table(("public", "bench"))
    ids = sorted(random.Random(5).sample(range(1, rows + 1), changes))
    schema = table.schema().as_arrow()
    batch = pa.table({"id": pa.array(ids, pa.int64()), "qty": pa.array([1] * changes, pa.int32()),
                      "price": pa.array([125] * changes, pa.decimal128(12, 2)),
                      "name": pa.array(["upserted"] * changes),
                      "created_at": pa.array([0] * changes, pa.int64()).cast(pa.timestamp("us", tz="UTC")),
                      "_olake_op": pa.array(["u"] * changes), "_olake_op_id": pa.array(["1" * 32] * changes),
                      "_olake_commit_ts": pa.nulls(changes, pa.timestamp("us", tz="UTC")),
                      "_olake_synced_at": pa.nulls(changes, pa.timestamp("us", tz="UTC"))}).cast(schema)
    started = time.perf_counter()
    table.upsert(batch, join_cols=["id"], when_not_matched_insert_all=False)
    return time.perf_counter() - started


def main() -> None:
    """Run both parts and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="rows of the full-load table (0: skip)")
    parser.add_argument("--chunk-rows", type=int, default=250_000)
    parser.add_argument("--spark-master", default="local[*]")
    parser.add_argument("--repeat", type=int, default=2, help="rounds of the full loads (best is shown)")
    parser.add_argument("--table-rows", default="1000000,10000000", help="table sizes for change commits")
    parser.add_argument("--changes", type=int, default=10_000, help="changes per commit")
    parser.add_argument("--commits", type=int, default=3, help="commits per table size")
    parser.add_argument("--upsert-baseline", action="store_true",
                        help="also time pyiceberg's copy-on-write Table.upsert of the same number of updates")
    args = parser.parse_args()
    if args.rows:
        full_loads(args.rows, args.chunk_rows, args.spark_master, args.repeat)
    for size in [int(s) for s in args.table_rows.split(",") if s]:
        root = Path(tempfile.mkdtemp(prefix="olake-bench-commit-"))
        try:
            started = time.perf_counter()
            build_table(root, size)
            print(f"change commits into {size:,} rows (table built in {time.perf_counter() - started:.1f} s):")
            timings, live = change_commits(root, size, args.changes, args.commits)
            for index, (adding, seconds) in enumerate(timings, 1):
                print(f"  commit {index}: {args.changes:,} changes: commit {seconds:6.2f} s; with adding "
                      f"(record decoding) {adding + seconds:6.2f} s, {args.changes / (adding + seconds):9,.0f} changes/s")
            print(f"  live rows after the commits: {live:,}")
            if args.upsert_baseline:
                seconds = upsert_baseline(root, size, args.changes)
                print(f"  pyiceberg Table.upsert of {args.changes:,} updates (copy-on-write): {seconds:6.2f} s")
        finally:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
