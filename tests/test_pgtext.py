"""PostgreSQL text output -> olake wire values, checked against the full-load path on a real server.

The decisive checks: for every olake type and its edge values, the wire value built from
PostgreSQL's text output (what pgoutput sends) is byte-for-byte the JSON that the full-load scan
(ADBC -> ``encode_records``) produces, and ``decode_rows`` turns both into the same Arrow values.
The text is taken twice: from a plain SELECT (the type's output function, as pgoutput calls it;
``::text`` would strip char(n) padding) and from a real pgoutput slot through the change feed.
"""

from __future__ import annotations

import random
import struct

import orjson
import psycopg
import pyarrow as pa
import pytest
from psycopg import sql

from olake_cli.core.codec.decode import decode_rows
from olake_cli.core.record_lines import encode_records
from olake_cli.core.errors import CatalogError, DestinationError, ProtocolError, SourceError
from olake_cli.sources.postgres.array_shapes import with_data_shapes
from olake_cli.sources.postgres.scan import PostgresChunkReader
from olake_cli.sources.postgres.wrapped_instants import instant_columns
from olake_cli.sources.postgres.pgtext import converter_for, parse_array_literal, text_to_wire
from olake_cli.sources.postgres.change_feed import current_wal_lsn, read_changes
from olake_cli.sources.postgres.pgoutput import UNCHANGED_TOAST
from tests.support.row_texts import make_row_converter, row_to_wire
from olake_cli.sources.postgres.types import (SCAN_SESSION_SETTINGS, fetch_columns,
                                              json_schema_property, select_expression, shape_checks,
                                              text_arrays)

DDL = """
CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy');
CREATE DOMAIN posint AS integer CHECK (VALUE > 0);
CREATE TABLE every (
  id int PRIMARY KEY, c_bool bool, c_int2 int2, c_int4 int4, c_int8 int8, c_oid oid,
  c_float4 real, c_float8 float8, c_dec numeric(10,2), c_dec38 numeric(38,10), c_num numeric,
  c_text text, c_char char(5), c_varchar varchar(10), c_enum mood, c_uuid uuid, c_json json,
  c_jsonb jsonb, c_bytea bytea, c_date date, c_time time, c_ts timestamp, c_tstz timestamptz,
  c_interval interval, c_inet inet, c_money money, c_timetz timetz, c_box box, c_domain posint,
  a_int int[], a_int8 int8[], a_text text[], a_dec numeric(10,2)[], a_num numeric[],
  a_tstz timestamptz[], a_ts timestamp[], a_enum mood[], a_interval interval[], a_uuid uuid[],
  a_bytea bytea[], a_float4 real[], a_float8 float8[], a_date date[], a_time time[], a_bool bool[],
  a_char char(3)[], a_jsonb jsonb[], a_box box[], m_int int[][], m_text text[][][],
  m_date date[][], m_tstz timestamptz[][]
);
"""
TEXT = 'quote " backslash \\ newline \n tab \t cr \r emoji \U0001F600 ünï {,} NULL'
TEXT_ARRAY = ["", "a,b", 'q"uote', "back\\slash", None, "NULL", "null", " sp ", "{brace}",
              "multi\nline", "semi;colon", "\U0001F600"]
