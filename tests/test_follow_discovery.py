"""Discovery while following: with ``new_streams: "cdc"``, a table created while ``sync --follow`` runs is
found within a discovery interval, loaded as Spark tasks beside the change capture of the others (a writer
hammers it during its load, so the load is stitched to the change log; the other table's changes go on
committing meanwhile; SIGTERM in the middle of the load ends the run in seconds, and the next run resumes
the load, again beside) and then followed, while a writer on another table never stops; a dropped
table's stream ends with a line saying so. Both tables then equal the source value by value."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import threading
import time

import psycopg
import pytest

from tests.support.cdc import discover_catalog
from tests.support.cli import write_json
from tests.support.follow import Incrementer, create_counted_table, start_olake, stop, wait_until
from tests.support.pg_compare import table_texts

COLUMNS = ["id", "v", "note"]


def _same(source: str, target: str, table: str) -> bool:
    try:
        return table_texts(target, "public", table, COLUMNS) == table_texts(source, "public", table, COLUMNS)
    except psycopg.Error:
        return False  # not created yet


def _lsn(text: str) -> int:
    high, low = text.split("/")
    return (int(high, 16) << 32) + int(low, 16)


def _committed_while_loading(stdout: str, loading: str, flowing: str) -> bool:
    """Whether the STATEs the destination committed show ``flowing``'s position moving on while
    ``loading``'s load still had chunks to do: the changes flowed during the load."""
    latest: dict[str, dict] = {}
    at_load_start = None
    for line in stdout.splitlines():
        message = json.loads(line)
        for ss in message.get("state", {}).get("streams", []) if message.get("type") == "STATE" else []:
            latest[ss["stream_name"]] = {"sync_type": ss["sync_type"], **ss["stream_state"]}
        new, old = latest.get(loading), latest.get(flowing)
        if not (new and old and new["sync_type"] == "full-load" and any(c["status"] != "succeed" for c in new["chunks"])):
            at_load_start = None
        elif at_load_start is None:
            at_load_start = _lsn(old["cursor_field"])
        elif _lsn(old["cursor_field"]) > at_load_start:
            return True
    return False


def test_a_table_created_while_following_is_loaded_then_followed_and_a_dropped_one_ends(
        pg_cluster, pg_db, pg_target, target_db, tmp_path):
    source, target = pg_cluster.dsn(pg_db), pg_target.dsn(target_db)
    with psycopg.connect(source, autocommit=True) as conn:
        for table, rows in (("t", 400), ("doomed", 20)):
            conn.execute(f"CREATE TABLE {table} (id int PRIMARY KEY, v bigint NOT NULL, note text)")
            conn.execute(f"INSERT INTO {table} SELECT g, 0, 'row ' || g FROM generate_series(1, {rows}) g")
    src = write_json(tmp_path / "src.json", pg_cluster.source_config(
        pg_db, replication_slot=f"disc_{pg_db}", publication=f"disc_{pg_db}_pub", create_slot_and_publication=True,
        in_process_rows=0, chunk_rows=1000, max_parallel=1))  # the new table's load: 20 Spark tasks in turn
    dst = write_json(tmp_path / "dst.json", pg_target.destination_config(target_db))
    catalog = discover_catalog(src, tmp_path / "cat.json", {"t": "cdc", "doomed": "cdc"})
    (tmp_path / "cat.json").write_text(json.dumps({**catalog, "new_streams": "cdc"}))
    args = ["sync", "--source", src, "--destination", dst, "--catalog", str(tmp_path / "cat.json"),
            "--state", str(tmp_path / "state.json"), "--follow", "--commit-interval", "0.5",
            "--discovery-interval", "1"]
    log = tmp_path / "sync.log"
    steady = Incrementer(source, seed=21, table="t", rows=400)
    steady.start()
    newcomer = None
    try:
        run = start_olake(args, log, stdout=open(tmp_path / "sync.out", "wb"))
        wait_until(lambda: "following the change log" in log.read_text(), "the change phase starts", run=run)
        wait_until(lambda: _same(source, target, "doomed"), "the doomed table is copied", run=run)
        with psycopg.connect(source, autocommit=True) as conn:
            conn.execute("CREATE TABLE fresh (id int PRIMARY KEY, v bigint NOT NULL, note text)")
            conn.execute("INSERT INTO fresh SELECT g, 0, 'row ' || g FROM generate_series(1, 20000) g")
            conn.execute("DROP TABLE doomed")
        newcomer = Incrementer(source, seed=22, table="fresh", rows=20000, pause=0.002)
        newcomer.start()  # writes all through the new table's load
        wait_until(lambda: "public.fresh: new stream found" in log.read_text(), "discovery finds the table",
                   timeout=30, run=run)
        wait_until(lambda: "public.fresh: chunk 5/" in log.read_text(), "the new table's load is under way", run=run)
        took = stop(run)
        assert run.returncode == 0 and took < 10, log.read_text()[-3000:]
        assert "joined after loading beside" not in log.read_text()  # (the load was stopped in its middle)
        run = start_olake(args, log, stdout=open(tmp_path / "resumed.out", "wb"))
        wait_until(lambda: "joined after loading beside the others" in log.read_text(), "the new table joins",
                   run=run)
        time.sleep(2.0)
        assert run.poll() is None, log.read_text()[-3000:]
    finally:
        for writer in (steady, newcomer):
            if writer is not None:
                writer.stop()
    assert steady.transactions > 50 and newcomer.transactions > 50
    wait_until(lambda: _same(source, target, "t") and _same(source, target, "fresh"),
               "both tables equal the source", run=run)
    took = stop(run)
    text = log.read_text()
    assert run.returncode == 0 and took < 10, text[-3000:]
    assert "public.doomed: no longer exists at the source; its stream ends" in text, text[-3000:]
    assert "Traceback" not in text
    assert table_texts(target, "public", "doomed", COLUMNS)  # the destination keeps what it held
    assert "public.fresh: resuming full load" in text, text[-3000:]
    assert _committed_while_loading((tmp_path / "resumed.out").read_text(), "fresh", "t"), text[-3000:]


