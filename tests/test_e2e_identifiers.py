"""Identifiers that need quoting (reserved words, quotes, mixed case, spaces, unicode) replicate
correctly in full load, incremental and change capture; names that would be hostile as paths
('../../../escape8b', 'x/../orders') stay inside the destination, in folders of their own."""

from __future__ import annotations

import json

import psycopg
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from psycopg import sql

from olake_cli.core.path_names import encode_name
from tests.support.cdc import discover_catalog, sync_once
from tests.support.cli import run_olake, write_json
from tests.support.current_view import current_view, iceberg_rows, iceberg_table
from tests.support.verify import assert_table_matches, latest_versions, read_parquet

SCHEMA = 'Odd "Schema"'
TABLES = {"select": "cdc", 'a"b': "incremental", "Mixed Case ünï": "cdc"}
COLUMNS = ['id', 'from', 'Col "Q"', 'späce col', 'updated at']


def _create(conn, table: str, first: int, count: int) -> None:
    ident = sql.Identifier(SCHEMA, table)
    cols = [sql.Identifier(c) for c in COLUMNS]
    conn.execute(sql.SQL("CREATE TABLE IF NOT EXISTS {} ({} int PRIMARY KEY, {} text, {} numeric, {} text, {} timestamptz)")
                 .format(ident, *cols))
    conn.execute(sql.SQL("INSERT INTO {} SELECT g, 'v' || g, g * 1.5, 'ü' || g, '2024-01-01'::timestamptz + g * interval '1 min' "
                         "FROM generate_series(%s::int, %s::int) g").format(ident), (first, first + count - 1))


def test_quoted_identifiers_in_every_sync_mode(pg_cluster, pg_db, tmp_path):
    dsn = pg_cluster.dsn(pg_db)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(SCHEMA)))
        for table in TABLES:
            _create(conn, table, 1, 500)
    src = write_json(tmp_path / "src.json", pg_cluster.source_config(
        pg_db, schemas=[SCHEMA], chunk_rows=100, replication_slot="odd_slot", publication='odd "pub"',
        create_slot_and_publication=True))
    disc = run_olake("discover", "--config", src)
    assert disc.returncode == 0, disc.stderr.decode()
    catalog = json.loads(disc.stdout)["catalog"]
    for stream in catalog["streams"]:
        stream["sync_mode"] = TABLES[stream["name"]]
        if stream["sync_mode"] == "incremental":
            stream["cursor_field"] = ["updated at"]
    (tmp_path / "cat.json").write_text(json.dumps(catalog))
    dst = write_json(tmp_path / "dst.json", {"type": "parquet", "path": str(tmp_path / "lake")})
    state = tmp_path / "st.json"
    sync_once(src, tmp_path / "cat.json", dst, state)
    with psycopg.connect(dsn, autocommit=True) as conn:
        for table in TABLES:
            _create(conn, table, 501, 50)
            conn.execute(sql.SQL("UPDATE {} SET {} = 'changed' WHERE {} <= 10").format(
                sql.Identifier(SCHEMA, table), sql.Identifier("from"), sql.Identifier("id")))
            conn.execute(sql.SQL("UPDATE {} SET {} = now() WHERE {} <= 10").format(
                sql.Identifier(SCHEMA, table), sql.Identifier("updated at"), sql.Identifier("id")))
            conn.execute(sql.SQL("DELETE FROM {} WHERE {} BETWEEN 20 AND 25").format(
                sql.Identifier(SCHEMA, table), sql.Identifier("id")))
    sync_once(src, tmp_path / "cat.json", dst, state)
    schemas = {s["name"]: s["json_schema"] for s in catalog["streams"]}
    with psycopg.connect(dsn) as conn:
        for table, mode in TABLES.items():
            rows = read_parquet(str(tmp_path / "lake" / SCHEMA / table))
            current = latest_versions(rows, ["id"]).select(COLUMNS)
            if mode == "incremental":  # an incremental pass sees no deletes: compare the rows that still exist
                ids = [r[0] for r in conn.execute(sql.SQL("SELECT {} FROM {}").format(
                    sql.Identifier("id"), sql.Identifier(SCHEMA, table))).fetchall()]
                current = current.filter(pc.is_in(current["id"], value_set=pa.array(ids, pa.int32())))
            assert_table_matches(conn, SCHEMA, table, schemas[table], current)


# Names that, pasted into a path, would climb out of the destination or into another stream's folder:
# (schema, table) pairs; 'a/b'.'c' and 'a'.'b/c' would share one folder, as 'x/../orders' and 'orders'.
HOSTILE = [("public", "../../../escape8b"), ("public", "x/../orders"), ("public", "orders"), ("public", ".."),
           ("a/b", "c"), ("a", "b/c")]