BIG_NUMERIC = "-" + "9" * 999 + ".5"  # 1000 digits
ROWS = [
    "INSERT INTO every (id) VALUES (1)",  # every other column NULL
    """INSERT INTO every VALUES (2, true, 12, 1234, 1234567890123, 4000000000, 0.1, 0.1, 12.30,
      1234.5678900000, 3.14159, %(text)s, 'ab', 'var', 'ok', 'A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11',
      '{ "a" : [1, 2.50, {"b": null}],  "c": "d" }', '{"b": [1, 2], "a": {"x": "y"}}',
      '\\x00ff00deadbeef00', '2024-02-29', '12:34:56.789012', '2024-02-29 12:34:56.123456',
      '2024-02-29 12:34:56.123456+05:30', '1 year 2 mons -3 days 04:05:06.789', '192.168.1.5/24',
      1234.56, '23:59:59.999999+03', '((1,1),(0,0))', 7,
      '{1,NULL,3}', '{9223372036854775807,-9223372036854775808}', %(tarr)s, '{1.50,NULL,-2.25}',
      '{NaN,0.000000000000000000001,Infinity,-Infinity,NULL}',
      '{"2020-01-01 00:00:00.5+00",NULL,"1999-12-31 23:59:59.999999-08",infinity,-infinity}',
      '{"2020-01-01 00:00:00",NULL,"0001-01-01 00:00:00.000001",infinity}', '{sad,NULL,happy}',
      '{"1 day",NULL,"-1 mon 00:00:00.000001",PT0S}', '{a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11,NULL}',
      '{"\\\\x00",NULL,"\\\\x","\\\\x5c22"}', '{0.1,NaN,-0,Infinity,3.4028235e38,1e-45,NULL}',
      '{1.5,NaN,NULL,-Infinity,-0}', '{2020-01-01,NULL,infinity,-infinity}',
      '{00:00:00,24:00:00,NULL,"12:00:00.5"}', '{t,f,NULL}', '{"a",NULL,"bc"}',
      ARRAY['{"k": "v \\"q\\""}'::jsonb, NULL], '{(1,1),(0,0);(3,3),(2,2)}')""",
    # maxima, infinities, NaN, a lower bound other than 1
    """INSERT INTO every (id, c_bool, c_int2, c_int4, c_int8, c_oid, c_float4, c_float8, c_dec,
      c_dec38, c_num, c_text, c_uuid, c_json, c_jsonb, c_bytea, c_date, c_time, c_ts, c_tstz,
      c_interval, a_int, a_text, a_float8)
      VALUES (3, false, 32767, 2147483647, 9223372036854775807, 4294967295, 'Infinity', 'NaN',
      'NaN', 9999999999999999999999999999.9999999999, 'Infinity', '', 'ffffffff-ffff-ffff-ffff-ffffffffffff',
      '[]', '[]', '', 'infinity', '23:59:59.999999', 'infinity', 'infinity',
      '178000000 years 2147483647 days 2562047788:00:54.775807', '{7,8,9}', '{}', '{}')""",
    # minima, -infinities, negative zero, trimmed fractions
    """INSERT INTO every (id, c_int2, c_int4, c_int8, c_oid, c_float4, c_float8, c_dec, c_dec38,
      c_num, c_text, c_json, c_jsonb, c_date, c_time, c_ts, c_tstz, c_interval)
      VALUES (4, -32768, -2147483648, -9223372036854775808, 0, '-Infinity', '-0', -99999999.99,
      -0.0000000001, %(big)s, 'NULL', '"x"', 'null', '-infinity', '00:00:00', '-infinity',
      '-infinity', '-178000000 years -2147483648 days -2562047788:00:54.775807')""",
    """INSERT INTO every (id, c_float4, c_float8, c_dec, c_num, c_date, c_time, c_ts, c_tstz,
      c_interval)
      VALUES (5, 3.4028235e38, 1.7976931348623157e308, 0, '-Infinity', '0001-01-01', '24:00:00',
      '9999-12-31 23:59:59.999999', '2024-06-30 23:59:59.999999-12:45', '-1 day -00:00:00.000001')""",
    """INSERT INTO every (id, c_float4, c_float8, c_num, c_ts, c_tstz, c_interval, c_time)
      VALUES (6, 1e-45, 4.9e-324, 0.000000000000000000001000, '2024-02-29 12:34:56.5',
      '0001-01-01 00:00:00+00', '-0.5 sec', '12:00')""",
    # the ends of PostgreSQL's range; multi-dimensional arrays
    """INSERT INTO every (id, c_date, c_ts, c_tstz, a_date, a_ts, m_int, m_text, m_date, m_tstz)
      VALUES (7, '4714-11-24 BC', '4714-11-24 00:00:00 BC', '294247-01-10 04:00:54.775806+00',
      '{0044-03-15 BC,10000-01-01,5874897-12-31,NULL}',
      '{"0001-12-31 23:59:59.999999 BC","12345-06-07 08:09:10.5"}',
      '{{1,2},{3,NULL}}', '{{{a,"q\\"uote"},{NULL,"NULL"}},{{"b,c","{x}"},{"",back\\\\slash}}}',
      '{{"0044-03-15 BC",infinity},{10000-01-01,NULL}}',
      '{{"0044-03-15 12:00:00+00 BC","2000-01-01 00:00:00+00"}}')""",
    """INSERT INTO every (id, c_date, c_ts, c_tstz, m_int, m_text)
      VALUES (8, '5874897-12-31', '0044-03-15 12:34:56.000001 BC', '4714-11-24 00:00:00+00 BC',
      '{}', '{{{x}}}')""",
]
PUBLICATION = "pgtext_pub"


