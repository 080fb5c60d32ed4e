"""PostgreSQL arrays of every shape are carried exactly (issue 17, item 10).

PostgreSQL enforces neither an array column's declared dimensions nor its lower bounds: an ``int[]``
column holds ``{{1,2},{3,4}}``, a ``date[][]`` column one-dimensional values, a ``text[]`` column
``'[0:2]={x,NULL,"y z"}'``, and one column may mix depths. ``discover`` reads the shapes from the data:
nested lists as deep as the values where they agree, ``ndarray<T>`` (lower bounds, lengths, elements)
where they differ or start elsewhere than 1. The values go through the full load and change capture,
``read | write`` and ``sync``, into Parquet and Iceberg, and are compared value by value with the
source (as PostgreSQL's own text, dimensions included). A value whose shape no longer fits its
column stops the run before anything after it is acknowledged, and ``discover --catalog`` then gives
a catalog under which the stream loads anew exactly.
"""

from __future__ import annotations

import json
from pathlib import Path

import psycopg

from olake_cli.sources.postgres.types import fetch_columns, type_property
from tests.support.cdc import discover_catalog, sync_once
from tests.support.cli import read_into_write, run_olake, trace_errors, write_json
from tests.support.current_view import iceberg_rows, iceberg_table
from tests.support.verify import assert_table_matches, latest_versions, read_parquet

DDL = """
CREATE TABLE shapes (id int PRIMARY KEY, grid int[], pairs text[], mixed int[], based text[],
                     deep date[][], flat float8[]);
"""
VALUES = r"""
(1, '{{1,2},{3,4}}', '{{a,b},{"c d",NULL}}', '{1,2}', '[0:2]={x,NULL,"y z"}', '{2024-02-29,NULL}',
 '{1.5,NaN}'),
(2, '{{-2147483648},{2147483647}}', '{}', '{{1,NULL},{3,4}}', '{a}', '{}', '{}'),
(3, '{{NULL,NULL}}', NULL, '[-2:-1][5:5][0:1]={{{1,2}},{{3,4}}}', '[5:5][-1:0]={{p,"q\"r"}}', NULL, NULL),
(4, '{}', '{{"{x}",","}}', '{}', NULL, '{"0044-03-15 BC",infinity}', '{-0}'),
(5, NULL, '{{e,f},{g,h},{i,j}}', NULL, '{}', NULL, NULL)
"""
SHAPES = {"grid": "array<array<int32>>", "pairs": "array<array<string>>", "mixed": "ndarray<int32>",
          "based": "ndarray<string>", "deep": "array<date>", "flat": "array<float64>"}
CHANGES = [
    "INSERT INTO shapes VALUES " + VALUES.replace("\n(", "\n(10"),  # ids 101 to 105
    "UPDATE shapes SET mixed = '[0:0][0:0][0:0][0:1]={{{{7,NULL}}}}', based = '[-3:-3]={z}', "
    "grid = '{{9,8,7}}' WHERE id = 1",
    "UPDATE shapes SET mixed = '{5}', pairs = '{}' WHERE id = 3",
    "DELETE FROM shapes WHERE id = 2",
]


def _source(pg_cluster, db: str, tmp_path: Path, slot: str) -> str:
    return write_json(tmp_path / f"{slot}.json", pg_cluster.source_config(
        db, replication_slot=slot, publication="shapes_pub", create_slot_and_publication=True))


def _assert_parquet_current(dsn: str, folder: Path, schema: dict, table: str = "shapes") -> None:
    current = latest_versions(read_parquet(str(folder / "public" / table)), ["id"]).select(list(schema["properties"]))
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert_table_matches(conn, "public", table, schema, current)


def _assert_iceberg_current(dsn: str, root: Path, schema: dict, table: str = "shapes") -> None:
    rows = iceberg_rows(root, "public", table).select(list(schema["properties"]))
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert_table_matches(conn, "public", table, schema, rows)


def _sync(src: str, dst: str, catalog: Path, state: Path):
    result = run_olake("sync", "--source", src, "--destination", dst, "--catalog", str(catalog),
                       "--state", str(state))
    assert result.returncode == 0, result.stderr.decode()[-3000:]
    return result


def _drop_slots(dsn: str, *slots: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        for slot in slots:
            conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))


