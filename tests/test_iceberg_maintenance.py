"""Iceberg compaction and snapshot expiry under a following run: ``sync --follow`` from PostgreSQL into Iceberg
with a short commit interval (many small commits) while a writer changes the table, for about a minute
(``OLAKE_ICEBERG_FOLLOW_S``), long enough for the change files to be compacted several times and old
snapshots to be expired (docs/destinations/iceberg.md: after more than 32 delete files or 64 manifests
one extra commit compacts; snapshots beyond the newest N are expired once there are more than 2N, N
being the table's ``history.expire.min-snapshots-to-keep``, here 20, or 100).

A user tagged the loaded snapshot before the run (as a reader keeps a snapshot it uses): it is never
expired. Then: every snapshot the table's metadata still lists is readable, each holds every key once, and a
compaction's snapshot holds exactly the rows of the snapshot before it (compaction changes files, not
contents); a reader that loaded the table early still reads its snapshot in full after that snapshot
was expired (no file is deleted under it); the live data files, delete files and manifests, the
snapshots and the metadata log stay within their bounds; and the table equals the source value by value.
"""

from __future__ import annotations

import os
import subprocess
import time

import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog

from olake_cli.core.errors import DestinationError
from olake_cli.destinations.iceberg import maintenance
from olake_cli.destinations.iceberg.maintenance import KEEP_SNAPSHOTS, snapshots_kept
from olake_cli.destinations.iceberg.snapshot import live_files
from tests.support.cdc import discover_catalog
from tests.support.cli import run_olake, write_json
from tests.support.current_view import iceberg_table
from tests.support.follow import Incrementer, create_counted_table, start_olake, stop, wait_until
from tests.support.pg_compare import table_texts

FOLLOW_S = float(os.environ.get("OLAKE_ICEBERG_FOLLOW_S", "50"))
KEEP_PROPERTY, KEEP = "history.expire.min-snapshots-to-keep", 20  # the newest snapshots expiry keeps
COLUMNS = ["id", "v", "note"]


def _rows(table, snapshot_id: int | None = None) -> list[tuple]:
    """The live rows of a snapshot (the current one by default) as PostgreSQL's text, sorted."""
    rows = table.scan(snapshot_id=snapshot_id, selected_fields=tuple(COLUMNS)).to_arrow().to_pydict()
    return sorted((str(i), str(v), n) for i, v, n in zip(rows["id"], rows["v"], rows["note"]))


def _equals_source(root, dsn: str) -> bool:
    try:
        return _rows(iceberg_table(root, "public", "t")) == table_texts(dsn, "public", "t", COLUMNS)
    except Exception:
        return False  # no table yet


def _compactions(table) -> list:
    """The snapshots a compaction made (no ``olake.state`` in its summary: not a change commit)."""
    return [s for s in table.metadata.snapshots if s.parent_snapshot_id is not None
            and "olake.state" not in (s.summary.additional_properties if s.summary else {})]