def scan_session(conn) -> None:
    """Apply the scan session settings (ADBC cursor or psycopg connection)."""
    for key, value in SCAN_SESSION_SETTINGS.items():
        conn.execute(f"SET {key} = '{value}'")


def create_every(dsn: str, with_slot: str | None = None) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(DDL)
        if with_slot:
            conn.execute(f"CREATE PUBLICATION {PUBLICATION} FOR TABLE every")
            conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (with_slot,))
        params = {"text": TEXT, "tarr": TEXT_ARRAY, "big": BIG_NUMERIC}
        for statement in ROWS:
            conn.execute(statement, {k: v for k, v in params.items() if f"%({k})s" in statement})


def table_schema(dsn: str, table: str = "every", shaped: bool = False) -> tuple[list, dict]:
    """The table's columns and json_schema; ``shaped``: array shapes read from the data, as discover does."""
    with psycopg.connect(dsn) as conn:
        columns = fetch_columns(conn, "public", table)
        if shaped:
            columns = with_data_shapes(conn, "public", table, columns)
    return columns, {"type": "object", "properties": {c.name: json_schema_property(c) for c in columns}}


def full_load_rows(pg_cluster, db: str, table: str = "every", shaped: bool = False) -> list[dict]:
    """The full-load path: select_expression -> the chunk reader (ADBC) -> encode_records -> JSON."""
    dsn = pg_cluster.dsn(db)
    columns, json_schema = table_schema(dsn, table, shaped)
    select = sql.SQL("SELECT {} FROM {} ORDER BY id").format(
        sql.SQL(", ").join(select_expression(c) for c in columns), sql.Identifier(table))
    with psycopg.connect(dsn) as conn:
        query = select.as_string(conn)
    reader = PostgresChunkReader(table, 0, query, pg_cluster.uri(db), None, text_arrays=text_arrays(columns),
                                 instant_columns=instant_columns(columns))
    lines = b"".join(encode_records(batch, json_schema, table, "public", 1, wire_columns=reader.wire_columns(batch))
                     for batch in reader.read_batches())
    return [orjson.loads(line)["record"]["data"] for line in lines.splitlines()]


def output_texts(dsn: str, table: str = "every") -> list[dict]:
    """Every column's text output (the type's output function, exactly what pgoutput sends)."""
    with psycopg.connect(dsn) as conn:
        scan_session(conn)
        cur = conn.execute(sql.SQL("SELECT * FROM {} ORDER BY id").format(sql.Identifier(table)))
        names = [d.name for d in cur.description]
        result = cur.pgresult
        return [{name: (None if (raw := result.get_value(row, col)) is None else bytes(raw).decode())
                 for col, name in enumerate(names)} for row in range(result.ntuples)]


def assert_same_wire(expected: dict, actual: dict, context: str) -> None:
    assert list(actual) == list(expected), context
    for name in expected:  # orjson bytes: strict about int vs float, -0.0, NaN, key order
        assert orjson.dumps(actual[name]) == orjson.dumps(expected[name]), f"{context}: {name}"


def _float_bits(values: list) -> list:
    if values and any(isinstance(v, list) for v in values):
        return [None if v is None else _float_bits(v) for v in values]
    return [None if v is None else struct.pack("<d", v) for v in values]


def assert_same_arrow(expected: pa.Table, actual: pa.Table) -> None:
    assert actual.schema.equals(expected.schema)
    for name in expected.column_names:
        left, right = expected.column(name), actual.column(name)
        if left.equals(right):
            continue
        floats = (pa.types.is_floating(left.type) or
                  (pa.types.is_list(left.type) and pa.types.is_floating(left.type.value_type)))
        assert floats, name  # only NaN makes equal float columns compare unequal
        assert _float_bits(right.to_pylist()) == _float_bits(left.to_pylist()), name


