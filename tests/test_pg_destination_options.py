"""PostgreSQL destination options and sources end to end: the real ``olake`` commands, real clusters.

- ``table_prefix`` (one that needs quoting): every table is created with the prefix, full loads (Spark
  tasks' COPY) and changes land there and nowhere else, and ``state recover`` / ``read --state-from``
  read the prefixed tables' committed state.
- TLS: a target that accepts connections only over TLS (the session's ``tls_cluster``), as a role that
  must also present a client certificate, receives a ``sync`` (driver and Spark tasks) with ``sslmode``
  verify-full against the CA; a wrong CA, a plain connection and a missing client certificate fail
  with one line, the state file untouched, no password printed.
- MongoDB into PostgreSQL: every BSON type the source maps (ObjectId as text, Decimal128 as numeric,
  dates as timestamptz, documents and mixed fields as jsonb, ...) and a field name beyond PostgreSQL's
  63 bytes, checked column type by column type and value by value after the full load, after changes
  (``sync``, then ``read | write``) and after two fields drifted to wider types (a load anew).
- Enums: kept as the enum (and arrays of it) when the target has a type of that name, text otherwise;
  a target type lacking labels is a config error before anything is written.
- Row filter and transform into an Iceberg destination (a pyiceberg SQLite catalog).
"""

from __future__ import annotations

import json
import os
import uuid
from datetime import datetime, timedelta, UTC
from pathlib import Path

import psycopg
import pytest
from bson import Binary, Decimal128, Int64, ObjectId, json_util
from bson.datetime_ms import DatetimeMS
from psycopg import sql

from tests.support.cdc import discover_catalog, sync_once
from tests.support.cli import messages, read_into_write, run_olake, write_json
from tests.support.current_view import iceberg_rows
from tests.support.mongo import connect
from tests.support.pg_compare import assert_same_rows, table_texts
from tests.support.pgcluster import create_database
from tests.support.row_hooks import install_hooks
from tests.support.tls import CERT_USER, CERT_USER_PASSWORD
from tests.test_bad_input import assert_one_error


def _ok(result) -> str:
    assert result.returncode == 0, result.stderr.decode()[-3000:]
    return result.stderr.decode()


def _sync(src: str, dst: str, catalog: Path, state: Path) -> str:
    return _ok(run_olake("sync", "--source", src, "--destination", dst, "--catalog", str(catalog),
                         "--state", str(state)))


def _user_tables(dsn: str) -> set[tuple[str, str]]:
    """(schema, table) of every table outside the system schemas and olake's ``_olake``."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        return set(conn.execute("SELECT table_schema, table_name FROM information_schema.tables WHERE table_schema "
                                "NOT IN ('pg_catalog', 'information_schema', '_olake')").fetchall())


def _column_types(dsn: str, schema: str, table: str) -> dict[str, str]:
    """Column name -> format_type text of a target table."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        return dict(conn.execute("SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = "
                                 "%s::regclass AND attnum > 0 AND NOT attisdropped",
                                 (sql.Identifier(schema, table).as_string(conn),)).fetchall())


def _drop_slots(dsn: str, *slots: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        for slot in slots:
            conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))


# ----------------------------------------------------------------------------- table_prefix


