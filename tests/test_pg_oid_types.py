"""Types whose binary form is not portable between PostgreSQL servers, from PostgreSQL into PostgreSQL.

The OID-alias types (``regclass``, ``regtype``, ...) are numbers in binary and names in text, and the
number behind a name is each database's own; ``aclitem`` names roles, and has no binary form at all;
an enum, a composite type and arrays of them carry the source's OIDs in binary. ``sync`` (whose full
load passes the source's binary COPY data through) and ``read | write`` (text on the wire) must agree,
value by value: every such column arrives as the source's text.
"""

from __future__ import annotations

import os

import psycopg

from tests.support.cdc import discover_catalog, sync_once
from tests.support.cli import run_olake, write_json
from tests.support.pg_compare import assert_same_rows, columns_of

ROLE = f"oid_owner_{os.getpid()}"
OID_TYPES = ("regclass", "regtype", "regproc", "regprocedure", "regoper", "regoperator", "regnamespace",
             "regrole", "regconfig", "regdictionary", "regcollation")
DDL = f"""
DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{ROLE}') THEN CREATE ROLE "{ROLE}"; END IF; END $$;
CREATE SCHEMA other;
CREATE TABLE ref (id int);
CREATE TABLE other.far (id int);
CREATE TYPE mood AS ENUM ('sad', 'ok');
CREATE TYPE pair AS (a int, b text);
CREATE FUNCTION twice(int) RETURNS int LANGUAGE sql AS 'SELECT $1 * 2';
CREATE FUNCTION same(int, int) RETURNS bool LANGUAGE sql AS 'SELECT $1 = $2';
CREATE OPERATOR === (LEFTARG = int, RIGHTARG = int, FUNCTION = same);
CREATE TEXT SEARCH CONFIGURATION mine (COPY = english);
CREATE TEXT SEARCH DICTIONARY mydict (TEMPLATE = simple);
CREATE COLLATION mycoll FROM "C";
CREATE TABLE names (id int PRIMARY KEY, c_regclass regclass, c_regtype regtype, c_regproc regproc,
                    c_regprocedure regprocedure, c_regoper regoper, c_regoperator regoperator,
                    c_regnamespace regnamespace, c_regrole regrole, c_regconfig regconfig,
                    c_regdictionary regdictionary, c_regcollation regcollation, c_oid oid,
                    a_regclass regclass[], a_regtype regtype[]);
CREATE TABLE acl (id int PRIMARY KEY, c_aclitem aclitem, a_aclitem aclitem[]);
CREATE TABLE udt (id int PRIMARY KEY, c_mood mood, a_mood mood[], c_pair pair, a_pair pair[]);
"""
ROWS = {
    "names": (f"(%(id)s, 'ref', 'mood', 'twice', 'same(int,int)', '===', '===(int,int)', 'other', '{ROLE}', "
              "'mine', 'mydict', 'mycoll', 16639, '{ref,other.far,pg_class}', '{mood,pair,int4}')"),
    "acl": f"(%(id)s, '{ROLE}=r/{ROLE}', '{{{ROLE}=arw/{ROLE},=r/{ROLE}}}')",
    "udt": "(%(id)s, 'ok', '{sad,ok}', '(1,x)', ARRAY['(2,y)'::pair, NULL])",
}
TABLES = tuple(ROWS)


def _target(pg_target, name: str) -> str:
    """A target database holding types named like the source's enum and composite (other OIDs)."""
    with psycopg.connect(pg_target.dsn(), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    dsn = pg_target.dsn(name)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TYPE filler AS (z int); CREATE TYPE mood AS ENUM ('sad', 'ok'); "
                     "CREATE TYPE pair AS (a int, b text)")
    return dsn