def test_select_output_text_gives_the_full_load_wire_values(pg_cluster, pg_db):
    dsn = pg_cluster.dsn(pg_db)
    create_every(dsn)
    _, json_schema = table_schema(dsn)
    expected = full_load_rows(pg_cluster, pg_db)
    texts = output_texts(dsn)
    assert len(expected) == len(texts) == len(ROWS)
    convert = make_row_converter(json_schema)
    actual = []
    for index, (want, row_texts) in enumerate(zip(expected, texts)):
        data, toasted = convert(row_texts)
        assert toasted == []
        assert_same_wire(want, data, f"row {index + 1}")
        assert row_to_wire(row_texts, json_schema) == (data, [])
        actual.append(data)
    row2 = actual[1]  # spot checks of the wire forms themselves
    assert row2["c_char"] == "ab   " and row2["a_char"] == ["a  ", None, "bc "]
    assert row2["c_float4"] == 0.10000000149011612 and row2["c_uuid"] == "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"
    assert row2["a_text"] == TEXT_ARRAY and row2["c_text"] == TEXT
    assert row2["a_box"] == ["(1,1),(0,0)", "(3,3),(2,2)"]
    assert row2["a_bytea"] == ["AA==", None, "", "XCI="]
    assert actual[2]["a_int"] == [7, 8, 9] and actual[3]["c_num"] == BIG_NUMERIC
    assert actual[3]["c_float8"] == -0.0 and str(actual[3]["c_float8"]) == "-0.0"
    row7, row8 = actual[6], actual[7]
    assert row7["c_date"] == "4714-11-24 BC" and row7["c_ts"] == "4714-11-24T00:00:00.000000 BC"
    assert row7["c_tstz"] == "294247-01-10T04:00:54.775806+00:00"
    assert row7["a_date"] == ["0044-03-15 BC", "10000-01-01", "5874897-12-31", None]
    assert row7["a_ts"] == ["0001-12-31T23:59:59.999999 BC", "12345-06-07T08:09:10.500000"]
    assert row7["m_int"] == [[1, 2], [3, None]]
    assert row7["m_text"] == [[["a", 'q"uote'], [None, "NULL"]], [["b,c", "{x}"], ["", "back\\slash"]]]
    assert row7["m_date"] == [["0044-03-15 BC", "infinity"], ["10000-01-01", None]]
    assert row7["m_tstz"] == [["0044-03-15T12:00:00.000000+00:00 BC", "2000-01-01T00:00:00.000000+00:00"]]
    assert row8["c_date"] == "5874897-12-31" and row8["c_ts"] == "0044-03-15T12:34:56.000001 BC"
    assert row8["c_tstz"] == "4714-11-24T00:00:00.000000+00:00 BC"
    assert row8["m_int"] == [] and row8["m_text"] == [[["x"]]]
    assert json_schema["properties"]["m_text"]["x-olake-type"] == "array<array<array<string>>>"
    expected_table, expected_warnings = decode_rows(expected, json_schema)
    actual_table, actual_warnings = decode_rows(actual, json_schema)
    assert actual_warnings == expected_warnings
    assert_same_arrow(expected_table, actual_table)


def test_pgoutput_changes_give_the_full_load_wire_values(pg_cluster, pg_db):
    dsn = pg_cluster.dsn(pg_db)
    slot = f"slot_{pg_db}"
    create_every(dsn, with_slot=slot)
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            scan_session(conn)
            events = list(read_changes(conn, slot, PUBLICATION, current_wal_lsn(conn)))
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
    _, json_schema = table_schema(dsn)
    expected = full_load_rows(pg_cluster, pg_db)
    assert [e.op for e in events] == ["c"] * len(ROWS)
    actual = []
    for index, (want, event) in enumerate(zip(expected, events)):
        data, toasted = row_to_wire(event.new, json_schema)
        assert toasted == []
        assert_same_wire(want, data, f"row {index + 1}")
        actual.append(data)
    assert_same_arrow(decode_rows(expected, json_schema)[0], decode_rows(actual, json_schema)[0])


