"""Change capture end to end: full load stitched to pgoutput changes, under concurrent writes."""

from __future__ import annotations

import json

import psycopg

from tests.support.cdc import ConcurrentWriter, discover_catalog, make_accounts, sync_once
from tests.support.cli import write_json
from tests.support.verify import assert_table_matches, latest_versions, read_parquet


def _cdc_config(pg_cluster, db, slot, **extra):
    return pg_cluster.source_config(db, replication_slot=slot, publication=f"{slot}_pub",
                                    create_slot_and_publication=True, **extra)


def _drop_slot(pg_cluster, db, slot):
    with psycopg.connect(pg_cluster.dsn(db), autocommit=True) as conn:
        conn.execute("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = %s",
                     (slot,))


def test_concurrent_writes_during_full_load_then_cdc(pg_cluster, pg_db, tmp_path):
    dsn = pg_cluster.dsn(pg_db)
    make_accounts(dsn, "acct", 40_000)
    src = write_json(tmp_path / "src.json", _cdc_config(pg_cluster, pg_db, "slot_conc", chunk_rows=2000,
                                                         max_parallel=1))
    dst = write_json(tmp_path / "dst.json", {"type": "parquet", "path": str(tmp_path / "out")})
    catalog = discover_catalog(src, tmp_path / "cat.json", {"acct": "cdc"})
    state = tmp_path / "st.json"
    writer = ConcurrentWriter(dsn, "acct", first_new_id=1_000_000, max_id=40_000)
    writer.start()
    try:
        sync_once(src, tmp_path / "cat.json", dst, state)
    finally:
        writer.stop()
    assert writer.transactions > 10, "the writer must have run during the load"
    result = sync_once(src, tmp_path / "cat.json", dst, state)
    assert b"change capture:" in result.read_stderr

    final = json.loads(state.read_text())
    acct = next(s for s in final["streams"] if s["stream_name"] == "acct")
    assert acct["sync_type"] == "cdc" and not acct["stream_state"].get("chunks")
    schema = next(s for s in catalog["streams"] if s["name"] == "acct")["json_schema"]
    data = read_parquet(str(tmp_path / "out" / "public" / "acct"))
    assert set(data.column("_olake_op").to_pylist()) >= {"r", "c", "u", "d"}
    current = latest_versions(data, ["id"]).select(list(schema["properties"]))
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert_table_matches(conn, "public", "acct", schema, current)
    _drop_slot(pg_cluster, pg_db, "slot_conc")