def test_discover_takes_array_shapes_from_the_data(pg_cluster, pg_db, tmp_path):
    dsn = pg_cluster.dsn(pg_db)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(DDL)
        conn.execute(f"INSERT INTO shapes VALUES {VALUES}")
        conn.execute("CREATE TABLE empty (id int PRIMARY KEY, one int[], two text[][], three date[][][])")
        conn.execute("CREATE VIEW shapes_view AS SELECT id, grid, mixed FROM shapes")
        conn.execute("CREATE MATERIALIZED VIEW later AS SELECT id, based FROM shapes WITH NO DATA")
    src = write_json(tmp_path / "src.json", pg_cluster.source_config(pg_db))
    catalog = discover_catalog(src, tmp_path / "cat.json", {})
    types = {s["name"]: {c: p["x-olake-type"] for c, p in s["json_schema"]["properties"].items() if c != "id"}
             for s in catalog["streams"]}
    assert types["shapes"] == SHAPES
    assert types["empty"] == {"one": "array<int32>", "two": "array<array<string>>",
                              "three": "array<array<array<date>>>"}  # no values yet: the declaration
    assert types["shapes_view"] == {"grid": "array<array<int32>>", "mixed": "ndarray<int32>"}
    assert types["later"] == {"based": "array<string>"}  # not populated: nothing to read
    mixed = _shapes_properties(catalog)["mixed"]
    assert mixed["type"] == ["null", "object"] and mixed["x-pg-type"] == "integer[]"
    assert mixed["properties"]["elements"]["items"]["x-olake-type"] == "int32"

    with psycopg.connect(dsn, autocommit=True) as conn:  # runs take the shapes from the catalog
        live = {c.name: c.olake_type for c in fetch_columns(conn, "public", "shapes", _shapes_properties(catalog))}
        assert {c: live[c] for c in SHAPES} == SHAPES
        assert type_property(conn, 1007, -1, catalog_type="ndarray<int32>")["x-olake-type"] == "ndarray<int32>"
        conn.execute("DELETE FROM shapes WHERE id <> 1")  # mixed and based hold regular values now
        conn.execute("UPDATE shapes SET based = '{a}'")
    again = run_olake("discover", "--config", src, "--catalog", str(tmp_path / "cat.json"))
    assert again.returncode == 0, again.stderr.decode()
    kept = _shapes_properties(json.loads(again.stdout)["catalog"])
    assert kept["mixed"] == mixed  # an ndarray stays one (every shape fits), no needless new load
    assert kept["based"]["x-olake-type"] == "ndarray<string>"
    assert kept["grid"]["x-olake-type"] == "array<array<int32>>"


def _shapes_properties(catalog: dict) -> dict:
    """The json_schema properties of the ``shapes`` stream."""
    return next(s for s in catalog["streams"] if s["name"] == "shapes")["json_schema"]["properties"]


def _failed_before_acknowledging(stderr: bytes, code: int, state: Path, before: str) -> None:
    assert code != 0, stderr.decode()[-2000:]
    for wanted in (b"column 'm', row with key id='3'", b"a 3-dimensional value in a column of 2 dimensions",
                   b"run discover again"):
        assert wanted in stderr, stderr.decode()[-2000:]
    assert state.read_text() == before, "nothing after the last committed state is acknowledged"