SHAPED_DDL = """
CREATE TABLE shaped (id int PRIMARY KEY, n_int int[], n_text text[], n_date date[], n_tstz timestamptz[],
                     n_bytea bytea[], n_float4 real[], n_interval interval[], n_box box[], n_char char(3)[],
                     n_num numeric[], n_inet inet[], g_text text[], g_float8 float8[][]);
INSERT INTO shaped VALUES
 (1, '[0:2]={1,NULL,-2147483648}', '[-1:0]={"a,b",NULL}', '[2:3]={"0044-03-15 BC",infinity}',
  '[0:0]={"2024-02-29 12:00:00.5+05:30"}', '[0:1]={"\\\\x00ff",NULL}', '[0:1]={0.1,NaN}', '[0:0]={"1 day -00:00:01"}',
  '[0:0]={(1,1),(0,0)}', '[0:0]={ab}', '[0:1]={NaN,-0.000001}', '[0:0]={10.0.0.1/8}', '{{a,"q\\"r"},{"",NULL}}',
  '{{1.5,-Infinity}}'),
 (2, '{{1,2},{3,4}}', '{{{x}}}', '{{2024-01-01},{NULL}}', '{{infinity}}', '{{"\\\\x"}}', '{{1e-45}}',
  '{{P1Y}}', '{{(2,2),(1,1);(3,3),(0,0)}}', '{{"x  "}}', '{{Infinity}}', '{{::1}}', '{}', '{}'),
 (3, '{}', '{}', NULL, '{}', NULL, '{}', NULL, '{}', '{}', '{}', '{}', NULL, NULL);
"""


def test_ndarray_columns_give_the_same_wire_values_on_both_paths(pg_cluster, pg_db):
    """Columns of varying shapes (ndarray) and a 2-D text[] column: the full-load scan's array text and
    pgoutput's text give byte-identical wire values, the bounds and lengths exact."""
    dsn = pg_cluster.dsn(pg_db)
    slot = f"slot_{pg_db}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"CREATE PUBLICATION {PUBLICATION} FOR ALL TABLES")
        conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (slot,))
        conn.execute(SHAPED_DDL)
        scan_session(conn)
        try:
            events = list(read_changes(conn, slot, PUBLICATION, current_wal_lsn(conn)))
        finally:
            conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
    _, json_schema = table_schema(dsn, "shaped", shaped=True)
    types = {n: p["x-olake-type"] for n, p in json_schema["properties"].items()}
    assert all(t.startswith("ndarray<") for n, t in types.items() if n.startswith("n_"))
    assert (types["g_text"], types["g_float8"]) == ("array<array<string>>", "array<array<float64>>")
    expected = full_load_rows(pg_cluster, pg_db, "shaped", shaped=True)
    for index, (want, row_texts, event) in enumerate(zip(expected, output_texts(dsn, "shaped"), events)):
        assert_same_wire(want, row_to_wire(row_texts, json_schema)[0], f"row {index + 1}")
        assert_same_wire(want, row_to_wire(event.new, json_schema)[0], f"change {index + 1}")
    first = expected[0]
    assert first["n_int"] == {"lower_bounds": [0], "lengths": [3], "elements": [1, None, -2147483648]}
    assert first["n_text"] == {"lower_bounds": [-1], "lengths": [2], "elements": ["a,b", None]}
    assert first["n_box"]["elements"] == ["(1,1),(0,0)"] and first["n_char"]["elements"] == ["ab "]
    assert first["n_inet"]["elements"] == ["10.0.0.1/8"] and first["n_bytea"]["elements"] == ["AP8=", None]
    assert expected[1]["n_int"] == {"lower_bounds": [1, 1], "lengths": [2, 2], "elements": [1, 2, 3, 4]}
    assert expected[1]["n_box"]["elements"] == ["(2,2),(1,1)", "(3,3),(0,0)"]
    assert expected[2]["n_int"] == {"lower_bounds": [], "lengths": [], "elements": []}
    table, _ = decode_rows(expected, json_schema)
    assert table.column("n_int").to_pylist()[0] == first["n_int"]


