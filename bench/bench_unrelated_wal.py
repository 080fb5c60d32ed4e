"""What a change-capture read costs when only tables outside the publication changed (issue 22, item 1).

    .venv/bin/python bench/bench_unrelated_wal.py --rows 1000000

Starts a throwaway PostgreSQL with the server's own durability defaults (synchronous_commit and fsync
on), a captured table in the publication and an unrelated one outside it, then reads the slot exactly
as olake's change feed does (``change_feed.read_changes``: the bounded peek through one named cursor)
and prints, for each situation, the WAL the server decodes from the slot's restart_lsn, the time of the
read (the first row arrives only once everything before it is decoded) and of the slot advance:

  1. one unrelated transaction of ``--rows`` row changes (the reorder buffer spills it to disk);
  2. the same read again at once, nothing new (restart_lsn trails the confirmed position);
  3. after ``--idle`` seconds of quiet, nothing new (a running_xacts record lets restart_lsn move);
  4. 10 unrelated transactions of ``--rows`` / 10 changes each (each fits in memory);
  5. case 1 with 4,000 captured changes behind it, at logical_decoding_work_mem 64MB and then 1GB.
Nothing here is a test: it measures.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import psycopg  # noqa: E402

from olake_cli.sources.postgres import change_feed  # noqa: E402
from tests.support.pgcluster import create_database, start_cluster  # noqa: E402

SLOT, PUBLICATION = "bench_slot", "bench_pub"


def main() -> None:
    """Run the situations on a fresh cluster and print one line each."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="unrelated row changes per situation")
    parser.add_argument("--idle", type=int, default=16, help="seconds of quiet before situation 3")
    args = parser.parse_args()
    cluster = start_cluster(extra_conf={"synchronous_commit": "on", "fsync": "on", "full_page_writes": "on"})
    try:
        create_database(cluster, "bench")
        with psycopg.connect(cluster.dsn("bench"), autocommit=True) as conn:
            _prepare(conn)
            reader = SlotReader(cluster.dsn("bench"), conn)
            conn.execute(f"INSERT INTO other SELECT g, md5(g::text) FROM generate_series(1, {args.rows}) g")
            reader.read(f"1. one unrelated transaction of {args.rows:,} rows")
            reader.read("2. the same read again at once, nothing new")
            time.sleep(args.idle)
            reader.read(f"3. after {args.idle} s of quiet, nothing new")
            for part in range(10):
                conn.execute(f"UPDATE other SET v = 'u{part}' WHERE id % 10 = {part}")
            reader.read(f"4. 10 unrelated transactions of {args.rows // 10:,} rows")
            conn.execute("UPDATE other SET v = 'big'")
            conn.execute("INSERT INTO captured SELECT g, 'x' FROM generate_series(1, 4000) g")
            for memory in ("64MB", "1GB"):
                reader.read(f"5. case 1 + 4,000 captured, logical_decoding_work_mem {memory}", memory, advance=False)
    finally:
        cluster.stop()


def _prepare(conn: psycopg.Connection) -> None:
    """A captured table in the publication, an unrelated one outside it, and the slot."""
    conn.execute("CREATE TABLE captured (id int PRIMARY KEY, v text)")
    conn.execute("CREATE TABLE other (id int PRIMARY KEY, v text)")
    conn.execute(f"CREATE PUBLICATION {PUBLICATION} FOR TABLE captured")
    conn.execute(f"SELECT pg_create_logical_replication_slot('{SLOT}', 'pgoutput')")


class SlotReader:
    """Reads the slot as olake's change feed does, then confirms what it read, timing both."""

    def __init__(self, dsn: str, conn: psycopg.Connection) -> None:
        self.dsn, self.conn = dsn, conn

    def read(self, label: str, work_mem: str | None = None, advance: bool = True) -> None:
        """One bounded read up to the WAL insert position now; prints its line."""
        info = change_feed.slot_info(self.conn, SLOT)
        upto = change_feed.current_wal_lsn(self.conn)
        started = time.monotonic()
        stream = change_feed.read_changes(lambda: self._feed(work_mem), SLOT, PUBLICATION, upto)
        changes = sum(len(run) for run in stream.runs())
        read_s = time.monotonic() - started
        started = time.monotonic()
        if advance:
            change_feed.advance_slot(self.conn, SLOT, stream.resume_lsn)
        advance_s = time.monotonic() - started
        spilled = self.conn.execute("SELECT pg_size_pretty(spill_bytes) FROM pg_stat_replication_slots "
                                    "WHERE slot_name = %s", (SLOT,)).fetchone()
        print(f"{label:62s} decoded from restart_lsn {(upto - info['restart_lsn']) / 2**20:7.1f} MB "
              f"({(upto - info['confirmed_flush_lsn']) / 2**20:7.1f} MB new): read {read_s:6.2f} s, "
              f"advance {advance_s:5.2f} s, {changes} changes; spilled so far {spilled[0] if spilled else '?'}",
              flush=True)

    def _feed(self, work_mem: str | None) -> psycopg.Connection:
        conn = psycopg.connect(self.dsn, autocommit=True)
        if work_mem:
            conn.execute(f"SET logical_decoding_work_mem = '{work_mem}'")
        return conn


if __name__ == "__main__":
    main()