def test_read_follow_into_write_takes_a_new_stream_in_the_readers_next_catalog(pg_cluster, pg_db, tmp_path):
    """``write`` without ``--catalog`` follows the reader's catalog: the reader's run that starts again with a
    new stream sends a catalog naming it, and the writer adds the stream (Parquet here)."""
    from tests.support.verify import latest_versions, read_parquet

    source = pg_cluster.dsn(pg_db)
    with psycopg.connect(source, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY, v bigint NOT NULL, note text)")
        conn.execute("INSERT INTO t SELECT g, 0, 'row ' || g FROM generate_series(1, 200) g")
    src = write_json(tmp_path / "src.json", pg_cluster.source_config(
        pg_db, replication_slot=f"discp_{pg_db}", publication=f"discp_{pg_db}_pub", create_slot_and_publication=True))
    dst = write_json(tmp_path / "dst.json", {"type": "parquet", "path": str(tmp_path / "lake")})
    catalog = discover_catalog(src, tmp_path / "cat.json", {"t": "cdc"})
    (tmp_path / "cat.json").write_text(json.dumps({**catalog, "new_streams": "cdc"}))
    state, log = tmp_path / "state.json", tmp_path / "pipe.log"
    reader = start_olake(["read", "--config", src, "--catalog", str(tmp_path / "cat.json"), "--state", str(state),
                          "--follow", "--commit-interval", "1", "--discovery-interval", "1"], log,
                         stdout=subprocess.PIPE)
    writer = start_olake(["write", "--config", dst, "--state", str(state)], log, stdin=reader.stdout,
                         stdout=subprocess.DEVNULL)
    reader.stdout.close()
    wait_until(lambda: "following the change log" in log.read_text(), "the change phase starts", run=reader)
    with psycopg.connect(source, autocommit=True) as conn:
        conn.execute("CREATE TABLE fresh (id int PRIMARY KEY, v bigint NOT NULL, note text)")
        conn.execute("INSERT INTO fresh SELECT g, 0, 'row ' || g FROM generate_series(1, 500) g")
    newcomer = Incrementer(source, seed=23, table="fresh", rows=500, pause=0.005)
    newcomer.start()
    try:
        wait_until(lambda: log.read_text().count("following the change log") >= 2, "the reader follows again",
                   run=writer)
        time.sleep(2.0)
    finally:
        newcomer.stop()

    def lake_matches() -> bool:
        try:
            rows = latest_versions(read_parquet(str(tmp_path / "lake" / "public" / "fresh")), ["id"])
        except Exception:
            return False
        lake = sorted((str(i), str(v), n) for i, v, n in zip(rows["id"].to_pylist(), rows["v"].to_pylist(),
                                                               rows["note"].to_pylist()))
        return lake == table_texts(source, "public", "fresh", COLUMNS)

    wait_until(lake_matches, "the new table's Parquet files equal the source", run=writer)
    took = stop(reader)
    writer.wait(timeout=60)
    text = log.read_text()
    assert reader.returncode == 0 and writer.returncode == 0 and took < 10, text[-3000:]
    assert "Traceback" not in text


