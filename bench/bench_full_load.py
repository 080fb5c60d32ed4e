"""Full-load benchmark: COPY (FORMAT binary) to /dev/null versus ``olake read | olake write`` to Parquet.

    .venv/bin/python bench/bench_full_load.py --rows 2000000

Starts a throwaway PostgreSQL, generates a table of N rows with mixed types (bigint, int, numeric,
text, timestamptz, date, boolean, double, uuid, jsonb), then times both in one run and prints their
wall time, rows/s and ratio, and the same for ``olake sync`` (the in-process path whose Spark tasks
write the Parquet files themselves). Nothing here is a test: it measures.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common import timed  # noqa: E402
from tests.support.pgcluster import create_database, start_cluster  # noqa: E402

CREATE = """
CREATE TABLE bench (
  id bigint PRIMARY KEY, qty integer, price numeric(12,2), name text, created_at timestamptz,
  day date, active boolean, score double precision, ref uuid, attrs jsonb);
INSERT INTO bench
SELECT g, (g % 1000)::int, round((g % 100000) / 7.0, 2), 'customer-' || g || '-' || md5(g::text),
       timestamptz '2024-01-01 00:00:00+00' + g * interval '1 second', date '2020-01-01' + (g % 2000),
       g % 3 = 0, g / 3.0, md5(g::text)::uuid, jsonb_build_object('k', g % 10, 'tag', 'x' || (g % 7))
FROM generate_series(1, %(rows)s) g;
ANALYZE bench;
"""


def main() -> None:
    """Run the benchmark and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--chunk-rows", type=int, default=250_000)
    parser.add_argument("--spark-master", default="local[*]")
    args = parser.parse_args()
    import psycopg

    cluster = start_cluster()
    work = Path(tempfile.mkdtemp(prefix="olake-bench-"))
    try:
        create_database(cluster, "bench")
        with psycopg.connect(cluster.dsn("bench"), autocommit=True) as conn:
            print(f"generating {args.rows:,} rows ...", file=sys.stderr)
            conn.execute(CREATE.replace("%(rows)s", str(args.rows)))
        env = dict(os.environ, PGPASSWORD=cluster.password, OLAKE_SPARK_MASTER=args.spark_master)
        psql = os.path.join(cluster.bin_dir, "psql")
        copy = (f"{psql} -h {cluster.host} -p {cluster.port} -U {cluster.superuser} -d bench -c "
                f"\"COPY bench TO STDOUT (FORMAT binary)\" > /dev/null")
        (work / "src.json").write_text(json.dumps(cluster.source_config("bench", chunk_rows=args.chunk_rows)))
        (work / "dst.json").write_text(json.dumps({"type": "parquet", "path": str(work / "out")}))
        olake = f"{sys.executable} -m olake_cli"
        subprocess.run(f"{olake} discover --config src.json > cat.json", shell=True, cwd=work, env=env, check=True)
        copy_s = timed(copy, work, env)
        olake_s = timed(f"{olake} read --config src.json --catalog cat.json --state st.json 2>read.log"
                        f" | {olake} write --config dst.json --state st.json > /dev/null 2>write.log", work, env)
        (work / "dst-sync.json").write_text(json.dumps({"type": "parquet", "path": str(work / "out-sync")}))
        sync_s = timed(f"{olake} sync --source src.json --destination dst-sync.json --catalog cat.json"
                       f" --state st-sync.json > /dev/null 2>sync.log", work, env)
        import pyarrow.dataset as ds

        for folder in ("out", "out-sync"):
            landed = ds.dataset(str(work / folder / "public" / "bench")).count_rows()
            assert landed == args.rows, f"{landed} rows landed in {folder}, expected {args.rows}"
        print(f"rows: {args.rows:,}  (chunk_rows {args.chunk_rows:,}, spark {args.spark_master}, {os.cpu_count()} cores)")
        print(f"COPY (FORMAT binary) > /dev/null : {copy_s:7.2f} s  {args.rows / copy_s:12,.0f} rows/s")
        print(f"olake read | olake write parquet : {olake_s:7.2f} s  {args.rows / olake_s:12,.0f} rows/s")
        print(f"ratio olake / COPY               : {olake_s / copy_s:7.2f} x")
        print(f"olake sync (tasks write parquet) : {sync_s:7.2f} s  {args.rows / sync_s:12,.0f} rows/s")
        print(f"ratio olake sync / COPY          : {sync_s / copy_s:7.2f} x")
    finally:
        cluster.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
