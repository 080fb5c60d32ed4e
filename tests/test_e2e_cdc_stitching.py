"""Change capture converges to the source: key updates, the snapshot/slot seam, unchanged TOAST values.

Every test runs the real commands and compares the current table (the README's DuckDB query) with the
source value by value. What is under test is the source's and the pipeline's, so by default each test
runs through one path, both paths appearing in the file; OLAKE_TEST_ALL_PATHS=1 runs each through both.
"""

from __future__ import annotations

import threading

import psycopg
import pytest

from tests.support.cdc import ConcurrentWriter, discover_catalog, make_accounts, sync_once
from tests.support.cli import run_olake, write_json
from tests.support.current_view import current_view
from tests.support.matrix import cases
from tests.support.verify import assert_table_matches

MODES = ["pipe", "sync"]


class Setup:
    """Configs, catalog and state of one test's source and Parquet destination."""

    def __init__(self, pg_cluster, db: str, tmp_path, slot: str, create: bool = True, **extra) -> None:
        self.dsn, self.slot, self.out, self.tmp = pg_cluster.dsn(db), slot, tmp_path / "out", tmp_path
        self.src = write_json(tmp_path / "src.json", pg_cluster.source_config(
            db, replication_slot=slot, publication=f"{slot}_pub", create_slot_and_publication=create,
            max_parallel=1, **extra))
        self.dst = write_json(tmp_path / "dst.json", {"type": "parquet", "path": str(self.out)})
        self.catalog_path, self.state = tmp_path / "cat.json", tmp_path / "st.json"
        self.catalog: dict = {}

    def discover(self, modes: dict[str, str]) -> None:
        self.catalog = discover_catalog(self.src, self.catalog_path, modes, only=set(modes))

    def run(self, mode: str):
        """One run of ``read | write`` or ``sync``; returns the reader's stderr."""
        if mode == "pipe":
            return sync_once(self.src, self.catalog_path, self.dst, self.state).read_stderr
        result = run_olake("sync", "--source", self.src, "--destination", self.dst, "--catalog",
                           str(self.catalog_path), "--state", str(self.state))
        assert result.returncode == 0, result.stderr.decode()[-3000:]
        return result.stderr

    def execute(self, *statements: str) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            for statement in statements:
                conn.execute(statement)

    def assert_current(self, name: str, key: tuple[str, ...] = ("id",)) -> None:
        """The documented current-table query over the stream's folder equals the source table."""
        schema = next(s for s in self.catalog["streams"] if s["name"] == name)["json_schema"]
        current = current_view(str(self.out / "public" / name), list(schema["properties"]), list(key))
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            assert_table_matches(conn, "public", name, schema, current)

    def drop_slot(self) -> None:
        self.execute(f"SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                     f"WHERE slot_name = '{self.slot}'")


@pytest.mark.parametrize("mode", cases(MODES, ["pipe"]))
def test_primary_key_updates_leave_no_ghost_rows(pg_cluster, pg_db, tmp_path, mode):
    setup = Setup(pg_cluster, pg_db, tmp_path, f"slot_pk_{mode}")
    make_accounts(setup.dsn, "acct", 300)
    make_accounts(setup.dsn, "acct_full", 300)
    setup.execute("ALTER TABLE acct_full REPLICA IDENTITY FULL",
                  "CREATE TABLE pair (a int, b text, v int, PRIMARY KEY (a, b))",
                  "INSERT INTO pair SELECT g, 'k' || g, g FROM generate_series(1, 50) g")
    setup.discover({"acct": "cdc", "acct_full": "cdc", "pair": "cdc"})
    setup.run(mode)
    setup.execute("UPDATE acct SET id = id + 1000 WHERE id <= 40",
                  "UPDATE acct SET id = id - 1000, note = 'moved back' WHERE id BETWEEN 1001 AND 1010",
                  "UPDATE acct_full SET id = id + 1000, balance = 7 WHERE id <= 40",
                  "UPDATE pair SET b = b || 'x' WHERE a <= 10",
                  "BEGIN; UPDATE acct SET id = 5000 WHERE id = 100; INSERT INTO acct VALUES (100, 1, 'reused'); COMMIT")
    setup.run(mode)
    setup.assert_current("acct")
    setup.assert_current("acct_full")
    setup.assert_current("pair", ("a", "b"))
    setup.drop_slot()


@pytest.mark.parametrize("mode", cases(MODES, ["sync"]))
def test_unchanged_toast_value_survives_in_the_current_table(pg_cluster, pg_db, tmp_path, mode):
    setup = Setup(pg_cluster, pg_db, tmp_path, f"slot_toast_{mode}")
    setup.execute("CREATE TABLE docs (id int PRIMARY KEY, title text, body text, meta jsonb)",
                  "INSERT INTO docs SELECT g, 'title ' || g, NULL, NULL FROM generate_series(1, 5) g")
    setup.discover({"docs": "cdc"})
    setup.run(mode)
    big = "(SELECT string_agg(md5(g::text || random()::text), '') FROM generate_series(1, 32768) g)"
    setup.execute(f"UPDATE docs SET body = {big}, meta = jsonb_build_object('blob', {big}) WHERE id <= 3",
                  "UPDATE docs SET title = 'renamed' WHERE id <= 3",  # body and meta arrive unchanged
                  "UPDATE docs SET title = 'twice' WHERE id = 1")
    setup.run(mode)
    with psycopg.connect(setup.dsn) as conn:
        assert conn.execute("SELECT length(body) FROM docs WHERE id = 1").fetchone()[0] == 32768 * 32
    setup.assert_current("docs")
    setup.drop_slot()


def test_changes_replayed_from_before_the_snapshot_do_not_override_the_load(pg_cluster, pg_db, tmp_path):
    """An existing slot starts before the load's snapshot: the transactions in between are in the load
    already, and their replayed images (here without a column added since) must not override it."""
    setup = Setup(pg_cluster, pg_db, tmp_path, "slot_seam", create=False)
    make_accounts(setup.dsn, "acct", 400)
    setup.execute("CREATE PUBLICATION slot_seam_pub FOR TABLE acct",
                  "SELECT pg_create_logical_replication_slot('slot_seam', 'pgoutput')",
                  "UPDATE acct SET balance = -1 WHERE id <= 50",
                  "ALTER TABLE acct ADD COLUMN flag text DEFAULT 'on'",
                  "UPDATE acct SET flag = 'set' WHERE id BETWEEN 40 AND 60")
    setup.discover({"acct": "cdc"})
    stderr = setup.run("pipe")
    setup.execute("UPDATE acct SET balance = 2 WHERE id BETWEEN 55 AND 70")
    setup.run("pipe")
    assert b"change capture" in stderr
    setup.assert_current("acct")
    setup.drop_slot()


class _Hammer:
    """Several writers plus a transaction held open across the start of the full load."""

    def __init__(self, dsn: str, table: str, seed: int) -> None:
        self.writers = [ConcurrentWriter(dsn, table, first_new_id=100_000 * (i + 1), max_id=3000, seed=seed + i)
                        for i in range(3)]
        self.held = psycopg.connect(dsn, autocommit=False)
        self.held.execute(f"UPDATE {table} SET note = 'held open' WHERE id BETWEEN 1 AND 20")
        self.held.execute(f"INSERT INTO {table} VALUES ({90_000 + seed}, 0, 'held insert')")

    def __enter__(self) -> _Hammer:
        for writer in self.writers:
            writer.start()
        threading.Timer(3.0, self._commit_held).start()  # commits while the load runs
        return self

    def _commit_held(self) -> None:
        self.held.commit()
        self.held.close()

    def __exit__(self, *exc) -> None:
        for writer in self.writers:
            writer.stop()
        assert all(w.transactions > 0 for w in self.writers)


@pytest.mark.parametrize("mode,create", cases([("pipe", False), ("sync", True), ("pipe", True)],
                                              [("pipe", False), ("sync", True)]))
def test_concurrent_writers_around_the_start_of_the_load(pg_cluster, pg_db, tmp_path, mode, create):
    setup = Setup(pg_cluster, pg_db, tmp_path, f"slot_hammer_{mode}_{int(create)}", create=create,
                  chunk_rows=500)
    make_accounts(setup.dsn, "acct", 3000)
    if not create:
        setup.execute(f"CREATE PUBLICATION {setup.slot}_pub FOR TABLE acct",
                      f"SELECT pg_create_logical_replication_slot('{setup.slot}', 'pgoutput')")
    setup.discover({"acct": "cdc"})
    with _Hammer(setup.dsn, "acct", seed=len(setup.slot)):
        setup.run(mode)
    setup.run(mode)
    setup.assert_current("acct")
    setup.drop_slot()


class _InvisibleCommit(threading.Thread):
    """A transaction whose commit record is in the WAL but which nobody sees yet.

    With a synchronous standby configured that never answers, COMMIT writes its commit record and
    then waits before the transaction becomes visible. The test releases it once the full load's
    snapshot is exported, so the load misses it although its commit lies below the snapshot's WAL
    position; change capture must still apply it.
    """

    def __init__(self, dsn: str, statement: str) -> None:
        super().__init__(daemon=True)
        self.dsn, self.statement = dsn, statement
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with psycopg.connect(self.dsn, autocommit=True) as conn:
                conn.execute("SET synchronous_commit = on")
                conn.execute(self.statement)
        except BaseException as exc:  # surfaced by the test
            self.error = exc


def _wait_for(conn: psycopg.Connection, query: str, timeout: float = 60.0) -> None:
    import time

    deadline = time.monotonic() + timeout
    while not conn.execute(query).fetchone()[0]:
        assert time.monotonic() < deadline, f"timed out waiting for: {query}"
        time.sleep(0.05)


@pytest.mark.parametrize("mode", cases(MODES, ["pipe"]))
def test_commit_written_before_the_snapshot_but_not_yet_visible(pg_cluster, pg_db, tmp_path, mode):
    setup = Setup(pg_cluster, pg_db, tmp_path, f"slot_invisible_{mode}", create=False)
    make_accounts(setup.dsn, "acct", 200)
    setup.execute(f"CREATE PUBLICATION slot_invisible_{mode}_pub FOR TABLE acct",
                  f"SELECT pg_create_logical_replication_slot('{setup.slot}', 'pgoutput')")
    setup.discover({"acct": "cdc"})
    admin = psycopg.connect(setup.dsn, autocommit=True)
    admin.execute("ALTER SYSTEM SET synchronous_standby_names = 'olake_nobody'")
    admin.execute("SELECT pg_reload_conf()")
    try:
        pending = _InvisibleCommit(setup.dsn, "UPDATE acct SET balance = 999, note = 'late' WHERE id <= 5")
        pending.start()
        _wait_for(admin, "SELECT count(*) > 0 FROM pg_stat_activity WHERE wait_event = 'SyncRep'")
        release = threading.Thread(target=_release_after_snapshot, args=(setup.dsn,), daemon=True)
        release.start()
        setup.run(mode)
        release.join(timeout=60)
        pending.join(timeout=60)
        assert pending.error is None, pending.error
    finally:
        admin.execute("ALTER SYSTEM RESET synchronous_standby_names")
        admin.execute("SELECT pg_reload_conf()")
        admin.close()
    setup.run(mode)
    with psycopg.connect(setup.dsn) as conn:
        assert conn.execute("SELECT count(*) FROM acct WHERE balance = 999").fetchone()[0] == 5
    setup.assert_current("acct")
    setup.drop_slot()


def _release_after_snapshot(dsn: str) -> None:
    """Once a session holds the exported snapshot open, let the waiting commit become visible."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        _wait_for(conn, "SELECT count(*) > 0 FROM pg_stat_activity WHERE state = 'idle in transaction'")
        conn.execute("ALTER SYSTEM RESET synchronous_standby_names")
        conn.execute("SELECT pg_reload_conf()")
