"""Every PostgreSQL type olake maps, with edge values, through the whole codec path.

fetch_columns -> select_expression -> ADBC scan -> encode_records -> JSON lines -> decode_rows ->
Parquet -> read back, compared value by value with what psycopg returns for the same rows.
"""

from __future__ import annotations

import datetime as dt
import math
import struct
from decimal import Decimal

import adbc_driver_postgresql.dbapi as adbc
import orjson
import psycopg
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from psycopg import sql
from psycopg.types import TypeInfo
from psycopg.types.datetime import DateLoader, TimeLoader, TimestampLoader, TimestamptzLoader
from psycopg.types.numeric import IntLoader
from psycopg.types.string import TextLoader

from olake_cli.core.codec.decode import decode_rows
from olake_cli.core.codec.types import arrow_schema
from olake_cli.core.record_lines import encode_records
from olake_cli.core.errors import SourceError
from olake_cli.sources.postgres.scan import PostgresChunkReader
from olake_cli.sources.postgres.wrapped_instants import instant_columns, instant_wire_columns
from olake_cli.sources.postgres.types import (
    SCAN_SESSION_SETTINGS, fetch_columns, json_schema_property, select_expression, shape_checks,
)

DDL = """
CREATE EXTENSION citext;
CREATE EXTENSION hstore;
CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy');
CREATE DOMAIN posint AS integer CHECK (VALUE > 0);
CREATE DOMAIN money2 AS numeric(12,2) NOT NULL;
CREATE TABLE everything (
  id int PRIMARY KEY, c_bool boolean, c_int2 smallint, c_int4 integer, c_int8 bigint, c_oid oid,
  c_float4 real, c_float8 double precision, c_dec38 numeric(38,10), c_dec numeric(10,2),
  c_num numeric, c_num50 numeric(50,5), c_text text, c_varchar varchar(20), c_char char(5),
  c_name name, c_citext citext, c_enum mood, c_inet inet, c_cidr cidr, c_macaddr macaddr,
  c_money money, c_timetz timetz, c_xml xml, c_bit bit(4), c_tsvector tsvector, c_hstore hstore,
  c_uuid uuid, c_json json, c_jsonb jsonb, c_bytea bytea, c_date date, c_time time,
  c_ts timestamp, c_ts3 timestamp(3), c_tstz timestamptz, c_interval interval,
  a_int int[], a_text text[], a_dec numeric(10,2)[], a_tstz timestamptz[], a_enum mood[],
  a_interval interval[], a_uuid uuid[], a_bytea bytea[], a_float8 float8[], a_date date[],
  a_bool bool[], a_char char(3)[], a_jsonb jsonb[],
  c_domain posint, c_money2 money2, c_notnull int NOT NULL, c_negscale numeric(5,-2),
  c_bigscale numeric(3,5), a_domain posint[]
);
"""
TEXT_1 = 'quote " backslash \\ newline \n tab \t cr \r bell \x07 esc \x1b emoji \U0001F600 ünï'
ROWS = [
    # 1: every nullable column NULL
    "INSERT INTO everything (id, c_money2, c_notnull) VALUES (1, 0, 0)",
    # 2: ordinary values
    """INSERT INTO everything VALUES (2, true, 12, 1234, 1234567890123, 4000000000, 1.5, 0.1,
      1234.5678900000, 12.30, 3.14159, 1.00000, %(t1)s, 'var', 'ab', 'nm', 'CaSe', 'ok',
      '192.168.1.5/24', '10.0.0.0/8', '08:00:2b:01:02:03', 1234.56, '23:59:59.999999+03',
      '<a>x</a>', B'1010', 'a fat:2 cat', 'k=>v, "x y"=>NULL',
      'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '{ "a" : [1, 2.50, {"b": null}],  "c": "d" }',
      '{"b": [1, 2], "a": {"x": "y"}}', '\\x00ff00deadbeef00', '2024-02-29', '12:34:56.789012',
      '2024-02-29 12:34:56.123456', '2024-02-29 12:34:56.123', '2024-02-29 12:34:56.123456+05:30',
      '1 year 2 mons -3 days 04:05:06.789', '{1,NULL,3}', %(tarr)s, '{1.50,NULL,-2.25}',
      '{"2020-01-01 00:00:00.5+00",NULL,"1999-12-31 23:59:59.999999-08"}', '{sad,NULL,happy}',
      '{"1 day",NULL,"-1 mon 00:00:00.000001"}', '{a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11,NULL}',
      '{"\\\\x00",NULL,"\\\\x"}', '{1.5,NaN,NULL,-Infinity}', '{2020-01-01,NULL,infinity}',
      '{t,f,NULL}', '{"a",NULL,"bc"}', ARRAY['{"k": 1}'::jsonb, NULL], 7, 12.34, 1, 12345,
      0.00123, '{1,NULL}')""",
    # 3: maxima, +infinities, NaN
    """INSERT INTO everything (id, c_bool, c_int2, c_int4, c_int8, c_oid, c_float4, c_float8,
      c_dec38, c_dec, c_num, c_num50, c_text, c_uuid, c_json, c_jsonb, c_bytea, c_date, c_time,
      c_ts, c_ts3, c_tstz, c_interval, a_int, a_text, a_tstz, a_float8, c_money2, c_notnull)
      VALUES (3, false, 32767, 2147483647, 9223372036854775807, 4294967295, 'Infinity', 'NaN',
      9999999999999999999999999999.9999999999, 'NaN', 'Infinity', 'NaN', '', 
      'ffffffff-ffff-ffff-ffff-ffffffffffff', '[]', '[]', '', 'infinity', '23:59:59.999999',
      'infinity', '9999-12-31 23:59:59.999', 'infinity',
      '178000000 years 2147483647 days 2562047788:00:54.775807', '{}', '{""}', '{infinity}',
      '{Infinity}', 99999.99, 2147483647)""",
    # 4: minima, -infinities, negative zero, other zones
    """INSERT INTO everything (id, c_int2, c_int4, c_int8, c_oid, c_float4, c_float8, c_dec38,
      c_dec, c_num, c_num50, c_text, c_json, c_jsonb, c_date, c_time, c_ts, c_ts3, c_tstz,
      c_interval, a_tstz, c_money2, c_notnull)
      VALUES (4, -32768, -2147483648, -9223372036854775808, 0, '-Infinity', '-0',
      -9999999999999999999999999999.9999999999, -99999999.99, %(big)s, -0.00001, %(long)s,
      '"x"', 'null', '-infinity', '00:00:00', '-infinity', '0001-01-01 00:00:00',
      '-infinity', '-178000000 years -2147483648 days -2562047788:00:54.775807', '{-infinity}',
      -0.01, -2147483648)""",
    # 5: more corner cases
    """INSERT INTO everything (id, c_float4, c_float8, c_dec, c_num, c_date, c_time, c_ts, c_tstz,
      c_interval, c_money2, c_notnull)
      VALUES (5, 3.4028235e38, 1.7976931348623157e308, 0, '-Infinity', '0001-01-01', '24:00:00',
      '1970-01-01 00:00:00', '2024-06-30 23:59:59.999999-12:45', '-1 day -00:00:00.000001',
      0.00, 5)""",
    """INSERT INTO everything (id, c_float8, c_num, c_money2, c_notnull)
      VALUES (6, 4.9e-324, 0.000000000000000000001000, 1, 6)""",
]
BIG_NUMERIC = "-" + "9" * 999 + ".5"  # 1000 digits, unconstrained numeric
EXPECTED_OLAKE_TYPES = {
    "id": "int32", "c_bool": "bool", "c_int2": "int16", "c_int4": "int32", "c_int8": "int64",
    "c_oid": "int64", "c_float4": "float32", "c_float8": "float64", "c_dec38": "decimal(38,10)",
    "c_dec": "decimal(10,2)", "c_num": "numeric", "c_num50": "numeric", "c_text": "string",
    "c_varchar": "string", "c_char": "string", "c_name": "string", "c_citext": "string",
    "c_enum": "string", "c_inet": "string", "c_cidr": "string", "c_macaddr": "string",
    "c_money": "string", "c_timetz": "string", "c_xml": "string", "c_bit": "string",
    "c_tsvector": "string", "c_hstore": "string", "c_uuid": "uuid", "c_json": "json",
    "c_jsonb": "json", "c_bytea": "bytes", "c_date": "date", "c_time": "time",
    "c_ts": "timestamp", "c_ts3": "timestamp", "c_tstz": "timestamptz", "c_interval": "interval",
    "a_int": "array<int32>", "a_text": "array<string>", "a_dec": "array<decimal(10,2)>",
    "a_tstz": "array<timestamptz>", "a_enum": "array<string>", "a_interval": "array<interval>",
    "a_uuid": "array<uuid>", "a_bytea": "array<bytes>", "a_float8": "array<float64>",
    "a_date": "array<date>", "a_bool": "array<bool>", "a_char": "array<string>",
    "a_jsonb": "array<json>", "c_domain": "int32", "c_money2": "decimal(12,2)",
    "c_notnull": "int32", "c_negscale": "numeric", "c_bigscale": "numeric",
    "a_domain": "array<int32>",
}
EPOCH = dt.datetime(1970, 1, 1)
UTC_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def _infinity_aware(loader_class: type) -> type:
    """A psycopg text loader that yields INT max/min markers instead of failing on infinities."""

    class Loader(loader_class):
        def load(self, data):
            text = bytes(data)
            if text in (b"infinity", b"-infinity", b"24:00:00"):
                return text.decode()
            return super().load(data)

    return Loader


