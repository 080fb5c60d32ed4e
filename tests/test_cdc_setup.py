"""Change-capture preflight against real PostgreSQL: every problem is found, and its printed fix SQL,
run as a superuser, makes that problem go away (so the SQL is exact)."""

from __future__ import annotations

import os
from dataclasses import replace

import psycopg
import pytest

from olake_cli.core.errors import ConfigError
from olake_cli.sources.postgres.cdc_setup import (CdcProblem, cdc_notes, cdc_problems,
                                                  ensure_slot_and_publication, publication_problems,
                                                  render_problems,
                                                  replication_privilege_problem, wal_level_problem)
from olake_cli.sources.postgres.connection import PostgresSettings
from tests.support.pgcluster import PgCluster, create_database, start_cluster

pytestmark = pytest.mark.timeout(120)

SCHEMA_SQL = """
CREATE SCHEMA shop;
CREATE TABLE shop.orders (id int PRIMARY KEY, note text);
CREATE TABLE shop."Odd Name" (id int PRIMARY KEY);
CREATE TABLE shop.nokey (x int);
CREATE TABLE shop.events (id int, day date, PRIMARY KEY (id, day)) PARTITION BY RANGE (day);
CREATE TABLE shop.events_2024 PARTITION OF shop.events FOR VALUES FROM ('2024-01-01') TO ('2025-01-01');
CREATE TABLE shop.logs (line text, day date) PARTITION BY RANGE (day);
CREATE TABLE shop.logs_a PARTITION OF shop.logs FOR VALUES FROM ('2024-01-01') TO ('2024-07-01');
CREATE TABLE shop.logs_b PARTITION OF shop.logs FOR VALUES FROM ('2024-07-01') TO ('2025-01-01');
"""
KEYED = [("shop", "orders"), ("shop", "Odd Name"), ("shop", "events")]
ALL_TABLES = KEYED + [("shop", "nokey"), ("shop", "logs")]


def settings_for(cluster: PgCluster, db: str, **extra) -> PostgresSettings:
    """Superuser settings naming a slot and a publication unique to ``db``."""
    values = {"host": cluster.host, "port": cluster.port, "database": db, "username": cluster.superuser,
              "password": cluster.password, "replication_slot": f"slot_{db}", "publication": f"Pub {db}"}
    values.update(extra)
    return PostgresSettings(**values)


def run_fix(conn: psycopg.Connection, problem: CdcProblem) -> None:
    """Run a fix the way psql would: one statement per line."""
    assert problem.fix_sql, problem.what
    for statement in problem.fix_sql.splitlines():
        conn.execute(statement)


def connect_as(cluster: PgCluster, db: str, user: str, password: str) -> psycopg.Connection:
    return psycopg.connect(host=cluster.host, port=cluster.port, dbname=db, user=user, password=password,
                           autocommit=True)


def drop_slot_if_exists(conn: psycopg.Connection, slot: str) -> None:
    conn.execute("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = %s",
                 (slot,))


@pytest.fixture()
def cdc_db(pg_cluster: PgCluster, pg_db: str):
    """(superuser autocommit connection, settings) on a database with the shop tables; drops the slot after."""
    with psycopg.connect(pg_cluster.dsn(pg_db), autocommit=True) as conn:
        conn.execute(SCHEMA_SQL)
        settings = settings_for(pg_cluster, pg_db)
        yield conn, settings
        drop_slot_if_exists(conn, settings.replication_slot)


def problems_about(problems: list[CdcProblem], word: str) -> list[CdcProblem]:
    return [p for p in problems if word in p.what]


# ---------------------------------------------------------------- wal_level and role

def test_wal_level_problem_only_for_non_logical_levels():
    assert wal_level_problem("logical") is None
    problem = wal_level_problem("minimal")
    assert problem.fix_sql == "ALTER SYSTEM SET wal_level = logical;"
    assert "'minimal'" in problem.what and "restart PostgreSQL" in problem.what


