"""Change capture and columns that change: widened, dropped, renamed, or retyped in a way that loses values.

Each case runs the real commands (``read | write`` and ``sync``) against a real server and compares the
current table (the README's DuckDB query) with the source value by value, or checks that the run failed
loudly before acknowledging anything under a shape it cannot carry.
"""

from __future__ import annotations

import json

import psycopg
import pytest

from tests.support.cli import read_into_write, run_olake, write_json
from tests.support.current_view import current_view, iceberg_rows, iceberg_table
from tests.support.verify import assert_table_matches
from tests.test_e2e_cdc_stitching import MODES, Setup


TABLE = """
CREATE TABLE acct (id int PRIMARY KEY, n int, ratio real, amount numeric(8,2), label varchar(10),
                   code text, doomed text);
INSERT INTO acct SELECT g, g, g / 4.0, g / 100.0, 'l' || g, (g * 3)::text, 'd' || g FROM generate_series(1, 300) g;
"""


@pytest.mark.parametrize("mode", MODES)
def test_widened_and_dropped_columns_keep_flowing(pg_cluster, pg_db, tmp_path, mode):
    setup = Setup(pg_cluster, pg_db, tmp_path, f"slot_widen_{mode}")
    setup.execute(TABLE)
    setup.discover({"acct": "cdc"})
    setup.run(mode)
    setup.execute("UPDATE acct SET n = n + 1 WHERE id <= 10",
                  "ALTER TABLE acct ALTER COLUMN n TYPE bigint, ALTER COLUMN ratio TYPE double precision, "
                  "ALTER COLUMN amount TYPE numeric(12,4), ALTER COLUMN label TYPE text",
                  "UPDATE acct SET n = 5000000000 + id, ratio = 1e300, amount = 12345678.1234, "
                  "label = repeat('x', 50) WHERE id BETWEEN 5 AND 20",
                  "ALTER TABLE acct DROP COLUMN doomed",
                  "UPDATE acct SET code = '7' WHERE id BETWEEN 15 AND 30",
                  "INSERT INTO acct (id, n, code) VALUES (1000, 9000000000, '1')")
    stderr = setup.run(mode)
    assert b"'n' widened from int32 to int64" in stderr and b"'doomed' no longer exists" in stderr
    schema = next(s for s in setup.catalog["streams"] if s["name"] == "acct")["json_schema"]
    del schema["properties"]["doomed"]
    for name, olake_type in (("n", "int64"), ("ratio", "float64"), ("amount", "decimal(12,4)")):
        schema["properties"][name]["x-olake-type"] = olake_type
    setup.assert_current("acct")
    setup.drop_slot()


@pytest.mark.parametrize("alter,column", [
    ("ALTER TABLE acct ALTER COLUMN code TYPE numeric USING code::numeric", "'code' string -> numeric"),
    ("ALTER TABLE acct RENAME COLUMN label TO tag", "'label' was renamed to 'tag'"),
])
def test_changes_that_would_lose_values_fail_before_anything_is_acknowledged(pg_cluster, pg_db, tmp_path,
                                                                              alter, column):
    setup = Setup(pg_cluster, pg_db, tmp_path, "slot_incompatible")
    setup.execute(TABLE)
    setup.discover({"acct": "cdc"})
    setup.run("pipe")
    setup.execute("UPDATE acct SET n = 1 WHERE id = 1")
    before_alter = _wal_position(setup)
    setup.execute(alter, "UPDATE acct SET n = 2 WHERE id = 2")
    for _ in range(2):  # the slot never moves past the change: the failure repeats, nothing is lost
        result = read_into_write(["--config", setup.src, "--catalog", str(setup.catalog_path), "--state",
                                  str(setup.state)], ["--config", setup.dst, "--state", str(setup.state)])
        assert result.read_code != 0 and result.write_code != 0
        assert column.encode() in result.read_stderr, result.read_stderr.decode()[-2000:]
        assert b'"failure_type":"config_error"' in result.write_stdout.replace(b" ", b"")
    _assert_not_past(setup, before_alter)
    setup.discover({"acct": "cdc"})  # what the error says to do: the stream is then loaded anew
    assert b"loading it anew" in setup.run("pipe")
    setup.execute("UPDATE acct SET n = 3 WHERE id = 3")
    setup.run("pipe")
    setup.assert_current("acct")
    setup.drop_slot()


def _wal_position(setup: Setup) -> str:
    with psycopg.connect(setup.dsn, autocommit=True) as conn:
        return conn.execute("SELECT pg_current_wal_insert_lsn()::text").fetchone()[0]


