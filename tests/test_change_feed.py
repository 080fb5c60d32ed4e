"""The PostgreSQL change feed against a real PostgreSQL 15 (wal_level=logical, synchronous_commit=off)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import psycopg
import pytest

from olake_cli.core.errors import ConfigError, PositionLostError
from olake_cli.core.opid import OpId
from olake_cli.sources.postgres.change_feed import (ChangeEvent, advance_slot, current_wal_lsn, read_changes,
                                                    slot_info)
from olake_cli.sources.postgres.pgoutput import UNCHANGED_TOAST

PUB = "Cdc Pub"  # mixed case and a space: must be quoted for pgoutput's publication_names
INT4, INT8, TEXT, VARCHAR = 23, 20, 25, 1043


@pytest.fixture()
def conn(pg_cluster, pg_db) -> Iterator[psycopg.Connection]:
    with psycopg.connect(pg_cluster.dsn(pg_db), autocommit=True) as connection:
        yield connection


@pytest.fixture()
def slot(conn: psycopg.Connection, pg_db: str) -> Iterator[str]:
    """A pgoutput slot, dropped at the end of the test (a database with a slot cannot be dropped)."""
    name = f"slot_{pg_db}"
    yield name
    conn.execute("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = %s",
                 (name,))


def create_slot(conn: psycopg.Connection, name: str, plugin: str = "pgoutput") -> None:
    conn.execute("SELECT pg_create_logical_replication_slot(%s, %s)", (name, plugin))


def read_all(conn: psycopg.Connection, slot: str, **kw) -> list[ChangeEvent]:
    return list(read_changes(conn, slot, PUB, current_wal_lsn(conn), **kw))


def now_us() -> int:
    return time.time_ns() // 1000


def summary(events: list[ChangeEvent]) -> list[tuple]:
    return [(e.op, e.namespace, e.table, e.op_id.seq, e.new, e.old) for e in events]


def group_by_transaction(events: list[ChangeEvent]) -> list[list[ChangeEvent]]:
    groups: list[list[ChangeEvent]] = []
    for event in events:
        if groups and groups[-1][0].op_id.commit == event.op_id.commit:
            groups[-1].append(event)
        else:
            groups.append([event])
    return groups


def make_schema(conn: psycopg.Connection, slot: str) -> str:
    """Three published tables (FULL identity, default identity, TOASTed text) and one unpublished."""
    big = "".join(chr(0x41 + (i * 7919) % 26) for i in range(20000))  # 20 kB, stored out of line
    conn.execute("CREATE TABLE full_t (id int PRIMARY KEY, name varchar(20), qty int)")
    conn.execute("ALTER TABLE full_t REPLICA IDENTITY FULL")
    conn.execute("CREATE TABLE def_t (id int PRIMARY KEY, v text)")
    conn.execute("CREATE TABLE toast_t (id int PRIMARY KEY, big text, small int)")
    conn.execute("ALTER TABLE toast_t ALTER COLUMN big SET STORAGE EXTERNAL")
    conn.execute("CREATE TABLE other_t (id int PRIMARY KEY)")
    conn.execute(f'CREATE PUBLICATION "{PUB}" FOR TABLE full_t, def_t, toast_t')
    create_slot(conn, slot)
    return big


def run_workload(conn: psycopg.Connection, big: str) -> None:
    """Eight transactions; the unpublished one yields nothing."""
    with conn.transaction():  # T1
        conn.execute("INSERT INTO def_t VALUES (1, 'a'), (2, NULL)")
        conn.execute("INSERT INTO full_t VALUES (1, 'x', 10)")
    with conn.transaction():  # T2
        conn.execute("UPDATE def_t SET v = 'b' WHERE id = 1")
        conn.execute("UPDATE def_t SET id = 3 WHERE id = 2")
        conn.execute("UPDATE full_t SET qty = 11 WHERE id = 1")
    with conn.transaction():  # T3
        conn.execute("DELETE FROM def_t WHERE id = 1")
        conn.execute("DELETE FROM full_t WHERE id = 1")
    conn.execute("INSERT INTO toast_t VALUES (1, %s, 5)", (big,))  # T4
    conn.execute("UPDATE toast_t SET small = 6 WHERE id = 1")  # T5: big untouched
    conn.execute("INSERT INTO other_t VALUES (1)")  # not published: no transaction at all
    with conn.transaction():  # T6: a column added while capture runs
        conn.execute("ALTER TABLE def_t ADD COLUMN extra int")
        conn.execute("INSERT INTO def_t VALUES (4, 'd', 7)")
    conn.execute("TRUNCATE def_t")  # T7
    conn.execute("TRUNCATE full_t, def_t")  # T8: one event per relation


EXPECTED = [
    [("c", "public", "def_t", 1, {"id": "1", "v": "a"}, None),
     ("c", "public", "def_t", 2, {"id": "2", "v": None}, None),
     ("c", "public", "full_t", 3, {"id": "1", "name": "x", "qty": "10"}, None)],
    [("u", "public", "def_t", 1, {"id": "1", "v": "b"}, None),
     ("u", "public", "def_t", 2, {"id": "3", "v": None}, {"id": "2"}),
     ("u", "public", "full_t", 3, {"id": "1", "name": "x", "qty": "11"}, {"id": "1", "name": "x", "qty": "10"})],
    [("d", "public", "def_t", 1, None, {"id": "1"}),
     ("d", "public", "full_t", 2, None, {"id": "1", "name": "x", "qty": "11"})],
    [("c", "public", "toast_t", 1, {"id": "1", "big": "<the 20 kB value>", "small": "5"}, None)],
    [("u", "public", "toast_t", 1, {"id": "1", "big": UNCHANGED_TOAST, "small": "6"}, None)],
    [("c", "public", "def_t", 1, {"id": "4", "v": "d", "extra": "7"}, None)],
    [("t", "public", "def_t", 1, None, None)],
    [("t", "public", "full_t", 1, None, None), ("t", "public", "def_t", 2, None, None)],
]


def test_read_changes_decodes_every_kind_of_change(conn, slot) -> None:
    big = make_schema(conn, slot)
    started = now_us()
    run_workload(conn, big)
    finished = now_us()
    stream = read_changes(conn, slot, PUB, current_wal_lsn(conn))
    events = list(stream)
    transactions = group_by_transaction(events)
    expected = [list(group) for group in EXPECTED]
    expected[3] = [("c", "public", "toast_t", 1, {"id": "1", "big": big, "small": "5"}, None)]
    assert [summary(group) for group in transactions] == expected
    assert transactions[4][0].new["big"] is UNCHANGED_TOAST
    assert stream.finished and stream.transactions == 8
    assert stream.last_commit_lsn == events[-1].op_id.commit < stream.last_end_lsn
    assert stream.resume_lsn >= stream.last_end_lsn
    for previous, event in zip(events, events[1:]):
        assert previous.op_id < event.op_id
    for group in transactions:
        assert len({e.commit_ts_us for e in group}) == 1
        assert [e.op_id.seq for e in group] == list(range(1, len(group) + 1))
        for event in group:
            assert started - 1_000_000 <= event.commit_ts_us <= finished + 1_000_000
            assert 0 < event.lsn < event.op_id.commit
    commit_times = [g[0].commit_ts_us for g in transactions]
    assert commit_times == sorted(commit_times)


def test_columns_follow_relation_messages(conn, slot) -> None:
    big = make_schema(conn, slot)
    run_workload(conn, big)
    events = read_all(conn, slot)
    by_table = {(e.table, e.op_id): e.columns for e in events}
    def_columns = [cols for (table, _), cols in sorted(by_table.items(), key=lambda kv: kv[0][1])
                   if table == "def_t"]
    before, after = [("id", INT4, -1), ("v", TEXT, -1)], [("id", INT4, -1), ("v", TEXT, -1), ("extra", INT4, -1)]
    assert def_columns == [before] * 5 + [after] * 3
    full = next(e for e in events if e.table == "full_t")
    assert full.columns == [("id", INT4, -1), ("name", VARCHAR, 24), ("qty", INT4, -1)]


def test_peek_does_not_consume_and_advance_moves_the_start(conn, slot) -> None:
    big = make_schema(conn, slot)
    run_workload(conn, big)
    upto = current_wal_lsn(conn)
    first = list(read_changes(conn, slot, PUB, upto))
    assert list(read_changes(conn, slot, PUB, upto)) == first  # peek does not consume

    runs = read_changes(conn, slot, PUB, upto, run_rows=1).runs()  # every run ends by its transaction's commit
    end_lsn = {int(run.commit[-1]): run.ends_at for run in runs}  # commit_lsn -> end_lsn of a transaction
    commits = [g[0].op_id.commit for g in group_by_transaction(first)]
    t3_commit, t3_end = commits[2], end_lsn[commits[2]]
    assert t3_commit < t3_end < commits[3]

    advance_slot(conn, slot, t3_commit)  # the commit LSN: transaction 3 is delivered again
    assert slot_info(conn, slot)["confirmed_flush_lsn"] == t3_commit
    again = list(read_changes(conn, slot, PUB, upto))
    assert again == first[first.index(group_by_transaction(first)[2][0]):]

    advance_slot(conn, slot, t3_end)  # the end LSN: the next read starts after transaction 3
    after = list(read_changes(conn, slot, PUB, upto))
    assert after[0].op_id == OpId(commits[3], 1)
    assert after == first[len(first) - len(after):]

    advance_slot(conn, slot, t3_commit)  # backwards: a no-op, not an error
    assert slot_info(conn, slot)["confirmed_flush_lsn"] == t3_end


def test_resume_lsn_skips_everything_read_including_unpublished_transactions(conn, slot) -> None:
    big = make_schema(conn, slot)
    run_workload(conn, big)
    stream = read_changes(conn, slot, PUB, current_wal_lsn(conn))
    assert len(list(stream)) == 14
    advance_slot(conn, slot, stream.resume_lsn)
    assert read_all(conn, slot) == []
    conn.execute("INSERT INTO other_t VALUES (2)")  # unpublished: no events, yet the range moves on
    position = current_wal_lsn(conn)
    stream = read_changes(conn, slot, PUB, position)
    assert list(stream) == [] and stream.last_end_lsn is None and stream.resume_lsn >= position
    advance_slot(conn, slot, stream.resume_lsn)  # (past position when the server said it sent all before more)
    assert slot_info(conn, slot)["confirmed_flush_lsn"] == stream.resume_lsn
    conn.execute("INSERT INTO def_t VALUES (50, 'late')")
    late = read_all(conn, slot)
    assert summary(late) == [("c", "public", "def_t", 1, {"id": "50", "v": "late", "extra": None}, None)]
    assert late[0].op_id.commit > position


def test_commit_just_made_is_read_despite_async_commit(conn, slot) -> None:
    """synchronous_commit=off: the feed flushes the WAL instead of missing the last commit."""
    conn.execute("CREATE TABLE def_t (id int PRIMARY KEY, v text)")
    conn.execute(f'CREATE PUBLICATION "{PUB}" FOR TABLE def_t')
    create_slot(conn, slot)
    for i in range(5):
        conn.execute("INSERT INTO def_t VALUES (%s, 'v')", (i,))
        events = read_all(conn, slot)
        assert [e.new["id"] for e in events] == [str(j) for j in range(i + 1)]


def test_factory_connection_is_closed_and_early_close_releases_the_cursor(pg_cluster, pg_db, conn, slot) -> None:
    conn.execute("CREATE TABLE def_t (id int PRIMARY KEY, v text)")
    conn.execute(f'CREATE PUBLICATION "{PUB}" FOR TABLE def_t')
    create_slot(conn, slot)
    conn.execute("INSERT INTO def_t SELECT i, 'v' FROM generate_series(1, 100) i")
    opened: list[psycopg.Connection] = []

    def factory() -> psycopg.Connection:
        opened.append(psycopg.connect(pg_cluster.dsn(pg_db)))  # not autocommit: the feed opens its own
        return opened[-1]

    events = list(read_changes(factory, slot, PUB, current_wal_lsn(conn), batch_size=7))
    assert [e.new["id"] for e in events] == [str(i) for i in range(1, 101)]
    assert len(opened) == 1 and opened[0].closed

    stream = read_changes(conn, slot, PUB, current_wal_lsn(conn), batch_size=10)
    assert next(iter(stream)).new == {"id": "1", "v": "v"}
    stream.close()
    assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    assert conn.execute("SELECT count(*) FROM pg_cursors").fetchone()[0] == 0
    assert stream.resume_lsn is None and not stream.finished


def test_missing_slot_wrong_plugin_and_missing_publication(conn, slot) -> None:
    upto = current_wal_lsn(conn)
    with pytest.raises(PositionLostError, match="does not exist"):
        list(read_changes(conn, slot, PUB, upto))
    with pytest.raises(PositionLostError):
        advance_slot(conn, slot, upto)
    assert slot_info(conn, slot) is None
    create_slot(conn, slot, "test_decoding")
    with pytest.raises(ConfigError, match="not 'pgoutput'"):
        list(read_changes(conn, slot, PUB, upto))
    conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
    create_slot(conn, slot)
    info = slot_info(conn, slot)
    assert info["plugin"] == "pgoutput" and info["wal_status"] == "reserved" and info["active"] is False
    assert info["database"] == conn.info.dbname and info["confirmed_flush_lsn"] <= current_wal_lsn(conn)
    with pytest.raises(ConfigError, match="publication 'Cdc Pub' does not exist"):
        list(read_changes(conn, slot, PUB, upto))


def test_fifty_thousand_changes_in_one_transaction(conn, slot) -> None:
    conn.execute("CREATE TABLE def_t (id int PRIMARY KEY, v text)")
    conn.execute(f'CREATE PUBLICATION "{PUB}" FOR TABLE def_t')
    create_slot(conn, slot)
    conn.execute("INSERT INTO def_t SELECT i, 'row ' || i FROM generate_series(1, 60000) i")
    stream = read_changes(conn, slot, PUB, current_wal_lsn(conn), batch_size=5000)
    count = 0
    commit_lsn = None
    for count, event in enumerate(stream, start=1):
        commit_lsn = commit_lsn or event.op_id.commit
        assert event.op_id == OpId(commit_lsn, count)
        assert event.new == {"id": str(count), "v": f"row {count}"}
    assert count == 60000 and stream.transactions == 1 and stream.last_commit_lsn == commit_lsn


def test_fifty_thousand_transactions(conn, slot) -> None:
    conn.execute("CREATE TABLE def_t (id int PRIMARY KEY, v text)")
    conn.execute(f'CREATE PUBLICATION "{PUB}" FOR TABLE def_t')
    create_slot(conn, slot)
    conn.execute("DO $$ BEGIN FOR i IN 1..50000 LOOP "
                 "INSERT INTO def_t VALUES (i, NULL); UPDATE def_t SET v = 'u' || i WHERE id = i; COMMIT; "
                 "END LOOP; END $$")
    stream = read_changes(conn, slot, PUB, current_wal_lsn(conn))
    previous = OpId(0, 0)
    count = 0
    for count, event in enumerate(stream, start=1):
        i = (count + 1) // 2
        assert event.op_id > previous and event.op_id.seq == 2 - count % 2
        assert event.op_id.commit > previous.commit or event.op_id.seq == 2
        expected = ("c", {"id": str(i), "v": None}) if count % 2 else ("u", {"id": str(i), "v": f"u{i}"})
        assert (event.op, event.new) == expected
        previous = event.op_id
    assert count == 100000 and stream.transactions == 50000