def test_values_that_cannot_be_carried_fail_on_both_paths_naming_stream_column_and_key(pg_cluster, pg_db):
    dsn = pg_cluster.dsn(pg_db)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE odd (id int PRIMARY KEY, a int[], ts timestamp)")
        conn.execute("INSERT INTO odd VALUES (1, '{1}', '294276-12-31 23:59:59.999999'), "
                     "(2, '[0:2]={7,8,9}', NULL), (3, '{{1,2},{3,4}}', NULL)")
    columns, json_schema = table_schema(dsn, "odd")
    texts = output_texts(dsn, "odd")
    convert = make_row_converter(json_schema, "public.odd", ("id",))
    for row, shape in ((texts[1], r"dimensions \[0:2\] \(a lower bound other than 1\)"),
                       (texts[2], "2-dimensional value in a column of 1 dimension")):
        with pytest.raises(SourceError, match=f"stream 'public.odd', column 'a', row with key "
                                              f"id='{row['id']}': .*{shape}.*; .*run discover again"):
            convert(row)
    (_, check), = shape_checks(columns)
    for wanted_id, dims in ((2, r"\[0:2\]"), (3, r"\[1:2\]\[1:2\]")):  # the scan refuses them too
        select = sql.SQL("SELECT {}, {} FROM odd WHERE id = {}").format(
            sql.SQL(", ").join(select_expression(c) for c in columns), check, wanted_id)
        with psycopg.connect(dsn) as conn:
            query = select.as_string(conn)
        reader = PostgresChunkReader("public.odd", 0, query, pg_cluster.uri(pg_db), None, key_columns=("id",),
                                     shape_checks=(("a", "array<int32>"),))
        with pytest.raises(SourceError, match=rf"stream 'public.odd', column 'a', row with key id={wanted_id}: "
                                              rf"an array with dimensions {dims}"):
            list(reader.read_batches())
    first = convert(texts[0])[0]
    assert first["ts"] == "294276-12-31T23:59:59.999999"  # the wire carries PostgreSQL's last instant
    with pytest.raises(DestinationError, match="stream 'public.odd', column 'ts', row with key id=1: "
                                               "timestamp '294276-12-31T23:59:59.999999' lies beyond"):
        decode_rows([first], json_schema, stream="public.odd", key_columns=("id",))


def test_unchanged_toast_is_reported_and_delete_keys_decode_all_nullable(pg_cluster, pg_db):
    dsn = pg_cluster.dsn(pg_db)
    slot = f"slot_{pg_db}"
    big = "".join(chr(0x41 + (i * 7919) % 26) for i in range(20000))
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE toasty (id int8 PRIMARY KEY, big text NOT NULL, n int4 NOT NULL)")
        conn.execute("ALTER TABLE toasty ALTER COLUMN big SET STORAGE EXTERNAL")
        conn.execute(f"CREATE PUBLICATION {PUBLICATION} FOR TABLE toasty")
        conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (slot,))
        conn.execute("INSERT INTO toasty VALUES (9007199254740993, %s, 1)", (big,))
        conn.execute("UPDATE toasty SET n = 2")
        conn.execute("DELETE FROM toasty")
        scan_session(conn)
        try:
            events = list(read_changes(conn, slot, PUBLICATION, current_wal_lsn(conn)))
        finally:
            conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
    _, json_schema = table_schema(dsn, "toasty")
    assert [e.op for e in events] == ["c", "u", "d"]
    assert events[1].new["big"] is UNCHANGED_TOAST
    assert row_to_wire(events[0].new, json_schema) == (
        {"id": 9007199254740993, "big": big, "n": 1}, [])
    assert row_to_wire(events[1].new, json_schema) == ({"id": 9007199254740993, "n": 2}, ["big"])
    delete_data, toasted = row_to_wire(events[2].old, json_schema)
    assert delete_data == {"id": 9007199254740993} and toasted == []  # a key-only old tuple
    key_only = [delete_data, {"id": 1, "big": None, "n": None}]
    with pytest.raises(ProtocolError, match="non-nullable"):
        decode_rows(key_only, json_schema)
    table, warnings = decode_rows(key_only, json_schema, all_nullable=True)
    assert warnings == []
    assert [field.nullable for field in table.schema] == [True, True, True]
    assert table.column("id").to_pylist() == [9007199254740993, 1]
    assert table.column("big").to_pylist() == [None, None]
    assert table.schema.field("id").type == pa.int64() and table.schema.field("n").type == pa.int32()


def test_inet_host_addresses_match_the_full_load(pg_cluster, pg_db):
    dsn = pg_cluster.dsn(pg_db)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE nets (id int PRIMARY KEY, host inet, hosts inet[])")
        conn.execute("INSERT INTO nets VALUES (1, '192.168.1.5', '{::1,10.0.0.0/8}')")
    _, json_schema = table_schema(dsn, "nets")
    data, _ = row_to_wire(output_texts(dsn, "nets")[0], json_schema)
    assert data == {"id": 1, "host": "192.168.1.5", "hosts": ["::1", "10.0.0.0/8"]}
    assert full_load_rows(pg_cluster, pg_db, "nets") == [data]