def test_table_prefix_names_every_table_and_the_state_recovers_from_them(pg_cluster, pg_db, pg_target, target_db,
                                                                          tmp_path):
    source, target = pg_cluster.dsn(pg_db), pg_target.dsn(target_db)
    with psycopg.connect(source, autocommit=True) as conn:
        conn.execute("CREATE TABLE orders (id int PRIMARY KEY, amount numeric(10,2), note text)")
        conn.execute("INSERT INTO orders SELECT g, g * 1.25, 'order ' || g FROM generate_series(1, 60) g")
        conn.execute("CREATE TABLE tags (name text PRIMARY KEY, n int)")
        conn.execute("INSERT INTO tags VALUES ('a', 1), ('b', 2)")
    src = write_json(tmp_path / "src.json", pg_cluster.source_config(
        pg_db, replication_slot="slot_prefix", publication="pub_prefix", create_slot_and_publication=True,
        chunk_rows=20))
    dst = write_json(tmp_path / "dst.json", pg_target.destination_config(target_db, table_prefix="Pre-fix."))
    catalog, state = tmp_path / "cat.json", tmp_path / "state.json"
    discover_catalog(src, catalog, {"orders": "cdc", "tags": "incremental"}, cursor={"tags": "n"})
    orders, tags = ["id", "amount", "note"], ["name", "n"]

    def assert_copied() -> None:
        assert _user_tables(target) == {("public", "Pre-fix.orders"), ("public", "Pre-fix.tags")}
        assert_same_rows(source, ("public", "orders"), target, ("public", "Pre-fix.orders"), orders)
        assert_same_rows(source, ("public", "tags"), target, ("public", "Pre-fix.tags"), tags)

    loaded = _sync(src, dst, catalog, state)  # 3 chunks of orders, COPYed by the Spark tasks
    assert "created table public.Pre-fix.orders" in loaded and "created table public.Pre-fix.tags" in loaded
    assert_copied()
    with psycopg.connect(source, autocommit=True) as conn:
        conn.execute("INSERT INTO orders VALUES (100, 9.99, 'new')")
        conn.execute("UPDATE orders SET amount = 0, note = 'changed' WHERE id IN (1, 2)")
        conn.execute("UPDATE orders SET id = 200 WHERE id = 3")
        conn.execute("DELETE FROM orders WHERE id > 50 AND id < 100")
        conn.execute("INSERT INTO tags VALUES ('c', 3)")
    _sync(src, dst, catalog, state)
    assert_copied()
    with psycopg.connect(target, autocommit=True) as conn:
        kept = conn.execute("SELECT table_schema, table_name, stream_name FROM _olake.streams ORDER BY 2").fetchall()
    assert kept == [("public", "Pre-fix.orders", "orders"), ("public", "Pre-fix.tags", "tags")]

    saved = json.loads(state.read_text())
    state.unlink()
    recovered = run_olake("state", "recover", "--config", dst, "--catalog", str(catalog))
    _ok(recovered)
    [message] = messages(recovered.stdout)
    by_name = {s["stream_name"]: s for s in message["state"]["streams"]}
    for stream in saved["streams"]:
        assert by_name[stream["stream_name"]]["sync_type"] == stream["sync_type"]
        assert by_name[stream["stream_name"]]["stream_state"]["cursor_field"] == \
            stream["stream_state"]["cursor_field"], "the position committed with the prefixed table"
    unprefixed = write_json(tmp_path / "plain.json", pg_target.destination_config(target_db))
    nothing = run_olake("state", "recover", "--config", unprefixed, "--catalog", str(catalog))
    _ok(nothing)
    assert not messages(nothing.stdout)[0]["state"]["streams"], "tables without the prefix hold no state"

    with psycopg.connect(source, autocommit=True) as conn:
        conn.execute("UPDATE orders SET note = 'from state-from' WHERE id < 10")
        conn.execute("INSERT INTO tags VALUES ('d', 4)")
    direct = read_into_write(["--config", src, "--catalog", str(catalog), "--state-from", dst], ["--config", dst])
    assert direct.read_code == 0, direct.read_stderr.decode()[-3000:]
    assert direct.write_code == 0, direct.write_stderr.decode()[-3000:]
    assert b"full load" not in direct.read_stderr, "resumed from the prefixed tables' state, not loaded anew"
    assert_copied()
    _drop_slots(source, "slot_prefix")


# ----------------------------------------------------------------------------- TLS


