"""Change capture meets table-level events: TRUNCATE, ADD COLUMN, and a table added to the catalog later."""

from __future__ import annotations

import json
from collections import Counter

import psycopg

from tests.support.cdc import discover_catalog, make_accounts, sync_once
from tests.support.cli import write_json
from tests.support.verify import assert_table_matches, latest_versions, read_parquet


def _source(pg_cluster, db, tmp_path, slot):
    return write_json(tmp_path / "src.json", pg_cluster.source_config(
        db, replication_slot=slot, publication=f"{slot}_pub", create_slot_and_publication=True, max_parallel=1))


def _changes(dsn: str, *statements: str) -> int:
    """Run each statement in its own transaction; returns the number of rows they changed."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        return sum(max(conn.execute(s).rowcount, 0) for s in statements)


def _schema(catalog: dict, name: str) -> dict:
    return next(s for s in catalog["streams"] if s["name"] == name)["json_schema"]


def _assert_current(dsn: str, catalog: dict, out, name: str, columns: list[str] | None = None):
    """The destination's latest version of every key equals the source (catalog columns, or ``columns``)."""
    schema = _schema(catalog, name)
    if columns is not None:
        schema = {**schema, "properties": {c: schema["properties"][c] for c in columns}}
    data = read_parquet(str(out / "public" / name))
    current = latest_versions(data, ["id"]).select(list(schema["properties"]))
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert_table_matches(conn, "public", name, schema, current)
    return data


def _drop_slot(dsn: str, slot: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))


def test_truncate_and_added_column_during_cdc(pg_cluster, pg_db, tmp_path):
    dsn, slot, out = pg_cluster.dsn(pg_db), "slot_schema", tmp_path / "out"
    make_accounts(dsn, "acct", 1500)
    make_accounts(dsn, "items", 1000)
    src = _source(pg_cluster, pg_db, tmp_path, slot)
    dst = write_json(tmp_path / "dst.json", {"type": "parquet", "path": str(out)})
    catalog = discover_catalog(src, tmp_path / "cat.json", {"acct": "cdc", "items": "cdc"})
    state = tmp_path / "st.json"
    sync_once(src, tmp_path / "cat.json", dst, state)

    after_truncate = _changes(
        dsn, "UPDATE acct SET note = 'before truncate' WHERE id <= 200",
        "INSERT INTO acct SELECT g, g, 'doomed' FROM generate_series(5001, 5100) g",
        "TRUNCATE acct",
        "INSERT INTO acct SELECT g, g / 4.0, 'after truncate ' || g FROM generate_series(9001, 9300) g",
        "UPDATE acct SET balance = -balance WHERE id BETWEEN 9001 AND 9050",
        "DELETE FROM acct WHERE id BETWEEN 9051 AND 9060") - 300
    assert after_truncate == 300 + 50 + 10
    _changes(dsn, "UPDATE items SET note = 'old shape' WHERE id <= 100",
             "ALTER TABLE items ADD COLUMN color text DEFAULT 'red'",
             "INSERT INTO items SELECT g, g, 'new shape ' || g, 'blue' FROM generate_series(2001, 2100) g",
             "UPDATE items SET balance = 7, color = 'green' WHERE id BETWEEN 50 AND 150",
             "DELETE FROM items WHERE id BETWEEN 900 AND 950")
    result = sync_once(src, tmp_path / "cat.json", dst, state)
    stderr = result.read_stderr.decode() + result.write_stderr.decode()
    assert "public.items: column(s) color are not in the catalog" in stderr, stderr[-2000:]
    assert "public.acct: truncated at the source" in stderr

    acct = _assert_current(dsn, catalog, out, "acct")
    assert acct.num_rows == after_truncate, "only the changes after the truncate remain"
    assert set(acct.column("_olake_op").to_pylist()) == {"c", "u", "d"}
    items = _assert_current(dsn, catalog, out, "items")
    assert "color" not in items.column_names

    # Re-discover: the catalog now has 'color'. Rows not changed since the column was added hold
    # its default only in the source, so the stream is loaded anew (its old files are replaced once
    # the new load completes); acct, whose columns did not change, keeps flowing from its position.
    new_catalog = discover_catalog(src, tmp_path / "cat2.json", {"acct": "cdc", "items": "cdc"})
    assert "color" in _schema(new_catalog, "items")["properties"]
    _changes(dsn, "UPDATE items SET color = 'violet', note = 'new catalog' WHERE id BETWEEN 100 AND 120",
             "INSERT INTO items SELECT g, 1, 'newest', NULL FROM generate_series(3001, 3010) g",
             "UPDATE acct SET note = 'still flowing' WHERE id BETWEEN 9001 AND 9010")
    result = sync_once(src, tmp_path / "cat2.json", dst, state)
    stderr = result.read_stderr.decode()
    assert "public.items: sync mode or columns changed since the last load; loading it anew" in stderr
    assert "public.acct: full load" not in stderr
    _assert_current(dsn, new_catalog, out, "acct")
    items = _assert_current(dsn, new_catalog, out, "items")
    assert "color" in items.column_names
    _drop_slot(dsn, slot)


