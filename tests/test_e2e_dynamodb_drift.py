"""DynamoDB numbers that outgrow the types discovery inferred, end to end against moto's server: the
column widens in place (a wider decimal scale or integer-digit bound, then exact decimal text) instead
of stopping the run or reloading the table, in INIT_SYNC's scan and in Streams changes, into Parquet,
Iceberg and PostgreSQL, compared value by value with the table's items.

Discovery sees numbers with one fraction digit (``v``: decimal(38,1), ``ns``: a set of them). Items put
after discovery need a second fraction digit and more integer digits than the bound (the scan meets
them: its chunks are read again under the wider type); changes after the load need a third digit, then
``1E+100`` and ``1E-100``, which no decimal(38,s) holds (Streams: the column becomes text). The first
test runs the real commands (``sync``, then ``read | write``), the others the same use cases in this
process on the session's Spark. Each destination keeps one type per column (Parquet rewrites the
load's files, Iceberg the table's rows, PostgreSQL alters the column), so DuckDB reads the Parquet
folder exactly too.
"""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path

import duckdb
import psycopg
import pyarrow.dataset as ds
import pyarrow.parquet as pq
from psycopg import sql

from olake_cli.pipeline.progress import REPLAYED
from tests.support.cdc import sync_once
from tests.support.cli import run_olake, write_json
from tests.support.current_view import iceberg_rows, iceberg_table
from tests.support.dynamo import NAMESPACE, all_items, create_table, discovered_catalog, dynamo_source, put_items
from tests.support.inprocess import read_write, sync

ITEMS = 40
OUTGROWN = 3  # items put after discovery whose numbers the discovered columns cannot hold


def _item(i: int, v: str, ns: list[str]) -> dict:
    return {"pk": {"S": f"p{i % 7}"}, "sk": {"N": str(i)}, "v": {"N": v}, "ns": {"NS": ns}}


def _seed(client, table: str) -> None:
    create_table(client, table)
    put_items(client, table, [_item(i, f"{i}.5", [f"{i}.5", "1"]) for i in range(ITEMS)])


def _outgrow_in_the_scan(client, table: str) -> None:
    """Numbers beyond the discovered columns, put before the first sync: its INIT_SYNC meets them."""
    put_items(client, table, [_item(1000, "-1.25", ["1"]), _item(1001, "1" + "0" * 24 + ".5", ["2"]),
                              _item(1002, "7", ["0.125", "3"])])


def _outgrow_in_streams(client, table: str) -> None:
    """Changes after the load: a third fraction digit, then numbers only exact text holds."""
    key = lambda i: {"pk": {"S": f"p{i % 7}"}, "sk": {"N": str(i)}}  # noqa: E731
    client.update_item(TableName=table, Key=key(3), UpdateExpression="SET v = :v",
                       ExpressionAttributeValues={":v": {"N": "-0.001"}})
    client.put_item(TableName=table, Item=_item(1003, "1E+100", ["5"]))
    client.update_item(TableName=table, Key=key(5), UpdateExpression="SET ns = :n",
                       ExpressionAttributeValues={":n": {"NS": ["2.5", "1E-100"]}})
    client.delete_item(TableName=table, Key=key(7))


def _number(value) -> Decimal | None:
    return None if value is None else Decimal(str(value))


def _expected(moto_server, table: str) -> dict:
    """(pk, sk) -> (v, sorted ns) of every item, as exact decimals."""
    return {(i["pk"]["S"], Decimal(i["sk"]["N"])): (Decimal(i["v"]["N"]), sorted(Decimal(n) for n in i["ns"]["NS"]))
            for i in all_items(moto_server.client(), table)}


def _actual(rows: list[dict]) -> dict:
    got = {}
    for row in rows:
        key = (row["pk"], _number(row["sk"]))
        assert key not in got, f"key {key} twice"
        got[key] = (_number(row["v"]), sorted(_number(n) for n in row["ns"] or []))
    return got


