"""Every value PostgreSQL can store is carried exactly, end to end (issue 7, point 9).

BC dates, years beyond 9999, +/-infinity, the ends of PostgreSQL's timestamp range that Arrow can hold,
2-D and 3-D arrays (ints, text with NULLs and quotes, dates), through ``read | write`` and ``sync``
full loads and through change capture (pgoutput text), compared value by value with the source.
A value that cannot be carried (an instant after Arrow's last microsecond) fails the run naming the
stream, the column and the row, and acknowledges nothing. (Arrays of every shape, lower bounds other
than 1 included: tests/test_e2e_pg_arrays.py.)
"""

from __future__ import annotations

import json

import psycopg

from tests.support.cdc import discover_catalog, sync_once
from tests.support.cli import read_into_write, run_olake, trace_errors, write_json
from tests.support.verify import assert_table_matches, latest_versions, read_parquet

EDGE_DDL = """
CREATE TABLE edge (id int PRIMARY KEY, d date, ts timestamp, tz timestamptz, a_date date[],
                   a_ts timestamp[]);
CREATE TABLE grid (id int PRIMARY KEY, m_int int[][], m_text text[][][], m_date date[][]);
"""
EDGE_VALUES = """
(1, '4714-11-24 BC', '4714-11-24 00:00:00 BC', '4714-11-24 00:00:00+00 BC',
 '{4714-11-24 BC,0044-03-15 BC,NULL}', '{"0001-12-31 23:59:59.999999 BC"}'),
(2, '0044-03-15 BC', '0044-03-15 12:34:56.000001 BC', '0001-12-31 23:59:59.999999+00 BC',
 '{10000-01-01,5874897-12-31}', '{"12345-06-07 08:09:10.5",infinity}'),
(3, '10000-01-01', '294247-01-10 04:00:54.775806', '294247-01-10 04:00:54.775806+00',
 '{infinity,-infinity}', '{-infinity}'),
(4, '5874897-12-31', '12345-06-07 08:09:10.5', '2024-02-29 12:00:00+05:30', '{}', NULL),
(5, 'infinity', 'infinity', '-infinity', NULL, '{}'),
(6, '-infinity', '-infinity', 'infinity', '{0001-01-01}', '{"9999-12-31 23:59:59.999999"}'),
(7, NULL, NULL, NULL, NULL, NULL)
"""
GRID_VALUES = r"""
(1, '{{1,2},{3,NULL}}', '{{{a,"q\"uote"},{NULL,"NULL"}},{{"b,c","{x}"},{"",back\\slash}}}',
 '{{"0044-03-15 BC",infinity},{10000-01-01,NULL}}'),
(2, '{}', '{{{x}}}', '{{2024-02-29}}'),
(3, '{{-2147483648},{2147483647}}', NULL, NULL)
"""


def shift_ids(values: str, by: int) -> str:
    """The same rows with ids ``by`` higher (for inserting them again after the full load)."""
    for first in range(7, 0, -1):
        values = values.replace(f"\n({first}, ", f"\n({first + by}, ")
    return values


