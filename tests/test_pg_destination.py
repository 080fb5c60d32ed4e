"""PostgreSQL destination end to end: real commands, a real source cluster and a second target cluster.

Every type the PostgreSQL source carries (the demo's all_types, test_types_codec's ``everything``, and the
calendar edges of test_e2e_edge_values) is copied by ``read | write`` and by ``sync``, then changed
(inserts, updates, a key update, deletes, TRUNCATE, a 1 MB TOASTed value an update leaves alone, a
delete followed in its transaction by an update of another row that leaves its TOASTed value alone), and
each target table is compared with its source table value by value (PostgreSQL's text of every column).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import psycopg

from tests.support.cdc import discover_catalog, sync_once
from tests.support.cli import messages, read_into_write, run_olake, trace_errors, write_json
from tests.support.pg_compare import assert_same_rows, columns_of, table_texts
from tests.test_e2e_edge_values import EDGE_DDL, EDGE_VALUES, GRID_VALUES
from tests.test_types_codec import BIG_NUMERIC, DDL as EVERYTHING_DDL, ROWS as EVERYTHING_ROWS, TEXT_1

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "postgres" / "demo.sql"
TABLES = [("shop", "all_types"), ("shop", "products"), ("public", "everything"), ("public", "edge"),
          ("public", "grid"), ("public", "docs"), ("public", "shapes"), ("public", "plain")]
CDC = {"all_types", "products", "everything", "edge", "grid", "docs", "shapes", "plain"}  # changes start no Spark
# only types COPY's binary format carries (copy_binary), with their edge values
PLAIN = """
CREATE TABLE plain (id int PRIMARY KEY, b boolean, i2 smallint, i8 bigint, f4 real, f8 double precision,
                    n numeric(12,2), n15 numeric(15,15), n0 numeric(15,0), t text, v varchar(10), j json,
                    jb jsonb, u uuid, by bytea, d date, tm time, ts timestamp, tz timestamptz, iv interval);
INSERT INTO plain VALUES
 (1, true, -32768, -9223372036854775808, 'NaN', '-Infinity', -9999999999.99, 0.999999999999999,
  999999999999999, E'tab\there \\ "q" \n', 'varchar', '{"a": [1, 2]}', '{"b": null}',
  '00000000-0000-0000-0000-000000000001', '\\x00ff', '4713-01-01 BC', '24:00:00', '294247-01-10 04:00:54.775806',
  '0001-01-01 00:00:00+00 BC', '-178000000 years -2147483648 days -2562047788:00:54.775807'),
 (2, false, 32767, 9223372036854775807, '-0', 'Infinity', 0.01, -0.000000000000001, -999999999999999, '', '',
  'null', '[]', 'ffffffff-ffff-ffff-ffff-ffffffffffff', '\\x', 'infinity', '00:00:00', '-infinity', 'infinity',
  '1 mon 2 days 00:00:00.000001'),
 (3, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL),
 (4, true, 0, 0, 1.5, 0.1, 0, 0, 0, 'naïve 😀', 'é', '{}', '{"k": "é"}', '6ba7b810-9dad-11d1-80b4-00c04fd430c8',
  '\\x0102', '2024-02-29', '12:34:56.789012', '2024-02-29 12:34:56.789012', '1999-12-31 23:59:59.999999+14',
  '-1 days')
"""
BIG = "x" * 1_000_000
DISTINCT_BIG = "(SELECT string_agg(md5(g::text || h::text), '') FROM generate_series(1, 4096) h)"  # TOASTed, per row


def make_source(dsn: str) -> None:
    """The demo schema plus every type, the calendar edges and a table with a 1 MB TOASTed value."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(FIXTURE.read_text())
        conn.execute(EVERYTHING_DDL)
        params = {"t1": TEXT_1, "tarr": ["", "a,b", 'q"uote', "back\\slash", None, "NULL", " sp "],
                  "big": BIG_NUMERIC, "long": "x" * 100_000}
        for statement in EVERYTHING_ROWS:
            conn.execute(statement, {k: v for k, v in params.items() if f"%({k})s" in statement})
        conn.execute(PLAIN)
        conn.execute(EDGE_DDL)
        conn.execute(f"INSERT INTO edge VALUES {EDGE_VALUES}")
        conn.execute(f"INSERT INTO grid VALUES {GRID_VALUES}")
        conn.execute("CREATE TABLE shapes (id int PRIMARY KEY, a int[], t text[])")  # ndarray<T>: any shape
        conn.execute("INSERT INTO shapes VALUES (1, '{1,2}', '{x}'), (2, '[0:2]={7,8,9}', '[2:2]={\"y,z\"}'), "
                     "(3, '{{1,2},{3,NULL}}', '{}'), (4, '{}', NULL)")
        conn.execute("CREATE TABLE docs (id int PRIMARY KEY, title text, body text)")
        conn.execute("INSERT INTO docs SELECT g, 'doc ' || g, %s FROM generate_series(1, 3) g", (BIG,))
        conn.execute(f"INSERT INTO docs SELECT g, 'doc ' || g, {DISTINCT_BIG} FROM generate_series(6, 7) g")