def test_a_target_that_requires_tls_verify_full_and_one_line_failures(pg_cluster, pg_db, tls_cluster, certs,
                                                                       tmp_path):
    """``tls_cluster`` accepts TCP connections only over TLS (hostssl lines alone), and CERT_USER only with
    its client certificate: a load whose Spark tasks COPY their chunks as CERT_USER proves that every
    connection, the tasks' included, used TLS with the configured files."""
    database = f"tls_dst_{os.getpid()}"
    create_database(tls_cluster, database)
    with psycopg.connect(tls_cluster.dsn(), autocommit=True) as conn:  # CREATE on the database, no superuser
        conn.execute(sql.SQL("ALTER DATABASE {} OWNER TO {}").format(sql.Identifier(database),
                                                                     sql.Identifier(CERT_USER)))
    source, target = pg_cluster.dsn(pg_db), tls_cluster.dsn(database)
    with psycopg.connect(source, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY, v numeric(8,3), at timestamptz, note text)")
        conn.execute("INSERT INTO t SELECT g, g / 8.0, '2024-05-01 10:00:00.5+02'::timestamptz + g * interval "
                     "'1 second', 'row ' || g FROM generate_series(1, 40) g")
    src = write_json(tmp_path / "src.json", pg_cluster.source_config(
        pg_db, replication_slot="slot_tls", publication="pub_tls", create_slot_and_publication=True, chunk_rows=15))
    verified = dict(username=CERT_USER, password=CERT_USER_PASSWORD, sslmode="verify-full", sslrootcert=certs.ca,
                    sslcert=certs.client_cert, sslkey=certs.client_key, origin=None)
    dst = write_json(tmp_path / "dst.json", tls_cluster.destination_config(database, **verified))
    catalog, state = tmp_path / "cat.json", tmp_path / "state.json"
    discover_catalog(src, catalog, {"t": "cdc"})
    columns = ["id", "v", "at", "note"]
    secrets = (tls_cluster.password, pg_cluster.password, CERT_USER_PASSWORD)

    check = run_olake("check", "--config", dst)
    _ok(check)
    assert messages(check.stdout)[0]["connectionStatus"]["status"] == "SUCCEEDED"
    outputs = [check.stdout, check.stderr]
    loaded = run_olake("sync", "--source", src, "--destination", dst, "--catalog", str(catalog),
                       "--state", str(state))
    _ok(loaded)
    assert_same_rows(source, ("public", "t"), target, ("public", "t"), columns)
    with psycopg.connect(source, autocommit=True) as conn:
        conn.execute("UPDATE t SET v = -v, note = 'changed' WHERE id <= 5")
        conn.execute("DELETE FROM t WHERE id > 35")
        conn.execute("INSERT INTO t VALUES (41, 1.5, now(), 'new')")
    changed = run_olake("sync", "--source", src, "--destination", dst, "--catalog", str(catalog),
                        "--state", str(state))
    _ok(changed)
    assert_same_rows(source, ("public", "t"), target, ("public", "t"), columns)
    outputs += [loaded.stdout, loaded.stderr, changed.stdout, changed.stderr, state.read_bytes()]

    with psycopg.connect(source, autocommit=True) as conn:
        conn.execute("UPDATE t SET note = 'never arrives' WHERE id = 1")
    saved = state.read_bytes()
    where = f"127.0.0.1:{tls_cluster.port}"
    wrong_ca = write_json(tmp_path / "wrong-ca.json", tls_cluster.destination_config(
        database, **{**verified, "sslrootcert": certs.other_ca}))
    plain = write_json(tmp_path / "plain.json", tls_cluster.destination_config(
        database, **{**verified, "sslmode": "disable"}))
    no_cert = write_json(tmp_path / "no-cert.json", tls_cluster.destination_config(
        database, **{k: v for k, v in verified.items() if k not in ("sslcert", "sslkey")}))
    for config, needles in ((wrong_ca, (where, "does not verify", "'sslrootcert'", "certificate verify failed")),
                            (plain, (where, "only over TLS", "'sslmode'", "'disable'")),
                            (no_cert, (where, "refuses the client certificate", "'sslcert'"))):
        for command in ([["check", "--config", config]] if config == no_cert else []) + \
                [["sync", "--source", src, "--destination", config, "--catalog", str(catalog), "--state", str(state)]]:
            failed = run_olake(*command)
            outputs += [failed.stdout, failed.stderr]
            assert_one_error(failed, "config_error", *needles, secrets=secrets)
        assert state.read_bytes() == saved, "a failed run leaves the state file alone"
    assert table_texts(target, "public", "t", ["note"]).count(("changed",)) == 5, "nothing was written"
    for output in outputs:
        for secret in secrets:
            assert secret.encode() not in output, "a password was printed"
    _drop_slots(source, "slot_tls")


# ----------------------------------------------------------------------------- MongoDB into PostgreSQL

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_DECIMALS = ["12.30", "-0.000000000000000000000000000000001", "1E+6144", "9999999999999999999999999999999999",
             "NaN", "Infinity", "-Infinity", "0E-10"]