def test_replica_cluster_is_reported_and_fixed_by_alter_system_and_restart():
    cluster = start_cluster({"wal_level": "replica"})
    try:
        create_database(cluster, "src")
        settings = settings_for(cluster, "src", create_slot_and_publication=True)
        with psycopg.connect(cluster.dsn("src"), autocommit=True) as conn:
            problems = cdc_problems(conn, settings, [])
            assert problems[0] == CdcProblem(
                "wal_level is 'replica' but change capture needs 'logical'; run the fix as a superuser, "
                "then restart PostgreSQL", "ALTER SYSTEM SET wal_level = logical;")
            with pytest.raises(ConfigError) as raised:  # the slot cannot be created before the fix
                ensure_slot_and_publication(conn, settings, [])
            assert "wal_level" in raised.value.message
            assert "pg_create_logical_replication_slot('slot_src', 'pgoutput')" in raised.value.message
            run_fix(conn, problems[0])
        cluster._run([os.path.join(cluster.bin_dir, "pg_ctl"), "-D", cluster.datadir, "-w", "-l",
                      os.path.join(os.path.dirname(cluster.datadir), "log"), "restart"])
        with psycopg.connect(cluster.dsn("src"), autocommit=True) as conn:
            assert problems_about(cdc_problems(conn, settings, []), "wal_level") == []
            assert ensure_slot_and_publication(conn, settings, []) == [
                "created replication slot 'slot_src' (pgoutput)"]
    finally:
        cluster.stop()


def test_role_without_replication_gets_alter_role(pg_cluster: PgCluster, cdc_db):
    admin, settings = cdc_db
    role = f"Reader {settings.database}"
    admin.execute(psycopg.sql.SQL("CREATE ROLE {} LOGIN PASSWORD 'pw'").format(psycopg.sql.Identifier(role)))
    try:
        with connect_as(pg_cluster, settings.database, role, "pw") as reader:
            problem = replication_privilege_problem(reader)
            assert problem.fix_sql == f'ALTER ROLE "{role}" WITH REPLICATION;'
            assert f"user '{role}' lacks the REPLICATION attribute" in problem.what
            assert problem in cdc_problems(reader, replace(settings, username=role), KEYED)
            run_fix(admin, problem)
        with connect_as(pg_cluster, settings.database, role, "pw") as reader:
            assert replication_privilege_problem(reader) is None
    finally:
        admin.execute(psycopg.sql.SQL("DROP ROLE {}").format(psycopg.sql.Identifier(role)))
    assert replication_privilege_problem(admin) is None  # superuser


# ---------------------------------------------------------------- config and slot

def test_missing_and_invalid_config_fields(cdc_db):
    conn, settings = cdc_db
    problems = cdc_problems(conn, replace(settings, replication_slot=None, publication=None), KEYED)
    assert problems == [
        CdcProblem("the source config has no 'replication_slot'; add e.g. \"replication_slot\": \"olake_slot\""),
        CdcProblem("the source config has no 'publication'; add e.g. \"publication\": \"olake_publication\"")]
    bad_name = replace(settings, replication_slot="My Slot")
    assert problems_about(cdc_problems(conn, bad_name, KEYED), "slot") == [CdcProblem(
        "replication_slot 'My Slot' is not a valid slot name (at most 63 lower-case letters, digits and "
        "underscores); rename it")]


def test_missing_slot_fix_creates_a_pgoutput_slot(cdc_db):
    conn, settings = cdc_db
    slot = settings.replication_slot
    [problem] = problems_about(cdc_problems(conn, settings, KEYED), "replication slot")
    assert problem == CdcProblem(f"replication slot '{slot}' does not exist; create it in database "
                                 f"'{settings.database}'",
                                 f"SELECT pg_create_logical_replication_slot('{slot}', 'pgoutput');")
    run_fix(conn, problem)
    assert problems_about(cdc_problems(conn, settings, KEYED), "replication slot") == []
    assert conn.execute("SELECT plugin, database FROM pg_replication_slots WHERE slot_name = %s",
                        (slot,)).fetchone() == ("pgoutput", settings.database)


def test_slot_with_another_plugin_is_dropped_and_recreated(cdc_db):
    conn, settings = cdc_db
    slot = settings.replication_slot
    conn.execute("SELECT pg_create_logical_replication_slot(%s, 'test_decoding')", (slot,))
    [problem] = problems_about(cdc_problems(conn, settings, KEYED), "replication slot")
    assert "uses plugin 'test_decoding' but olake reads 'pgoutput'" in problem.what
    assert problem.fix_sql == (f"SELECT pg_drop_replication_slot('{slot}');\n"
                               f"SELECT pg_create_logical_replication_slot('{slot}', 'pgoutput');")
    run_fix(conn, problem)
    assert problems_about(cdc_problems(conn, settings, KEYED), "replication slot") == []


