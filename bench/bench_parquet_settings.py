"""Parquet write settings of a full-load task: codec, level and row-group size, measured on real rows.

    .venv/bin/python bench/bench_parquet_settings.py --rows 1000000

Starts a throwaway PostgreSQL with bench_full_load.py's table, discovers it with olake, reads it once
through ADBC in the scan's 10,000-row batches and converts them to the destination types as a ``sync``
task does (``codec.scanned.to_destination``). Then, for each setting, writes those batches into one
Parquet file the way a task writes (one ``write_table`` per group of batches) and prints the write time
(wall and CPU), the file size and the time to read the file back whole. The converted rows are the same
for every setting, so the values that land are too; only the file's encoding differs. Nothing here is a
test: it measures.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.bench_full_load import CREATE  # noqa: E402
from tests.support.pgcluster import create_database, start_cluster  # noqa: E402

SETTINGS = [  # (codec, level, rows per row group)
    ("zstd", 1, 10_000), ("zstd", 1, 100_000), ("zstd", 1, 1_000_000),
    ("zstd", 3, 10_000), ("zstd", 3, 100_000), ("zstd", 3, 1_000_000),
    ("snappy", None, 10_000), ("snappy", None, 100_000), ("snappy", None, 1_000_000),
    ("none", None, 100_000),
]


def main() -> None:
    """Run the benchmark and print one table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    args = parser.parse_args()
    import adbc_driver_postgresql.dbapi as dbapi
    import pyarrow as pa
    import pyarrow.parquet as pq

    from olake_cli.core.codec.scanned import to_destination

    cluster = start_cluster()
    work = Path(tempfile.mkdtemp(prefix="olake-bench-parquet-"))
    try:
        create_database(cluster, "bench")
        dsn = cluster.dsn("bench")
        import psycopg

        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(CREATE.replace("%(rows)s", str(args.rows)))
        (work / "src.json").write_text(json.dumps(cluster.source_config("bench")))
        env = dict(os.environ, PGPASSWORD=cluster.password)
        subprocess.run(f"{sys.executable} -m olake_cli discover --config src.json > cat.json", shell=True, cwd=work,
                       env=env, check=True)
        json_schema = json.loads((work / "cat.json").read_text())["catalog"]["streams"][0]["json_schema"]
        batches = []
        with dbapi.connect(dsn) as conn, conn.cursor() as cur:
            cur.execute("SET TIME ZONE 'UTC'")
            cur.execute("SELECT * FROM bench")
            for batch in cur.fetch_record_batch():
                for start in range(0, batch.num_rows, 10_000):
                    batches.append(to_destination(batch.slice(start, 10_000), json_schema)[0])
        print(f"rows: {args.rows:,} of bench_full_load.py's table, {len(batches)} batches of 10,000; "
              f"pyarrow {pa.__version__}, {os.cpu_count()} cores")
        print("| codec | level | rows per row group | write wall s | write CPU s | MB | read back s |")
        print("|---|---:|---:|---:|---:|---:|---:|")
        for codec, level, group_rows in SETTINGS:
            path = work / f"{codec}-{level}-{group_rows}.parquet"
            wall, cpu = time.perf_counter(), time.process_time()
            with pq.ParquetWriter(path, batches[0].schema, compression=codec, compression_level=level) as writer:
                per_write = max(1, group_rows // 10_000)
                for start in range(0, len(batches), per_write):
                    writer.write_table(pa.concat_tables(batches[start:start + per_write]))
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            read = time.perf_counter()
            assert pq.read_table(path).num_rows == args.rows
            read = time.perf_counter() - read
            print(f"| {codec} | {level if level is not None else '-'} | {group_rows:,} | {wall:.2f} | {cpu:.2f} | "
                  f"{path.stat().st_size / 1e6:.1f} | {read:.2f} |")
            path.unlink()
    finally:
        cluster.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