def test_oid_alias_and_catalog_types_arrive_as_the_source_text_by_sync_and_read_write(
        pg_cluster, pg_db, pg_target, target_db, tmp_path):
    source = pg_cluster.dsn(pg_db)
    with psycopg.connect(source, autocommit=True) as conn:
        conn.execute(DDL)
        for table, row in ROWS.items():
            conn.execute(f"INSERT INTO {table} VALUES {row}", {"id": 1})
            conn.execute(f"INSERT INTO {table} (id) VALUES (2)")
    config = pg_cluster.source_config(pg_db, schemas=["public"], publication="pub_odd",
                                      create_slot_and_publication=True)
    src_pipe = write_json(tmp_path / "src_pipe.json", {**config, "replication_slot": "slot_odd_pipe"})
    src_sync = write_json(tmp_path / "src_sync.json", {**config, "replication_slot": "slot_odd_sync"})
    catalog = tmp_path / "cat.json"
    discover_catalog(src_pipe, catalog, dict.fromkeys(TABLES, "cdc"), only=set(TABLES))
    piped, synced = _target(pg_target, f"{target_db}_p"), _target(pg_target, f"{target_db}_s")
    dst_pipe = write_json(tmp_path / "dst_pipe.json", pg_target.destination_config(f"{target_db}_p"))
    dst_sync = write_json(tmp_path / "dst_sync.json", pg_target.destination_config(f"{target_db}_s"))
    sync_args = ["sync", "--source", src_sync, "--destination", dst_sync, "--catalog", str(catalog),
                 "--state", str(tmp_path / "sync.json")]

    loaded = run_olake(*sync_args)  # full loads: the names pass through as text
    assert loaded.returncode == 0, loaded.stderr.decode()[-3000:]
    sync_once(src_pipe, catalog, dst_pipe, tmp_path / "pipe.json")
    _assert_copied(source, synced, piped)
    types = _target_types(synced)
    assert {types[f"c_{t}"] for t in OID_TYPES} == {"text"} and types["a_regclass"] == "text[]"
    assert types["c_aclitem"] == "text" and types["a_aclitem"] == "text[]" and types["c_oid"] == "oid"
    assert types["c_mood"] == "mood" and types["c_pair"] == "pair", "the target's own types of those names"
    assert _passed_through(synced) == {"names": True, "acl": True, "udt": False}

    with psycopg.connect(source, autocommit=True) as conn:  # changes carry the same text
        for table, row in ROWS.items():
            conn.execute(f"INSERT INTO {table} VALUES {row}", {"id": 3})
        conn.execute("UPDATE names SET c_regclass = 'other.far', c_regtype = 'pair' WHERE id = 1")
    sync_once(src_pipe, catalog, dst_pipe, tmp_path / "pipe.json")
    applied = run_olake(*sync_args)
    assert applied.returncode == 0, applied.stderr.decode()[-3000:]
    _assert_copied(source, synced, piped)
    with psycopg.connect(source, autocommit=True) as conn:
        for slot in ("slot_odd_pipe", "slot_odd_sync"):
            conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))


def _assert_copied(source: str, *targets: str) -> None:
    for target in targets:
        for table in TABLES:
            assert_same_rows(source, ("public", table), target, ("public", table), columns_of(source, "public", table))


def _target_types(dsn: str) -> dict[str, str]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return dict(conn.execute("SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid "
                                 "IN ('names'::regclass, 'acl'::regclass, 'udt'::regclass) AND attnum > 0").fetchall())


def _passed_through(dsn: str) -> dict[str, bool]:
    """Per table, whether sync's full load passes the source's binary COPY data through (cast to the
    target's types: text for the naming types) or converts each value."""
    from olake_cli.destinations.postgres.load_copy import passthrough_casts
    from olake_cli.destinations.postgres.tables import TargetColumn, TargetTable

    types = _target_types(dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        return {table: passthrough_casts(conn, TargetTable("public", table, table, tuple(
            TargetColumn(name, types[name], "string") for name in columns_of(dsn, "public", table)), ("id",)))
            is not None for table in TABLES}