_DOUBLES = [1.5, -0.0, float("inf"), float("-inf"), float("nan"), 0.1, 1e300]
_MILLIS = [-62_135_596_800_000, 253_402_300_799_999, -1, 1_700_000_000_123, 0]
_LONG_FIELD = "a field name longer than the 63 bytes of a PostgreSQL identifier, ünïcode"  # 77 bytes
_LONG_COLUMN = _LONG_FIELD.encode()[:63].decode()  # PostgreSQL keeps the first 63 bytes


def _mongo_document(i: int) -> dict:
    """A document with every BSON type the source maps to a column (``mixed`` changes type with ``i``)."""
    return {
        "_id": ObjectId(f"65a0000000000000000000{i:02x}"), "i32": -i * 1000, "i64": Int64(2**62 + i),
        "dbl": _DOUBLES[i % len(_DOUBLES)], "s": f"text {i} é\t\\ \"q\"\n", "b": i % 2 == 0,
        "bin": Binary(bytes([i, 0, 255]), 0), "uid": uuid.UUID(int=i * 7919),
        "dec": Decimal128(_DECIMALS[i % len(_DECIMALS)]), "when": DatetimeMS(_MILLIS[i % len(_MILLIS)]),
        "sub": {"a": i, "b": {"c": f"deep {i}"}, "tags": ["x", None]},
        "mixed": [i, f"str {i}", {"k": i, "v": [1, "two"]}, None, Decimal128("1.10")][i % 5],
        "tags": [f"t{i}", "", "a,b", None], "nums": [i, -i, 2**31 - 1],
        "people": [{"name": f"p{i}", "age": i}, {"name": "q", "age": None}],
        "maybe": None if i % 3 else f"m{i}", _LONG_FIELD: i,
    }


_MONGO_TYPES = {"_id": "text", "i32": "integer", "i64": "bigint", "dbl": "double precision", "s": "text",
                "b": "boolean", "bin": "bytea", "uid": "uuid", "dec": "numeric", "when": "timestamp with time zone",
                "sub": "jsonb", "mixed": "jsonb", "tags": "text[]", "nums": "integer[]", "people": "jsonb",
                "maybe": "text", _LONG_COLUMN: "integer"}


def _decimal_text(value: Decimal128) -> str:
    """PostgreSQL's numeric text of a Decimal128: the exact digits in positional notation."""
    number = value.to_decimal()
    if number.is_nan():
        return "NaN"
    if number.is_infinite():
        return "Infinity" if number > 0 else "-Infinity"
    text = format(number, "f")
    return text[1:] if text.startswith("-") and number.is_zero() else text  # numeric has no -0


def _canonical(value) -> object:
    """A ``bson`` field's jsonb value: the value's canonical Extended JSON, parsed."""
    return None if value is None else json.loads(json_util.dumps(value, json_options=json_util.CANONICAL_JSON_OPTIONS))


def _expected_mongo_row(doc: dict, drifted: bool = False) -> dict:
    """The target row a document becomes (psycopg's Python values; jsonb as parsed JSON); ``drifted``:
    after ``s`` became ``bson`` (jsonb) and ``i32`` float64."""
    row = _expected_typed_row(doc)
    if drifted:
        row["s"], row["i32"] = _canonical(doc["s"]), None if doc["i32"] is None else float(doc["i32"])
    return row


def _expected_typed_row(doc: dict) -> dict:
    mixed = doc["mixed"]
    sub = doc["sub"]
    return {
        "_id": str(doc["_id"]), "i32": doc["i32"], "i64": int(doc["i64"]), "dbl": repr(doc["dbl"]), "s": doc["s"],
        "b": doc["b"], "bin": bytes(doc["bin"]), "uid": doc["uid"], "dec": _decimal_text(doc["dec"]),
        "when": _EPOCH + timedelta(milliseconds=int(doc["when"])),
        "sub": {"a": sub["a"], "b": sub["b"], "tags": sub["tags"]},
        "mixed": _canonical(mixed),
        "tags": doc["tags"], "nums": doc["nums"], "people": doc["people"], "maybe": doc["maybe"],
        _LONG_COLUMN: doc.get(_LONG_FIELD),
    }


