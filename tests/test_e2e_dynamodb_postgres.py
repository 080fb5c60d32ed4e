"""DynamoDB into the PostgreSQL destination end to end: the real commands, moto's server and a target cluster.

A table with a partition and a sort key and every attribute type (``every_type_items``: S, N integers
and decimals, B, BOOL, NULL, M, L, SS, NS, BS and mixed shapes) goes by ``sync`` (INIT_SYNC, then SYNC)
into the PostgreSQL destination; puts, updates (attributes set, removed, nested) and deletes follow,
and a second ``sync`` applies them. The changes are then replayed: ``read`` from the state saved before
them gives the same stream records again (same sequence numbers, so the same operation ids), and
``write`` of that input, twice, skips all 30 changes and changes no row (``_olake.streams`` takes the
replayed run's checkpoint: the same shard positions, a later time). After each step the target table
is compared with the DynamoDB table item by item, attribute by attribute: each column read by psycopg
against the value ``tests.support.dynamo.expected_row`` builds from boto3's items (decimals compared
exactly as ``Decimal``, documents as the JSON of their wire values, sets in any order).
"""

from __future__ import annotations

import base64
import json
import shutil
from collections import Counter
from decimal import Decimal
from typing import Any

import psycopg
from psycopg import sql

from tests.support.cli import messages, run_olake, write_json
from tests.support.dynamo import (NAMESPACE, all_items, create_table, discovered_catalog, dynamo_source,
                                  every_type_items, expected_row, first_schema, put_items)


def _norm(value: Any, prop: dict) -> Any:
    """A value (the oracle's, or psycopg's: jsonb documents hold decimals as text and bytes as base64)
    in one comparable form: decimals as ``Decimal``, bytes as ``bytes``, sets sorted by value."""
    olake_type = prop["x-olake-type"]
    if value is None or olake_type == "json":
        return value
    if olake_type.startswith("array<"):
        element = {**prop.get("items", {}), "x-olake-type": olake_type[6:-1]}
        values = [_norm(v, element) for v in value]
        return values if prop.get("x-olake-dynamodb-type") == "L" else sorted(values)
    if olake_type == "document":
        return {name: _norm(value.get(name), sub) for name, sub in prop["properties"].items()}
    if olake_type.startswith(("decimal", "numeric")):
        return Decimal(str(value))  # "numeric" (a scale the sample cannot fix) lands in numeric as a value
    if olake_type == "bytes":
        return base64.b64decode(value) if isinstance(value, str) else bytes(value)
    return value


def assert_target_equals_table(dsn: str, moto_server, table: str, schema: dict) -> int:
    """Every item of the DynamoDB table is one target row, equal in every attribute; returns the count."""
    props = schema["properties"]
    want = {}
    for item in all_items(moto_server.client(), table):
        row = expected_row(item, schema)
        want[(row["pk"], Decimal(row["sk"]))] = {n: _norm(v, props[n]) for n, v in row.items()}
    with psycopg.connect(dsn, autocommit=True) as conn:
        cursor = conn.execute(sql.SQL("SELECT {} FROM {}").format(
            sql.SQL(", ").join(map(sql.Identifier, props)), sql.Identifier(NAMESPACE, table)))
        got = {}
        for values in cursor.fetchall():
            row = {n: _norm(v, props[n]) for n, v in zip(props, values)}
            assert (row["pk"], row["sk"]) not in got, f"key {row['pk']}, {row['sk']} twice"
            got[(row["pk"], row["sk"])] = row
    assert got.keys() == want.keys(), (sorted(got.keys() - want.keys()), sorted(want.keys() - got.keys()))
    for key, row in want.items():
        for name in props:
            assert got[key][name] == row[name], (key, name, got[key][name], row[name])
    return len(want)


def _ok(result) -> str:
    assert result.returncode == 0, result.stderr.decode()[-3000:]
    return result.stderr.decode()


