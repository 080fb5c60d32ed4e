"""``sync --follow`` into Iceberg: a writer changes the source all along, the run is SIGKILLed at a seeded
moment and started again; once the writer stops and the run catches up, the table's live rows equal the
source value by value (nothing lost, nothing doubled: a doubled key would make the lists differ), and
SIGTERM ends the run within 10 s with exit 0. (The compaction of many commits' change files is
tests/test_iceberg_destination.py's.)"""

from __future__ import annotations

import subprocess
import time

from tests.support.cdc import discover_catalog
from tests.support.cli import write_json
from tests.support.follow import (Incrementer, create_counted_table, iceberg_equals_source, kill_and_restart,
                                  start_olake, stop, wait_until)


def test_sync_follow_into_iceberg_survives_a_kill_and_stops_on_sigterm(pg_cluster, pg_db, tmp_path):
    source = pg_cluster.dsn(pg_db)
    create_counted_table(source)
    src = write_json(tmp_path / "src.json", pg_cluster.source_config(
        pg_db, replication_slot=f"fice_{pg_db}", publication=f"fice_{pg_db}_pub", create_slot_and_publication=True))
    root = tmp_path / "ice"
    dst = write_json(tmp_path / "dst.json", {"type": "iceberg", "path": str(root)})
    discover_catalog(src, tmp_path / "cat.json", {"t": "cdc"})
    args = ["sync", "--source", src, "--destination", dst, "--catalog", str(tmp_path / "cat.json"),
            "--state", str(tmp_path / "state.json"), "--follow", "--commit-interval", "0.5"]
    log = tmp_path / "sync.log"
    writer = Incrementer(source, seed=31)
    writer.start()
    try:
        run = start_olake(args, log, stdout=subprocess.DEVNULL)
        wait_until(lambda: "following the change log" in log.read_text(), "the change phase starts", run=run)
        run = kill_and_restart(run, args, log, seed=7)
        time.sleep(3.0)
        assert run.poll() is None, log.read_text()[-3000:]
    finally:
        writer.stop()
    assert writer.transactions > 50
    wait_until(lambda: iceberg_equals_source(root, source), "the Iceberg table equals the source", run=run)
    took = stop(run)
    text = log.read_text()
    assert run.returncode == 0 and took < 10, text[-3000:]
    assert "stopped by SIGTERM" in text.splitlines()[-1] and "Traceback" not in text, text[-3000:]
    assert iceberg_equals_source(root, source)