def test_slot_in_another_database_is_reported(pg_cluster: PgCluster, cdc_db):
    conn, settings = cdc_db
    other = f"{settings.database}_other"
    create_database(pg_cluster, other)
    try:
        with psycopg.connect(pg_cluster.dsn(other), autocommit=True) as other_conn:
            other_conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')",
                               (settings.replication_slot,))
        [problem] = problems_about(cdc_problems(conn, settings, KEYED), "replication slot")
        assert problem.what.startswith(f"replication slot '{settings.replication_slot}' belongs to database "
                                       f"'{other}', not '{settings.database}'")
        run_fix(conn, problem)
        assert problems_about(cdc_problems(conn, settings, KEYED), "replication slot") == []
    finally:
        drop_slot_if_exists(conn, settings.replication_slot)
        conn.execute(psycopg.sql.SQL("DROP DATABASE {} WITH (FORCE)").format(psycopg.sql.Identifier(other)))


def test_lost_slot_says_position_is_gone_and_recreates_it():
    cluster = start_cluster({"max_slot_wal_keep_size": "1MB"})
    try:
        create_database(cluster, "src")
        settings = settings_for(cluster, "src")
        with psycopg.connect(cluster.dsn("src"), autocommit=True) as conn:
            conn.execute("SELECT pg_create_logical_replication_slot('slot_src', 'pgoutput')")
            conn.execute("CREATE TABLE filler (x int)")
            for _ in range(4):  # push the slot's WAL out: new segments, then a checkpoint removes old ones
                conn.execute("INSERT INTO filler SELECT generate_series(1, 1000)")
                conn.execute("SELECT pg_switch_wal()")
            conn.execute("CHECKPOINT")
            assert conn.execute("SELECT wal_status FROM pg_replication_slots").fetchone() == ("lost",)
            [problem] = problems_about(cdc_problems(conn, settings, []), "replication slot")
            assert "has lost WAL it needed (wal_status = 'lost'), so its position is gone" in problem.what
            assert "re-sync every cdc stream with a new full load (on_position_lost = 'resync')" in problem.what
            [failing] = problems_about(cdc_problems(conn, replace(settings, on_position_lost="fail"), []),
                                       "replication slot")
            assert "olake stops with an error meanwhile (on_position_lost = 'fail')" in failing.what
            run_fix(conn, problem)
            assert problems_about(cdc_problems(conn, settings, []), "replication slot") == []
    finally:
        cluster.stop()


# ---------------------------------------------------------------- publication

def test_missing_publication_fix_creates_it_for_every_table(cdc_db):
    conn, settings = cdc_db
    [problem] = problems_about(cdc_problems(conn, settings, KEYED), "publication")
    pub = settings.publication
    assert problem == CdcProblem(
        f"publication '{pub}' does not exist in this database",
        f'CREATE PUBLICATION "{pub}" FOR TABLE "shop"."orders", "shop"."Odd Name", "shop"."events";')
    run_fix(conn, problem)
    assert problems_about(cdc_problems(conn, settings, KEYED), "publication") == []
    published = conn.execute("SELECT schemaname, tablename FROM pg_publication_tables WHERE pubname = %s "
                             "ORDER BY 2", (pub,)).fetchall()
    # not via the partition root: PostgreSQL lists (and publishes) the leaf partitions under their names
    assert published == [("shop", "Odd Name"), ("shop", "events_2024"), ("shop", "orders")]


def test_publication_missing_some_tables_gets_add_table(cdc_db):
    conn, settings = cdc_db
    pub = settings.publication
    conn.execute(f'CREATE PUBLICATION "{pub}" FOR TABLE shop.orders WITH (publish_via_partition_root = true)')
    [problem] = problems_about(cdc_problems(conn, settings, KEYED), "publication")
    assert problem == CdcProblem(f"publication '{pub}' does not cover shop.Odd Name, shop.events",
                                 f'ALTER PUBLICATION "{pub}" ADD TABLE "shop"."Odd Name", "shop"."events";')
    run_fix(conn, problem)
    assert problems_about(cdc_problems(conn, settings, KEYED), "publication") == []