def expected_connection(dsn: str) -> psycopg.Connection:
    """A psycopg connection whose loaders keep PG's own text where Python types cannot hold it."""
    conn = psycopg.connect(dsn)
    conn.execute("SET TimeZone = 'UTC'")
    conn.execute("SET IntervalStyle = 'iso_8601'")
    for name in ("inet", "cidr", "macaddr", "money", "timetz", "xml", "bit", "tsvector", "json",
                 "jsonb", "interval"):
        conn.adapters.register_loader(name, TextLoader)
    TypeInfo.fetch(conn, "mood").register(conn)  # so mood[] loads as a list of labels
    posint = TypeInfo.fetch(conn, "posint")  # and posint[] as a list of ints
    posint.register(conn)
    conn.adapters.register_loader(posint.oid, IntLoader)
    conn.adapters.register_loader("date", _infinity_aware(DateLoader))
    conn.adapters.register_loader("time", _infinity_aware(TimeLoader))
    conn.adapters.register_loader("timestamp", _infinity_aware(TimestampLoader))
    conn.adapters.register_loader("timestamptz", _infinity_aware(TimestamptzLoader))
    return conn


def comparable_expected(olake_type: str, value):
    """psycopg's value in the form the Parquet side is compared in."""
    if value is None:
        return None
    if olake_type.startswith("array<"):
        return [comparable_expected(olake_type[6:-1], v) for v in value]
    infinities = {"date": (2**31 - 1, -(2**31)), "timestamp": (2**63 - 1, -(2**63)),
                  "timestamptz": (2**63 - 1, -(2**63))}
    if value in ("infinity", "-infinity"):
        return infinities[olake_type][value == "-infinity"]
    if olake_type == "date":
        return (value - dt.date(1970, 1, 1)).days
    if olake_type == "time":
        if value == "24:00:00":
            return 86_400_000_000
        return ((value.hour * 60 + value.minute) * 60 + value.second) * 1_000_000 + value.microsecond
    if olake_type in ("timestamp", "timestamptz"):
        delta = value - (UTC_EPOCH if value.tzinfo else EPOCH)
        return (delta.days * 86400 + delta.seconds) * 1_000_000 + delta.microseconds
    if olake_type.startswith("float"):
        return _float_key(value, olake_type)
    if olake_type.startswith("decimal"):
        return None if value.is_nan() else value.as_tuple()
    if olake_type == "numeric":
        return str(value) if not value.is_finite() else value.as_tuple()
    return value