def test_dynamodb_changes_into_postgres_converge_and_replay_harmlessly(moto_server, dynamo_table, pg_target,
                                                                      target_db, tmp_path):
    client = moto_server.client()
    items = every_type_items(60)
    create_table(client, dynamo_table)  # pk S + sk N, stream NEW_AND_OLD_IMAGES
    put_items(client, dynamo_table, items[:40])
    src = dynamo_source(tmp_path, moto_server, dynamo_table, segments=2)
    catalog = discovered_catalog(tmp_path, src, "cdc")
    schema = first_schema(catalog)
    dst = write_json(tmp_path / "dst.json", pg_target.destination_config(target_db))
    target, state = pg_target.dsn(target_db), tmp_path / "state.json"
    sync_args = ["sync", "--source", src, "--destination", dst, "--catalog", str(catalog), "--state", str(state)]

    _ok(run_olake(*sync_args))  # INIT_SYNC (parallel scan segments), then SYNC over the seed's inserts
    assert assert_target_equals_table(target, moto_server, dynamo_table, schema) == 40
    with psycopg.connect(target, autocommit=True) as conn:
        types = dict(conn.execute("SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute WHERE "
                                  "attrelid = %s::regclass AND attnum > 0 AND NOT attisdropped",
                                  (f'{NAMESPACE}."{dynamo_table}"',)).fetchall())
    assert types == {"pk": "text", "sk": "numeric(38,0)", "s": "text", "price": "numeric(38,3)",
                     "huge": "numeric", "raw": "bytea", "ok": "boolean", "tags": "text[]",
                     "scores": "numeric(38,2)[]", "blobs": "bytea[]", "addr": "jsonb", "events": "jsonb",
                     "words": "text[]", "mixed": "jsonb", "varmap": "jsonb", "gone": "jsonb"}, types
    before = tmp_path / "state-before-changes.json"
    shutil.copy(state, before)

    def key(i: int) -> dict:
        return {"pk": items[i]["pk"], "sk": items[i]["sk"]}

    put_items(client, dynamo_table, items[40:])  # INSERTs (sk 40, 45, 50, 55: 10**37 + i)
    for i in (1, 6, 11):  # MODIFY: scalars, a set, a nested attribute; attributes removed
        client.update_item(
            TableName=dynamo_table, Key=key(i),
            UpdateExpression="SET price = :p, s = :s, tags = :t, ok = :b, #r = :r, words = :w "
                             "REMOVE scores, gone",
            ExpressionAttributeNames={"#r": "raw"},
            ExpressionAttributeValues={":p": {"N": f"-{i}.001"}, ":s": {"S": f"changed ✓ {i}"},
                                       ":t": {"SS": ["z", "a", f"u{i}"]}, ":b": {"BOOL": False},
                                       ":r": {"B": b"\x00\xff\x10"}, ":w": {"L": [{"S": "x"}]}})
    client.update_item(TableName=dynamo_table, Key=key(2), UpdateExpression="SET addr.city = :c, huge = :h",
                       ExpressionAttributeValues={":c": {"S": "moved"}, ":h": {"N": "-1.25E-7"}})
    client.update_item(TableName=dynamo_table, Key=key(2), UpdateExpression="SET scores = :n",  # twice in a run
                       ExpressionAttributeValues={":n": {"NS": ["1.5", "-2", "9" * 35 + ".99"]}})
    for i in (3, 20, 33, 41):  # REMOVE, one of them an item inserted in this same run
        client.delete_item(TableName=dynamo_table, Key=key(i))
    client.put_item(TableName=dynamo_table, Item={**items[7], "s": {"NULL": True}, "price": {"N": "0.001"}})  # a MODIFY

    _ok(run_olake(*sync_args))
    assert assert_target_equals_table(target, moto_server, dynamo_table, schema) == 56

    # the replay: the same stream records again, from the state saved before the changes
    lines = run_olake("read", "--config", src, "--catalog", str(catalog), "--state", str(before))
    _ok(lines)
    changes = [m for m in messages(lines.stdout) if m["type"] == "RECORD"]
    ops = Counter(m["record"]["data"]["_olake_op"] for m in changes)
    assert ops == {"c": 20, "u": 6, "d": 4}, ops  # every put, update (the overwrite too) and delete above
    for _ in range(2):
        replay = _ok(run_olake("write", "--config", dst, stdin=lines.stdout))
        assert "skipped 30 change(s) the target already holds (a replay)" in replay, replay[-2000:]
        assert assert_target_equals_table(target, moto_server, dynamo_table, schema) == 56
    with psycopg.connect(target, autocommit=True) as conn:
        saved = conn.execute("SELECT state FROM _olake.streams").fetchall()
    [(committed,)] = saved  # the replayed run's checkpoint, at the same shard positions as the real one
    for name in ("stream_arn", "shards", "floor_ms", "load_id"):
        assert committed["stream_state"][name] == json.loads(state.read_text())["streams"][0]["stream_state"][name]