def test_float4_text_round_trips_to_the_exact_float32(pg_cluster, pg_db):
    rng = random.Random(20240229)
    bit_patterns = [rng.getrandbits(32) for _ in range(3000)] + [1, 0x7F7FFFFF, 0x00800000, 0x80000001]
    originals = [struct.unpack("<f", struct.pack("<I", b))[0] for b in bit_patterns]
    originals = [v for v in originals if v == v and abs(v) != float("inf")]
    # decimal strings whose nearest double is a float32 midpoint (double rounding would go wrong)
    tricky = ["1.000000059604644775390625", "1.0000000596046447753906250000001",
              "1.0000000596046447753906249999999", "16777217", "16777219", "0.50000002980232238769531251"]
    with psycopg.connect(pg_cluster.dsn(pg_db)) as conn:
        scan_session(conn)
        literal = "{" + ",".join(repr(v) for v in originals) + "}"
        texts = conn.execute("SELECT unnest(%s::float4[])::text", (literal,)).fetchall()
        pg_tricky = conn.execute("SELECT t::float4::float8 FROM unnest(%s::text[]) t", (tricky,)).fetchall()
    assert [text_to_wire("float32", t, "f") for (t,) in texts] == originals
    assert [text_to_wire("float32", t, "f") for t in tricky] == [v for (v,) in pg_tricky]
    assert text_to_wire("float32", tricky[1], "f") == 1.00000011920928955078125
    assert text_to_wire("float32", tricky[2], "f") == 1.0


@pytest.mark.parametrize("literal, expected", [
    ("{}", []),
    ("{1,NULL,3}", ["1", None, "3"]),
    ('{"a b","c\\"d",NULL,"NULL",""}', ["a b", 'c"d', None, "NULL", ""]),
    ('{"x\\\\y","\\\\x00",null,Null}', ["x\\y", "\\x00", "null", "Null"]),
    ('{"{",",","}"}', ["{", ",", "}"]),
    ('{"multi\nline",plain}', ["multi\nline", "plain"]),
])
def test_array_literal_parser(literal, expected):
    assert parse_array_literal(literal) == expected


def test_array_literal_parser_with_box_delimiter():
    assert parse_array_literal("{(1,1),(0,0);NULL;(3,3),(2,2)}", ";") == ["(1,1),(0,0)", None, "(3,3),(2,2)"]


@pytest.mark.parametrize("literal", ["{{1,2},{3,4}}", "[1:2][1:2]={{1,2},{3,4}}", "{{}}",
                                     "[0:2]={7,8,9}", '[-1:0]={"a b",NULL}',
                                     '{"unterminated}', "{1,2", '{"a"b}', "1,2", '{"a""b"}',
                                     '{1"2"}', "{,1}", '{,"1"}', '{"1",,2}', '{"1\\"}',
                                     '{"1",{2}}'])
def test_bad_array_literals_raise_source_errors_naming_the_column(literal):
    with pytest.raises(SourceError, match="column 'arr'"):
        text_to_wire("array<int32>", literal, "arr")