def _start_following(mode: str, src: str, dst: str, catalog: str, state: str, log, out) -> list[subprocess.Popen]:
    """``sync --follow`` (one process) or ``read --follow | write`` (reader first) with live discovery."""
    follow = ["--follow", "--commit-interval", "0.5", "--discovery-interval", "1"]
    if mode == "sync":
        return [start_olake(["sync", "--source", src, "--destination", dst, "--catalog", catalog, "--state", state,
                             *follow], log, stdout=out)]
    reader = start_olake(["read", "--config", src, "--catalog", catalog, "--state", state, *follow], log,
                         stdout=subprocess.PIPE)
    writer = start_olake(["write", "--config", dst, "--state", state], log, stdin=reader.stdout, stdout=out)
    reader.stdout.close()
    return [reader, writer]


@pytest.mark.parametrize("mode", ["sync", "pipe"])
def test_a_transaction_writing_a_found_table_before_it_joined_lands_whole(
        pg_cluster, pg_db, pg_target, target_db, tmp_path, mode):
    """A transaction that inserts into and updates a new table before discovery adds the table to the
    publication, and commits only after: PostgreSQL never publishes its earlier changes, so the load
    waits for it to end (saying so) and its snapshot holds them; the later changes of every table flow."""
    source, target = pg_cluster.dsn(pg_db), pg_target.dsn(target_db)
    with psycopg.connect(source, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY, v bigint NOT NULL, note text)")
        conn.execute("INSERT INTO t SELECT g, 0, 'row ' || g FROM generate_series(1, 50) g")
    slot = f"inflight_{mode}_{pg_db}"
    src = write_json(tmp_path / "src.json", pg_cluster.source_config(
        pg_db, replication_slot=slot, publication=f"{slot}_pub", create_slot_and_publication=True))
    dst = write_json(tmp_path / "dst.json", pg_target.destination_config(target_db))
    catalog = discover_catalog(src, tmp_path / "cat.json", {"t": "cdc"})
    (tmp_path / "cat.json").write_text(json.dumps({**catalog, "new_streams": "cdc"}))
    log = tmp_path / "run.log"
    runs = _start_following(mode, src, dst, str(tmp_path / "cat.json"), str(tmp_path / "state.json"), log,
                            open(tmp_path / "run.out", "wb"))
    wait_until(lambda: "following the change log" in log.read_text(), "the change phase starts", run=runs[-1])
    with psycopg.connect(source, autocommit=True) as conn:
        conn.execute("CREATE TABLE nb (id int PRIMARY KEY, v bigint NOT NULL, note text)")
        conn.execute("INSERT INTO nb SELECT g, 0, 'committed ' || g FROM generate_series(1, 500) g")
    in_flight = psycopg.connect(source)
    try:
        in_flight.execute("UPDATE nb SET v = v + 1, note = 'updated in flight'")
        in_flight.execute("INSERT INTO nb SELECT g, 7, 'inserted in flight' FROM generate_series(501, 2500) g")
        wait_until(lambda: "public.nb: new stream found" in log.read_text(), "discovery finds nb", run=runs[-1])
        wait_until(lambda: any(line in log.read_text() for line in ("joined after loading beside",
                                                                    "began before the table joined")),
                   "nb's load waits for the open transaction (or, unfixed, joins without it)", run=runs[-1])
        time.sleep(1.0)
        in_flight.commit()
    finally:
        in_flight.close()
    with psycopg.connect(source, autocommit=True) as conn:
        conn.execute("UPDATE t SET v = v + 1 WHERE id <= 10")
        conn.execute("UPDATE nb SET note = 'later' WHERE id % 100 = 0")
    wait_until(lambda: _same(source, target, "t") and _same(source, target, "nb"),
               "both tables equal the source", timeout=60, run=runs[-1])
    took = stop(runs[0])
    for run in runs[1:]:
        run.wait(timeout=60)
    text = log.read_text()
    assert all(run.returncode == 0 for run in runs) and took < 10, text[-3000:]
    assert "waiting" in text and "began before the table joined publication" in text, text[-3000:]
    assert "Traceback" not in text