def assert_current_matches(dsn: str, out: str, catalog: dict) -> None:
    """The current table of every stream (newest version per key) equals the source table."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        for entry in catalog["streams"]:
            schema = entry["json_schema"]
            data = read_parquet(f"{out}/public/{entry['name']}")
            current = latest_versions(data, ["id"]).select(list(schema["properties"]))
            assert_table_matches(conn, "public", entry["name"], schema, current)


def test_edge_values_round_trip_through_read_write_sync_and_change_capture(pg_cluster, pg_db, tmp_path):
    dsn = pg_cluster.dsn(pg_db)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(EDGE_DDL)
        conn.execute(f"INSERT INTO edge VALUES {EDGE_VALUES}")
        conn.execute(f"INSERT INTO grid VALUES {GRID_VALUES}")
    src = write_json(tmp_path / "src.json", pg_cluster.source_config(
        pg_db, replication_slot="edge_slot", publication="edge_pub", create_slot_and_publication=True))
    catalog_path = tmp_path / "cat.json"
    catalog = discover_catalog(src, catalog_path, {"edge": "cdc"}, only={"edge", "grid"})
    grid = next(s for s in catalog["streams"] if s["name"] == "grid")
    assert grid["json_schema"]["properties"]["m_text"]["x-olake-type"] == "array<array<array<string>>>"

    piped = write_json(tmp_path / "dst.json", {"type": "parquet", "path": str(tmp_path / "piped")})
    sync_once(src, catalog_path, piped, tmp_path / "piped.json")  # full load: read | write
    assert_current_matches(dsn, str(tmp_path / "piped"), catalog)

    synced = write_json(tmp_path / "dst2.json", {"type": "parquet", "path": str(tmp_path / "synced")})
    sync_src = write_json(tmp_path / "src2.json", pg_cluster.source_config(
        pg_db, replication_slot="edge_slot2", publication="edge_pub", create_slot_and_publication=True))
    sync_args = ["sync", "--source", sync_src, "--destination", synced, "--catalog", str(catalog_path),
                 "--state", str(tmp_path / "synced.json")]
    first = run_olake(*sync_args)  # full load: the Spark tasks convert and write (to_destination)
    assert first.returncode == 0, first.stderr.decode()[-3000:]
    assert_current_matches(dsn, str(tmp_path / "synced"), catalog)

    with psycopg.connect(dsn, autocommit=True) as conn:  # the same values again, as changes
        conn.execute(f"INSERT INTO edge VALUES {shift_ids(EDGE_VALUES, 100)}")
        conn.execute("UPDATE edge SET d = '0001-01-01 BC', ts = '4713-01-01 00:00:00 BC' WHERE id = 7")
        conn.execute("DELETE FROM edge WHERE id = 6")
    sync_once(src, catalog_path, piped, tmp_path / "piped.json")
    assert_current_matches(dsn, str(tmp_path / "piped"), catalog)
    second = run_olake(*sync_args)
    assert second.returncode == 0, second.stderr.decode()[-3000:]
    assert b"change capture: 9 change(s)" in second.stderr
    assert_current_matches(dsn, str(tmp_path / "synced"), catalog)
    with psycopg.connect(dsn, autocommit=True) as conn:
        for slot in ("edge_slot", "edge_slot2"):
            conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))


def test_values_that_cannot_be_carried_fail_naming_stream_column_and_row(pg_cluster, pg_db, tmp_path):
    dsn = pg_cluster.dsn(pg_db)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE late (id int PRIMARY KEY, ts timestamp)")
        conn.execute("INSERT INTO late VALUES (1, '2000-01-01'), (42, '294276-12-31 23:59:59.999999')")
    src = write_json(tmp_path / "src.json", pg_cluster.source_config(pg_db))
    dst = write_json(tmp_path / "dst.json", {"type": "parquet", "path": str(tmp_path / "out")})
    state = tmp_path / "state.json"
    catalog_path = tmp_path / "late.json"
    discover_catalog(src, catalog_path, {}, only={"late"})
    result = read_into_write(["--config", src, "--catalog", str(catalog_path), "--state", str(state)],
                             ["--config", dst, "--state", str(state)])
    stderr = result.read_stderr + result.write_stderr
    assert result.write_code != 0, stderr.decode()[-2000:]
    assert b"column 'ts', row with key id=42" in stderr, stderr.decode()[-2000:]
    assert b"late" in stderr
    assert trace_errors(result.write_stdout), "a TRACE error on stdout"
    saved = json.loads(state.read_text())["streams"] if state.exists() else []
    chunks = [c for s in saved for c in s["stream_state"].get("chunks", [])]
    assert all(s["sync_type"] == "full-load" for s in saved), "nothing acknowledged"
    assert all(c["status"] != "succeed" for c in chunks), "nothing acknowledged"