def test_arrays_of_every_shape_through_full_load_change_capture_and_a_reshape(pg_cluster, pg_db, tmp_path):
    dsn = pg_cluster.dsn(pg_db)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(DDL)
        conn.execute(f"INSERT INTO shapes VALUES {VALUES}")
        conn.execute("CREATE TABLE grow (id int PRIMARY KEY, m int[])")
        conn.execute("INSERT INTO grow VALUES (1, '{{1,2},{3,4}}'), (2, NULL)")
    rw_src = _source(pg_cluster, pg_db, tmp_path, "shapes_rw")
    catalog_path = tmp_path / "cat.json"
    catalog = discover_catalog(rw_src, catalog_path, {"shapes": "cdc", "grow": "cdc"})
    schemas = {s["name"]: s["json_schema"] for s in catalog["streams"]}
    assert {c: p["x-olake-type"] for c, p in schemas["shapes"]["properties"].items() if c != "id"} == SHAPES
    assert schemas["grow"]["properties"]["m"]["x-olake-type"] == "array<array<int32>>"
    pq, ice = tmp_path / "pq", tmp_path / "ice"
    parquet = write_json(tmp_path / "pq.json", {"type": "parquet", "path": str(pq)})
    iceberg = write_json(tmp_path / "ice.json", {"type": "iceberg", "path": str(ice)})
    pq_state, ice_state = tmp_path / "pq_state.json", tmp_path / "ice_state.json"
    sync_src = _source(pg_cluster, pg_db, tmp_path, "shapes_sync")

    def both(catalog_file: Path, schemas: dict) -> None:
        """read | write into Parquet and sync into Iceberg, then both destinations equal the source."""
        sync_once(rw_src, catalog_file, parquet, pq_state)
        _sync(sync_src, iceberg, catalog_file, ice_state)
        for name, schema in schemas.items():
            _assert_parquet_current(dsn, pq, schema, name)
            _assert_iceberg_current(dsn, ice, schema, name)

    both(catalog_path, schemas)  # full loads: encode_records -> decode_rows, and the tasks' to_destination
    lower = iceberg_rows(ice, "public", "shapes").sort_by("id").column("based").to_pylist()[0]
    assert lower == {"lower_bounds": [0], "lengths": [3], "elements": ["x", None, "y z"]}
    with psycopg.connect(dsn, autocommit=True) as conn:  # the same shapes again, as changes
        for statement in CHANGES:
            conn.execute(statement)
    both(catalog_path, schemas)

    with psycopg.connect(dsn) as conn:  # one transaction: the first change after the committed states
        conn.execute("UPDATE grow SET m = '{{5,6}}' WHERE id = 1")
        conn.execute("INSERT INTO grow VALUES (3, '{{{1},{2}},{{3},{4}}}'), (4, '[0:1]={7,8}')")
    before = pq_state.read_text()
    failed = read_into_write(["--config", rw_src, "--catalog", str(catalog_path), "--state", str(pq_state)],
                             ["--config", parquet, "--state", str(pq_state)])
    _failed_before_acknowledging(failed.read_stderr + failed.write_stderr, failed.read_code, pq_state, before)
    assert trace_errors(failed.write_stdout)
    before = ice_state.read_text()
    failed = run_olake("sync", "--source", sync_src, "--destination", iceberg, "--catalog", str(catalog_path),
                       "--state", str(ice_state))
    _failed_before_acknowledging(failed.stderr, failed.returncode, ice_state, before)
    assert iceberg_rows(ice, "public", "grow").sort_by("id").column("m").to_pylist() == [[[1, 2], [3, 4]], None]

    again = run_olake("discover", "--config", rw_src, "--catalog", str(catalog_path))
    assert again.returncode == 0, again.stderr.decode()
    reshaped = tmp_path / "reshaped.json"
    reshaped.write_text(json.dumps(json.loads(again.stdout)["catalog"]))
    schemas = {s["name"]: s["json_schema"] for s in json.loads(reshaped.read_text())["streams"]}
    assert schemas["grow"]["properties"]["m"]["x-olake-type"] == "ndarray<int32>"
    assert schemas["shapes"] == next(s for s in catalog["streams"] if s["name"] == "shapes")["json_schema"]
    # Iceberg cannot turn a list column into a struct in place: the user drops the table, which then
    # loads anew; Parquet's new load replaces the old files by itself
    iceberg_table(ice, "public", "grow").catalog.drop_table(("public", "grow"))
    with psycopg.connect(dsn, autocommit=True) as conn:  # every shape fits from now on
        conn.execute("INSERT INTO grow VALUES (5, '{1}'), (6, '[2:2][3:4][1:1]={{{9},{10}}}')")
        conn.execute("UPDATE grow SET m = '{}' WHERE id = 3")
        conn.execute("UPDATE shapes SET grid = NULL WHERE id = 1")
    both(reshaped, schemas)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE grow SET m = '[-1:-1]={0}' WHERE id = 1")
        conn.execute("UPDATE shapes SET mixed = '{{1},{2}}' WHERE id = 4")
    both(reshaped, schemas)
    _drop_slots(dsn, "shapes_rw", "shapes_sync")
