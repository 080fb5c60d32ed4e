"""The slot read over the streaming replication protocol, against a real PostgreSQL 15 walsender.

Rows flow while the server still decodes the range; the walsender is kept alive while the consumer is
busy; a bounded read confirms the destination's position to an idle slot whose database is busy; the
walsender lets go of the slot when a run ends, is closed early, or is killed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator

import psycopg
import pytest

from olake_cli.core.catalog import parse_catalog
from olake_cli.core.state import State
from olake_cli.sources.postgres.capture import PostgresChangeCapture
from olake_cli.sources.postgres.change_feed import current_wal_lsn, read_changes, slot_info
from olake_cli.sources.postgres.connection import PostgresSettings
from olake_cli.sources.postgres.lsn import format_lsn
from tests.support.states import stream_state

PUB = "stream_pub"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture()
def conn(pg_cluster, pg_db) -> Iterator[psycopg.Connection]:
    with psycopg.connect(pg_cluster.dsn(pg_db), autocommit=True) as connection:
        yield connection


@pytest.fixture()
def slot(conn: psycopg.Connection, pg_db: str) -> Iterator[str]:
    """A pgoutput slot on table ``t`` (published) beside ``other`` (not), dropped at the end."""
    name = f"slot_{pg_db}"
    conn.execute("CREATE TABLE t (id int PRIMARY KEY, v text)")
    conn.execute("CREATE TABLE other (id int PRIMARY KEY, v text)")
    conn.execute(f"CREATE PUBLICATION {PUB} FOR TABLE t")
    conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (name,))
    yield name
    conn.execute("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = %s",
                 (name,))


def insert_transactions(conn: psycopg.Connection, table: str, transactions: int, rows: int, width: int) -> None:
    """``transactions`` commits of ``rows`` rows each (ids continue), values ``width`` characters long."""
    conn.execute(f"""DO $$ DECLARE base int := (SELECT coalesce(max(id), 0) FROM {table}); BEGIN
                     FOR b IN 0..{transactions - 1} LOOP
                       INSERT INTO {table} SELECT base + b * {rows} + g, repeat(chr(65 + g % 26), {width})
                       FROM generate_series(1, {rows}) g;
                       COMMIT;
                     END LOOP; END $$""")


def expected_value(row_id: int, width: int, rows: int) -> str:
    return chr(65 + ((row_id - 1) % rows + 1) % 26) * width


def test_first_rows_arrive_while_the_server_still_sends_the_range(conn, slot) -> None:
    """A bounded read over ~60 MB of changes hands on its first run while the walsender has sent only a
    part of the range (pg_stat_replication.sent_lsn below the last commit); then every row arrives."""
    transactions, rows, width = 100, 1000, 500
    insert_transactions(conn, "t", transactions, rows, width)
    upto = current_wal_lsn(conn)
    with read_changes(conn, slot, PUB, upto, batch_size=1000) as feed:
        runs = feed.runs()
        first = next(runs)
        walsender = conn.execute("SELECT r.pid, (r.sent_lsn - '0/0')::text FROM pg_replication_slots s "
                                 "JOIN pg_stat_replication r ON r.pid = s.active_pid "
                                 "WHERE s.slot_name = %s", (slot,)).fetchone()
        assert walsender is not None, "no walsender holds the slot while the read is under way"
        assert int(walsender[1]) < upto, "the server had sent the whole range before the first run"
        ids = [int(x) for run in [first, *runs] for x in run.new[0].texts.to_pylist()]
        values = {int(i): v for run in [first] for i, v in zip(run.new[0].texts.to_pylist(),
                                                                   run.new[1].texts.to_pylist())}
    assert ids == list(range(1, transactions * rows + 1))
    assert all(v == expected_value(i, width, rows) for i, v in values.items())
    assert feed.finished and feed.transactions == transactions


def test_a_busy_consumer_keeps_the_walsender_alive(pg_cluster, pg_db, conn, slot) -> None:
    """wal_sender_timeout of 1 s on the feed's session, a consumer that stops for 3 s after its first run:
    the reader thread's status updates keep the walsender from timing out, and every row arrives."""
    insert_transactions(conn, "t", 40, 1000, 200)  # more than the socket buffers hold
    upto = current_wal_lsn(conn)
    with psycopg.connect(pg_cluster.dsn(pg_db), autocommit=True, options="-c wal_sender_timeout=1000") as short:
        with read_changes(short, slot, PUB, upto, batch_size=500) as feed:
            ids: list[int] = []
            for run in feed.runs():
                if not ids:
                    time.sleep(3)  # three wal_sender_timeouts without reading the socket
                ids += [int(x) for x in run.new[0].texts.to_pylist()]
    assert ids == list(range(1, 40 * 1000 + 1))