@pytest.mark.parametrize("scope", ["FOR ALL TABLES", "FOR TABLES IN SCHEMA shop"])
def test_publication_covering_all_tables_or_the_schema_is_enough(cdc_db, scope):
    conn, settings = cdc_db
    conn.execute(f'CREATE PUBLICATION "{settings.publication}" {scope} WITH (publish_via_partition_root = true)')
    assert problems_about(cdc_problems(conn, settings, KEYED), "publication") == []


def test_publication_operations_are_fixed_and_partition_root_is_not_required(cdc_db):
    conn, settings = cdc_db
    pub = settings.publication
    conn.execute(f'CREATE PUBLICATION "{pub}" FOR TABLE shop.orders, shop.events WITH (publish = \'insert\')')
    problems = problems_about(cdc_problems(conn, settings, KEYED[:1] + KEYED[2:]), "publication")
    assert problems == [  # leaf partitions map to their root stream: publish_via_partition_root is optional
        CdcProblem(f"publication '{pub}' does not publish update, delete, truncate, so those changes would be lost",
                   f"ALTER PUBLICATION \"{pub}\" SET (publish = 'insert, update, delete, truncate');")]
    for problem in problems:
        run_fix(conn, problem)
    assert problems_about(cdc_problems(conn, settings, KEYED), "publication") == [
        CdcProblem(f"publication '{pub}' does not cover shop.Odd Name",
                   f'ALTER PUBLICATION "{pub}" ADD TABLE "shop"."Odd Name";')]


def test_publication_row_filter_is_dropped_and_re_added(cdc_db):
    conn, settings = cdc_db
    pub = settings.publication
    conn.execute(f'CREATE PUBLICATION "{pub}" FOR TABLE shop.orders WHERE (id > 10) '
                 'WITH (publish_via_partition_root = true)')
    [problem] = problems_about(cdc_problems(conn, settings, [("shop", "orders")]), "publication")
    assert "has a row filter or column list on shop.orders, so some changes of shop.orders" in problem.what
    assert problem.fix_sql == (f'ALTER PUBLICATION "{pub}" DROP TABLE "shop"."orders";\n'
                               f'ALTER PUBLICATION "{pub}" ADD TABLE "shop"."orders";')
    run_fix(conn, problem)
    assert problems_about(cdc_problems(conn, settings, [("shop", "orders")]), "publication") == []


def test_unknown_table_is_reported_without_fix(cdc_db):
    conn, settings = cdc_db
    assert problems_about(cdc_problems(conn, settings, [("shop", "ghost")]), "ghost") == [CdcProblem(
        f"table shop.ghost does not exist in database '{settings.database}'; run discover again and fix "
        "the catalog")]


# ---------------------------------------------------------------- replica identity

def test_tables_without_usable_replica_identity_get_replica_identity_full(cdc_db):
    conn, settings = cdc_db
    pub = settings.publication
    conn.execute("CREATE TABLE shop.nothing (id int PRIMARY KEY); ALTER TABLE shop.nothing REPLICA IDENTITY NOTHING;"
                 "CREATE TABLE shop.by_index (id int NOT NULL); CREATE UNIQUE INDEX by_index_id ON shop.by_index (id);"
                 "ALTER TABLE shop.by_index REPLICA IDENTITY USING INDEX by_index_id; DROP INDEX shop.by_index_id;")
    tables = ALL_TABLES + [("shop", "nothing"), ("shop", "by_index")]
    problems = problems_about(publication_problems(conn, settings, tables), "cannot use cdc")
    assert [(p.what.split(";")[0], p.fix_sql) for p in problems] == [
        ("table shop.nokey cannot use cdc: no primary key (REPLICA IDENTITY DEFAULT)",
         f'ALTER TABLE "shop"."nokey" REPLICA IDENTITY FULL;\nALTER PUBLICATION "{pub}" ADD TABLE "shop"."nokey";'),
        ("table shop.logs cannot use cdc: no primary key (REPLICA IDENTITY DEFAULT)",
         'ALTER TABLE "shop"."logs" REPLICA IDENTITY FULL;\nALTER TABLE "shop"."logs_a" REPLICA IDENTITY FULL;\n'
         f'ALTER TABLE "shop"."logs_b" REPLICA IDENTITY FULL;\nALTER PUBLICATION "{pub}" ADD TABLE "shop"."logs";'),
        ("table shop.nothing cannot use cdc: REPLICA IDENTITY NOTHING",
         f'ALTER TABLE "shop"."nothing" REPLICA IDENTITY FULL;\nALTER PUBLICATION "{pub}" ADD TABLE "shop"."nothing";'),
        ("table shop.by_index cannot use cdc: a REPLICA IDENTITY USING INDEX whose index no longer exists",
         'ALTER TABLE "shop"."by_index" REPLICA IDENTITY FULL;\n'
         f'ALTER PUBLICATION "{pub}" ADD TABLE "shop"."by_index";')]
    for problem in publication_problems(conn, settings, tables):  # the publication is created first
        run_fix(conn, problem)
    assert publication_problems(conn, settings, tables) == []