def _hostile_source(dsn: str) -> None:
    """One table per hostile name, each with its own contents (a shared folder would mix them)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        for number, (schema, table) in enumerate(HOSTILE):
            conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema)))
            conn.execute(sql.SQL("CREATE TABLE {} (id int PRIMARY KEY, v text)").format(sql.Identifier(schema, table)))
            conn.execute(sql.SQL("INSERT INTO {} SELECT g, %s || g FROM generate_series(1, 20) g").format(
                sql.Identifier(schema, table)), (f"table {number}: ",))


def _hostile_changes(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        for schema, table in HOSTILE:
            ident = sql.Identifier(schema, table)
            conn.execute(sql.SQL("UPDATE {} SET v = v || ' changed' WHERE id <= 5").format(ident))
            conn.execute(sql.SQL("DELETE FROM {} WHERE id BETWEEN 6 AND 8").format(ident))
            conn.execute(sql.SQL("INSERT INTO {} VALUES (100, 'new')").format(ident))


def _sync_command(src: str, catalog, dst: str, state) -> None:
    result = run_olake("sync", "--source", src, "--destination", dst, "--catalog", str(catalog), "--state", str(state))
    assert result.returncode == 0, result.stderr.decode()[-3000:]


def _outside(top, lake) -> set[str]:
    """Every path under ``top`` except the destination folder ``lake`` and what it holds."""
    return {str(p) for p in top.rglob("*") if p != lake and lake not in p.parents}


@pytest.mark.parametrize("destination", ["parquet", "iceberg"])
def test_hostile_names_stay_inside_the_destination(pg_cluster, pg_db, tmp_path, destination):
    """Tables named '../../../escape8b' or 'x/../orders' get a folder (Parquet) or a table location
    (Iceberg) of their own inside the destination; the first run creates them with one command, the
    second brings the changes with the other."""
    dsn, lake = pg_cluster.dsn(pg_db), tmp_path / "lake"
    _hostile_source(dsn)
    src = write_json(tmp_path / "src.json", pg_cluster.source_config(
        pg_db, schemas=["public", "a/b", "a"], replication_slot=f"hostile_slot_{destination}",
        publication="hostile_pub", create_slot_and_publication=True, max_parallel=1))
    dst = write_json(tmp_path / "dst.json", {"type": destination, "path": str(lake)})
    catalog = discover_catalog(src, tmp_path / "cat.json", {t: "cdc" for _, t in HOSTILE})
    assert sorted((s["namespace"], s["name"]) for s in catalog["streams"]) == sorted(HOSTILE)
    outside = _outside(tmp_path.parent, lake)
    state = tmp_path / "st.json"
    runs = [lambda: _sync_command(src, tmp_path / "cat.json", dst, state),
            lambda: sync_once(src, tmp_path / "cat.json", dst, state)]
    first, second = runs if destination == "iceberg" else runs[::-1]
    first()
    _hostile_changes(dsn)
    second()
    beside_state = {str(state), f"{state}.read.lock", f"{state}.write.lock"}  # the state and its run locks
    assert _outside(tmp_path.parent, lake) == outside | beside_state, \
        "nothing may be written outside the destination's folder"
    schemas = {(s["namespace"], s["name"]): s["json_schema"] for s in catalog["streams"]}
    locations = set()
    with psycopg.connect(dsn) as conn:
        for schema, table in HOSTILE:
            if destination == "parquet":
                folder = lake / encode_name(schema) / encode_name(table)
                current = current_view(str(folder), ["id", "v"], ["id"])
                locations.add(folder.resolve())
            else:
                iceberg = iceberg_table(lake, schema, table)
                location = iceberg.location().removeprefix("file://")
                assert location.startswith(f"{lake}/warehouse/"), location
                files = [t.file.file_path for t in iceberg.scan().plan_files()]
                assert files and all(f.removeprefix("file://").startswith(location + "/") for f in files)
                current = iceberg_rows(lake, schema, table).select(["id", "v"])
                locations.add(location)
            assert_table_matches(conn, schema, table, schemas[(schema, table)], current)
    assert len(locations) == len(HOSTILE), "every table has a folder of its own"
    if destination == "iceberg":
        assert f"{lake}/warehouse/public/%2E.%2F..%2F..%2Fescape8b" in locations
        assert f"{lake}/warehouse/public/x%2F..%2Forders" in locations
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT pg_drop_replication_slot(%s)", (f"hostile_slot_{destination}",))