def _target_mongo_rows(dsn: str, schema: str, table: str) -> dict[str, dict]:
    names = list(_MONGO_TYPES)
    with psycopg.connect(dsn, autocommit=True) as conn:
        listed = sql.SQL(", ").join(sql.SQL("{}::text").format(sql.Identifier(n)) if n == "dec"
                                    else sql.Identifier(n) for n in names)
        rows = conn.execute(sql.SQL("SELECT {} FROM {}").format(listed, sql.Identifier(schema, table))).fetchall()
    found = {}
    for values in rows:
        row = dict(zip(names, values))
        row["dbl"] = None if row["dbl"] is None else repr(row["dbl"])
        found[row["_id"]] = row
    return found


def _assert_mongo_target(uri: str, database: str, dsn: str, drifted: bool = False) -> int:
    with connect(uri) as client:
        docs = list(client[database].things.find())
    want = {str(d["_id"]): _expected_mongo_row(d, drifted) for d in docs}
    got = _target_mongo_rows(dsn, database, "things")
    assert got.keys() == want.keys(), (sorted(got.keys() - want.keys()), sorted(want.keys() - got.keys()))
    for key, row in want.items():
        for name, value in row.items():
            assert got[key][name] == value, (key, name, got[key][name], value)
    return len(want)


def test_mongodb_types_into_postgres_by_sync_and_read_write(mongo_server, mongo_db, pg_target, target_db,
                                                            tmp_path):
    with connect(mongo_server.uri) as client:
        client[mongo_db].things.insert_many([_mongo_document(i) for i in range(20)])
    src = write_json(tmp_path / "src.json", {"type": "mongodb", "uri": mongo_server.uri, "database": mongo_db,
                                             "chunk_documents": 8})
    dst = write_json(tmp_path / "dst.json", pg_target.destination_config(target_db))
    catalog, state = tmp_path / "cat.json", tmp_path / "state.json"
    discover_catalog(src, catalog, {"things": "cdc"})
    target = pg_target.dsn(target_db)

    loaded = _sync(src, dst, catalog, state)  # full load: 3 chunks COPYed by the Spark tasks
    assert f"the table's column is '{_LONG_COLUMN}'" in loaded, loaded
    assert _column_types(target, mongo_db, "things") == _MONGO_TYPES
    with psycopg.connect(target, autocommit=True) as conn:
        key = conn.execute("SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND "
                           "a.attnum = ANY(i.indkey) WHERE i.indrelid = %s::regclass AND i.indisprimary",
                           (f'"{mongo_db}".things',)).fetchall()
    assert key == [("_id",)]
    assert _assert_mongo_target(mongo_server.uri, mongo_db, target) == 20

    with connect(mongo_server.uri) as client:
        coll = client[mongo_db].things
        coll.insert_many([_mongo_document(i) for i in range(20, 24)])
        coll.update_one({"_id": _mongo_document(1)["_id"]},
                        {"$set": {"dec": Decimal128("-123456789012345678901234567890.1234"), "s": "updated",
                                  "when": DatetimeMS(-86_400_001), "sub.a": 99, "mixed": "now a string",
                                  "tags": [], "nums": None, _LONG_FIELD: -1}})
        coll.replace_one({"_id": _mongo_document(2)["_id"]}, {**_mongo_document(2), "dbl": -2.5, "maybe": "r"})
        coll.delete_many({"_id": {"$in": [_mongo_document(i)["_id"] for i in (3, 21)]}})
    _sync(src, dst, catalog, state)  # changes, by sync
    assert _assert_mongo_target(mongo_server.uri, mongo_db, target) == 22

    with connect(mongo_server.uri) as client:
        coll = client[mongo_db].things
        coll.insert_one(_mongo_document(30))
        coll.update_one({"_id": _mongo_document(4)["_id"]}, {"$set": {"dec": Decimal128("0.5"), "b": None,
                                                                      "mixed": {"new": [True]}}})
        coll.delete_one({"_id": _mongo_document(5)["_id"]})
    sync_once(src, catalog, dst, state)  # changes, by read | write
    assert _assert_mongo_target(mongo_server.uri, mongo_db, target) == 22
    assert _column_types(target, mongo_db, "things") == _MONGO_TYPES

    with connect(mongo_server.uri) as client:  # drift: 's' becomes mixed (bson), 'i32' float64
        client[mongo_db].things.insert_one({**_mongo_document(31), "s": 31, "i32": 1.5})
    drift = _sync(src, dst, catalog, state)
    assert "the stream is loaded anew on the next run" in drift, drift
    reloaded = _sync(src, dst, catalog, state)  # the load anew, under the wider types
    assert "gained or widened columns" in reloaded, reloaded
    assert _column_types(target, mongo_db, "things") == {**_MONGO_TYPES, "s": "jsonb", "i32": "double precision"}
    assert _assert_mongo_target(mongo_server.uri, mongo_db, target, drifted=True) == 23