def test_missing_replica_identity_really_blocks_updates_once_published(cdc_db):
    conn, settings = cdc_db
    conn.execute(f'CREATE PUBLICATION "{settings.publication}" FOR TABLE shop.nokey')
    conn.execute("INSERT INTO shop.nokey VALUES (1)")
    with pytest.raises(psycopg.errors.ObjectNotInPrerequisiteState):
        conn.execute("UPDATE shop.nokey SET x = 2")
    [problem] = problems_about(cdc_problems(conn, settings, [("shop", "nokey")]), "cannot use cdc")
    run_fix(conn, problem)
    conn.execute("UPDATE shop.nokey SET x = 2")
    assert conn.execute("SELECT x FROM shop.nokey").fetchall() == [(2,)]


def test_tables_with_a_key_get_no_advice(cdc_db):
    """A key-only old row on a delete is all change capture needs: no REPLICA IDENTITY FULL suggestion."""
    conn, settings = cdc_db
    assert problems_about(cdc_problems(conn, settings, KEYED), "replica identity") == []
    assert cdc_notes(conn, settings, KEYED) == []



def test_publication_via_partition_root_gets_a_note_about_partition_truncates(cdc_db):
    conn, settings = cdc_db
    pub = settings.publication
    conn.execute(f'CREATE PUBLICATION "{pub}" FOR TABLE shop.orders, shop.events WITH (publish_via_partition_root = true)')
    assert problems_about(cdc_problems(conn, settings, KEYED[:1] + KEYED[2:]), "partition root") == []
    [note] = [n for n in cdc_notes(conn, settings, KEYED) if "publish_via_partition_root" in n]
    assert note == (f"publication '{pub}' uses publish_via_partition_root, so PostgreSQL publishes nothing for a "
                    "TRUNCATE of a single partition of shop.events and the destination would keep its rows; run "
                    f'ALTER PUBLICATION "{pub}" SET (publish_via_partition_root = false);')
    conn.execute(note.split("; run ", 1)[1])
    assert [n for n in cdc_notes(conn, settings, KEYED) if "publish_via_partition_root" in n] == []
    assert [n for n in cdc_notes(conn, settings, [("shop", "orders")]) if "partition" in n] == []


# ---------------------------------------------------------------- the whole check, rendering

def test_running_every_printed_fix_leaves_no_problem(cdc_db):
    conn, settings = cdc_db
    conn.execute(f"CREATE PUBLICATION \"{settings.publication}\" FOR TABLE shop.orders "
                 "WITH (publish = 'insert, update')")
    conn.execute("SELECT pg_create_logical_replication_slot(%s, 'test_decoding')", (settings.replication_slot,))
    problems = cdc_problems(conn, settings, ALL_TABLES)
    assert len(problems) == 3  # slot plugin; 2 keyed tables not covered (one problem); operations
    for problem in problems:
        run_fix(conn, problem)
    assert cdc_problems(conn, settings, ALL_TABLES) == []
    assert any(note.startswith("2 table(s) cannot use cdc") for note in cdc_notes(conn, settings, ALL_TABLES))


