"""Verify fixtures/postgres/demo.sql: it loads (with psycopg and with psql, repeatedly) and holds what it promises."""

from __future__ import annotations

import hashlib
import math
import os
import subprocess
import uuid
from datetime import date, datetime, time, timedelta, timezone, UTC
from decimal import Decimal
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from tests.support.pgcluster import create_database

DEMO_SQL = Path(__file__).resolve().parents[1] / "fixtures" / "postgres" / "demo.sql"

EXPECTED_ROW_COUNTS = {
    ("shop", "customers"): 2003, ("shop", "products"): 510, ("shop", "orders"): 20000,
    ("shop", "order_items"): 12001, ("shop", "payments"): 3001, ("shop", "page_views"): 3003,
    ("shop", "events"): 3000, ("shop", "all_types"): 6, ("public", "app_settings"): 4,
    ("shop", "events_2024_q1"): 1000, ("shop", "events_2024_q2"): 1000, ("shop", "events_2024_q3"): 1000,
}
TOP_LEVEL_TABLES = [key for key in EXPECTED_ROW_COUNTS if not key[1].startswith("events_2024")]
UTC = UTC
MIN_ID, MAX_ID = -(2**63), 2**63 - 1


def customer_uuid(n: int) -> uuid.UUID:
    """The uuid demo.sql derives with md5('customer-' || n)::uuid."""
    return uuid.UUID(hashlib.md5(f"customer-{n}".encode()).hexdigest())


@pytest.fixture(scope="module")
def demo_db(pg_cluster) -> str:
    """A fresh database, shared by this module, into which demo.sql was loaded with psycopg."""
    name = f"fixture_demo_{os.getpid()}"
    create_database(pg_cluster, name)
    with psycopg.connect(pg_cluster.dsn(name), autocommit=True) as conn:
        conn.execute(DEMO_SQL.read_text(encoding="utf-8"))
    return name


@pytest.fixture()
def demo_conn(pg_cluster, demo_db):
    """An autocommit connection (TimeZone UTC) to the loaded demo database."""
    with psycopg.connect(pg_cluster.dsn(demo_db), autocommit=True) as conn:
        conn.execute("SET TimeZone = 'UTC'")
        yield conn


def row_counts(conn: psycopg.Connection) -> dict[tuple[str, str], int]:
    """Row count of every table named in EXPECTED_ROW_COUNTS."""
    query = "SELECT count(*) FROM {}.{}"
    return {(schema, table): conn.execute(sql.SQL(query).format(sql.Identifier(schema), sql.Identifier(table)))
            .fetchone()[0] for schema, table in EXPECTED_ROW_COUNTS}


def test_row_counts(demo_conn):
    assert row_counts(demo_conn) == EXPECTED_ROW_COUNTS