# ----------------------------------------------------------------------------- enums

_MOODS = "('sad', 'ok', 'happy', 'très \"bien\"')"


def test_an_enum_stays_an_enum_where_the_target_has_the_type_and_is_text_elsewhere(pg_cluster, pg_db, pg_target,
                                                                                    target_db, tmp_path):
    """Into a target that has type ``mood`` by ``read | write``; into one without it by ``sync``, whose
    tasks copy ``mood_log`` (built-in types once the enum is text) straight from COPY to COPY."""
    source = pg_cluster.dsn(pg_db)
    with psycopg.connect(source, autocommit=True) as conn:
        conn.execute(f"CREATE TYPE mood AS ENUM {_MOODS}")
        conn.execute("CREATE TABLE feelings (id int PRIMARY KEY, m mood, ms mood[], note text)")
        conn.execute("""INSERT INTO feelings VALUES (1, 'sad', '{sad,happy}', 'a'), (2, 'très "bien"', '{}', 'b'),
                        (3, NULL, NULL, 'c'), (4, 'ok', ARRAY['ok', NULL, 'très "bien"']::mood[], 'd')""")
        conn.execute("CREATE TABLE mood_log (id int PRIMARY KEY, m mood NOT NULL, n int)")
        conn.execute("INSERT INTO mood_log SELECT g, (enum_range(NULL::mood))[1 + g % 4], g FROM generate_series(1, 30) g")
    with_type, without = target_db, f"{target_db}_text"
    create_database(pg_target, without)
    with psycopg.connect(pg_target.dsn(with_type), autocommit=True) as conn:
        conn.execute(f"CREATE TYPE mood AS ENUM {_MOODS}")
    src = write_json(tmp_path / "src.json", pg_cluster.source_config(
        pg_db, replication_slot="slot_enum", publication="pub_enum", create_slot_and_publication=True,
        chunk_rows=10))
    src_sync = write_json(tmp_path / "src_sync.json", pg_cluster.source_config(
        pg_db, replication_slot="slot_enum_sync", publication="pub_enum", create_slot_and_publication=True,
        chunk_rows=10))
    catalog = tmp_path / "cat.json"
    discover_catalog(src, catalog, {"feelings": "cdc", "mood_log": "cdc"})
    dst_with = write_json(tmp_path / "with.json", pg_target.destination_config(with_type))
    dst_without = write_json(tmp_path / "without.json", pg_target.destination_config(without))
    state_with, state_without = tmp_path / "with-state.json", tmp_path / "without-state.json"
    tables = {"feelings": ["id", "m", "ms", "note"], "mood_log": ["id", "m", "n"]}
    expected_types = {with_type: {"m": "mood", "ms": "mood[]"}, without: {"m": "text", "ms": "text[]"}}

    def copy_both() -> str:
        """``read | write`` into the target with the type, ``sync`` into the other; both equal the source."""
        sync_once(src, catalog, dst_with, state_with)
        synced = _sync(src_sync, dst_without, catalog, state_without)
        for name, types in expected_types.items():
            dsn = pg_target.dsn(name)
            for table, columns in tables.items():
                assert_same_rows(source, ("public", table), dsn, ("public", table), columns)
            assert {k: v for k, v in _column_types(dsn, "public", "feelings").items() if k in types} == types
            assert _column_types(dsn, "public", "mood_log")["m"] == types["m"]
        return synced

    synced = copy_both()  # full loads
    assert "the target has no type mood (column 'm'); it becomes text" in synced, synced
    assert "the target has no type mood[] (column 'ms'); it becomes text[]" in synced, synced
    with psycopg.connect(source, autocommit=True) as conn:
        conn.execute("INSERT INTO feelings VALUES (5, 'happy', '{happy,happy}', 'e')")
        conn.execute("UPDATE feelings SET m = 'ok', ms = array_append(ms, 'sad') WHERE id = 1")
        conn.execute("UPDATE feelings SET m = 'sad', ms = '{ok}' WHERE id = 3")
        conn.execute("UPDATE feelings SET id = 40 WHERE id = 4")
        conn.execute("DELETE FROM feelings WHERE id = 2")
        conn.execute("UPDATE mood_log SET m = 'très \"bien\"' WHERE id <= 3")
        conn.execute("INSERT INTO mood_log VALUES (31, 'sad', NULL)")
        conn.execute("DELETE FROM mood_log WHERE id = 30")
    copy_both()  # changes
    assert table_texts(pg_target.dsn(with_type), "public", "feelings", ["id", "m"])[0] == ("1", "ok")

    short = f"{target_db}_short"  # a type of that name lacking labels: one config error before anything
    create_database(pg_target, short)
    with psycopg.connect(pg_target.dsn(short), autocommit=True) as conn:
        conn.execute("CREATE TYPE mood AS ENUM ('sad', 'ok')")
    dst_short = write_json(tmp_path / "short.json", pg_target.destination_config(short))
    src_short = write_json(tmp_path / "src_short.json", pg_cluster.source_config(  # a pipeline of its own
        pg_db, replication_slot="slot_enum_short", publication="pub_enum", create_slot_and_publication=True,
        chunk_rows=10))
    refused = run_olake("sync", "--source", src_short, "--destination", dst_short, "--catalog", str(catalog),
                        "--state", str(tmp_path / "short-state.json"))
    slot_notes = [line for line in refused.stderr.splitlines() if b"replication slot 'slot_enum_short'" in line]
    assert len(slot_notes) == 3, refused.stderr.decode()  # claimed, created, its WAL: the source is prepared first
    refused.stderr = b"".join(line + b"\n" for line in refused.stderr.splitlines() if line not in slot_notes)
    assert_one_error(refused, "config_error", "table public.feelings (stream public.feelings): column 'm'",
                     "lacks the value(s) 'happy', 'très \"bien\"'", "ALTER TYPE mood ADD VALUE")
    assert _user_tables(pg_target.dsn(short)) == set(), "no table is created"
    assert not (tmp_path / "short-state.json").exists()
    _drop_slots(source, "slot_enum", "slot_enum_sync")
    with psycopg.connect(source, autocommit=True) as conn:
        conn.execute("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                     "WHERE slot_name = 'slot_enum_short'")


# ----------------------------------------------------------------------------- row filter and transform, Iceberg



def test_filter_and_transform_into_iceberg_for_loads_and_changes(pg_cluster, pg_db, tmp_path, monkeypatch):
    row_filter, transform = install_hooks(tmp_path, "olake_iceberg_hooks")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")])))
    source = pg_cluster.dsn(pg_db)
    with psycopg.connect(source, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY, note text, n numeric(6,2))")
        conn.execute("INSERT INTO t SELECT g, 'note ' || g, g / 4.0 FROM generate_series(1, 60) g")
    src = write_json(tmp_path / "src.json", pg_cluster.source_config(
        pg_db, replication_slot="slot_ice_hooks", publication="pub_ice_hooks", create_slot_and_publication=True,
        chunk_rows=20))
    catalog, state = tmp_path / "cat.json", tmp_path / "state.json"
    entry = discover_catalog(src, catalog, {"t": "cdc"})
    entry["streams"][0].update(row_filter=row_filter, transform=transform)
    catalog.write_text(json.dumps(entry))
    lake = tmp_path / "ice"
    dst = write_json(tmp_path / "ice.json", {"type": "iceberg", "path": str(lake)})

    def assert_hooked() -> None:
        with psycopg.connect(source, autocommit=True) as conn:
            want = conn.execute("SELECT id, upper(note), n::text FROM t WHERE id % 2 = 0 ORDER BY id").fetchall()
        rows = iceberg_rows(lake, "public", "t").sort_by("id")
        got = list(zip(rows.column("id").to_pylist(), rows.column("note").to_pylist(),
                       [None if n is None else str(n) for n in rows.column("n").to_pylist()]))
        assert got == [tuple(r) for r in want]

    def position() -> int:
        high, low = json.loads(state.read_text())["streams"][0]["stream_state"]["cursor_field"].split("/")
        return (int(high, 16) << 32) + int(low, 16)

    _sync(src, dst, catalog, state)  # full load
    assert_hooked()
    with psycopg.connect(source, autocommit=True) as conn:
        conn.execute("INSERT INTO t VALUES (61, 'odd, dropped', 1), (62, 'even, kept', 2)")
        conn.execute("UPDATE t SET note = 'changed', n = -n WHERE id IN (4, 7)")
        conn.execute("DELETE FROM t WHERE id IN (6, 9)")
        conn.execute("UPDATE t SET id = 100 WHERE id = 10")  # a key update: the old key is deleted
    _sync(src, dst, catalog, state)  # changes, by sync
    assert_hooked()
    with psycopg.connect(source, autocommit=True) as conn:
        conn.execute("INSERT INTO t VALUES (63, 'only odd rows in this transaction', 3)")
        conn.execute("UPDATE t SET note = 'odd again' WHERE id = 11")
        after = conn.execute("SELECT (pg_current_wal_insert_lsn() - '0/0'::pg_lsn)::bigint").fetchone()[0]
    piped = read_into_write(["--config", src, "--catalog", str(catalog), "--state", str(state)],
                            ["--config", dst, "--state", str(state)])  # everything filtered out, by read | write
    assert piped.read_code == 0 and piped.write_code == 0, piped.write_stderr.decode()[-3000:]
    assert position() >= after, "the state stayed before the filtered-out transactions"
    assert_hooked()
    _drop_slots(source, "slot_ice_hooks")



def test_which_replaced_column_types_change_in_place():
    """A column olake writes follows a type its source replaced (MongoDB drift): to jsonb from anything,
    to double precision from integers; nothing else that does not hold the old values."""
    from olake_cli.destinations.postgres.types import holds, replaces

    for planned, existing in (("jsonb", "text"), ("jsonb", "integer"), ("jsonb", "text[]"), ("jsonb", "boolean"),
                              ("double precision", "integer"), ("double precision", "bigint"),
                              ("double precision[]", "smallint[]"), ("jsonb[]", "text[]")):
        assert replaces(planned, existing) and not holds(existing, planned), (planned, existing)
    for planned, existing in (("text", "jsonb"), ("integer", "text"), ("real", "integer"), ("bigint", "numeric"),
                              ("double precision", "numeric"), ("double precision[]", "integer"), ("uuid", "text")):
        assert not replaces(planned, existing), (planned, existing)


def test_long_column_names_are_cut_as_postgresql_cuts_them():
    """PostgreSQL keeps the first 63 bytes of a name (whole characters): olake compares a long stream
    column with the table's column so, and refuses two columns that would become one."""
    from olake_cli.core.catalog import CatalogStream
    from olake_cli.core.errors import ConfigError
    from olake_cli.destinations.postgres.tables import check_identifiers, column_identifier

    assert column_identifier("short") == "short" and column_identifier("x" * 63) == "x" * 63
    assert column_identifier("x" * 62 + "é" + "tail") == "x" * 62, "a character is never cut in half"
    assert column_identifier(_LONG_FIELD) == _LONG_COLUMN
    stream = CatalogStream(name="s", namespace="n", json_schema={})
    logged: list[str] = []
    check_identifiers(stream, ("n", "s"), ["id", _LONG_FIELD], logged.append)
    assert logged == [f"n.s: column '{_LONG_FIELD}' is longer than PostgreSQL's 63 bytes; the table's column "
                      f"is '{_LONG_COLUMN}'"]
    with pytest.raises(ConfigError, match="are one column"):
        check_identifiers(stream, ("n", "s"), [_LONG_FIELD, _LONG_FIELD + " other"], logged.append)