def test_render_problems_puts_each_fix_under_its_problem():
    problems = [CdcProblem("slot 's' is missing", "SELECT 1;\nSELECT 2;"), CdcProblem("add 'publication'")]
    assert render_problems(problems, ["a note"]) == (
        "- slot 's' is missing\n"
        "  fix: SELECT 1;\n"
        "       SELECT 2;\n"
        "- add 'publication'\n"
        "note: a note")
    assert render_problems([]) == ""


# ---------------------------------------------------------------- ensure_slot_and_publication

def test_ensure_creates_what_is_missing_and_is_idempotent(cdc_db):
    conn, settings = cdc_db
    assert ensure_slot_and_publication(conn, settings, KEYED) == []  # option off: nothing happens
    assert conn.execute("SELECT count(*) FROM pg_publication").fetchone() == (0,)
    creating = replace(settings, create_slot_and_publication=True)
    assert ensure_slot_and_publication(conn, creating, KEYED[:1]) == [
        f"created publication '{settings.publication}' for 1 table(s)",
        f"created replication slot '{settings.replication_slot}' (pgoutput)"]
    assert ensure_slot_and_publication(conn, creating, KEYED) == [
        f"added shop.Odd Name, shop.events to publication '{settings.publication}'"]
    assert ensure_slot_and_publication(conn, creating, KEYED) == []
    assert cdc_problems(conn, settings, KEYED) == []
    assert conn.execute("SELECT pubviaroot FROM pg_publication WHERE pubname = %s",
                        (settings.publication,)).fetchone() == (False,)  # a partition's TRUNCATE is published


def test_ensure_needs_names_and_never_drops(cdc_db):
    conn, settings = cdc_db
    creating = replace(settings, create_slot_and_publication=True)
    with pytest.raises(ConfigError, match="no 'publication'"):
        ensure_slot_and_publication(conn, replace(creating, publication=None), KEYED)
    conn.execute("SELECT pg_create_logical_replication_slot(%s, 'test_decoding')", (settings.replication_slot,))
    assert ensure_slot_and_publication(conn, creating, KEYED) == [
        f"created publication '{settings.publication}' for 3 table(s)"]
    assert conn.execute("SELECT plugin FROM pg_replication_slots WHERE slot_name = %s",
                        (settings.replication_slot,)).fetchone() == ("test_decoding",)


def test_ensure_as_unprivileged_role_raises_config_error_with_the_sql(pg_cluster: PgCluster, cdc_db):
    admin, settings = cdc_db
    role = f"weak_{settings.database}"
    admin.execute(f"CREATE ROLE {role} LOGIN PASSWORD 'pw'")
    weak = replace(settings, username=role, password="pw", create_slot_and_publication=True)
    try:
        with connect_as(pg_cluster, settings.database, role, "pw") as conn:
            with pytest.raises(ConfigError) as raised:
                ensure_slot_and_publication(conn, weak, KEYED[:1])
            assert f"user '{role}' may not do this" in raised.value.message
            assert raised.value.message.endswith(
                f'CREATE PUBLICATION "{settings.publication}" FOR TABLE "shop"."orders";')
            admin.execute(f'CREATE PUBLICATION "{settings.publication}" FOR TABLE shop.orders')
            with pytest.raises(ConfigError) as raised:
                ensure_slot_and_publication(conn, weak, KEYED[:1])
            assert raised.value.message.endswith(
                f"SELECT pg_create_logical_replication_slot('{settings.replication_slot}', 'pgoutput');")
            assert conn.execute("SELECT count(*) FROM pg_replication_slots WHERE slot_name = %s",
                                (settings.replication_slot,)).fetchone() == (0,)
    finally:
        admin.execute(f"DROP ROLE {role}")


def test_ensure_works_on_a_connection_without_autocommit(pg_cluster: PgCluster, cdc_db):
    admin, settings = cdc_db
    creating = replace(settings, create_slot_and_publication=True)
    with psycopg.connect(pg_cluster.dsn(settings.database)) as conn:
        assert not conn.autocommit
        assert len(ensure_slot_and_publication(conn, creating, KEYED)) == 2
    assert cdc_problems(admin, settings, KEYED) == []  # committed, seen from another session