def change_source(dsn: str) -> None:
    """Inserts, updates (one leaves the 1 MB body unsent), key updates, deletes and a TRUNCATE."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE shop.all_types SET c_integer = 7, c_text = 'changed' WHERE id = 1")
        conn.execute("UPDATE shop.all_types SET c_integer = 8 WHERE id = 9223372036854775807")  # c_text TOASTed
        conn.execute("UPDATE shop.all_types SET id = 42 WHERE id = 3")
        conn.execute("DELETE FROM shop.all_types WHERE id = 2")
        conn.execute("INSERT INTO everything SELECT id + 100, c_bool, c_int2, c_int4, c_int8, c_oid, c_float4, "
                     "c_float8, c_dec38, c_dec, c_num, c_num50, c_text, c_varchar, c_char, c_name, c_citext, "
                     "c_enum, c_inet, c_cidr, c_macaddr, c_money, c_timetz, c_xml, c_bit, c_tsvector, c_hstore, "
                     "c_uuid, c_json, c_jsonb, c_bytea, c_date, c_time, c_ts, c_ts3, c_tstz, c_interval, a_int, "
                     "a_text, a_dec, a_tstz, a_enum, a_interval, a_uuid, a_bytea, a_float8, a_date, a_bool, "
                     "a_char, a_jsonb, c_domain, c_money2, c_notnull, c_negscale, c_bigscale, a_domain "
                     "FROM everything WHERE c_dec IS DISTINCT FROM 'NaN'")
        conn.execute("UPDATE everything SET c_text = 'updated', c_int4 = c_int4 + 1 WHERE id = 4")
        conn.execute("DELETE FROM everything WHERE id = 5")
        conn.execute(f"INSERT INTO edge VALUES {EDGE_VALUES.replace(chr(10) + '(', chr(10) + '(10')}")
        conn.execute("UPDATE edge SET id = 77 WHERE id = 7")
        conn.execute("UPDATE grid SET m_int = '{{5,6},{7,8}}' WHERE id = 2")
        conn.execute("TRUNCATE grid")
        conn.execute("INSERT INTO grid VALUES (9, '{{9}}', '{{{z}}}', NULL)")
        conn.execute("INSERT INTO shapes VALUES (5, '[-1:0][3:4]={{1,2},{3,4}}', '{{a,b}}')")
        conn.execute("UPDATE shapes SET a = '[5:5]={5}' WHERE id = 1")
        conn.execute("INSERT INTO plain SELECT id + 10, b, i2, i8, f4, f8, n, n15, n0, t, v, j, jb, u, by, d, tm, ts, "
                     "tz, iv FROM plain")
        conn.execute("UPDATE docs SET title = 'kept body' WHERE id = 1")  # body (1 MB, TOASTed) is not sent
        conn.execute("UPDATE docs SET id = 30, title = 'moved' WHERE id = 3")  # a key update leaving body alone
        conn.execute("INSERT INTO docs VALUES (4, 'new', 'small'), (5, 'gone', 'soon')")
        conn.execute("DELETE FROM docs WHERE id = 5")
        # a delete and then an update of another row, in one transaction: row 7 keeps its own body (not row 6's)
        conn.execute("BEGIN; DELETE FROM docs WHERE id = 6; UPDATE docs SET title = 'renamed' WHERE id = 7; COMMIT")


def uses_binary_copy(target_dsn: str, table: str) -> bool:
    """Whether full loads of ``table`` go in with COPY's binary format."""
    from olake_cli.destinations.postgres.load_copy import uses_binary
    from olake_cli.destinations.postgres.tables import TargetColumn, TargetTable

    with psycopg.connect(target_dsn, autocommit=True) as conn:
        schema = conn.execute("SELECT n.nspname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                              "WHERE c.relname = %s AND n.nspname <> '_olake'", (table,)).fetchone()[0]
        columns = conn.execute("SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = "
                               "%s::regclass AND attnum > 0 AND NOT attisdropped", (f"{schema}.{table}",)).fetchall()
    olake_types = {"boolean": "bool", "smallint": "int16", "integer": "int32", "bigint": "int64", "real": "float32",
                   "double precision": "float64", "text": "string", "character varying(10)": "string",
                   "json": "json", "jsonb": "json", "uuid": "uuid", "bytea": "bytes", "date": "date",
                   "time without time zone": "time", "timestamp without time zone": "timestamp",
                   "timestamp with time zone": "timestamptz", "interval": "interval", "numeric(12,2)": "decimal(12,2)",
                   "numeric(15,15)": "decimal(15,15)", "numeric(15,0)": "decimal(15,0)"}
    return uses_binary(TargetTable(schema, table, table, tuple(
        TargetColumn(name, type_text, olake_types.get(type_text, "?")) for name, type_text in columns), ("id",)))


def assert_copied(source_dsn: str, target_dsn: str) -> None:
    """Every source table equals its target table, value by value."""
    for schema, table in TABLES:
        assert_same_rows(source_dsn, (schema, table), target_dsn, (schema, table), columns_of(source_dsn, schema, table))


def catalog_for(src: str, path: Path) -> dict:
    return discover_catalog(src, path, {name: "cdc" for name in CDC}, only={t for _, t in TABLES})


def cdc_source(pg_cluster, db: str, slot: str) -> dict:
    return pg_cluster.source_config(db, schemas=["shop", "public"], replication_slot=slot, publication="pub_all",
                                    create_slot_and_publication=True)


def without_nan_decimal(dsn: str) -> None:
    """numeric(p,s) NaN cannot be carried through records (it becomes NULL with a warning, as in every
    destination); only sync's full load from PostgreSQL into PostgreSQL, which never decodes it, keeps it."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE everything SET c_dec = NULL WHERE c_dec = 'NaN'")


def test_every_type_and_every_change_by_read_write_and_sync(pg_cluster, pg_db, pg_target, target_db, tmp_path):
    source = pg_cluster.dsn(pg_db)
    make_source(source)
    src_pipe = write_json(tmp_path / "src_pipe.json", cdc_source(pg_cluster, pg_db, "slot_pipe"))
    src_sync = write_json(tmp_path / "src_sync.json", cdc_source(pg_cluster, pg_db, "slot_sync"))
    catalog = tmp_path / "cat.json"
    catalog_for(src_pipe, catalog)
    with psycopg.connect(pg_target.dsn(), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{target_db}_sync"')
    piped = pg_target.dsn(target_db)
    synced = pg_target.dsn(f"{target_db}_sync")
    dst_pipe = write_json(tmp_path / "dst_pipe.json", pg_target.destination_config(target_db))
    dst_sync = write_json(tmp_path / "dst_sync.json", pg_target.destination_config(f"{target_db}_sync"))
    state_pipe, state_sync = tmp_path / "pipe.json", tmp_path / "sync.json"
    sync_args = ["sync", "--source", src_sync, "--destination", dst_sync, "--catalog", str(catalog),
                 "--state", str(state_sync)]

    first = sync_once(src_pipe, catalog, dst_pipe, state_pipe)  # full loads: read | write
    assert b"NaN" in first.write_stderr and b"c_dec" in first.write_stderr, "the NaN decimal is named"
    loaded = run_olake(*sync_args)  # full loads: the Spark tasks pass the source's binary COPY data through
    assert loaded.returncode == 0, loaded.stderr.decode()[-3000:]
    assert b"NaN" not in loaded.stderr
    assert_copied(source, synced)  # exact, numeric(p,s) NaN included: no value was decoded on the way
    without_nan_decimal(source)
    assert_copied(source, piped)
    with psycopg.connect(piped, autocommit=True) as conn:
        types = dict(conn.execute("SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute WHERE "
                                  "attrelid = 'shop.all_types'::regclass AND attnum > 0").fetchall())
    assert types["c_numeric_12_2"] == "numeric(12,2)" and types["c_timestamptz"] == "timestamp with time zone"
    assert types["c_status"] == "text", "an enum the target lacks becomes text"
    assert types["c_jsonb"] == "jsonb" and types["c_int_array"] == "integer[]"
    assert uses_binary_copy(piped, "plain") and not uses_binary_copy(piped, "all_types")

    change_source(source)
    changes = sync_once(src_pipe, catalog, dst_pipe, state_pipe)
    assert b"truncated at the source" in changes.write_stderr
    assert_copied(source, piped)
    applied = run_olake(*sync_args)
    assert applied.returncode == 0, applied.stderr.decode()[-3000:]
    assert_copied(source, synced)
    with psycopg.connect(synced, autocommit=True) as conn:
        bodies = conn.execute("SELECT id, length(body) FROM docs ORDER BY id").fetchall()
    assert bodies == [(1, 1_000_000), (2, 1_000_000), (4, 5), (7, 4096 * 32), (30, 1_000_000)], \
        "unsent TOAST values are kept"
    with psycopg.connect(source, autocommit=True) as conn:
        for slot in ("slot_pipe", "slot_sync"):
            conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))


def test_replay_recover_and_state_from(pg_cluster, pg_db, pg_target, target_db, tmp_path):
    """A batch written twice changes nothing; ``state recover`` and ``read --state-from`` read the
    state the target committed with its rows (``_olake.streams``)."""
    source = pg_cluster.dsn(pg_db)
    with psycopg.connect(source, autocommit=True) as conn:
        conn.execute("CREATE TABLE acct (id int PRIMARY KEY, v int, note text)")
        conn.execute("INSERT INTO acct SELECT g, 0, 'n' || g FROM generate_series(1, 2000) g")
        conn.execute("CREATE TABLE tags (name text PRIMARY KEY, n int)")
        conn.execute("INSERT INTO tags VALUES ('a', 1), ('b', 2)")
    src = write_json(tmp_path / "src.json", pg_cluster.source_config(
        pg_db, replication_slot="slot_rr", publication="pub_rr", create_slot_and_publication=True, chunk_rows=500))
    dst = write_json(tmp_path / "dst.json", pg_target.destination_config(target_db, schema="copy"))
    catalog = tmp_path / "cat.json"
    discover_catalog(src, catalog, {"acct": "cdc", "tags": "incremental"}, cursor={"tags": "n"})
    target = pg_target.dsn(target_db)
    state = tmp_path / "state.json"
    sync_once(src, catalog, dst, state)  # the only full loads: later runs start no Spark
    with psycopg.connect(source, autocommit=True) as conn:
        conn.execute("UPDATE acct SET v = v + 1 WHERE id % 3 = 0")
        conn.execute("DELETE FROM acct WHERE id > 1990")
        conn.execute("INSERT INTO tags VALUES ('c', 3)")
    lines = run_olake("read", "--config", src, "--catalog", str(catalog), "--state", str(state))
    assert lines.returncode == 0, lines.stderr.decode()[-3000:]
    written = run_olake("write", "--config", dst, "--state", str(state), stdin=lines.stdout)
    assert written.returncode == 0, written.stderr.decode()[-3000:]
    assert_same_rows(source, ("public", "acct"), target, ("copy", "acct"), ["id", "v", "note"])
    replay = run_olake("write", "--config", dst, stdin=lines.stdout)  # the same batch again
    assert replay.returncode == 0, replay.stderr.decode()[-3000:]
    assert b"already holds (a replay)" in replay.stderr
    assert_same_rows(source, ("public", "acct"), target, ("copy", "acct"), ["id", "v", "note"])
    assert_same_rows(source, ("public", "tags"), target, ("copy", "tags"), ["name", "n"])

    state.unlink()
    recovered = run_olake("state", "recover", "--config", dst, "--catalog", str(catalog))
    assert recovered.returncode == 0, recovered.stderr.decode()
    [message] = messages(recovered.stdout)
    kinds = {s["stream_name"]: s["sync_type"] for s in message["state"]["streams"]}
    assert kinds == {"acct": "cdc", "tags": "incremental"}
    with psycopg.connect(source, autocommit=True) as conn:
        conn.execute("UPDATE acct SET v = v + 10 WHERE id < 5")
        conn.execute("INSERT INTO tags VALUES ('d', 4)")
    direct = read_into_write(["--config", src, "--catalog", str(catalog), "--state-from", dst], ["--config", dst])
    assert direct.read_code == 0 and direct.write_code == 0, direct.write_stderr.decode()[-3000:]
    assert b"acct: full load" not in direct.read_stderr and b"tags: full load" not in direct.read_stderr, \
        "recovered streams are not copied again"
    assert_same_rows(source, ("public", "acct"), target, ("copy", "acct"), ["id", "v", "note"])
    assert_same_rows(source, ("public", "tags"), target, ("copy", "tags"), ["name", "n"])
    with psycopg.connect(source, autocommit=True) as conn:
        conn.execute("SELECT pg_drop_replication_slot('slot_rr')")


def test_a_reload_replaces_the_rows_in_one_step(pg_cluster, pg_db, pg_target, target_db, tmp_path):
    """A second full load is staged: killed after its first chunk's commit, the target still holds the
    old rows exactly; the rerun swaps the new ones in."""
    source = pg_cluster.dsn(pg_db)
    with psycopg.connect(source, autocommit=True) as conn:
        conn.execute("CREATE TABLE items (id int PRIMARY KEY, label text)")
        conn.execute("INSERT INTO items SELECT g, 'old ' || g FROM generate_series(1, 3000) g")
    src = write_json(tmp_path / "src.json", pg_cluster.source_config(pg_db, chunk_rows=500, chunk_strategy="primary_key"))
    dst = write_json(tmp_path / "dst.json", pg_target.destination_config(target_db))
    catalog = tmp_path / "cat.json"
    discover_catalog(src, catalog, {})
    target = pg_target.dsn(target_db)
    state = tmp_path / "state.json"
    sync_once(src, catalog, dst, state)
    old = [(f"{i}", f"old {i}") for i in range(1, 3001)]
    with psycopg.connect(source, autocommit=True) as conn:
        conn.execute("UPDATE items SET label = 'new ' || id")
        conn.execute("INSERT INTO items SELECT g, 'new ' || g FROM generate_series(3001, 3500) g")
    result = run_olake("sync", "--source", src, "--destination", dst, "--catalog", str(catalog), "--state",
                       str(state), env={"OLAKE_TEST_CRASH_AT": "postgres-committed", "OLAKE_TEST_CRASH_AFTER": "2"})
    assert result.returncode != 0, "the run was killed in the middle of the load"
    with psycopg.connect(target, autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM _olake.chunks").fetchone()[0] >= 1, "a chunk was committed"
        staged = conn.execute("SELECT staged_table FROM _olake.loads").fetchone()[0]
        assert staged is not None
        assert conn.execute(f'SELECT count(*) FROM _olake."{staged}"').fetchone()[0] >= 500
        rows = conn.execute("SELECT id::text, label FROM items ORDER BY items.id").fetchall()
    assert rows == old, "readers see the complete old rows while the new load is staged"
    finished = run_olake("sync", "--source", src, "--destination", dst, "--catalog", str(catalog), "--state",
                         str(state))
    assert finished.returncode == 0, finished.stderr.decode()[-3000:]
    assert b"the new load replaced the table's rows" in finished.stderr
    assert_same_rows(source, ("public", "items"), target, ("public", "items"), ["id", "label"])
    with psycopg.connect(target, autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM _olake.loads").fetchone()[0] == 0
        assert conn.execute("SELECT count(*) FROM pg_tables WHERE schemaname = '_olake' AND tablename NOT IN "
                            "('streams', 'loads', 'chunks', 'row_versions', 'conflicts')").fetchone()[0] == 0, \
            "the staging table is dropped"


def test_an_existing_table_is_checked_before_anything_is_written(pg_cluster, pg_db, pg_target, target_db, tmp_path):
    source = pg_cluster.dsn(pg_db)
    with psycopg.connect(source, autocommit=True) as conn:
        conn.execute("CREATE TABLE a (id bigint PRIMARY KEY, amount numeric(12,2), note text)")
        conn.execute("INSERT INTO a VALUES (1, 1.5, 'x')")
    src = write_json(tmp_path / "src.json", pg_cluster.source_config(pg_db))
    dst = write_json(tmp_path / "dst.json", pg_target.destination_config(target_db))
    catalog = tmp_path / "cat.json"
    discover_catalog(src, catalog, {})
    target = pg_target.dsn(target_db)
    lines = run_olake("read", "--config", src, "--catalog", str(catalog))  # one read, written four times
    assert lines.returncode == 0, lines.stderr.decode()[-2000:]
    cases = [("CREATE TABLE a (id bigint PRIMARY KEY, amount integer, note text)",
              b"column 'amount' is integer, which cannot hold the source's numeric(12,2)"),
             ("CREATE TABLE a (id bigint, amount numeric(12,2), note text)",
              b"has no primary key or unique index on (id)"),
             ("CREATE TABLE a (id bigint PRIMARY KEY, amount numeric(12,2), note text, extra int NOT NULL)",
              b"column 'extra' is NOT NULL without a default")]
    for ddl, wanted in cases:
        with psycopg.connect(target, autocommit=True) as conn:
            conn.execute("DROP TABLE IF EXISTS a")
            conn.execute(ddl)
        result = run_olake("write", "--config", dst, stdin=lines.stdout)
        assert result.returncode != 0
        errors = [line for line in result.stderr.decode().splitlines() if "error" in line]
        assert len(errors) == 1 and wanted.decode() in errors[0] and "public.a" in errors[0], errors
        assert trace_errors(result.stdout)[0]["trace"]["error"]["failure_type"] == "config_error"
        with psycopg.connect(target, autocommit=True) as conn:
            assert conn.execute("SELECT count(*) FROM a").fetchone()[0] == 0, "nothing is written"
    with psycopg.connect(target, autocommit=True) as conn:  # a table lacking a column, of a wider type
        conn.execute("DROP TABLE a")
        conn.execute("CREATE TABLE a (id numeric(20,0) PRIMARY KEY, amount numeric, other text DEFAULT 'd')")
    result = run_olake("write", "--config", dst, stdin=lines.stdout)
    assert result.returncode == 0, result.stderr.decode()[-2000:]
    assert b"added or widened column(s) note of table public.a" in result.stderr
    assert table_texts(target, "public", "a", ["id", "amount", "note", "other"]) == [("1", "1.50", "x", "d")]


def test_a_column_widened_at_the_source_is_widened_in_the_target(pg_cluster, pg_db, pg_target, target_db, tmp_path):
    source = pg_cluster.dsn(pg_db)
    with psycopg.connect(source, autocommit=True) as conn:
        conn.execute("CREATE TABLE w (id int PRIMARY KEY, n int, price numeric(8,2))")
        conn.execute("INSERT INTO w VALUES (1, 1, 1.25)")
    src = write_json(tmp_path / "src.json", pg_cluster.source_config(
        pg_db, replication_slot="slot_w", publication="pub_w", create_slot_and_publication=True))
    dst = write_json(tmp_path / "dst.json", pg_target.destination_config(target_db))
    catalog = tmp_path / "cat.json"
    discover_catalog(src, catalog, {"w": "cdc"})
    state = tmp_path / "state.json"
    sync_once(src, catalog, dst, state)
    with psycopg.connect(source, autocommit=True) as conn:
        conn.execute("ALTER TABLE w ALTER COLUMN n TYPE bigint, ALTER COLUMN price TYPE numeric(12,4)")
        conn.execute("INSERT INTO w VALUES (2, 1099511627776, 12345678.1234)")
    result = sync_once(src, catalog, dst, state)
    assert b"added or widened column(s) n, price of table public.w" in result.write_stderr
    target = pg_target.dsn(target_db)
    with psycopg.connect(target, autocommit=True) as conn:
        types = conn.execute("SELECT format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = 'w'::regclass "
                             "AND attname IN ('n', 'price') ORDER BY attname").fetchall()
    assert types == [("bigint",), ("numeric(12,4)",)]
    assert_same_rows(source, ("public", "w"), target, ("public", "w"), ["id", "n", "price"])
    with psycopg.connect(source, autocommit=True) as conn:
        conn.execute("SELECT pg_drop_replication_slot('slot_w')")


def test_a_wrong_password_is_one_line_without_the_password(pg_target, target_db, tmp_path):
    dst = write_json(tmp_path / "dst.json", pg_target.destination_config(target_db, password="not-the-secret-xyz",
                                                                         origin="olake"))
    result = run_olake("check", "--config", dst)
    assert result.returncode != 0
    errors = [line for line in result.stderr.decode().splitlines() if "error" in line]
    assert len(errors) == 1 and "wrong username or password for user 'olake'" in errors[0], errors
    assert b"not-the-secret-xyz" not in result.stdout + result.stderr
    # a destination field (here "schema") tells check that this postgres config is a destination
    ok = run_olake("check", "--config", write_json(tmp_path / "ok.json",
                                                   pg_target.destination_config(target_db, schema="public")))
    assert ok.returncode == 0, ok.stderr.decode()
    status = messages(ok.stdout)[0]["connectionStatus"]
    assert status["status"] == "SUCCEEDED" and "track_commit_timestamp is on" in status["message"]


def test_soft_delete_and_metadata_columns(pg_cluster, pg_db, pg_target, target_db, tmp_path):
    source = pg_cluster.dsn(pg_db)
    with psycopg.connect(source, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY, v text)")
        conn.execute("INSERT INTO t VALUES (1, 'a'), (2, 'b'), (3, 'c')")
    src = write_json(tmp_path / "src.json", pg_cluster.source_config(
        pg_db, replication_slot="slot_soft", publication="pub_soft", create_slot_and_publication=True))
    bad = write_json(tmp_path / "bad.json", pg_target.destination_config(target_db, soft_delete=True))
    refused = run_olake("check", "--config", bad)
    assert refused.returncode != 0 and b"set \"metadata_columns\": true" in refused.stderr
    dst = write_json(tmp_path / "dst.json", pg_target.destination_config(target_db, soft_delete=True,
                                                                         metadata_columns=True))
    catalog = tmp_path / "cat.json"
    discover_catalog(src, catalog, {"t": "cdc"})
    state = tmp_path / "state.json"
    sync_once(src, catalog, dst, state)
    with psycopg.connect(source, autocommit=True) as conn:
        conn.execute("DELETE FROM t WHERE id = 2")
        conn.execute("UPDATE t SET v = 'cc' WHERE id = 3")
    sync_once(src, catalog, dst, state)
    with psycopg.connect(pg_target.dsn(target_db), autocommit=True) as conn:
        rows = conn.execute("SELECT id, v, _olake_op, _olake_op_id IS NOT NULL, _olake_commit_ts IS NOT NULL, "
                            "_olake_synced_at IS NOT NULL FROM t ORDER BY id").fetchall()
    assert rows == [(1, "a", "r", True, False, True), (2, "b", "d", True, True, True),
                    (3, "cc", "u", True, True, True)]
    with psycopg.connect(source, autocommit=True) as conn:
        conn.execute("SELECT pg_drop_replication_slot('slot_soft')")


def test_a_target_that_goes_down_fails_transiently_and_the_rerun_completes(pg_cluster, pg_db, spare_cluster,
                                                                          tmp_path):
    """The target stops after the first commits: one transient_error line, nothing half-applied; the
    rerun (the same input, from the state file) completes."""
    import subprocess

    from tests.support.cli import olake_cmd, olake_env
    from tests.support.pgcluster import create_database

    database = f"down_{os.getpid()}"
    create_database(spare_cluster, database)

    source = pg_cluster.dsn(pg_db)
    with psycopg.connect(source, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY, v text)")
        conn.execute("INSERT INTO t SELECT g, 'v' || g FROM generate_series(1, 4000) g")
    src = write_json(tmp_path / "src.json", pg_cluster.source_config(pg_db, chunk_rows=1000,
                                                                     chunk_strategy="primary_key"))
    dst = write_json(tmp_path / "dst.json", spare_cluster.destination_config(database))
    catalog = tmp_path / "cat.json"
    discover_catalog(src, catalog, {})
    lines = run_olake("read", "--config", src, "--catalog", str(catalog))
    assert lines.returncode == 0, lines.stderr.decode()
    cut = lines.stdout.index(b'"status":"succeed"')  # the first chunk's STATE
    first, rest = lines.stdout[:lines.stdout.index(b"\n", cut) + 1], lines.stdout[lines.stdout.index(b"\n", cut) + 1:]
    state = tmp_path / "state.json"
    writer = subprocess.Popen(olake_cmd("write", "--config", dst, "--state", str(state)), stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=olake_env())
    writer.stdin.write(first)
    writer.stdin.flush()
    while b'"succeed"' not in writer.stdout.readline():  # the first chunk's STATE, echoed once committed
        assert writer.poll() is None, writer.stderr.read().decode()[-2000:]
    spare_cluster._run([f"{spare_cluster.bin_dir}/pg_ctl", "-D", spare_cluster.datadir, "-m", "fast", "stop"])
    out, err = writer.communicate(rest, timeout=300)
    assert writer.returncode != 0
    errors = [line for line in err.decode().splitlines() if "error:" in line]
    assert len(errors) == 1 and "run again" in errors[0], errors
    assert [m["trace"]["error"]["failure_type"] for m in messages(out) if m.get("type") == "TRACE"] \
        == ["transient_error"], err.decode()[-2000:]
    spare_cluster._run([f"{spare_cluster.bin_dir}/pg_ctl", "-D", spare_cluster.datadir, "-l",
                       f"{spare_cluster.datadir}/../log", "-w", "start"])
    with psycopg.connect(spare_cluster.dsn(database), autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM t").fetchone()[0] == 1000, "only the committed chunk"
    rerun = run_olake("write", "--config", dst, "--state", str(state), stdin=lines.stdout)  # the same input
    assert rerun.returncode == 0, rerun.stderr.decode()[-2000:]
    assert b"skipped 1000 full-load row(s) of a chunk the target already holds" in rerun.stderr
    assert_same_rows(source, ("public", "t"), spare_cluster.dsn(database), ("public", "t"), ["id", "v"])
    assert json.loads(state.read_text())["streams"][0]["sync_type"] == "full-load"


def test_a_dropped_table_is_loaded_anew(pg_cluster, pg_db, pg_target, target_db, tmp_path):
    """A target table dropped outside olake (its ``_olake`` row left behind) is loaded anew by the next
    ``sync``, also for a stream set to ``skip_initial_load``, instead of applying the later changes to an
    empty table. (A re-sync marker keeping the rows until the new load replaces them: the conformance
    suite over every destination; a partition's TRUNCATE marking the stream: tests/test_e2e_resync.py.)"""
    from tests.test_e2e_resync import PARTITIONED

    source, target = pg_cluster.dsn(pg_db), pg_target.dsn(target_db)
    with psycopg.connect(source, autocommit=True) as conn:
        conn.execute(PARTITIONED)
    src = write_json(tmp_path / "src.json", pg_cluster.source_config(
        pg_db, replication_slot="slot_marker", publication="pub_marker", create_slot_and_publication=True,
        max_parallel=1))
    dst = write_json(tmp_path / "dst.json", pg_target.destination_config(target_db))
    catalog, state = tmp_path / "cat.json", tmp_path / "state.json"
    discover_catalog(src, catalog, {"events": "cdc"}, only={"events"})
    columns = ["id", "region", "v", "note"]
    sync_once(src, catalog, dst, state)
    assert assert_same_rows(source, ("public", "events"), target, ("public", "events"), columns) == 100

    with psycopg.connect(target, autocommit=True) as conn:
        conn.execute("DROP TABLE events")
    with psycopg.connect(source, autocommit=True) as conn:
        conn.execute("UPDATE events SET note = 'since' WHERE id <= 5")
    entry = json.loads(catalog.read_text())
    entry["streams"][0]["skip_initial_load"] = True  # a lost load is loaded in full all the same
    catalog.write_text(json.dumps(entry))
    synced = run_olake("sync", "--source", src, "--destination", dst, "--catalog", str(catalog), "--state", str(state))
    assert synced.returncode == 0, synced.stderr.decode()[-3000:]
    assert b"public.events: the state says 'cdc' but the destination holds no data of its load" in synced.stderr
    assert assert_same_rows(source, ("public", "events"), target, ("public", "events"), columns) == 100
    with psycopg.connect(source, autocommit=True) as conn:
        conn.execute("SELECT pg_drop_replication_slot('slot_marker')")


def test_a_load_resumed_into_a_target_that_lost_it_commits_a_marker(pg_target, target_db, tmp_path):
    """The state says chunk 0 is done, the target holds nothing: committing chunk 1 alone would pass for
    the whole load; ``write`` commits a re-sync marker instead and passes it on."""
    from tests.support.cli import with_stream_ends
    from tests.test_e2e_resync import _stream_state

    columns = {"id": {"type": ["integer"], "x-olake-type": "int32"},
               "v": {"type": ["string", "null"], "x-olake-type": "string"}}
    lines = [{"type": "CATALOG", "catalog": {"streams": [{
        "name": "t", "namespace": "ns", "sync_mode": "cdc", "supported_sync_modes": ["full_refresh", "cdc"],
        "source_defined_primary_key": [["id"]], "json_schema": {"type": "object", "properties": columns}}]}},
             _stream_state(["succeed", "pending"])]
    lines += [{"type": "RECORD", "record": {"stream": "t", "namespace": "ns", "emitted_at": 0,
                                            "data": {"id": i, "v": "chunk 1"}}} for i in range(10, 20)]
    lines += [_stream_state(["succeed", "succeed"]), _stream_state(None, "cdc")]
    dst = write_json(tmp_path / "dst.json", pg_target.destination_config(target_db))
    state = tmp_path / "state.json"
    result = run_olake("write", "--config", dst, "--state", str(state),
                       stdin=with_stream_ends(b"".join(json.dumps(m).encode() + b"\n" for m in lines)))
    assert result.returncode == 0, result.stderr.decode()
    assert table_texts(pg_target.dsn(target_db), "ns", "t", ["id", "v"]) == [], "not chunk 1 alone"
    assert b"ns.t: the state says 'full-load' but the destination holds no data of its load" in result.stderr
    assert result.stderr.count(b"the stream is loaded anew on the next run") == 1, result.stderr
    marker = {"cursor_field": None, "chunks": [], "sync_mode": "cdc", "columns": ["id", "v"]}
    echoed = [m["state"]["streams"][0] for m in messages(result.stdout) if m["type"] == "STATE"]
    assert len(echoed) == 3 and all(e["stream_state"] == marker for e in echoed)
    assert json.loads(state.read_text())["streams"][0]["stream_state"] == marker
    with psycopg.connect(pg_target.dsn(target_db), autocommit=True) as conn:  # what state recover reads
        assert conn.execute("SELECT state -> 'stream_state' FROM _olake.streams").fetchall() == [(marker,)]
