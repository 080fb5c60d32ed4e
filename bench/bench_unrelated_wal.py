"""What a change-capture read costs when only tables outside the publication changed (issue 22, item 1).

    .venv/bin/python bench/bench_unrelated_wal.py --rows 1000000

Starts a throwaway PostgreSQL with the server's own durability defaults (synchronous_commit and fsync
on, logical_decoding_work_mem 64MB), a captured table in the publication and an unrelated one outside
it, then reads the slot exactly as olake's change capture does (``change_feed.read_changes``: the WAL
flushed, then the bounded peek through one named cursor, in a session whose logical_decoding_work_mem
is raised to ``--work-mem-mb``, olake's default unless given) and prints, for each situation, the WAL
the server decodes from the slot's restart_lsn, the time of the read (the first row arrives only once
everything before it is decoded), of the slot advance, and the bytes the server spilled to disk:

  1. one unrelated transaction of ``--rows`` row changes;
  2. the same read again at once, nothing new (restart_lsn trails the confirmed position);
  3. after ``--idle`` seconds of quiet, nothing new (a running_xacts record lets restart_lsn move);
  4. 10 unrelated transactions of ``--rows`` / 10 changes each;
  5. case 1 with 4,000 captured changes behind it, at logical_decoding_work_mem 64MB (the server's),
     256MB (olake's default) and 1GB;
  6. an empty read right after a VACUUM of the unrelated table, whose last WAL no commit flushed: how
     long the server took to flush up to the read's bound on its own (what olake waited for before it
     flushed the WAL itself), and the read.
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

from olake_cli.sources.postgres import change_feed, decoding  # noqa: E402
from olake_cli.sources.postgres.connection import DEFAULT_DECODING_WORK_MEM_MB  # noqa: E402
from tests.support.pgcluster import create_database, start_cluster  # noqa: E402

SLOT, PUBLICATION = "bench_slot", "bench_pub"


def main() -> None:
    """Run the situations on a fresh cluster and print one line each."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="unrelated row changes per situation")
    parser.add_argument("--idle", type=int, default=16, help="seconds of quiet before situation 3")
    parser.add_argument("--work-mem-mb", type=int, default=DEFAULT_DECODING_WORK_MEM_MB,
                        help="logical_decoding_work_mem_mb of situations 1 to 4 and 6 (64: the server's own)")
    args = parser.parse_args()
    cluster = start_cluster(extra_conf={"synchronous_commit": "on", "fsync": "on", "full_page_writes": "on"})
    try:
        create_database(cluster, "bench")
        with psycopg.connect(cluster.dsn("bench"), autocommit=True) as conn:
            _prepare(conn)
            reader = SlotReader(cluster.dsn("bench"), conn, args.work_mem_mb)
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
            for memory in (64, 256, 1024):
                reader.read(f"5. case 1 + 4,000 captured, logical_decoding_work_mem {memory}MB", memory,
                            advance=memory == 1024)
            time.sleep(args.idle)
            reader.read("   the same again after the quiet, nothing new")
            for row in (1, 2):
                conn.execute(f"UPDATE other SET v = 'v{row}' WHERE id <= 1000")
                conn.execute("VACUUM other")
                if row == 1:
                    print(f"6. after VACUUM other, the server flushed its WAL up to the insert position on its "
                          f"own in {_flushed_on_its_own(conn):.2f} s", flush=True)
            reader.read("6. a read right after VACUUM other")
    finally:
        cluster.stop()


def _flushed_on_its_own(conn: psycopg.Connection, limit_s: float = 10.0) -> float:
    """Seconds until the server flushed its WAL up to the insert position without olake's help (at most
    ``limit_s``, olake's wait before it flushed the WAL itself)."""
    upto, started = change_feed.current_wal_lsn(conn), time.monotonic()
    while change_feed.current_flush_lsn(conn) < upto and time.monotonic() - started < limit_s:
        time.sleep(0.01)
    return time.monotonic() - started


def _prepare(conn: psycopg.Connection) -> None:
    """A captured table in the publication, an unrelated one outside it, and the slot."""
    conn.execute("CREATE TABLE captured (id int PRIMARY KEY, v text)")
    conn.execute("CREATE TABLE other (id int PRIMARY KEY, v text)")
    conn.execute(f"CREATE PUBLICATION {PUBLICATION} FOR TABLE captured")
    conn.execute(f"SELECT pg_create_logical_replication_slot('{SLOT}', 'pgoutput')")


class SlotReader:
    """Reads the slot as olake's change capture does, then confirms what it read, timing both."""

    def __init__(self, dsn: str, conn: psycopg.Connection, work_mem_mb: int) -> None:
        self.dsn, self.conn, self.work_mem_mb = dsn, conn, work_mem_mb

    def read(self, label: str, work_mem_mb: int | None = None, advance: bool = True) -> None:
        """One bounded read up to the WAL insert position now; prints its line."""
        info = change_feed.slot_info(self.conn, SLOT)
        upto = change_feed.current_wal_lsn(self.conn)
        plan = decoding.measure(self.conn, SLOT, upto, work_mem_mb or self.work_mem_mb)
        started = time.monotonic()
        stream = change_feed.read_changes(lambda: self._feed(plan.session_settings()), SLOT, PUBLICATION, upto)
        changes = sum(len(run) for run in stream.runs())
        read_s = time.monotonic() - started
        started = time.monotonic()
        if advance:
            change_feed.advance_slot(self.conn, SLOT, stream.resume_lsn)
        advance_s = time.monotonic() - started
        spilled = decoding.slot_stats(self.conn, SLOT)[2] - plan.stats[2]
        print(f"{label:62s} decoded from restart_lsn {(upto - info['restart_lsn']) / 2**20:7.1f} MB "
              f"({(upto - info['confirmed_flush_lsn']) / 2**20:7.1f} MB new): read {read_s:6.2f} s, "
              f"advance {advance_s:5.2f} s, {changes} changes; spilled {spilled / 2**20:6.1f} MB "
              f"at {decoding.format_kb(plan.work_mem_kb)}", flush=True)

    def _feed(self, settings: dict[str, str]) -> psycopg.Connection:
        conn = psycopg.connect(self.dsn, autocommit=True)
        for name, value in settings.items():
            conn.execute(f"SET {name} = '{value}'")
        return conn


if __name__ == "__main__":
    main()
