"""``sync --follow`` from MongoDB and from DynamoDB under SIGKILLs at random moments, with writers changing
the source all along (the counterpart of tests/test_follow.py's PostgreSQL schedule).

MongoDB (SecantusDB, or OLAKE_TEST_MONGO_URI's server) goes into Parquet, DynamoDB (moto's server, tables
found by their tags) into PostgreSQL. Each run follows with live discovery (``--discovery-interval 1``,
``new_streams: "cdc"``). The schedule: the follower is SIGKILLed at a seeded random moment and started
again; then a new collection (a new tagged table) is created with a writer changing it from its first
document on, so writes are in flight when discovery finds it; a kill is aimed at its load (0-0.5 s
after its first chunk, so the next run mostly resumes the load); then the remaining kills at random
moments. Once the writers stop and the run catches up (a last change written to each source after its
writers stopped shows it), every stream's destination equals its source value by value (MongoDB: every
document's fields; DynamoDB: every attribute of every item, no key twice), so a write lost or applied
out of order shows; SIGTERM then ends the run with exit 0.

    OLAKE_FAULT_ROUNDS=12 OLAKE_FAULT_SEED=7 bash scripts/test.sh tests/test_follow_faults_mongo_dynamo.py -s

``OLAKE_FAULT_ROUNDS`` (default 3) is the number of kills per source; the seed is printed so that a
failure can be replayed.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import psycopg

from tests.support.cdc import discover_catalog
from tests.support.cli import write_json
from tests.support.dynamo import ItemWriter, create_table, discovered_catalog, put_items
from tests.support.follow import kill_and_restart, start_olake, stop, wait_until
from tests.support.mongo import MongoWriter, collection_rows, connect, lake_rows, seed_documents
from tests.test_e2e_dynamodb_postgres import assert_target_equals_table

ROUNDS = max(2, int(os.environ.get("OLAKE_FAULT_ROUNDS", "3")))
SEED = int(os.environ.get("OLAKE_FAULT_SEED", str(random.randrange(1 << 20))))
NEW_ROWS = 600  # of the stream created while following: its load takes several chunks, so a kill may land in it


def _writes_under_kills(args: list[str], log: Path, state: Path, writers: list, create, min_ops: int,
                        first_writer_late: bool = False) -> subprocess.Popen:
    """Start the follow run (and then the first writer, if ``first_writer_late``), run the kill schedule
    (``create`` adds the second stream and its writer), stop the writers, which must each have written more
    than ``min_ops`` times, and wait until every load is done; returns the run."""
    try:
        run = start_olake(args, log, stdout=subprocess.DEVNULL)
        wait_until(lambda: "following the change log" in log.read_text(), "the change phase starts", run=run)
        if first_writer_late:
            writers[0].start()
        run = _kill_schedule(run, args, log, create)
        time.sleep(1.0)
    finally:
        for writer in writers:
            writer.stop()
    assert len(writers) == 2 and all(writer.ops > min_ops for writer in writers), [w.ops for w in writers]
    _wait_for_loads(run, state, log)
    return run


def _kill_schedule(run: subprocess.Popen, args: list[str], log: Path, create_new: Callable[[], str]
                   ) -> subprocess.Popen:
    """ROUNDS kills of the following ``run`` (restarted each time); after the first, ``create_new()``
    makes a new stream (returning its label) and the second kill lands 0-0.5 s after its load committed
    a first chunk (in the load, or just after it). Returns the run left following."""
    try:
        return _kills(run, args, log, create_new)
    except AssertionError as exc:  # the run's own words say why
        raise AssertionError(f"{exc} (seed {SEED}); the run's log ends:\n{log.read_text()[-4000:]}") from None


def _kills(run: subprocess.Popen, args: list[str], log: Path, create_new: Callable[[], str]) -> subprocess.Popen:
    rng = random.Random(SEED)
    print(f"follow fault schedule: seed {SEED}, {ROUNDS} kills")
    run = kill_and_restart(run, args, log, seed=rng.randrange(1 << 30), low=1.0, high=4.0)
    label = create_new()
    wait_until(lambda: f"{label}: new stream found" in log.read_text(), "discovery finds the new stream", timeout=60,
               run=run)
    wait_until(lambda: f"{label}: chunk " in log.read_text(), "the new stream's load commits a chunk", run=run)
    run = kill_and_restart(run, args, log, seed=rng.randrange(1 << 30), low=0.0, high=0.5)
    for _ in range(ROUNDS - 2):
        run = kill_and_restart(run, args, log, seed=rng.randrange(1 << 30), low=0.5, high=4.0)
    return run


def _wait_for_loads(run: subprocess.Popen, state: Path, log: Path) -> None:
    """Wait until the state file shows both streams' loads done (both in change capture)."""
    def loaded() -> bool:
        try:
            streams = json.loads(state.read_text())["streams"]
        except (OSError, ValueError, KeyError):
            return False  # being replaced
        return len(streams) == 2 and all(s["sync_type"] == "cdc" for s in streams)

    try:
        wait_until(loaded, "both streams' loads are done", timeout=120, run=run)
    except AssertionError as exc:  # the run's own words say why
        raise AssertionError(f"{exc} (seed {SEED}); the run's log ends:\n{log.read_text()[-4000:]}") from None