def _assert_equal(rows: list[dict], moto_server, table: str) -> None:
    want, got = _expected(moto_server, table), _actual(rows)
    assert got.keys() == want.keys(), (sorted(got.keys() - want.keys()), sorted(want.keys() - got.keys()))
    for key, values in want.items():
        assert got[key] == values, key


def _parquet_rows(root: Path, table: str) -> list[dict]:
    """The current rows (newest version per key, deletes dropped) of a folder whose files all have one
    type per number column (rewritten when one changed by value); read again by DuckDB, which rounds
    decimals of files that differ in scale, they are the same."""
    folder = str(root / NAMESPACE / table)
    files = ds.dataset(folder, format="parquet").files
    assert len({(pq.read_schema(f).field("v").type, pq.read_schema(f).field("ns").type) for f in files}) == 1
    rows = _latest(ds.dataset(folder, format="parquet").to_table().to_pylist())
    duck = duckdb.sql(f"SELECT * FROM read_parquet('{folder}/*.parquet', union_by_name = true)")
    assert _actual(_latest([dict(zip(duck.columns, values)) for values in duck.fetchall()])) == _actual(rows)
    return rows


def _latest(rows: list[dict]) -> list[dict]:
    latest: dict = {}
    for row in rows:
        key = (row["pk"], _number(row["sk"]))
        if key not in latest or row["_olake_op_id"] >= latest[key]["_olake_op_id"]:
            latest[key] = row
    return [row for row in latest.values() if row["_olake_op"] != "d"]


def _load_id(state: Path) -> str:
    return json.loads(state.read_text())["streams"][0]["stream_state"]["load_id"]


def _drift(state: Path) -> dict:
    """Column -> x-olake-type the state records the column widened to."""
    recorded = json.loads(state.read_text())["streams"][0]["stream_state"]["schema_drift"]
    return {name: change["to"]["x-olake-type"] for name, change in recorded.items()}


def _prepare(moto_server, table: str, tmp_path: Path) -> tuple[str, Path]:
    client = moto_server.client()
    _seed(client, table)
    src = dynamo_source(tmp_path, moto_server, table)
    catalog = discovered_catalog(tmp_path, src, "cdc")
    props = json.loads(catalog.read_text())["streams"][0]["json_schema"]["properties"]
    assert props["v"]["x-olake-type"] == "decimal(38,1)" and props["ns"]["x-olake-type"] == "array<decimal(38,1)>"
    _outgrow_in_the_scan(client, table)
    return src, catalog


def _after_the_scan(log: str, table: str, state: Path) -> str:
    """The first run widened in place (no reload), and reported the replayed inserts as such."""
    label = f"{NAMESPACE}.{table}"
    assert "chunk(s) are read again" in log and "loaded anew" not in log, log[-3000:]
    assert _drift(state) == {"v": "decimal(38,2)", "ns": "array<decimal(38,3)>"}
    total = ITEMS + OUTGROWN
    assert f"summary: {label}: {total} rows loaded" in log, log[-3000:]
    assert f"changes: {total} inserted, 0 updated, 0 deleted, of which {total} {REPLAYED}" in log, log[-3000:]
    return _load_id(state)


def _after_the_changes(log: str, table: str, state: Path, load_id: str) -> None:
    assert "widened in place" in log and "loaded anew" not in log and "re-syncing" not in log, log[-3000:]
    assert _drift(state) == {"v": "numeric", "ns": "array<numeric>"}
    assert "changes: 1 inserted, 2 updated, 1 deleted;" in log, log[-3000:]  # none replayed
    assert _load_id(state) == load_id  # the same load: nothing was reloaded


def _ok(result) -> str:
    assert result.returncode == 0, result.stderr.decode()[-3000:]
    return result.stderr.decode()