def test_reload_with_psql_is_idempotent(pg_cluster, demo_conn):
    """Running the file again through psql (single transaction, stop on error) recreates the same data."""
    # Leaves the shared database exactly as loaded: the extra order is dropped by the reload.
    dbname = demo_conn.info.dbname
    demo_conn.execute("INSERT INTO shop.orders (updated_at) VALUES (now())")
    env = dict(os.environ, PGPASSWORD=pg_cluster.password)
    result = subprocess.run(
        [os.path.join(pg_cluster.bin_dir, "psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1", "--single-transaction",
         "-h", pg_cluster.host, "-p", str(pg_cluster.port), "-U", pg_cluster.superuser, "-d", dbname,
         "-f", str(DEMO_SQL)], env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert row_counts(demo_conn) == EXPECTED_ROW_COUNTS
    with demo_conn.transaction(force_rollback=True):
        insert = "INSERT INTO shop.orders (updated_at) VALUES (now()) RETURNING order_id"
        assert demo_conn.execute(insert).fetchone() == (20001,)
    assert row_counts(demo_conn) == EXPECTED_ROW_COUNTS


def test_table_kinds_and_keys(demo_conn):
    kinds = dict(demo_conn.execute(
        "SELECT c.relname, c.relkind::text || (CASE WHEN c.relispartition THEN '+partition' ELSE '' END) "
        "FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname IN ('shop', 'public') AND c.relkind IN ('r', 'p')").fetchall())
    assert kinds == {"customers": "r", "products": "r", "orders": "r", "order_items": "r", "payments": "r",
                     "page_views": "r", "all_types": "r", "app_settings": "r", "events": "p",
                     "events_2024_q1": "r+partition", "events_2024_q2": "r+partition",
                     "events_2024_q3": "r+partition"}
    keys = dict(demo_conn.execute(
        "SELECT c.relname, array_agg(a.attname || ':' || format_type(a.atttypid, a.atttypmod) "
        "                            ORDER BY array_position(i.indkey, a.attnum)) "
        "FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid JOIN pg_namespace n ON n.oid = c.relnamespace "
        "JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = ANY (i.indkey) "
        "WHERE i.indisprimary AND n.nspname IN ('shop', 'public') AND NOT c.relispartition "
        "GROUP BY c.relname").fetchall())
    assert keys == {"customers": ["customer_id:uuid"], "products": ["sku:text"], "orders": ["order_id:bigint"],
                    "order_items": ["order_id:bigint", "line_no:smallint"], "payments": ["payment_id:integer"],
                    "events": ["event_id:bigint", "occurred_at:timestamp with time zone"],
                    "all_types": ["id:bigint"], "app_settings": ["setting_key:text"]}


def test_every_keyed_table_has_a_not_null_updated_at_cursor(demo_conn):
    rows = demo_conn.execute(
        "SELECT table_name, data_type, is_nullable FROM information_schema.columns "
        "WHERE table_schema IN ('shop', 'public') AND column_name = 'updated_at' "
        "AND table_name NOT LIKE 'events_2024%' ORDER BY table_name").fetchall()
    expected = ["all_types", "app_settings", "customers", "events", "order_items", "orders", "payments", "products"]
    assert rows == [(name, "timestamp with time zone", "NO") for name in expected]


def test_every_table_has_a_row_with_all_nullable_columns_null(demo_conn):
    for schema, table in TOP_LEVEL_TABLES:
        columns = [name for (name,) in demo_conn.execute(
            "SELECT column_name FROM information_schema.columns "
            "WHERE table_schema = %s AND table_name = %s AND is_nullable = 'YES'", (schema, table))]
        assert len(columns) >= 2, (schema, table)
        condition = sql.SQL(" AND ").join(sql.SQL("{} IS NULL").format(sql.Identifier(c)) for c in columns)
        query = sql.SQL("SELECT count(*) FROM {}.{} WHERE {}").format(
            sql.Identifier(schema), sql.Identifier(table), condition)
        expected = 2 if table == "page_views" else 1
        assert demo_conn.execute(query).fetchone()[0] == expected, (schema, table)


def test_all_types_covers_every_type(demo_conn):
    types = [row[0] for row in demo_conn.execute(
        "SELECT format_type(atttypid, atttypmod) FROM pg_attribute "
        "WHERE attrelid = 'shop.all_types'::regclass AND attnum > 0 AND NOT attisdropped ORDER BY attnum")]
    assert types == [
        "bigint", "smallint", "integer", "bigint", "real", "double precision", "numeric(12,2)",
        "numeric(38,10)", "numeric", "boolean", "text", "character varying(40)", "character(5)", "bytea",
        "uuid", "json", "jsonb", "date", "time without time zone", "time with time zone",
        "timestamp without time zone", "timestamp with time zone", "interval", "integer[]", "text[]",
        "numeric(10,2)[]", "shop.order_status", "inet", "cidr", "macaddr", "money", "shop.positive_int",
        "timestamp with time zone"]


def fetch_all_types(conn: psycopg.Connection, row_id: int) -> dict:
    """One all_types row; types without an exact Python value (infinite dates, intervals, json) as text."""
    cur = conn.execute(
        "SELECT c_smallint, c_integer, c_bigint, c_real, c_double, c_numeric_12_2, c_numeric_38_10, c_numeric, "
        "c_boolean, c_text, c_varchar, c_char, c_bytea, c_uuid, c_json::text AS c_json, c_jsonb::text AS c_jsonb, "
        "c_date::text AS c_date, c_time, c_timetz, c_timestamp::text AS c_timestamp, "
        "c_timestamptz::text AS c_timestamptz, c_interval::text AS c_interval, c_int_array, c_text_array, "
        "c_numeric_array, c_status::text AS c_status, c_inet::text AS c_inet, c_cidr::text AS c_cidr, "
        "c_macaddr::text AS c_macaddr, c_money::numeric AS c_money, c_positive "
        "FROM shop.all_types WHERE id = %s", (row_id,))
    names = [column.name for column in cur.description]
    return dict(zip(names, cur.fetchone()))


def test_all_types_minimum_row(demo_conn):
    row = fetch_all_types(demo_conn, MIN_ID)
    assert (row["c_smallint"], row["c_integer"], row["c_bigint"]) == (-32768, -(2**31), -(2**63))
    assert row["c_real"] == -math.inf and row["c_double"] == -math.inf
    assert row["c_numeric_12_2"] == Decimal("-9999999999.99")
    assert row["c_numeric_38_10"] == Decimal("-9999999999999999999999999999.9999999999")
    assert row["c_numeric"].is_infinite() and row["c_numeric"] < 0
    assert (row["c_text"], row["c_varchar"], row["c_char"], row["c_bytea"]) == ("", "", "     ", b"")
    assert (row["c_date"], row["c_timestamp"], row["c_timestamptz"]) == ("-infinity",) * 3
    assert row["c_timetz"] == time(0, 0, tzinfo=timezone(-timedelta(hours=15, minutes=59)))
    assert row["c_interval"] == "-178000000 years"
    assert (row["c_int_array"], row["c_text_array"], row["c_numeric_array"]) == ([], [], [])
    assert (row["c_json"], row["c_jsonb"], row["c_status"]) == ("[]", "{}", "pending")
    assert row["c_money"] == Decimal("-92233720368547758.08")


def test_all_types_maximum_row(demo_conn):
    row = fetch_all_types(demo_conn, MAX_ID)
    assert (row["c_smallint"], row["c_integer"], row["c_bigint"]) == (32767, 2**31 - 1, 2**63 - 1)
    assert row["c_real"] == math.inf and row["c_double"] == math.inf
    assert row["c_numeric"] == Decimal("Infinity")
    assert row["c_numeric_38_10"] == Decimal("9999999999999999999999999999.9999999999")
    assert row["c_text"] == "x" * 10000 and row["c_varchar"] == "z" * 40 and row["c_bytea"] == b"\xff" * 256
    assert (row["c_date"], row["c_timestamp"], row["c_timestamptz"]) == ("infinity",) * 3
    assert row["c_time"] == time(23, 59, 59, 999999)
    assert row["c_uuid"] == uuid.UUID("ffffffff-ffff-ffff-ffff-ffffffffffff")
    assert row["c_money"] == Decimal("92233720368547758.07")
    assert (row["c_cidr"], row["c_macaddr"], row["c_positive"]) == ("ffff::/16", "ff:ff:ff:ff:ff:ff", 2**31 - 1)


def test_all_types_special_values_row(demo_conn):
    row = fetch_all_types(demo_conn, 2)
    assert math.isnan(row["c_real"]) and math.isnan(row["c_double"]) and row["c_numeric"].is_nan()
    assert row["c_text"] == 'It\'s a "quote", a back\\slash, a\nnewline, a\ttab, and a \\N that is not NULL'
    assert (row["c_varchar"], row["c_char"]) == ("tab\there", "a'b\"c")
    assert row["c_bytea"] == b"\x00\xff\x00\xfe\x00\x00"
    assert row["c_json"] == '{ "b" : 1,\n  "a" : [1, 2 ,3],  "a" : "duplicate key kept" }'
    assert row["c_jsonb"] == "null"
    assert row["c_int_array"] == [1, None, 3]
    assert row["c_text_array"] == ["a,b", 'with "quotes"', None, "", "NULL"]
    assert row["c_numeric_array"] == [Decimal("1.50"), None, Decimal("-2.25")]
    assert row["c_timestamp"] == "1969-12-31 23:59:59.999999"
    assert row["c_timestamptz"] == "2024-06-01 06:15:00+00"
    assert row["c_timetz"] == time(12, 0, tzinfo=timezone(timedelta(hours=5, minutes=45)))
    assert row["c_interval"] == "-1 mons -2 days -00:00:01.5"
    assert (row["c_inet"], row["c_cidr"], row["c_status"]) == ("2001:db8::1/64", "2001:db8::/32", "shipped")


def test_all_types_negative_zero_and_wide_numeric_row(demo_conn):
    row = fetch_all_types(demo_conn, 3)
    assert row["c_real"] == 0 and math.copysign(1.0, row["c_real"]) == -1.0
    assert row["c_double"] == 0 and math.copysign(1.0, row["c_double"]) == -1.0
    wide = Decimal("123456789012345678901234567890.123456789012345678901234567890")
    assert row["c_numeric"] == wide and len(row["c_numeric"].as_tuple().digits) == 60
    assert row["c_text"] == "naïve café Ωμέγα 中文 😀🚀👍🏽" and row["c_char"] == "é    "
    assert row["c_interval"] == "1 mon -1 days +00:00:00.000001"
    assert row["c_int_array"] == [-(2**31), 2**31 - 1]
    assert row["c_timestamptz"] == "1999-12-31 09:59:59.999999+00"
    assert row["c_money"] == Decimal("-0.01")


def test_generated_order_row_matches_its_formula(demo_conn):
    i = 12350
    cur = demo_conn.execute("SELECT * FROM shop.orders WHERE order_id = %s", (i,))
    row = dict(zip([c.name for c in cur.description], cur.fetchone()))
    start = datetime(2024, 1, 1, tzinfo=UTC)
    assert row == {
        "order_id": i, "customer_id": customer_uuid(1 + (i * 7) % 2000), "status": "pending",
        "total_amount": Decimal((i * 7919) % 100000) / 100, "item_count": 1,
        "placed_at": start + i * timedelta(minutes=7, seconds=13, microseconds=123456),
        "delivery_date": date(2024, 1, 3) + timedelta(days=i // 100), "delivery_slot": time(8, 0),
        "processing_time": timedelta(days=2, minutes=50, seconds=2.25), "coupon_codes": ["WELCOME10", None],
        "note": "Leave at the door, it's \"fragile\"\nCall first",
        "updated_at": start + timedelta(minutes=i // 2)}
    ties = demo_conn.execute("SELECT count(*) FROM shop.orders WHERE updated_at = %s", (row["updated_at"],))
    assert ties.fetchone() == (2,)


def test_text_keys_and_duplicates(demo_conn):
    query = "SELECT sku FROM shop.products WHERE sku !~ '^SKU-[0-9]{5}$'"
    skus = {sku for (sku,) in demo_conn.execute(query)}
    assert skus == {"", "SKU-00001 ", "sku-lowercase", "Äpfel", "ß", "😀-emoji", "Zebra", "a b",
                    "O'Reilly \\ path", "zz-all-nulls"}
    distinct = demo_conn.execute("SELECT count(*) FROM (SELECT DISTINCT * FROM shop.page_views) AS d")
    assert distinct.fetchone() == (3001,)
    special = demo_conn.execute("SELECT weight_kg, rating FROM shop.products WHERE sku = 'sku-lowercase'")
    assert all(math.isnan(value) for value in special.fetchone())


def test_events_rows_land_in_their_quarter(demo_conn):
    rows = demo_conn.execute(
        "SELECT tableoid::regclass::text, min(occurred_at), max(occurred_at), count(*) "
        "FROM shop.events GROUP BY 1 ORDER BY 1").fetchall()
    step = timedelta(hours=2, seconds=3, microseconds=1)
    assert rows == [
        ("shop.events_2024_q1", datetime(2024, 1, 1, tzinfo=UTC), datetime(2024, 1, 1, tzinfo=UTC) + 999 * step, 1000),
        ("shop.events_2024_q2", datetime(2024, 4, 1, tzinfo=UTC), datetime(2024, 4, 1, tzinfo=UTC) + 999 * step, 1000),
        ("shop.events_2024_q3", datetime(2024, 7, 1, tzinfo=UTC),
         datetime(2024, 9, 30, 23, 59, 59, 999999, tzinfo=UTC), 1000)]
