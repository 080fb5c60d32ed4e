"""A stream's row filter and transform (catalog ``row_filter`` / ``transform``, "module:function" over
pyarrow record batches): applied to full-load rows and changes alike, by ``read | write`` into PostgreSQL
and by ``sync`` into Parquet; rows filtered out still move the stream's position."""

from __future__ import annotations

import json

import psycopg

from tests.support.cdc import discover_catalog
from tests.support.cli import run_olake, trace_errors, write_json
from tests.support.pg_compare import table_texts
from tests.support.row_hooks import install_hooks
from tests.support.verify import latest_versions, read_parquet


def _expected(dsn: str) -> list[tuple]:
    """The source rows the hooks keep, transformed."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute("SELECT id::text, upper(note) FROM t WHERE id % 2 = 0 ORDER BY id").fetchall()
    return [tuple(r) for r in rows]


def test_filter_and_transform_apply_to_loads_and_changes_and_positions_move(pg_cluster, pg_db, pg_target,
                                                                            target_db, tmp_path):
    row_filter, transform = install_hooks(tmp_path, "olake_test_hooks")
    env = {"PYTHONPATH": str(tmp_path)}
    source = pg_cluster.dsn(pg_db)
    with psycopg.connect(source, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY, note text)")
        conn.execute("INSERT INTO t SELECT g, 'note ' || g FROM generate_series(1, 100) g")
    src = write_json(tmp_path / "src.json", pg_cluster.source_config(
        pg_db, replication_slot="slot_hooks", publication="pub_hooks", create_slot_and_publication=True))
    src_sync = write_json(tmp_path / "src_sync.json", pg_cluster.source_config(
        pg_db, replication_slot="slot_hooks_sync", publication="pub_hooks", create_slot_and_publication=True))
    catalog = tmp_path / "cat.json"
    entry = discover_catalog(src, catalog, {"t": "cdc"})
    entry["streams"][0].update(row_filter=row_filter, transform=transform)
    catalog.write_text(json.dumps(entry))
    dst = write_json(tmp_path / "dst.json", pg_target.destination_config(target_db))
    lake = tmp_path / "lake"
    dst_parquet = write_json(tmp_path / "parquet.json", {"type": "parquet", "path": str(lake)})
    state, state_sync = tmp_path / "state.json", tmp_path / "state_sync.json"
    target = pg_target.dsn(target_db)

    def both() -> None:
        lines = run_olake("read", "--config", src, "--catalog", str(catalog), "--state", str(state))
        assert lines.returncode == 0, lines.stderr.decode()[-2000:]
        written = run_olake("write", "--config", dst, "--state", str(state), stdin=lines.stdout, env=env)
        assert written.returncode == 0, written.stderr.decode()[-2000:]
        synced = run_olake("sync", "--source", src_sync, "--destination", dst_parquet, "--catalog", str(catalog),
                           "--state", str(state_sync), env=env)
        assert synced.returncode == 0, synced.stderr.decode()[-2000:]
        expected = _expected(source)
        assert table_texts(target, "public", "t", ["id", "note"]) == sorted(expected, key=lambda r: r)
        current = latest_versions(read_parquet(str(lake / "public" / "t")), ["id"])
        got = sorted((str(i), n) for i, n in zip(current.column("id").to_pylist(), current.column("note").to_pylist()))
        assert got == sorted(expected)

    both()  # full loads
    with psycopg.connect(source, autocommit=True) as conn:
        conn.execute("INSERT INTO t VALUES (101, 'odd, dropped'), (102, 'even, kept')")
        conn.execute("UPDATE t SET note = 'changed' WHERE id IN (4, 7)")
        conn.execute("DELETE FROM t WHERE id = 6")
    both()  # changes
    with psycopg.connect(source, autocommit=True) as conn:
        conn.execute("INSERT INTO t VALUES (103, 'only odd rows in this transaction')")
        after = conn.execute("SELECT (pg_current_wal_insert_lsn() - '0/0'::pg_lsn)::text").fetchone()[0]
    both()  # everything filtered out: the positions still pass the transaction
    for saved in (state, state_sync):
        position = json.loads(saved.read_text())["streams"][0]["stream_state"]["cursor_field"]
        high, low = position.split("/")
        assert (int(high, 16) << 32) + int(low, 16) >= int(after), f"{saved.name} stayed before the filtered rows"

    entry["streams"][0]["transform"] = "olake_test_hooks:missing"
    catalog.write_text(json.dumps(entry))
    lines = run_olake("read", "--config", src, "--catalog", str(catalog), "--state", str(state))
    failed = run_olake("write", "--config", dst, "--state", str(state), stdin=lines.stdout, env=env)
    assert failed.returncode != 0
    errors = [line for line in failed.stderr.decode().splitlines() if "error:" in line]
    assert len(errors) == 1 and "olake_test_hooks:missing" in errors[0] and "public.t" in errors[0], errors
    assert trace_errors(failed.stdout)
    with psycopg.connect(source, autocommit=True) as conn:
        for slot in ("slot_hooks", "slot_hooks_sync"):
            conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