def _converge_and_stop(run: subprocess.Popen, log: Path, equal: Callable[[], bool], what: str) -> None:
    """Wait until ``equal()``; SIGTERM ends the run with exit 0 and one line; ``equal()`` still holds.

    Each source got one last change once its writers stopped and every load was done, so ``equal()``
    holds only once the run has committed the log up to it: before that, a stream loaded while following
    may match its source for a while and then step back, as the run commits a part of the changes made
    during its load (replayed after it; the copy converges once the replay has passed the load)."""
    try:
        wait_until(equal, what, timeout=120, run=run)
    except AssertionError as exc:  # the run's own words say why
        raise AssertionError(f"{exc} (seed {SEED}); the run's log ends:\n{log.read_text()[-4000:]}") from None
    stop(run)
    text = log.read_text()
    assert run.returncode == 0 and "stopped by SIGTERM" in text.splitlines()[-1], text[-3000:]
    assert "Traceback" not in text, text[-3000:]
    assert equal(), what


def test_mongodb_follow_under_kills_with_a_collection_created_while_following(mongo_server, mongo_db, tmp_path):
    uri = mongo_server.uri
    seed_documents(uri, mongo_db, "acct", 300)
    src = write_json(tmp_path / "src.json", {"type": "mongodb", "uri": uri, "database": mongo_db,
                                             "chunk_documents": 100, "max_parallel": 1})  # loads in many steps
    dst = write_json(tmp_path / "dst.json", {"type": "parquet", "path": str(tmp_path / "lake")})
    catalog = discover_catalog(src, tmp_path / "cat.json", {"acct": "cdc"})
    (tmp_path / "cat.json").write_text(json.dumps({**catalog, "new_streams": "cdc"}))
    args = ["sync", "--source", src, "--destination", dst, "--catalog", str(tmp_path / "cat.json"),
            "--state", str(tmp_path / "state.json"), "--follow", "--commit-interval", "0.5",
            "--discovery-interval", "1"]
    log, lake = tmp_path / "sync.log", tmp_path / "lake" / mongo_db
    writers = [MongoWriter(uri, mongo_db, "acct", 300, seed=SEED, pause=0.005)]
    writers[0].start()

    def create_fresh() -> str:
        seed_documents(uri, mongo_db, "fresh", NEW_ROWS)
        writers.append(MongoWriter(uri, mongo_db, "fresh", NEW_ROWS, seed=SEED + 1, pause=0.005))
        writers[-1].start()
        return f"{mongo_db}.fresh"

    run = _writes_under_kills(args, log, tmp_path / "state.json", writers, create_fresh, min_ops=50)
    with connect(uri) as client:  # the last change of each collection (see _converge_and_stop)
        for coll in ("acct", "fresh"):
            client[mongo_db][coll].insert_one({"_id": -1, "v": 0, "note": "end"})

    def lake_matches() -> bool:
        try:
            return all(lake_rows(lake / coll) == collection_rows(uri, mongo_db, coll) for coll in ("acct", "fresh"))
        except (OSError, KeyError):
            return False  # no file yet

    _converge_and_stop(run, log, lake_matches, "both Parquet copies equal their collections")


def test_dynamodb_follow_under_kills_with_a_tagged_table_created_while_following(moto_server, dynamo_table,
                                                                                pg_target, target_db, tmp_path):
    client = moto_server.client()
    tags = {"olake-ingest": "yes", "olake-env": f"env-{dynamo_table}"}  # only this test's tables match
    first, later = f"{dynamo_table}_first", f"{dynamo_table}_later"

    def create_tagged(name: str, count: int) -> None:
        create_table(client, name, tags=tags)
        put_items(client, name, [{"pk": {"S": f"p{i % 13}"}, "sk": {"N": str(i)}, "v": {"N": f"{i}.5"},
                                  "note": {"S": f"n{i}"}} for i in range(count)])

    create_tagged(first, 100)
    src = write_json(tmp_path / "src.json", moto_server.config(segments=2, checkpoint_items=40, page_items=20,
                                                               max_parallel=1, tags={
        "ingestion_key": "olake-ingest", "environment_key": "olake-env", "environment_value": tags["olake-env"]}))
    catalog = discovered_catalog(tmp_path, src, "cdc")
    catalog.write_text(json.dumps({**json.loads(catalog.read_text()), "new_streams": "cdc"}))
    schema = json.loads(catalog.read_text())["streams"][0]["json_schema"]  # both tables: one shape
    dst = write_json(tmp_path / "dst.json", pg_target.destination_config(target_db))
    args = ["sync", "--source", src, "--destination", dst, "--catalog", str(catalog), "--state",
            str(tmp_path / "state.json"), "--follow", "--commit-interval", "0.5", "--discovery-interval", "1"]
    log = tmp_path / "sync.log"
    writers = [ItemWriter(moto_server, first, 100, seed=SEED, pause=0.02)]

    def create_later() -> str:
        create_tagged(later, NEW_ROWS)
        writers.append(ItemWriter(moto_server, later, NEW_ROWS, seed=SEED + 1, pause=0.02))
        writers[-1].start()
        return f"dynamodb.{later}"

    run = _writes_under_kills(args, log, tmp_path / "state.json", writers, create_later, min_ops=20,
                              first_writer_late=True)
    for table in (first, later):  # the last change of each table (see _converge_and_stop)
        put_items(client, table, [{"pk": {"S": "end"}, "sk": {"N": "-1"}, "v": {"N": "0.5"}, "note": {"S": "end"}}])
    target = pg_target.dsn(target_db)

    def target_matches() -> bool:
        try:
            for table in (first, later):
                assert_target_equals_table(target, moto_server, table, schema)
        except (AssertionError, psycopg.Error):
            return False  # not equal yet, or the table not created yet
        return True

    _converge_and_stop(run, log, target_matches, "both target tables equal their DynamoDB tables")