def test_following_a_busy_log_hands_on_what_each_batch_completed(pg_cluster, pg_db, conn, slot) -> None:
    """Following (no end), with a writer that never lets the server idle and a consumer slower than the
    log: the rows of every transaction a batch completed are handed on with that batch, not held until
    RUN_ROWS more rows arrive (which kept a steady 1,000 rows/s several seconds behind)."""
    import threading

    from olake_cli.sources.postgres.change_feed import RUN_ROWS

    total, batch = 3000 * 5, 500
    def write() -> None:
        with psycopg.connect(pg_cluster.dsn(pg_db), autocommit=True) as other:
            insert_transactions(other, "t", 3000, 5, 10)

    writer = threading.Thread(target=write)
    ids: list[int] = []
    sizes: list[int] = []
    with read_changes(conn, slot, PUB, None, batch_size=batch) as feed:
        writer.start()
        for run in feed.runs():
            if run is None:  # an idle moment
                continue
            sizes.append(len(run))
            ids += [int(x) for x in run.new[0].texts.to_pylist()]
            if len(ids) >= total:
                break
            time.sleep(0.02)  # a destination busy with the run before
    writer.join()
    assert ids == list(range(1, total + 1))
    assert max(sizes) <= 2 * batch < RUN_ROWS, sizes  # a transaction cut by a batch's end waits for the next


def read_idle_stream(config: dict, position: str) -> str:
    """One change read as ``read`` does it, for stream ``t`` at ``position``; returns the position the
    run ends at (its last batch's), after checking that no change of ``t`` came."""
    settings = PostgresSettings.from_config(config)
    stream = parse_catalog({"streams": [{
        "name": "t", "namespace": "public", "sync_mode": "cdc", "primary_key": [["id"]],
        "json_schema": {"type": "object", "properties": {
            "id": {"type": ["null", "integer"], "x-olake-type": "int32", "x-pg-type": "integer"},
            "v": {"type": ["null", "string"], "x-olake-type": "string", "x-pg-type": "text"}}}}]}).streams[0]
    state = State(streams=[stream_state("cdc", "t", "public", position, None, op_seq=0)])
    capture = PostgresChangeCapture(settings, [stream], lambda line: None)
    capture.preflight(state)
    batches = list(capture.read([stream], state))
    assert [run for batch in batches for run in batch.runs] == []
    return format_lsn(batches[-1].position.commit)


def test_an_idle_slot_in_a_busy_database_is_confirmed_to_the_committed_position(pg_cluster, pg_db, conn,
                                                                                slot) -> None:
    """Only tables outside the publication change: each bounded run ends further on, and the next run
    confirms exactly the position the previous one committed (the walsender's flush position, never
    further), so the slot's confirmed and restart positions follow the busy database."""
    config = pg_cluster.source_config(pg_db, replication_slot=slot, publication=PUB)
    created = slot_info(conn, slot)
    position = format_lsn(created["confirmed_flush_lsn"])
    ends = []
    for _ in range(3):
        insert_transactions(conn, "other", 20, 500, 100)
        conn.execute("CHECKPOINT")  # a running-transactions record: a restart position the slot may take
        position = read_idle_stream(config, position)
        ends.append(position)
        info = slot_info(conn, slot)
        assert not info["active"]
        confirmed = ends[-2] if len(ends) > 1 else format_lsn(created["confirmed_flush_lsn"])
        assert format_lsn(info["confirmed_flush_lsn"]) == confirmed
    assert slot_info(conn, slot)["restart_lsn"] > created["restart_lsn"]
    assert len(set(ends)) == 3


def test_the_walsender_lets_go_of_the_slot_at_the_end_on_close_and_when_killed(pg_cluster, pg_db, conn,
                                                                               slot) -> None:
    """A read that ends, a read closed after its first run, and a process SIGKILLed in the middle of a
    read: each time pg_replication_slots.active turns false (the first two before read_changes returns)."""
    insert_transactions(conn, "t", 30, 1000, 200)
    upto = current_wal_lsn(conn)
    assert sum(len(run) for run in read_changes(conn, slot, PUB, upto).runs()) == 30_000
    assert slot_info(conn, slot)["active"] is False
    feed = read_changes(conn, slot, PUB, upto, batch_size=100)
    assert len(next(feed.runs())) > 0
    assert slot_info(conn, slot)["active"] is True
    feed.close()
    assert slot_info(conn, slot)["active"] is False

    script = textwrap.dedent(f"""
        import sys, time, psycopg
        from olake_cli.sources.postgres.change_feed import read_changes
        conn = psycopg.connect({pg_cluster.dsn(pg_db)!r}, autocommit=True)
        runs = read_changes(conn, {slot!r}, {PUB!r}, {upto}, batch_size=100).runs()
        next(runs)
        print("reading", flush=True)
        time.sleep(600)
    """)
    reader = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        assert reader.stdout.readline().strip() == "reading"
        assert slot_info(conn, slot)["active"] is True
    finally:
        os.kill(reader.pid, signal.SIGKILL)
        reader.wait()
    deadline = time.monotonic() + 60
    while slot_info(conn, slot)["active"] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert slot_info(conn, slot)["active"] is False
    assert sum(len(run) for run in read_changes(conn, slot, PUB, upto).runs()) == 30_000  # nothing consumed