def _float_key(value: float, olake_type: str):
    if olake_type == "float32":
        value = struct.unpack("f", struct.pack("f", value))[0]
    return "nan" if math.isnan(value) else (value, math.copysign(1.0, value))


def comparable_actual(olake_type: str, array: pa.Array, conn: psycopg.Connection) -> list:
    """The Parquet column as comparable Python values (raw ints for temporal types)."""
    if olake_type.startswith("array<"):
        inner = comparable_actual(olake_type[6:-1], array.flatten(), conn)
        out, pos = [], 0
        for length in array.value_lengths().to_pylist():
            out.append(None if length is None else inner[pos:pos + length])
            pos += length or 0
        return out
    if olake_type in ("date", "time", "timestamp", "timestamptz"):
        return array.view(pa.int32() if olake_type == "date" else pa.int64()).to_pylist()
    values = array.to_pylist()
    if olake_type.startswith("float"):
        return [None if v is None else _float_key(v, olake_type) for v in values]
    if olake_type.startswith("decimal"):
        return [None if v is None else v.as_tuple() for v in values]
    if olake_type == "numeric":
        return [None if v is None else (v if v in ("NaN", "Infinity", "-Infinity")
                                        else Decimal(v).as_tuple()) for v in values]
    if olake_type == "interval":
        return [None if v is None else _interval_text(conn, v) for v in values]
    return values