def test_numbers_widen_in_place_through_the_real_commands_into_parquet(moto_server, dynamo_table, tmp_path):
    src, catalog = _prepare(moto_server, dynamo_table, tmp_path)
    root = tmp_path / "lake"
    dst = write_json(tmp_path / "lake.json", {"type": "parquet", "path": str(root)})
    state = tmp_path / "state.json"
    log = _ok(run_olake("sync", "--source", src, "--destination", dst, "--catalog", str(catalog),
                        "--state", str(state)))
    load_id = _after_the_scan(log, dynamo_table, state)
    _assert_equal(_parquet_rows(root, dynamo_table), moto_server, dynamo_table)

    _outgrow_in_streams(moto_server.client(), dynamo_table)
    piped = sync_once(src, catalog, dst, state)
    _after_the_changes(piped.read_stderr.decode() + piped.write_stderr.decode(), dynamo_table, state, load_id)
    _assert_equal(_parquet_rows(root, dynamo_table), moto_server, dynamo_table)


def test_numbers_widen_in_place_into_iceberg(moto_server, dynamo_table, tmp_path, spark):
    src, catalog = _prepare(moto_server, dynamo_table, tmp_path)
    root = tmp_path / "ice"
    dst = write_json(tmp_path / "ice.json", {"type": "iceberg", "path": str(root)})
    state = tmp_path / "state.json"
    load_id = _after_the_scan(read_write(src, catalog, dst, state), dynamo_table, state)
    _assert_equal(iceberg_rows(root, NAMESPACE, dynamo_table).to_pylist(), moto_server, dynamo_table)

    _outgrow_in_streams(moto_server.client(), dynamo_table)
    log = sync(src, catalog, dst, state)
    _after_the_changes(log, dynamo_table, state, load_id)
    assert "rewrites the table's rows with the new type(s)" in log, log[-3000:]
    schema = iceberg_table(root, NAMESPACE, dynamo_table).schema()
    assert str(schema.find_field("v").field_type) == "string"
    _assert_equal(iceberg_rows(root, NAMESPACE, dynamo_table).to_pylist(), moto_server, dynamo_table)

    log = sync(src, catalog, dst, state)  # the next run: the recorded widening, no reload
    assert "loaded anew" not in log and _load_id(state) == load_id, log[-3000:]
    _assert_equal(iceberg_rows(root, NAMESPACE, dynamo_table).to_pylist(), moto_server, dynamo_table)


def _pg_rows(dsn: str, table: str) -> tuple[list[dict], dict]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        cursor = conn.execute(sql.SQL("SELECT pk, sk, v, ns FROM {}").format(sql.Identifier(NAMESPACE, table)))
        rows = [dict(zip(("pk", "sk", "v", "ns"), values)) for values in cursor.fetchall()]
        types = dict(conn.execute("SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute WHERE "
                                  "attrelid = %s::regclass AND attname IN ('v', 'ns')",
                                  (f'{NAMESPACE}."{table}"',)).fetchall())
    return rows, types


def test_numbers_widen_in_place_into_postgres(moto_server, dynamo_table, tmp_path, spark, pg_target, target_db):
    src, catalog = _prepare(moto_server, dynamo_table, tmp_path)
    dst = write_json(tmp_path / "dst.json", pg_target.destination_config(target_db))
    dsn, state = pg_target.dsn(target_db), tmp_path / "state.json"
    load_id = _after_the_scan(sync(src, catalog, dst, state), dynamo_table, state)
    rows, types = _pg_rows(dsn, dynamo_table)
    assert types == {"v": "numeric(38,2)", "ns": "numeric(38,3)[]"}
    _assert_equal(rows, moto_server, dynamo_table)

    _outgrow_in_streams(moto_server.client(), dynamo_table)
    _after_the_changes(read_write(src, catalog, dst, state), dynamo_table, state, load_id)
    rows, types = _pg_rows(dsn, dynamo_table)
    assert types == {"v": "numeric", "ns": "numeric[]"}
    _assert_equal(rows, moto_server, dynamo_table)

    log = read_write(src, catalog, dst, state)  # the next run: the recorded widening, no reload
    assert "loaded anew" not in log and _load_id(state) == load_id, log[-3000:]
    _assert_equal(_pg_rows(dsn, dynamo_table)[0], moto_server, dynamo_table)
