"""What a following run notices while it runs, as a bounded run does at its start.

``sync --follow`` into PostgreSQL follows tables ``t1`` and ``t2`` (discovery off, so only change capture's
own checks can notice). ``t2`` leaves the publication, 10 rows are updated and 10 deleted, it comes back and
more changes follow: the run says so in one line and loads ``t2`` anew beside ``t1`` while it keeps going.
The replication slot dropped under the run: with ``on_position_lost: resync`` (olake manages the slot) the
slot is created again and both tables loaded anew; with ``fail`` the run stops with one line. A table renamed
and renamed back inside one transaction loses nothing (the change under the other name is captured); a table
renamed for good stops the run with one line, as a new run would at its start. The destination equals the
source value by value each time, while the run keeps going.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess

import psycopg
import pytest

from tests.support.cdc import discover_catalog
from tests.support.cli import write_json
from tests.support.follow import start_olake, stop, wait_until
from tests.support.pg_compare import table_texts

COLUMNS = ["id", "v", "note"]
LOST_LINE = "public.t2: change position lost: "


@pytest.fixture()
def runs():
    """The runs a test starts; those still going at its end (a failed test) are killed."""
    started: list[subprocess.Popen] = []
    yield started
    for run in started:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
            run.wait(timeout=30)


class _Follower:
    """Tables t1 and t2 (50 rows each) and a ``sync --follow`` of both into the target database."""

    def __init__(self, cluster, database: str, target: str, tmp_path, name: str, runs: list) -> None:
        self.source, self.target, self.tmp_path = cluster.dsn(database), target, tmp_path
        self.slot, self.publication = f"{name}_{database}", f"{name}_{database}_pub"
        with psycopg.connect(self.source, autocommit=True) as conn:
            for table in ("t1", "t2"):
                conn.execute(f"CREATE TABLE {table} (id int PRIMARY KEY, v bigint NOT NULL, note text)")
                conn.execute(f"INSERT INTO {table} SELECT g, 0, 'row ' || g FROM generate_series(1, 50) g")
        self.src_config = cluster.source_config(database, replication_slot=self.slot, publication=self.publication,
                                                create_slot_and_publication=True)
        self.log = tmp_path / "sync.log"
        self.run: subprocess.Popen | None = None
        self.runs = runs

    def start(self, dst: str, **config) -> subprocess.Popen:
        """Start following (with ``config`` over the source config), and wait until both tables are copied."""
        src = write_json(self.tmp_path / "src_run.json", {**self.src_config, **config})
        if not (self.tmp_path / "cat.json").exists():
            discover_catalog(src, self.tmp_path / "cat.json", {"t1": "cdc", "t2": "cdc"})
        args = ["sync", "--source", src, "--destination", dst, "--catalog", str(self.tmp_path / "cat.json"),
                "--state", str(self.tmp_path / "state.json"), "--follow", "--commit-interval", "0.5",
                "--discovery-interval", "0"]
        follows = self.text().count("following the change log")
        self.run = start_olake(args, self.log, stdout=open(self.tmp_path / "sync.out", "ab"))
        self.runs.append(self.run)
        wait_until(lambda: self.text().count("following the change log") > follows, "the change phase starts",
                   run=self.run)
        self.wait_equal()
        return self.run

    def text(self) -> str:
        return self.log.read_text() if self.log.exists() else ""

    def execute(self, *statements: str) -> None:
        with psycopg.connect(self.source, autocommit=True) as conn:
            for statement in statements:
                conn.execute(statement)

    def same(self, table: str) -> bool:
        try:
            return table_texts(self.target, "public", table, COLUMNS) == table_texts(self.source, "public", table,
                                                                                    COLUMNS)
        except psycopg.Error:
            return False  # not created yet

    def wait_equal(self, *tables: str) -> None:
        """Wait until ``tables`` (default both) equal the source value by value, the run still going."""
        for table in tables or ("t1", "t2"):
            wait_until(lambda table=table: self.same(table), f"{table} equals the source", timeout=60, run=self.run)

    def wait_failed(self) -> str:
        """Wait for the run to end; its status must be non-zero; returns the log written since it started."""
        self.run.wait(timeout=60)
        assert self.run.returncode != 0, self.text()[-3000:]
        return self.text()

    def drop_slot(self) -> None:
        """End the walsender reading the slot and drop the slot (again, while the run reconnects)."""
        def dropped() -> bool:
            try:
                self.execute(f"SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots "
                             f"WHERE slot_name = '{self.slot}' AND active_pid IS NOT NULL",
                             f"SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                             f"WHERE slot_name = '{self.slot}'")
            except psycopg.errors.ObjectInUse:
                return False
            return True
        wait_until(dropped, "the slot is dropped", timeout=30)


def _changes(table: str, low: int) -> list[str]:
    return [f"UPDATE {table} SET v = v + 1, note = 'changed' WHERE id BETWEEN {low} AND {low + 9}",
            f"DELETE FROM {table} WHERE id BETWEEN {low + 10} AND {low + 19}"]


def test_a_table_that_leaves_the_publication_and_comes_back_is_loaded_anew_while_following(
        pg_cluster, pg_db, pg_target, target_db, tmp_path, runs):
    follower = _Follower(pg_cluster, pg_db, pg_target.dsn(target_db), tmp_path, "pubgapf", runs)
    run = follower.start(write_json(tmp_path / "dst.json", pg_target.destination_config(target_db)))
    follower.execute(f"ALTER PUBLICATION {follower.publication} DROP TABLE t2", *_changes("t2", 1),
                     f"ALTER PUBLICATION {follower.publication} ADD TABLE t2",
                     *_changes("t2", 31), *_changes("t1", 1), "INSERT INTO t2 VALUES (100, 7, 'after')")
    follower.wait_equal()
    text = follower.text()
    assert text.count(LOST_LINE) == 1, text[-3000:]
    assert "left publication" in text and "joined it again" in text, text[-3000:]
    follower.execute(*_changes("t2", 21), "UPDATE t1 SET v = 9 WHERE id = 40")  # followed as usual again
    follower.wait_equal()
    took = stop(run)
    assert run.returncode == 0 and took < 10, follower.text()[-3000:]
    assert follower.text().count(LOST_LINE) == 1 and "Traceback" not in follower.text()


def test_a_slot_dropped_while_following_is_created_again_or_stops_the_run(
        pg_cluster, pg_db, pg_target, target_db, tmp_path, runs):
    follower = _Follower(pg_cluster, pg_db, pg_target.dsn(target_db), tmp_path, "slotgonef", runs)
    dst = write_json(tmp_path / "dst.json", pg_target.destination_config(target_db))
    run = follower.start(dst)
    follower.drop_slot()
    follower.execute(*_changes("t1", 1), *_changes("t2", 1))  # never in a slot: the loads anew hold them
    follower.wait_equal()
    follower.execute(*_changes("t2", 21))
    follower.wait_equal()
    text = follower.text()
    assert "public.t1: change position lost: replication slot" in text, text[-3000:]
    assert "public.t2: change position lost: replication slot" in text, text[-3000:]
    assert run.poll() is None
    assert stop(run) < 10 and run.returncode == 0, follower.text()[-3000:]

    follower.start(dst, on_position_lost="fail")
    before = follower.text()
    follower.drop_slot()
    text = follower.wait_failed()[len(before):]
    lines = [line for line in text.splitlines() if "change position lost" in line]
    assert len(lines) == 1 and f"replication slot '{follower.slot}'" in lines[0], text[-3000:]
    assert "on_position_lost = fail" in lines[0] and "Traceback" not in text


def test_a_table_renamed_while_following(pg_cluster, pg_db, pg_target, target_db, tmp_path, runs):
    follower = _Follower(pg_cluster, pg_db, pg_target.dsn(target_db), tmp_path, "renamef", runs)
    follower.start(write_json(tmp_path / "dst.json", pg_target.destination_config(target_db)))
    with psycopg.connect(follower.source) as conn:  # renamed and back in one transaction: no check sees it
        conn.execute("ALTER TABLE t2 RENAME TO t2_away")
        conn.execute("UPDATE t2_away SET v = 5, note = 'while away' WHERE id BETWEEN 1 AND 10")
        conn.execute("ALTER TABLE t2_away RENAME TO t2")
    follower.execute(*_changes("t1", 1))
    follower.wait_equal()
    before = follower.text()
    follower.execute("ALTER TABLE t2 RENAME TO t2_gone", "UPDATE t2_gone SET v = 6 WHERE id = 20")
    text = follower.wait_failed()[len(before):]
    assert text.count("stream 'public.t2' does not exist") == 1, text[-3000:]  # the start checks' line
    assert "public.t2 was renamed to public.t2_gone" in text, text[-3000:]
    assert "Traceback" not in text


WINDOWS = {  # what a following read must notice, done after it began and before its first look
    "out and back in one transaction": ["ALTER PUBLICATION {pub} DROP TABLE acct_f", "DELETE FROM acct_f WHERE id <= 5",
                                        "ALTER PUBLICATION {pub} ADD TABLE acct_f"],
    "an action switched off": ["ALTER PUBLICATION {pub} SET (publish = 'insert')"],
}


@pytest.mark.parametrize("on_position_lost", ["resync", "fail"])
def test_a_following_read_gives_up_a_stream_whose_changes_went_unpublished(pg_cluster, pg_db, on_position_lost):
    """In process: a window no look could see open (the table out of the publication and back inside one
    transaction), and a publish action switched off, while ``follow`` reads: ``resync`` ends the read with
    the stream to load anew, ``fail`` raises, each with the reason."""
    import threading

    from olake_cli.core.catalog import parse_catalog
    from olake_cli.core.errors import PositionLostError
    from olake_cli.core.follow import Follow
    from olake_cli.core.state import State
    from olake_cli.sources.postgres.capture import PostgresChangeCapture
    from olake_cli.sources.postgres.connection import PostgresSettings
    from olake_cli.sources.postgres.source import PostgresSource
    from tests.support.cdc import make_accounts
    from tests.support.states import stream_state

    dsn, slot = pg_cluster.dsn(pg_db), f"livef_{on_position_lost}"
    make_accounts(dsn, "acct_f", 20)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"CREATE PUBLICATION {slot}_pub FOR TABLE acct_f")
        conn.execute(f"SELECT pg_create_logical_replication_slot('{slot}', 'pgoutput')")
        position = conn.execute("SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s",
                                (slot,)).fetchone()[0]
    config = pg_cluster.source_config(pg_db, replication_slot=slot, publication=f"{slot}_pub",
                                      on_position_lost=on_position_lost)
    stream = parse_catalog(PostgresSource(config).discover()).find("public", "acct_f")
    stream.sync_mode = "cdc"
    expected = {"out and back in one transaction": "left publication .* and joined it again",
                "an action switched off": "no longer publishes update, delete, truncate"}
    for window, statements in WINDOWS.items():
        def begun(line: str, statements=statements) -> None:  # the read checked its start: open the window
            if "following slot" in line:
                with psycopg.connect(dsn, autocommit=True) as conn:
                    for statement in statements:
                        conn.execute(statement.format(pub=f"{slot}_pub"))

        state = State(streams=[stream_state("cdc", "acct_f", "public", position, None, op_seq=0)])
        capture = PostgresChangeCapture(PostgresSettings.from_config(config), [stream], begun)
        capture.preflight(state)
        follow = Follow(commit_interval_s=0.2)
        timer = threading.Timer(60, follow.stop.set)  # a read that never notices ends, and the test fails
        timer.start()
        try:
            if on_position_lost == "fail":
                with pytest.raises(PositionLostError, match=f"public.acct_f: change position lost: .*{expected[window]}"):
                    list(capture.follow([stream], state, follow))
            else:
                resyncs = [batch.resync for batch in capture.follow([stream], state, follow) if batch.resync]
                assert len(resyncs) == 1 and not follow.stop.is_set(), window
                assert resyncs[0].keys() == {("public", "acct_f")}
                assert re.search(expected[window], resyncs[0][("public", "acct_f")]), resyncs[0]
        finally:
            timer.cancel()
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f"ALTER PUBLICATION {slot}_pub SET (publish = 'insert, update, delete, truncate')")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"SELECT pg_drop_replication_slot('{slot}')")


def test_a_partition_created_while_following_reaches_its_stream(pg_cluster, pg_db):
    """In process: a partition attached to a captured partitioned table after the following read began (its
    routing was made then) publishes its changes under its own name: they reach the root's stream."""
    import threading

    from olake_cli.core.catalog import parse_catalog
    from olake_cli.core.follow import Follow
    from olake_cli.core.state import State
    from olake_cli.sources.postgres.capture import PostgresChangeCapture
    from olake_cli.sources.postgres.connection import PostgresSettings
    from olake_cli.sources.postgres.source import PostgresSource
    from tests.support.states import stream_state

    dsn, slot = pg_cluster.dsn(pg_db), "partf"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE parted (id int PRIMARY KEY, v text) PARTITION BY RANGE (id)")
        conn.execute("CREATE TABLE parted_1 PARTITION OF parted FOR VALUES FROM (0) TO (100)")
        conn.execute(f"CREATE PUBLICATION {slot}_pub FOR TABLE parted")
        conn.execute(f"SELECT pg_create_logical_replication_slot('{slot}', 'pgoutput')")
        position = conn.execute("SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s",
                                (slot,)).fetchone()[0]
    config = pg_cluster.source_config(pg_db, replication_slot=slot, publication=f"{slot}_pub")
    stream = parse_catalog(PostgresSource(config).discover()).find("public", "parted")
    stream.sync_mode = "cdc"

    def begun(line: str) -> None:  # the read made its routing: a new partition, and rows in both
        if "following slot" in line:
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute("CREATE TABLE parted_2 PARTITION OF parted FOR VALUES FROM (100) TO (200)")
                conn.execute("INSERT INTO parted SELECT g, 'v' || g FROM generate_series(95, 104) g")

    state = State(streams=[stream_state("cdc", "parted", "public", position, None, op_seq=0)])
    capture = PostgresChangeCapture(PostgresSettings.from_config(config), [stream], begun)
    capture.preflight(state)
    follow = Follow(commit_interval_s=0.2)
    timer = threading.Timer(30, follow.stop.set)  # a read that never sees them ends, and the test fails
    timer.start()
    ids: list[str] = []
    try:
        for batch in capture.follow([stream], state, follow):
            ids += [i for run in batch.runs if run.stream == ("public", "parted") for i in run.data["id"].to_pylist()]
            if len(ids) >= 10:
                follow.stop.set()
    finally:
        timer.cancel()
    assert sorted(ids, key=int) == [str(i) for i in range(95, 105)], ids
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"SELECT pg_drop_replication_slot('{slot}')")
