"""Change-capture benchmark: raw slot read versus ``olake read | olake write`` of the same changes.

    .venv/bin/python bench/bench_cdc.py --changes 1000000 --rows 100000

Starts a throwaway PostgreSQL, full-loads a table of ``--rows`` rows in cdc mode (slot and publication
created by olake), applies ``--changes`` changes (inserts, updates and deletes spread over the rows, in
transactions of 1,000), then times, in one run:
  1. the raw slot read: ``SELECT count(*) FROM pg_logical_slot_peek_binary_changes(...)`` (server-side
     decoding, nothing leaves the server but a count),
  2. the raw replication stream, the protocol olake reads the slot with: ``pg_recvlogical --start
     --endpos ... -f /dev/null`` on a second slot created beside olake's (it confirms what it read), and
  3. ``olake read | olake write`` to Parquet (decode pgoutput, convert, JSON lines, Parquet, state).
Prints the rates and olake's ratio to each raw read. Nothing here is a test: it measures.
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

from bench.common import timed  # noqa: E402
from tests.support.pgcluster import create_database, find_pg_bin, start_cluster  # noqa: E402

SLOT, PUB, STREAM_SLOT = "bench_slot", "bench_pub", "bench_stream_slot"

CHANGES_SQL = """
DO $$
DECLARE
  batch int := 0;
  total int := %(changes)s;
  n int := %(rows)s;
  next_id bigint := %(rows)s + 1;
BEGIN
  WHILE batch * 1000 < total LOOP
    -- 1,000 changes per transaction: 400 updates, 400 inserts, 200 deletes
    UPDATE bench SET qty = qty + 1, note = note || '.', updated_at = now()
      WHERE id IN (SELECT 1 + ((batch * 7919 + g * 104729) %% n) FROM generate_series(1, 400) g);
    INSERT INTO bench (id, qty, price, note, updated_at)
      SELECT next_id + g, g, g / 3.0, 'new ' || (next_id + g), now() FROM generate_series(0, 399) g;
    DELETE FROM bench WHERE id IN (SELECT next_id + g * 2 FROM generate_series(0, 199) g);
    next_id := next_id + 400;
    batch := batch + 1;
    COMMIT;
  END LOOP;
END $$;
"""


def main() -> None:
    """Run the benchmark and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--changes", type=int, default=1_000_000)
    parser.add_argument("--rows", type=int, default=100_000)
    args = parser.parse_args()
    import psycopg

    cluster = start_cluster()
    work = Path(tempfile.mkdtemp(prefix="olake-bench-cdc-"))
    try:
        create_database(cluster, "bench")
        with psycopg.connect(cluster.dsn("bench"), autocommit=True) as conn:
            conn.execute(f"""CREATE TABLE bench (id bigint PRIMARY KEY, qty int, price numeric(12,2), note text,
                             updated_at timestamptz);
                             INSERT INTO bench SELECT g, g % 100, g / 7.0, 'row ' || g, now()
                             FROM generate_series(1, {args.rows}) g; ANALYZE bench;""")
        src = cluster.source_config("bench", replication_slot=SLOT, publication=PUB,
                                    create_slot_and_publication=True)
        (work / "src.json").write_text(json.dumps(src))
        (work / "dst.json").write_text(json.dumps({"type": "parquet", "path": str(work / "out")}))
        env = dict(os.environ, PGPASSWORD=cluster.password, OLAKE_SPARK_MASTER="local[*]")
        olake = f"{sys.executable} -m olake_cli"
        subprocess.run(f"{olake} discover --config src.json > disc.json", shell=True, cwd=work, env=env, check=True)
        catalog = json.loads((work / "disc.json").read_text())["catalog"]
        for stream in catalog["streams"]:
            stream["sync_mode"] = "cdc"
        (work / "cat.json").write_text(json.dumps(catalog))
        pipe = (f"{olake} read --config src.json --catalog cat.json --state st.json 2>>read.log"
                f" | {olake} write --config dst.json --state st.json > /dev/null 2>>write.log")
        timed(pipe, work, env)  # full load; leaves the stream in cdc at the slot's position
        print(f"applying {args.changes:,} changes ...", file=sys.stderr)
        with psycopg.connect(cluster.dsn("bench"), autocommit=True) as conn:
            conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (STREAM_SLOT,))
            conn.execute(CHANGES_SQL % {"changes": args.changes, "rows": args.rows})
            conn.execute("CHECKPOINT")  # the raw read decodes only flushed WAL
            raw_started = time.perf_counter()
            count = conn.execute(
                "SELECT count(*) FILTER (WHERE get_byte(data, 0) IN (73, 85, 68)) FROM "
                "pg_logical_slot_peek_binary_changes(%s, NULL, NULL, 'proto_version', '1', "
                "'publication_names', %s)", (SLOT, PUB)).fetchone()[0]
            raw_s = time.perf_counter() - raw_started
            endpos = conn.execute("SELECT pg_current_wal_insert_lsn()::text").fetchone()[0]
        stream_s = timed(f"{find_pg_bin()}/pg_recvlogical -d '{cluster.dsn('bench')}' --slot {STREAM_SLOT} --start "
                         f"--endpos {endpos} --no-loop -o proto_version=1 -o publication_names={PUB} -f /dev/null",
                         work, env)
        olake_s = timed(pipe, work, env)
        log = (work / "read.log").read_text().strip().splitlines()
        phase = [line for line in log if "change capture:" in line]
        print(f"changes: {count:,} row changes over {args.rows:,} rows ({os.cpu_count()} cores)")
        print(f"raw pg_logical_slot_peek_binary_changes : {raw_s:7.2f} s  {count / raw_s:10,.0f} changes/s")
        print(f"raw replication stream (pg_recvlogical) : {stream_s:7.2f} s  {count / stream_s:10,.0f} changes/s")
        print(f"olake read | olake write parquet        : {olake_s:7.2f} s  {count / olake_s:10,.0f} changes/s")
        print(f"ratio olake rate / raw rate             : {raw_s / olake_s:7.2f} (peek), "
              f"{stream_s / olake_s:.2f} (stream)")
        if phase:
            print(f"(read's own report: {phase[-1].removeprefix('olake: ')})")
    finally:
        cluster.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