def _interval_text(conn: psycopg.Connection, value: dict) -> str:
    """Rebuild the interval in PostgreSQL from its three fields and return PG's iso_8601 text."""
    literal = f"{value['months']} months {value['days']} days {value['microseconds']} microseconds"
    return conn.execute("SELECT %s::interval::text", (literal,)).fetchone()[0]


def create_everything(conn: psycopg.Connection) -> None:
    """Table ``public.everything``: a column of every supported type, its rows of edge values."""
    conn.execute(DDL)
    params = {"t1": TEXT_1, "tarr": ["", "a,b", 'q"uote', "back\\slash", None, "NULL", " sp "],
              "big": BIG_NUMERIC, "long": "x" * 100_000}
    for statement in ROWS:
        conn.execute(statement, {k: v for k, v in params.items() if f"%({k})s" in statement})


@pytest.fixture()
def everything_db(pg_cluster, pg_db) -> str:
    with psycopg.connect(pg_cluster.dsn(pg_db), autocommit=True) as conn:
        create_everything(conn)
    return pg_db


def scan_with_adbc(uri: str, select: sql.Composable, dsn: str) -> pa.Table:
    """Run the chunk-scan SELECT through ADBC with the scan session settings."""
    with psycopg.connect(dsn) as conn:
        query = select.as_string(conn)
    with adbc.connect(uri) as conn, conn.cursor() as cur:
        for key, value in SCAN_SESSION_SETTINGS.items():
            cur.execute(f"SET {key} = '{value}'")
        cur.execute(query)
        return cur.fetch_arrow_table()


def select_all(columns) -> sql.Composable:
    return sql.SQL("SELECT {} FROM public.everything ORDER BY id").format(
        sql.SQL(", ").join(select_expression(col) for col in columns))


