"""``sync --follow`` of a MongoDB collection (SecantusDB, or OLAKE_TEST_MONGO_URI's server) into Parquet:
inserts, updates, replaces and deletes made while it runs arrive; a SIGKILL at a random moment and a
restart lose and double nothing; the connection dropped under the change stream (a ``failCommand``
failpoint closing it on ``getMore`` and ``aggregate``, past the driver's own resume and retry) is
retried and the run stays up; once the writer stops, the copy equals the collection document by
document; SIGTERM ends the run within 10 s with exit 0."""

from __future__ import annotations

import subprocess
import time

from tests.support.cdc import discover_catalog
from tests.support.cli import write_json
from tests.support.follow import kill_and_restart, start_olake, stop, wait_until
from tests.support.mongo import MongoWriter, collection_rows, connect, lake_rows, seed_documents


def test_sync_follow_of_a_mongodb_collection_survives_a_kill_and_stops_on_sigterm(mongo_server, mongo_db, tmp_path):
    seed_documents(mongo_server.uri, mongo_db, "acct", 300)
    src = write_json(tmp_path / "src.json", {"type": "mongodb", "uri": mongo_server.uri, "database": mongo_db})
    dst = write_json(tmp_path / "dst.json", {"type": "parquet", "path": str(tmp_path / "lake")})
    discover_catalog(src, tmp_path / "cat.json", {"acct": "cdc"})
    args = ["sync", "--source", src, "--destination", dst, "--catalog", str(tmp_path / "cat.json"),
            "--state", str(tmp_path / "state.json"), "--follow", "--commit-interval", "1"]
    log, folder = tmp_path / "sync.log", tmp_path / "lake" / mongo_db / "acct"
    writer = MongoWriter(mongo_server.uri, mongo_db, "acct", 300, seed=13, pause=0.003)
    writer.start()
    try:
        run = start_olake(args, log, stdout=subprocess.DEVNULL)
        wait_until(lambda: "following the change log" in log.read_text(), "the change phase starts", run=run)
        run = kill_and_restart(run, args, log, seed=7)
        with connect(mongo_server.uri) as client:  # the connection drops under the stream, its resume, its retry
            client.admin.command("configureFailPoint", "failCommand", mode={"times": 3},
                                 data={"failCommands": ["getMore", "aggregate"], "closeConnection": True})
        wait_until(lambda: "trying again in" in log.read_text(), "the run notices the lost connection", run=run)
        time.sleep(2.0)
    finally:
        writer.stop()
    assert writer.ops > 100

    def lake_matches() -> bool:
        try:
            return lake_rows(folder) == collection_rows(mongo_server.uri, mongo_db, "acct")
        except (OSError, KeyError):
            return False  # no file yet

    wait_until(lake_matches, "the Parquet copy equals the collection", timeout=60, run=run)
    took = stop(run)
    text = log.read_text()
    assert run.returncode == 0 and took < 10, text[-3000:]
    assert "stopped by SIGTERM" in text.splitlines()[-1] and "Traceback" not in text, text[-3000:]
    assert "olake: following: " in text and "1 retries" in text, "a status line while running"
    assert lake_rows(folder) == collection_rows(mongo_server.uri, mongo_db, "acct")


def test_a_collection_created_while_following_is_loaded_then_followed_and_a_dropped_one_ends(
        mongo_server, mongo_db, tmp_path):
    import json

    seed_documents(mongo_server.uri, mongo_db, "acct", 200)
    seed_documents(mongo_server.uri, mongo_db, "doomed", 10)
    src = write_json(tmp_path / "src.json", {"type": "mongodb", "uri": mongo_server.uri, "database": mongo_db})
    dst = write_json(tmp_path / "dst.json", {"type": "parquet", "path": str(tmp_path / "lake")})
    catalog = discover_catalog(src, tmp_path / "cat.json", {"acct": "cdc", "doomed": "cdc"})
    (tmp_path / "cat.json").write_text(json.dumps({**catalog, "new_streams": "cdc"}))
    args = ["sync", "--source", src, "--destination", dst, "--catalog", str(tmp_path / "cat.json"),
            "--state", str(tmp_path / "state.json"), "--follow", "--commit-interval", "1", "--discovery-interval", "1"]
    log, lake = tmp_path / "sync.log", tmp_path / "lake" / mongo_db
    writers = [MongoWriter(mongo_server.uri, mongo_db, "acct", 200, seed=14, pause=0.005)]
    writers[0].start()
    try:
        run = start_olake(args, log, stdout=subprocess.DEVNULL)
        wait_until(lambda: "following the change log" in log.read_text(), "the change phase starts", run=run)
        seed_documents(mongo_server.uri, mongo_db, "fresh", 400)
        writers.append(MongoWriter(mongo_server.uri, mongo_db, "fresh", 400, seed=15, pause=0.005))
        writers[1].start()  # writes all through the new collection's load
        with connect(mongo_server.uri) as client:
            client[mongo_db].drop_collection("doomed")
        wait_until(lambda: f"{mongo_db}.fresh: new stream found" in log.read_text(), "discovery finds the collection",
                   timeout=30, run=run)
        wait_until(lambda: log.read_text().count("following the change log") >= 2, "the run follows again", run=run)
        time.sleep(2.0)
    finally:
        for writer in writers:
            writer.stop()
    assert all(writer.ops > 50 for writer in writers)

    def lake_matches() -> bool:
        try:
            return all(lake_rows(lake / coll) == collection_rows(mongo_server.uri, mongo_db, coll)
                       for coll in ("acct", "fresh"))
        except (OSError, KeyError):
            return False  # no file yet

    wait_until(lake_matches, "both Parquet copies equal their collections", timeout=60, run=run)
    took = stop(run)
    text = log.read_text()
    assert run.returncode == 0 and took < 10 and "Traceback" not in text, text[-3000:]
    assert f"{mongo_db}.doomed: no longer exists at the source; its stream ends" in text, text[-3000:]