def test_scalar_conversions():
    assert text_to_wire("bytes", "\\x", "b") == ""
    assert text_to_wire("bytes", "\\x000a0bff", "b") == "AAoL/w=="
    assert text_to_wire("bytes", "a\\\\b\\000\\377", "b") == "YVxiAP8="  # bytea_output = escape
    assert text_to_wire("bool", "t", "c") is True and text_to_wire("bool", "f", "c") is False
    assert text_to_wire("int64", "-9223372036854775808", "c") == -(2**63)
    assert text_to_wire("float64", "-Infinity", "c") == "-Infinity"
    assert text_to_wire("decimal(10,2)", "NaN", "c") == "NaN"
    assert text_to_wire("time", "24:00:00", "c") == "24:00:00.000000"
    assert text_to_wire("time", "01:02:03.04", "c") == "01:02:03.040000"
    assert text_to_wire("timestamp", "2024-01-02 03:04:05", "c") == "2024-01-02T03:04:05.000000"
    assert text_to_wire("timestamptz", "2024-01-02 03:04:05.1+00", "c") == "2024-01-02T03:04:05.100000+00:00"
    assert text_to_wire("timestamptz", "2024-01-02 03:04:05-05:30:15", "c") == "2024-01-02T08:34:20.000000+00:00"
    assert text_to_wire("interval", "PT0S", "c") == {"months": 0, "days": 0, "microseconds": 0}
    assert text_to_wire("interval", "-P1Y2DT3S", "c") == {"months": -12, "days": -2, "microseconds": -3_000_000}
    assert text_to_wire("interval", "P1Y-2M3DT-4H5M-6.000007S", "c") == {
        "months": 10, "days": 3, "microseconds": -4 * 3_600_000_000 + 300_000_000 - 6_000_007}
    assert text_to_wire("array<interval>", "{P1D,NULL}", "c") == [
        {"months": 0, "days": 1, "microseconds": 0}, None]
    assert text_to_wire("timestamptz", "0001-01-01 00:30:00+01", "c") == "0001-12-31T23:30:00.000000+00:00 BC"
    assert text_to_wire("timestamptz", "294276-12-31 23:59:59.999999+00", "c") == \
        "294276-12-31T23:59:59.999999+00:00"
    assert text_to_wire("date", "0001-01-01 BC", "c") == "0001-01-01 BC"
    assert text_to_wire("array<array<string>>", '{{"a\\\\b",NULL},{"",x}}', "c") == [["a\\b", None], ["", "x"]]
    assert text_to_wire("string", None, "c") is None
    assert converter_for("string") is None and converter_for("array<json>") is not None


@pytest.mark.parametrize("olake_type, text, reason", [
    ("date", "2023-02-29 BC", "no such date"),
    ("date", "0000-01-01 BC", "no year 0"),
    ("timestamp", "10000-01-01 24:00:00", "not a time of day"),
    ("timestamptz", "0001-01-01 00:30:00 BC", "without an offset"),
    ("array<array<int32>>", "{1,2}", "1-dimensional value in a column of 2 dimensions"),
    ("array<array<int32>>", "[0:1][1:1]={{1},{2}}", r"dimensions \[0:1\]\[1:1\] \(a lower bound other than 1\)"),
    ("ndarray<int32>", "[0:1]={1,2,3}", "array dimensions do not match its elements"),
    ("ndarray<int32>", "{{1,2},{3}}", "sub-arrays of different lengths"),
    ("interval", "1 day", "IntervalStyle=iso_8601"),
    ("int32", "twelve", "ValueError"),
    ("bool", "yes", "KeyError"),
    ("bytes", "\\xabc", "Error"),
    ("time", "12:00:00+02", "not a time"),
])
def test_bad_text_raises_source_error_naming_the_column(olake_type, text, reason):
    with pytest.raises(SourceError, match=f"column 'col'.*{olake_type}.*{reason}") as info:
        text_to_wire(olake_type, text, "col")
    assert text[:20] in info.value.message


def test_row_converter_ignores_unknown_columns_and_reports_toast():
    json_schema = {"properties": {
        "id": {"type": ["integer"], "x-olake-type": "int64"},
        "doc": {"type": ["null", "string"], "x-olake-type": "json"},
        "tags": {"type": ["null", "array"], "x-olake-type": "array<string>"},
        "at": {"type": ["null", "string"], "x-olake-type": "timestamptz"}}}
    convert = make_row_converter(json_schema)
    values = {"id": "5", "doc": UNCHANGED_TOAST, "extra": "ignored", "tags": '{a,"b c"}',
              "at": UNCHANGED_TOAST}
    assert convert(values) == ({"id": 5, "tags": ["a", "b c"]}, ["doc", "at"])
    assert convert({"id": "6", "doc": None, "tags": None, "at": None}) == (
        {"id": 6, "doc": None, "tags": None, "at": None}, [])
    with pytest.raises(SourceError, match="column 'at': cannot convert PostgreSQL text 'soon'"):
        convert({"id": "7", "at": "soon"})


def test_unknown_olake_type_is_a_catalog_error():
    with pytest.raises(CatalogError, match="unknown x-olake-type"):
        make_row_converter({"properties": {"x": {"x-olake-type": "float128"}}})
    with pytest.raises(CatalogError, match="no x-olake-type"):
        make_row_converter({"properties": {"x": {"type": "string"}}})