def test_fetch_columns_maps_every_type(pg_cluster, everything_db):
    with psycopg.connect(pg_cluster.dsn(everything_db)) as conn:
        columns = fetch_columns(conn, "public", "everything")
    assert {c.name: c.olake_type for c in columns} == EXPECTED_OLAKE_TYPES
    assert [c.name for c in columns] == list(EXPECTED_OLAKE_TYPES)
    by_name = {c.name: c for c in columns}
    assert by_name["c_enum"].enum_labels == ("sad", "ok", "happy")
    assert by_name["a_enum"].enum_labels == ("sad", "ok", "happy")
    assert by_name["c_domain"].type_name == "integer" and by_name["c_domain"].type_oid == 23
    assert by_name["c_money2"].type_name == "numeric(12,2)" and not by_name["c_money2"].nullable
    assert by_name["a_dec"].element_oid == 1700 and by_name["a_dec"].category == "A"
    assert not by_name["id"].nullable and by_name["c_int4"].nullable
    assert json_schema_property(by_name["c_dec"]) == {
        "type": ["null", "string"], "x-olake-type": "decimal(10,2)", "x-pg-type": "numeric(10,2)"}
    assert json_schema_property(by_name["c_enum"])["enum"] == ["sad", "ok", "happy", None]
    assert json_schema_property(by_name["c_int8"])["type"] == ["null", "integer"]
    assert json_schema_property(by_name["c_float4"])["type"] == ["null", "number", "string"]
    assert json_schema_property(by_name["c_bytea"])["contentEncoding"] == "base64"
    assert json_schema_property(by_name["c_tstz"])["format"] == "date-time"
    assert json_schema_property(by_name["a_int"])["items"]["type"] == ["null", "integer"]
    assert json_schema_property(by_name["c_interval"])["type"] == ["null", "object"]
    assert json_schema_property(by_name["id"])["type"] == ["integer"]


def test_every_type_round_trips_through_json_lines_and_parquet(pg_cluster, everything_db, tmp_path):
    dsn = pg_cluster.dsn(everything_db)
    with psycopg.connect(dsn) as conn:
        columns = fetch_columns(conn, "public", "everything")
    json_schema = {"type": "object",
                   "properties": {c.name: json_schema_property(c) for c in columns}}
    scanned = scan_with_adbc(pg_cluster.uri(everything_db), select_all(columns), dsn)
    assert scanned.num_rows == len(ROWS)

    lines = b"".join(encode_records(batch, json_schema, "everything", "public", 1700000000000, {"_olake_op": "r"},
                                    wire_columns=instant_wire_columns(batch, instant_columns(columns)))
                     for batch in scanned.to_batches())
    messages = [orjson.loads(line) for line in lines.splitlines()]
    assert len(messages) == len(ROWS)
    assert messages[0]["record"]["stream"] == "everything"
    assert messages[0]["record"]["namespace"] == "public"
    assert messages[0]["record"]["data"]["_olake_op"] == "r"
    table, warnings = decode_rows([m["record"]["data"] for m in messages], json_schema)
    assert warnings == ["column 'c_dec': 1 NaN value(s) stored as null in decimal(10,2)"]

    pq.write_table(table, tmp_path / "everything.parquet")
    back = pq.read_table(tmp_path / "everything.parquet")
    assert back.schema.equals(arrow_schema(json_schema)), back.schema

    with expected_connection(dsn) as conn:
        cursor = conn.execute("SELECT * FROM everything ORDER BY id")
        expected_rows = cursor.fetchall()
        for index, column in enumerate(columns):
            expected = [comparable_expected(column.olake_type, row[index]) for row in expected_rows]
            actual = comparable_actual(column.olake_type, back.column(column.name).combine_chunks(),
                                       conn)
            assert actual == expected, column.name


