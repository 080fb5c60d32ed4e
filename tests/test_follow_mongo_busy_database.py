"""``sync --follow`` of one MongoDB collection, changed all along by a writer, while another collection of
the same database, which the run does not follow, takes bursts of writes: the change stream (on the
database, filtered to the followed collections) then returns empty batches while it is still reading
through a burst (SecantusDB reads 400 log entries per batch), whose post-batch resume tokens lie inside
the burst, behind the followed collection's changes made meanwhile. A checkpoint at such an idle moment
must cover no change it has not read yet: every change arrives, and the Parquet copy ends equal to the
collection document by document."""

from __future__ import annotations

import subprocess

from tests.support.cdc import discover_catalog
from tests.support.cli import write_json
from tests.support.follow import start_olake, stop, wait_until
from tests.support.mongo import MongoWriter, collection_rows, connect, lake_rows, seed_documents

BURST = 20_000  # documents written to the other collection at once


def test_changes_after_a_burst_in_an_unfollowed_collection_are_not_skipped(mongo_server, mongo_db, tmp_path):
    uri = mongo_server.uri
    seed_documents(uri, mongo_db, "acct", 50)
    seed_documents(uri, mongo_db, "noise", 1)
    src = write_json(tmp_path / "src.json", {"type": "mongodb", "uri": uri, "database": mongo_db})
    dst = write_json(tmp_path / "dst.json", {"type": "parquet", "path": str(tmp_path / "lake")})
    discover_catalog(src, tmp_path / "cat.json", {"acct": "cdc"}, only={"acct"})
    log, folder = tmp_path / "sync.log", tmp_path / "lake" / mongo_db / "acct"
    run = start_olake(["sync", "--source", src, "--destination", dst, "--catalog", str(tmp_path / "cat.json"),
                       "--state", str(tmp_path / "state.json"), "--follow", "--commit-interval", "0.5"],
                      log, stdout=subprocess.DEVNULL)
    writer = MongoWriter(uri, mongo_db, "acct", 50, seed=3, pause=0.05)  # steady changes all along
    try:
        wait_until(lambda: "following the change log" in log.read_text(), "the change phase starts", run=run)
        writer.start()
        with connect(uri) as client:
            for burst in range(2):
                start = 1_000_000 * (burst + 1)
                client[mongo_db].noise.insert_many([{"_id": start + i, "pad": "x" * 20} for i in range(BURST)])
        writer.stop()
        assert writer.ops > 20, writer.ops

        def lake_matches() -> bool:
            try:
                return lake_rows(folder) == collection_rows(uri, mongo_db, "acct")
            except (OSError, KeyError):
                return False  # no file yet

        wait_until(lake_matches, "the Parquet copy equals the collection", timeout=120, run=run)
    finally:
        writer.stop()
        if run.poll() is None:
            stop(run)
    assert run.returncode == 0, log.read_text()[-3000:]
