"""``olake spec``, ``olake discover`` and ``--help`` through the real command."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

from tests.support.cli import messages, olake_env, run_olake, with_stream_ends, write_json
from tests.test_bad_input import assert_one_error

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "fixtures" / "postgres" / "demo.sql"
DEMO_DB = "demo_spec_discover"

EXPECTED_KEYS = {
    ("public", "app_settings"): [["setting_key"]],
    ("shop", "all_types"): [["id"]],
    ("shop", "customers"): [["customer_id"]],
    ("shop", "events"): [["event_id"], ["occurred_at"]],
    ("shop", "order_items"): [["order_id"], ["line_no"]],
    ("shop", "orders"): [["order_id"]],
    ("shop", "page_views"): [],
    ("shop", "payments"): [["payment_id"]],
    ("shop", "products"): [["sku"]],
}
# Tables in schema "extras": no column can be a cursor (text, bool, bytea, uuid, json only).
EXTRAS_SQL = """
CREATE SCHEMA extras;
CREATE TABLE extras.tags (tag text PRIMARY KEY, note text, hidden boolean);
CREATE TABLE extras.blobs (id uuid, body bytea, meta jsonb);
"""


@pytest.fixture(scope="module")
def demo_db(pg_cluster) -> str:
    """The demo fixture plus schema ``extras`` whose tables have no cursor candidate."""
    from tests.support.pgcluster import create_database

    create_database(pg_cluster, DEMO_DB)
    with psycopg.connect(pg_cluster.dsn(DEMO_DB), autocommit=True) as conn:
        conn.execute(FIXTURE.read_text())
        conn.execute(EXTRAS_SQL)
    return DEMO_DB


@pytest.fixture(scope="module")
def discover_run(pg_cluster, demo_db, tmp_path_factory) -> subprocess.CompletedProcess:
    """``olake discover`` over schemas shop and public."""
    folder = tmp_path_factory.mktemp("discover")
    config = write_json(folder / "src.json", pg_cluster.source_config(demo_db, schemas=["shop", "public"]))
    return run_olake("discover", "--config", config)


@pytest.fixture(scope="module")
def streams(discover_run) -> dict[tuple[str, str], dict]:
    """Discovered streams by (namespace, name)."""
    catalog = messages(discover_run.stdout)[0]["catalog"]
    return {(s["namespace"], s["name"]): s for s in catalog["streams"]}


# ---------------------------------------------------------------- spec

@pytest.mark.parametrize("flag, kind, schema_file", [
    ("--source", "postgres", "source-postgres.schema.json"),
    ("--destination", "parquet", "destination-parquet.schema.json"),
])
def test_spec_prints_the_config_schema(flag, kind, schema_file):
    result = run_olake("spec", flag, kind)
    assert result.returncode == 0, result.stderr.decode()
    out = messages(result.stdout)
    assert [m["type"] for m in out] == ["SPEC"]
    expected = json.loads((ROOT / "schemas" / schema_file).read_text())
    assert out[0]["spec"]["connectionSpecification"] == expected
    assert expected["properties"]["type"]["const"] == kind


@pytest.mark.parametrize("args, needles", [
    (["--source", "postgres", "--destination", "parquet"], ["one of --source TYPE or --destination TYPE"]),
    (["--source", "mysql"], ["unknown source type 'mysql'", "postgres"]),
    (["--destination", "bigquery"], ["unknown destination type 'bigquery'", "parquet"]),
    (["--source", "parquet"], ["unknown source type 'parquet'"]),
])
def test_spec_bad_arguments(args, needles):
    result = run_olake("spec", *args)
    assert_one_error(result, "config_error", *needles)
    assert [m["type"] for m in messages(result.stdout)] == ["TRACE"]


# ---------------------------------------------------------------- discover

def test_discover_prints_one_catalog(discover_run, streams):
    assert discover_run.returncode == 0, discover_run.stderr.decode()
    assert [m["type"] for m in messages(discover_run.stdout)] == ["CATALOG"]
    assert discover_run.stderr.decode().splitlines() == ["olake: discovered 9 stream(s)"]
    assert sorted(streams) == sorted(EXPECTED_KEYS)


def test_discover_excludes_partitions(streams):
    assert ("shop", "events") in streams
    assert streams[("shop", "events")]["x-olake"]["relkind"] == "partitioned"
    assert not [key for key in streams if key[1].startswith("events_")]


def test_discover_schema_lists_every_column_in_table_order(pg_cluster, streams):
    with psycopg.connect(pg_cluster.dsn(DEMO_DB)) as conn:
        for (namespace, name), stream in streams.items():
            columns = [row[0] for row in conn.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_schema = %s AND "
                "table_name = %s ORDER BY ordinal_position", (namespace, name))]
            assert stream["json_schema"]["type"] == "object"
            assert list(stream["json_schema"]["properties"]) == columns, name
            for column, prop in stream["json_schema"]["properties"].items():
                assert isinstance(prop.get("x-olake-type"), str) and prop["x-olake-type"], (name, column)


@pytest.mark.parametrize("stream, column, olake_type, nullable", [
    ("orders", "order_id", "int64", False),
    ("orders", "total_amount", "decimal(12,2)", True),
    ("customers", "customer_id", "uuid", False),
    ("products", "sku", "string", False),
    ("order_items", "line_no", "int16", False),
    ("payments", "payment_id", "int32", False),
    ("page_views", "viewed_at", "timestamp", True),
    ("events", "occurred_at", "timestamptz", False),
    ("all_types", "c_numeric_array", "array<decimal(10,2)>", True),
])
def test_discover_column_types(streams, stream, column, olake_type, nullable):
    prop = streams[("shop", stream)]["json_schema"]["properties"][column]
    assert prop["x-olake-type"] == olake_type
    assert ("null" in prop["type"]) is nullable


def test_discover_primary_keys(streams):
    assert {key: s["source_defined_primary_key"] for key, s in streams.items()} == EXPECTED_KEYS


def test_discover_sync_modes_follow_cursor_candidates(streams):
    for key, stream in streams.items():
        assert stream["sync_mode"] == "full_refresh" and stream["selected"] is True
        assert stream["supported_sync_modes"][0] == "full_refresh"
        assert ("incremental" in stream["supported_sync_modes"]) is bool(stream["cursor_candidates"]), key
        # cdc needs a row identity: every demo table without a primary key has REPLICA IDENTITY DEFAULT
        assert ("cdc" in stream["supported_sync_modes"]) is bool(stream["source_defined_primary_key"]), key
        if key != ("shop", "page_views"):
            assert "updated_at" in stream["cursor_candidates"]
            assert stream["default_cursor_field"] == ["updated_at"], key
    page_views = streams[("shop", "page_views")]
    assert "viewed_at" in page_views["cursor_candidates"]
    assert page_views["default_cursor_field"] == []
    assert "url" not in page_views["cursor_candidates"]


def test_discover_without_cursor_candidates_offers_no_incremental(pg_cluster, demo_db, tmp_path):
    config = write_json(tmp_path / "src.json", pg_cluster.source_config(demo_db, schemas=["extras"]))
    result = run_olake("discover", "--config", config)
    assert result.returncode == 0, result.stderr.decode()
    found = {s["name"]: s for s in messages(result.stdout)[0]["catalog"]["streams"]}
    assert sorted(found) == ["blobs", "tags"]
    for stream in found.values():
        assert "incremental" not in stream["supported_sync_modes"]
        assert stream["cursor_candidates"] == [] and stream["default_cursor_field"] == []
    assert found["tags"]["source_defined_primary_key"] == [["tag"]]
    assert found["blobs"]["source_defined_primary_key"] == []
    assert found["tags"]["supported_sync_modes"] == ["full_refresh", "cdc"]
    assert found["blobs"]["supported_sync_modes"] == ["full_refresh"]
    assert found["blobs"]["x-olake"]["cdc_unsupported"] == (
        'no primary key (REPLICA IDENTITY DEFAULT); for cdc run: ALTER TABLE "extras"."blobs" REPLICA IDENTITY FULL;')
    assert pg_cluster.password not in result.stdout.decode() + result.stderr.decode()


def test_discover_output_is_accepted_as_catalog(discover_run, tmp_path):
    """write --catalog takes discover's raw stdout (the CATALOG message line) as is."""
    cat = tmp_path / "cat.json"
    cat.write_bytes(discover_run.stdout)
    config = write_json(tmp_path / "dst.json", {"type": "parquet", "path": str(tmp_path / "out")})
    ends = with_stream_ends(discover_run.stdout)[len(discover_run.stdout):]  # a reader with nothing to copy
    result = run_olake("write", "--config", config, "--catalog", str(cat), stdin=ends)
    assert result.returncode == 0, result.stderr.decode()
    assert messages(result.stdout) == []


def test_discover_never_prints_the_password(pg_cluster, discover_run):
    assert pg_cluster.password not in discover_run.stdout.decode() + discover_run.stderr.decode()


# ---------------------------------------------------------------- help

@pytest.mark.parametrize("argv", [
    [sys.executable, "-m", "olake_cli", "--help"],
    [str(Path(sys.executable).parent / "olake"), "--help"],
])
def test_help_exits_zero(argv):
    result = subprocess.run(argv, capture_output=True, timeout=120, env=olake_env())
    assert result.returncode == 0, result.stderr.decode()
    text = result.stdout.decode()
    assert "Usage:" in text
    for command in ("spec", "check", "discover", "read", "write"):
        assert command in text


@pytest.mark.parametrize("command", ["spec", "check", "discover", "read", "write"])
def test_command_help_exits_zero(command):
    result = run_olake(command, "--help")
    assert result.returncode == 0, result.stderr.decode()
    assert "Usage:" in result.stdout.decode()