def test_wire_values_are_the_documented_ones(pg_cluster, everything_db):
    dsn = pg_cluster.dsn(everything_db)
    with psycopg.connect(dsn) as conn:
        columns = fetch_columns(conn, "public", "everything")
    json_schema = {"properties": {c.name: json_schema_property(c) for c in columns}}
    scanned = scan_with_adbc(pg_cluster.uri(everything_db), select_all(columns), dsn)
    batch = scanned.to_batches()[0]
    lines = encode_records(batch, json_schema, "everything", None, 1,
                           wire_columns=instant_wire_columns(batch, instant_columns(columns)))
    rows = [orjson.loads(line)["record"] for line in lines.splitlines()]
    assert "namespace" not in rows[0]
    row2, row3, row4, row5 = (r["data"] for r in rows[1:5])
    assert row2["c_dec"] == "12.30" and row2["c_num50"] == "1.00000"
    assert row2["c_bytea"] == "AP8A3q2+7wA="
    assert row2["c_ts"] == "2024-02-29T12:34:56.123456"
    assert row2["c_tstz"] == "2024-02-29T07:04:56.123456+00:00"
    assert row2["c_time"] == "12:34:56.789012" and row2["c_date"] == "2024-02-29"
    assert row2["c_interval"] == {"months": 14, "days": -3, "microseconds": 14706789000}
    assert row2["a_interval"] == [{"months": 0, "days": 1, "microseconds": 0}, None,
                                  {"months": -1, "days": 0, "microseconds": 1}]
    assert row2["c_json"] == '{ "a" : [1, 2.50, {"b": null}],  "c": "d" }'
    assert row2["c_jsonb"] == '{"a": {"x": "y"}, "b": [1, 2]}'
    assert row2["c_char"] == "ab   " and row2["a_char"] == ["a  ", None, "bc "]
    assert row2["c_text"] == TEXT_1 and row2["c_enum"] == "ok"
    assert row2["a_float8"] == [1.5, "NaN", None, "-Infinity"]
    assert row2["a_date"] == ["2020-01-01", None, "infinity"]
    assert row3["c_int8"] == 9223372036854775807 and row3["c_oid"] == 4294967295
    assert row3["c_float4"] == "Infinity" and row3["c_float8"] == "NaN"
    assert row3["c_dec"] == "NaN" and row3["c_num"] == "Infinity"
    assert row3["c_date"] == "infinity" and row3["c_ts"] == "infinity"
    assert row3["c_tstz"] == "infinity" and row3["a_tstz"] == ["infinity"]
    assert row3["c_interval"] == {"months": 2136000000, "days": 2147483647,
                                  "microseconds": 9223372036854775807}
    assert row4["c_int8"] == -9223372036854775808 and row4["c_float8"] == -0.0
    assert row4["c_num"] == BIG_NUMERIC and row4["c_tstz"] == "-infinity"
    assert row4["c_ts3"] == "0001-01-01T00:00:00.000000"
    assert row5["c_time"] == "24:00:00.000000"
    assert row5["c_tstz"] == "2024-07-01T12:44:59.999999+00:00"