def test_table_added_to_catalog_later(pg_cluster, pg_db, tmp_path):
    """Run 1: acct in cdc, 'switched' incremental on id, 'later' not selected. Run 2 selects 'later'
    and switches 'switched' to cdc: both get their own full load while acct continues from its position."""
    dsn, slot, out = pg_cluster.dsn(pg_db), "slot_added", tmp_path / "out"
    for name, rows in (("acct", 1500), ("later", 800), ("switched", 600)):
        make_accounts(dsn, name, rows)
    src = _source(pg_cluster, pg_db, tmp_path, slot)
    dst = write_json(tmp_path / "dst.json", {"type": "parquet", "path": str(out)})
    discover_catalog(src, tmp_path / "cat1.json", {"acct": "cdc", "switched": "incremental"},
                     cursor={"switched": "id"}, only={"acct", "switched"})
    state = tmp_path / "st.json"
    sync_once(src, tmp_path / "cat1.json", dst, state)
    acct_changes = _changes(dsn, "UPDATE acct SET note = 'between runs' WHERE id <= 300",
                            "DELETE FROM acct WHERE id BETWEEN 301 AND 350",
                            "INSERT INTO acct SELECT g, g, 'new' FROM generate_series(2001, 2100) g",
                            "UPDATE later SET note = 'before it was selected' WHERE id <= 100",
                            "DELETE FROM later WHERE id BETWEEN 101 AND 120",
                            "UPDATE switched SET note = 'before the switch' WHERE id <= 100") - 220
    acct_before = next(s for s in json.loads(state.read_text())["streams"] if s["stream_name"] == "acct")

    modes = {"acct": "cdc", "later": "cdc", "switched": "cdc"}
    catalog = discover_catalog(src, tmp_path / "cat2.json", modes, only=set(modes))
    result = sync_once(src, tmp_path / "cat2.json", dst, state)
    stderr = result.read_stderr.decode()
    assert "public.later: full load in" in stderr and "public.switched: full load in" in stderr, stderr[-2000:]
    assert "public.acct: full load" not in stderr and "position lost" not in stderr, stderr[-2000:]
    streams = {s["stream_name"]: s for s in json.loads(state.read_text())["streams"]}
    assert streams["acct"]["stream_state"]["load_id"] == acct_before["stream_state"]["load_id"]
    assert {s["sync_type"] for s in streams.values()} == {"cdc"}
    acct_changes += _changes(dsn, "UPDATE acct SET balance = 1 WHERE id BETWEEN 1000 AND 1100",
                             "UPDATE later SET balance = 2 WHERE id BETWEEN 500 AND 600",
                             "INSERT INTO later SELECT g, g, 'later new' FROM generate_series(901, 950) g",
                             "DELETE FROM switched WHERE id BETWEEN 1 AND 10") - 161
    sync_once(src, tmp_path / "cat2.json", dst, state)

    acct = _assert_current(dsn, catalog, out, "acct")
    op_ids = Counter(k for k, op in zip(acct.column("_olake_op_id").to_pylist(), acct.column("_olake_op").to_pylist())
                     if op != "r")  # full-load rows all carry their snapshot's position
    assert len(op_ids) == acct_changes == 300 + 50 + 100 + 101 and set(op_ids.values()) == {1}
    later = _assert_current(dsn, catalog, out, "later")
    assert later.column("_olake_op").to_pylist().count("r") == 780
    _assert_current(dsn, catalog, out, "switched")
    _drop_slot(dsn, slot)