def test_a_long_follow_into_iceberg_compacts_and_expires_and_every_kept_snapshot_reads(pg_cluster, pg_db, tmp_path):
    source = pg_cluster.dsn(pg_db)
    create_counted_table(source)
    src = write_json(tmp_path / "src.json", pg_cluster.source_config(
        pg_db, replication_slot=f"imaint_{pg_db}", publication=f"imaint_{pg_db}_pub", create_slot_and_publication=True))
    root = tmp_path / "ice"
    dst = write_json(tmp_path / "dst.json", {"type": "iceberg", "path": str(root)})
    discover_catalog(src, tmp_path / "cat.json", {"t": "cdc"})
    log = tmp_path / "sync.log"
    sync = ["sync", "--source", src, "--destination", dst, "--catalog", str(tmp_path / "cat.json"),
            "--state", str(tmp_path / "state.json")]
    assert run_olake(*sync).returncode == 0  # the load; then, as a user would: this table's retention, a tag
    loaded = iceberg_table(root, "public", "t")
    loaded.transaction().set_properties({KEEP_PROPERTY: str(KEEP)}).commit_transaction()
    tagged, tagged_rows = loaded.current_snapshot().snapshot_id, _rows(loaded)
    loaded.manage_snapshots().create_tag(tagged, "loaded").commit()
    run = start_olake(sync + ["--follow", "--commit-interval", "0.05"], log, stdout=subprocess.DEVNULL)
    writer = Incrementer(source, seed=41, pause=0.002)
    try:
        wait_until(lambda: "following the change log" in log.read_text(), "the change phase starts", run=run)
        writer.start()
        wait_until(lambda: len(iceberg_table(root, "public", "t").metadata.snapshots) >= 5, "a few commits", run=run)
        early = iceberg_table(root, "public", "t")  # a reader that loaded the table early
        early_id, early_rows = early.current_snapshot().snapshot_id, _rows(early)
        time.sleep(FOLLOW_S)
    finally:
        writer.stop()
    wait_until(lambda: _equals_source(root, source), "the Iceberg table equals the source", run=run)
    assert stop(run) < 10 and run.returncode == 0, log.read_text()[-3000:]
    text = log.read_text()
    assert "Traceback" not in text and text.count("compacted") >= 2, text[-3000:]

    table = iceberg_table(root, "public", "t")
    snapshots = table.metadata.snapshots
    print(f"iceberg maintenance: {writer.transactions} transactions, {len(table.metadata.snapshot_log)} snapshots "
          f"logged, {len(snapshots)} kept, {text.count('compacted')} compactions")
    assert early_id not in {s.snapshot_id for s in snapshots}, "expiry ran (raise OLAKE_ICEBERG_FOLLOW_S)"
    assert _rows(early, early_id) == early_rows, "a reader of an expired snapshot still reads it in full"
    assert tagged in {s.snapshot_id for s in snapshots} and _rows(table, tagged) == tagged_rows, "the tag's snapshot"
    by_id = {s.snapshot_id: s for s in snapshots}
    for snapshot in snapshots:
        rows = _rows(table, snapshot.snapshot_id)
        assert len({r[0] for r in rows}) == len(rows), f"snapshot {snapshot.snapshot_id}: a key twice"
    for snapshot in _compactions(table):
        if snapshot.parent_snapshot_id in by_id:
            assert _rows(table, snapshot.snapshot_id) == _rows(table, snapshot.parent_snapshot_id), snapshot
    data, deletes = live_files(table)
    manifests = table.current_snapshot().manifests(io=table.io)
    assert len(deletes) <= maintenance.MAX_DELETE_FILES + 1 and len(manifests) <= maintenance.MAX_MANIFESTS + 2, \
        (len(deletes), len(manifests))
    assert len(data) <= maintenance.MAX_MANIFESTS + 1, len(data)
    assert KEEP <= len(snapshots) <= 2 * KEEP + 2, len(snapshots)  # and the tag's
    assert len(table.metadata.metadata_log) <= 100, len(table.metadata.metadata_log)
    assert _rows(table) == table_texts(source, "public", "t", COLUMNS)


def test_the_retention_property_must_be_a_number_of_snapshots(tmp_path):
    catalog = SqlCatalog("t", uri=f"sqlite:///{tmp_path}/c.db", warehouse=f"file://{tmp_path}/w")
    catalog.create_namespace("ns")
    table = catalog.create_table(("ns", "t"), schema=pa.schema([("id", pa.int64())]))
    assert snapshots_kept(table) == KEEP_SNAPSHOTS
    for value, kept in (("7", 7), (" 30 ", 30), ("0", None), ("-1", None), ("ten", None), ("", None)):
        table.transaction().set_properties({KEEP_PROPERTY: value}).commit_transaction()
        table = catalog.load_table(("ns", "t"))
        if kept is not None:
            assert snapshots_kept(table) == kept, value
            continue
        with pytest.raises(DestinationError) as raised:
            snapshots_kept(table)
        assert f"property {KEEP_PROPERTY} is {value!r}; give a whole number" in str(raised.value), value