def test_dates_and_timestamps_of_every_year_round_trip_exactly(pg_cluster, pg_db, tmp_path):
    """BC, beyond 9999, the ends of PostgreSQL's range: Parquet holds the server's own day and
    microsecond counts since 1970 (infinities as int max/min)."""
    dsn = pg_cluster.dsn(pg_db)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE old (id int PRIMARY KEY, d date, ts timestamp, tz timestamptz)")
        conn.execute("""INSERT INTO old VALUES
          (1, '4714-11-24 BC', '4714-11-24 00:00:00 BC', '4714-11-24 00:00:00+00 BC'),
          (2, '0044-03-15 BC', '0044-03-15 12:00:00.000001 BC', '0001-12-31 23:59:59.999999+00 BC'),
          (3, '10000-01-01', '12345-06-07 08:09:10.5', '294247-01-10 04:00:54.775806+00'),
          (4, '5874897-12-31', '294247-01-10 04:00:54.775806', '2000-01-01 00:00:00+05'),
          (5, 'infinity', '-infinity', 'infinity'), (6, NULL, NULL, NULL)""")
        columns = fetch_columns(conn, "public", "old")
        expected = conn.execute("""SELECT
            CASE d WHEN 'infinity' THEN 2147483647 WHEN '-infinity' THEN -2147483648
              ELSE d - '1970-01-01'::date END,
            CASE ts WHEN 'infinity' THEN 9223372036854775807 WHEN '-infinity' THEN -9223372036854775808
              ELSE (extract(epoch FROM ts) * 1000000)::int8 END,
            CASE tz WHEN 'infinity' THEN 9223372036854775807 WHEN '-infinity' THEN -9223372036854775808
              ELSE (extract(epoch FROM tz) * 1000000)::int8 END
                                 FROM old ORDER BY id""").fetchall()
    json_schema = {"properties": {c.name: json_schema_property(c) for c in columns}}
    select = sql.SQL("SELECT {} FROM old ORDER BY id").format(
        sql.SQL(", ").join(select_expression(c) for c in columns))
    scanned = scan_with_adbc(pg_cluster.uri(pg_db), select, dsn)
    batch = scanned.to_batches()[0]
    lines = encode_records(batch, json_schema, "old", "public", 1,
                           wire_columns=instant_wire_columns(batch, instant_columns(columns)))
    data = [orjson.loads(line)["record"]["data"] for line in lines.splitlines()]
    assert data[0]["d"] == "4714-11-24 BC" and data[2]["ts"] == "12345-06-07T08:09:10.500000"
    table, _ = decode_rows(data, json_schema)
    pq.write_table(table, tmp_path / "old.parquet")
    back = pq.read_table(tmp_path / "old.parquet")
    actual = list(zip(back.column("d").combine_chunks().view(pa.int32()).to_pylist(),
                      *(back.column(c).combine_chunks().view(pa.int64()).to_pylist() for c in ("ts", "tz"))))
    assert actual == [tuple(row) for row in expected]


def test_a_value_of_another_shape_in_a_one_dimensional_column_fails_the_scan_naming_column_and_key(
        pg_cluster, pg_db):
    """ADBC would flatten it and drop its bounds: the shape check beside the column stops the scan."""
    dsn = pg_cluster.dsn(pg_db)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE grid (id int PRIMARY KEY, m int[])")
        conn.execute("INSERT INTO grid VALUES (1, '{1,2}'), (2, '{{1,2},{3,4}}'), (3, '[0:1]={5,6}'), (4, '{}')")
        columns = fetch_columns(conn, "public", "grid")  # no catalog: the declared dimension
        checks = shape_checks(columns)
        queries = {wanted: sql.SQL("SELECT {}, {} AS olake_shape_0 FROM grid WHERE id IN {} ORDER BY id").format(
            sql.SQL(", ").join(select_expression(c) for c in columns), checks[0][1],
            sql.SQL(wanted)).as_string(conn) for wanted in ("(1, 4)", "(1, 2)", "(3)")}
    assert [c.name for c, _ in checks] == ["m"]

    def reader(where: str) -> PostgresChunkReader:
        return PostgresChunkReader("public.grid", 0, queries[where], pg_cluster.uri(pg_db), None,
                                   key_columns=("id",), shape_checks=(("m", "array<int32>"),))

    batches = list(reader("(1, 4)").read_batches())
    assert [b.schema.names for b in batches] == [["id", "m"]]  # the check column is dropped
    assert batches[0].column("m").to_pylist() == [[1, 2], []]
    for where, key, dims in (("(1, 2)", 2, r"\[1:2\]\[1:2\]"), ("(3)", 3, r"\[0:1\]")):
        with pytest.raises(SourceError, match=rf"stream 'public.grid', column 'm', row with key id={key}: an array "
                                              rf"with dimensions {dims} in a column of type array<int32> .*"
                                              "run discover again"):
            list(reader(where).read_batches())
