"""Empty ``cdc`` passes after a big load into a table outside the publication, end to end.

    .venv/bin/python bench/bench_unrelated_load.py --rows 2000000 --passes 3

Starts a throwaway PostgreSQL with the server's own durability defaults, loads a 1,000-row captured
table in ``cdc`` mode into Parquet with ``olake sync`` (slot and publication created by olake: the
pipeline's state is current), then inserts ``--rows`` rows into another table of the same database in
``--transactions`` transactions (each larger than the feed's ``logical_decoding_work_mem`` at the
default sizes), waits ``--wait`` seconds (0: a cron run right after the load) and times ``--passes``
empty ``olake sync`` passes (one process each, interpreter start included). For each pass it prints the
wall seconds, the slot's ``restart_lsn`` and ``confirmed_flush_lsn`` before and after, whether
``restart_lsn`` is past the load's end, and what ``pg_stat_replication_slots`` says the server
spilled to disk during the pass. Nothing here is a test: it measures.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import psycopg  # noqa: E402

from bench.bench_empty_pass import OLAKE, _catalog, _times  # noqa: E402
from tests.support.pgcluster import create_database, start_cluster  # noqa: E402

SLOT = "bench_slot"
_SLOT_SQL = ("SELECT restart_lsn::text, confirmed_flush_lsn::text, (restart_lsn - %s::pg_lsn)::int8,"
             " (SELECT spill_bytes FROM pg_stat_replication_slots WHERE slot_name = s.slot_name)"
             " FROM pg_replication_slots s WHERE slot_name = %s")


def main() -> None:
    """Load, then time the empty passes and print one line each."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2_000_000, help="rows inserted into the unrelated table")
    parser.add_argument("--transactions", type=int, default=1, help="transactions the rows are inserted in")
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--wait", type=float, default=0.0, help="seconds between the load and the first pass")
    args = parser.parse_args()
    cluster = start_cluster({"synchronous_commit": "on", "fsync": "on", "full_page_writes": "on"})
    try:
        create_database(cluster, "bench")
        work = Path(tempfile.mkdtemp(prefix="olake-unrelated-"))
        sync = _pipeline(cluster, work)
        _times(sync, 1)  # the first load; the state is current from here on
        with psycopg.connect(cluster.dsn("bench"), autocommit=True) as conn:
            load_end = _load(conn, args.rows, args.transactions)
            time.sleep(args.wait)
            for number in range(1, args.passes + 1):
                before = conn.execute(_SLOT_SQL, (load_end, SLOT)).fetchone()
                seconds = _times(sync, 1)[0]
                after = conn.execute(_SLOT_SQL, (load_end, SLOT)).fetchone()
                print(f"empty pass {number}: {seconds:6.2f} s; restart_lsn {before[0]} -> {after[0]} "
                      f"({'past' if after[2] >= 0 else 'before'} the load's end {load_end}), confirmed_flush_lsn "
                      f"{before[1]} -> {after[1]}; spilled {(after[3] - before[3]) / 2**20:7.1f} MB", flush=True)
    finally:
        cluster.stop()


def _pipeline(cluster, work: Path) -> list[str]:
    """The captured table, the configs and catalog; returns the ``olake sync`` command."""
    with psycopg.connect(cluster.dsn("bench"), autocommit=True) as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY, v text)")
        conn.execute("INSERT INTO t SELECT g, 'row ' || g FROM generate_series(1, 1000) g")
        conn.execute("CREATE TABLE other (id int PRIMARY KEY, v text)")
    src = work / "src.json"
    src.write_text(json.dumps(cluster.source_config("bench", replication_slot=SLOT, publication="bench_pub",
                                                    create_slot_and_publication=True)))
    (work / "dst.json").write_text(json.dumps({"type": "parquet", "path": str(work / "lake")}))
    _catalog(src, work / "cat.json")
    catalog = json.loads((work / "cat.json").read_text())
    catalog["streams"] = [s for s in catalog["streams"] if s["name"] == "t"]
    (work / "cat.json").write_text(json.dumps(catalog))
    return [OLAKE, "sync", "--source", str(src), "--destination", str(work / "dst.json"),
            "--catalog", str(work / "cat.json"), "--state", str(work / "state.json")]


def _load(conn: psycopg.Connection, rows: int, transactions: int) -> str:
    """Insert the unrelated rows; returns the WAL position after the last commit."""
    started, per = time.monotonic(), -(-rows // transactions)
    for first in range(0, rows, per):
        conn.execute(f"INSERT INTO other SELECT g, md5(g::text) FROM generate_series({first + 1}, "
                     f"{min(rows, first + per)}) g")
    end = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()[0]
    print(f"loaded {rows:,} unrelated rows in {transactions} transaction(s) in {time.monotonic() - started:.1f} s, "
          f"WAL up to {end}", flush=True)
    return end


if __name__ == "__main__":
    main()