def _assert_not_past(setup: Setup, lsn: str) -> None:
    """Neither the state file nor the slot went past ``lsn``."""
    position = json.loads(setup.state.read_text())["streams"][0]["stream_state"]["cursor_field"]
    with psycopg.connect(setup.dsn, autocommit=True) as conn:
        slot = conn.execute("SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s",
                            (setup.slot,)).fetchone()[0]
        for seen in (position, slot):
            assert conn.execute("SELECT %s::pg_lsn <= %s::pg_lsn", (seen, lsn)).fetchone()[0], (seen, lsn)


def test_sync_fails_on_a_change_it_cannot_carry(pg_cluster, pg_db, tmp_path):
    setup = Setup(pg_cluster, pg_db, tmp_path, "slot_incompatible_sync")
    setup.execute(TABLE)
    setup.discover({"acct": "cdc"})
    setup.run("sync")
    before_alter = _wal_position(setup)
    setup.execute("ALTER TABLE acct ALTER COLUMN n TYPE text", "UPDATE acct SET n = 'x' WHERE id = 2")
    result = run_olake("sync", "--source", setup.src, "--destination", setup.dst, "--catalog",
                       str(setup.catalog_path), "--state", str(setup.state))
    assert result.returncode != 0 and b"'n' int32 -> string" in result.stderr, result.stderr.decode()[-2000:]
    _assert_not_past(setup, before_alter)
    setup.drop_slot()


@pytest.mark.parametrize("destination", ["iceberg", "parquet"])
def test_a_catalog_narrower_than_the_widened_destination_keeps_flowing(pg_cluster, pg_db, tmp_path, destination):
    """Widened during change capture (real -> double precision, int -> bigint, numeric(8,2) -> (12,2)),
    then every later run with the original, narrower catalog: ``sync`` and ``read | write --catalog``.
    The destination keeps its wider types and takes the narrower ones losslessly."""
    setup = Setup(pg_cluster, pg_db, tmp_path, f"slot_narrow_{destination}")
    root = tmp_path / "lake"
    setup.dst = write_json(tmp_path / "dst.json", {"type": destination, "path": str(root)})
    setup.execute(TABLE)
    setup.discover({"acct": "cdc"})
    narrow = setup.catalog_path.read_text()
    setup.run("sync")
    setup.execute("ALTER TABLE acct ALTER COLUMN n TYPE bigint, ALTER COLUMN ratio TYPE double precision, "
                  "ALTER COLUMN amount TYPE numeric(12,2)",
                  "UPDATE acct SET n = 5000000000 + id, ratio = 1e300, amount = 1234567890.12 WHERE id <= 5")
    assert b"'ratio' widened from float32 to float64" in setup.run("pipe")
    assert setup.catalog_path.read_text() == narrow  # the user's catalog still says real and int
    setup.execute("UPDATE acct SET ratio = 0.1, n = -5000000000 WHERE id BETWEEN 6 AND 10")
    setup.run("sync")
    setup.execute("UPDATE acct SET ratio = 1e-300, amount = -9999999999.99 WHERE id BETWEEN 11 AND 15",
                  "INSERT INTO acct (id, n, ratio) VALUES (1001, 9000000000, 2.5e200)")
    result = read_into_write(["--config", setup.src, "--catalog", str(setup.catalog_path), "--state", str(setup.state)],
                             ["--config", setup.dst, "--catalog", str(setup.catalog_path), "--state", str(setup.state)])
    assert result.read_code == 0 and result.write_code == 0, result.write_stderr.decode()[-3000:]
    schema = next(s for s in setup.catalog["streams"] if s["name"] == "acct")["json_schema"]
    for name, olake_type in (("n", "int64"), ("ratio", "float64"), ("amount", "decimal(12,2)")):
        schema["properties"][name]["x-olake-type"] = olake_type
    columns = list(schema["properties"])
    if destination == "iceberg":
        current = iceberg_rows(root, "public", "acct").select(columns)
        fields = iceberg_table(root, "public", "acct").schema()
        assert [str(fields.find_field(c).field_type) for c in ("n", "ratio", "amount")] == \
            ["long", "double", "decimal(12, 2)"]
    else:
        current = current_view(str(root / "public" / "acct"), columns, ["id"])
    with psycopg.connect(setup.dsn) as conn:
        assert_table_matches(conn, "public", "acct", schema, current)
    setup.drop_slot()