def test_tables_found_with_transactions_in_flight_under_random_kills(pg_cluster, pg_db, pg_target, target_db, tmp_path):
    """The follow fault schedule with live discovery: each round creates a table, opens a transaction that
    updates and inserts into it, commits it at a seeded moment, and SIGKILLs the run at another (before,
    during or after the table's discovery, load and join), then starts it again; a writer keeps changing
    ``t`` throughout. Every table then equals the source value by value. OLAKE_FAULT_ROUNDS (default 2) and
    OLAKE_FAULT_SEED make the schedule longer or another one."""
    rng = random.Random(int(os.environ.get("OLAKE_FAULT_SEED", "18")))
    rounds = int(os.environ.get("OLAKE_FAULT_ROUNDS", "2"))
    source, target = pg_cluster.dsn(pg_db), pg_target.dsn(target_db)
    create_counted_table(source)
    src = write_json(tmp_path / "src.json", pg_cluster.source_config(
        pg_db, replication_slot=f"inkill_{pg_db}", publication=f"inkill_{pg_db}_pub", create_slot_and_publication=True))
    dst = write_json(tmp_path / "dst.json", pg_target.destination_config(target_db))
    catalog = discover_catalog(src, tmp_path / "cat.json", {"t": "cdc"})
    (tmp_path / "cat.json").write_text(json.dumps({**catalog, "new_streams": "cdc"}))
    args = ["sync", "--source", src, "--destination", dst, "--catalog", str(tmp_path / "cat.json"),
            "--state", str(tmp_path / "state.json"), "--follow", "--commit-interval", "0.5",
            "--discovery-interval", "1"]
    log = tmp_path / "sync.log"
    steady = Incrementer(source, seed=rng.randrange(1000))
    steady.start()
    try:
        run = start_olake(args, log, stdout=subprocess.DEVNULL)
        wait_until(lambda: "following the change log" in log.read_text(), "the change phase starts", run=run)
        for round_ in range(rounds):
            commit = _open_writing_transaction(source, f"nb{round_}", rng.uniform(2.5, 6.0))
            time.sleep(rng.uniform(0.5, 8.0))
            os.killpg(run.pid, signal.SIGKILL)
            run.wait(timeout=30)
            commit.join(timeout=30)
            run = start_olake(args, log, stdout=subprocess.DEVNULL)
        time.sleep(2.0)
    finally:
        steady.stop()
    tables = ["t"] + [f"nb{r}" for r in range(rounds)]
    wait_until(lambda: all(_same(source, target, table) for table in tables), "every table equals the source",
               timeout=120, run=run)
    took = stop(run)
    text = log.read_text()
    assert run.returncode == 0 and took < 10 and "Traceback" not in text, text[-3000:]


def _open_writing_transaction(dsn: str, table: str, commit_after: float) -> threading.Thread:
    """Create ``table`` with 300 committed rows, then, in an open transaction, update half of them and
    insert 1,000 more; a thread commits it ``commit_after`` seconds later (join it)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {table} (id int PRIMARY KEY, v bigint NOT NULL, note text)")
        conn.execute(f"INSERT INTO {table} SELECT g, 0, 'row ' || g FROM generate_series(1, 300) g")
    txn = psycopg.connect(dsn)
    txn.execute(f"UPDATE {table} SET v = v + 1, note = 'in flight' WHERE id % 2 = 0")
    txn.execute(f"INSERT INTO {table} SELECT g, 5, 'in flight' FROM generate_series(301, 1300) g")

    def commit() -> None:
        time.sleep(commit_after)
        txn.commit()
        txn.close()

    thread = threading.Thread(target=commit, daemon=True)
    thread.start()
    return thread
