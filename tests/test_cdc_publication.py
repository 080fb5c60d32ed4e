"""Keyless tables never break the source, and every selected cdc table is really published (issue 7,
points 2 and 3, setup side), against a real PostgreSQL server. Each printed fix is executed and the
problem it fixes must be gone afterwards."""

from __future__ import annotations

from dataclasses import replace

import psycopg
import pytest

from olake_cli.core.errors import ConfigError
from olake_cli.sources.postgres.cdc_setup import (CdcProblem, cdc_notes, cdc_problems,
                                                  ensure_slot_and_publication, publication_problems,
                                                  require_publication_ready)
from olake_cli.sources.postgres.discover import discover_catalog
from olake_cli.sources.postgres.partitions import partition_roots
from olake_cli.sources.postgres.publication import publication_members
from tests.test_cdc_setup import drop_slot_if_exists, run_fix, settings_for

pytestmark = pytest.mark.timeout(120)

# keyed: orders (pk), full_log (no pk, FULL), by_index (USING INDEX), events (partitioned pk, two levels).
# keyless: nokey (DEFAULT, no pk), nothing (pk but NOTHING), logs (partitioned, no pk anywhere),
# mixed (partitioned root FULL, one leaf FULL, one leaf without identity).
SCHEMA_SQL = """
CREATE SCHEMA shop;
CREATE TABLE shop.orders (id int PRIMARY KEY, note text);
CREATE TABLE shop.full_log (line text); ALTER TABLE shop.full_log REPLICA IDENTITY FULL;
CREATE TABLE shop.by_index (id int NOT NULL); CREATE UNIQUE INDEX by_index_id ON shop.by_index (id);
ALTER TABLE shop.by_index REPLICA IDENTITY USING INDEX by_index_id;
CREATE TABLE shop.events (id int, day date, PRIMARY KEY (id, day)) PARTITION BY RANGE (day);
CREATE TABLE shop.events_2024 PARTITION OF shop.events FOR VALUES FROM ('2024-01-01') TO ('2025-01-01')
  PARTITION BY RANGE (day);
CREATE TABLE shop.events_2024h1 PARTITION OF shop.events_2024 FOR VALUES FROM ('2024-01-01') TO ('2024-07-01');
CREATE TABLE shop.events_2024h2 PARTITION OF shop.events_2024 FOR VALUES FROM ('2024-07-01') TO ('2025-01-01');
CREATE TABLE shop.events_2025 PARTITION OF shop.events FOR VALUES FROM ('2025-01-01') TO ('2026-01-01');
CREATE TABLE shop.nokey (x int);
CREATE TABLE shop.nothing (id int PRIMARY KEY); ALTER TABLE shop.nothing REPLICA IDENTITY NOTHING;
CREATE TABLE shop.logs (line text, day date) PARTITION BY RANGE (day);
CREATE TABLE shop.logs_a PARTITION OF shop.logs FOR VALUES FROM ('2024-01-01') TO ('2024-07-01');
CREATE TABLE shop.mixed (line text, day date) PARTITION BY RANGE (day);
ALTER TABLE shop.mixed REPLICA IDENTITY FULL;
CREATE TABLE shop.mixed_a PARTITION OF shop.mixed FOR VALUES FROM ('2024-01-01') TO ('2024-07-01');
ALTER TABLE shop.mixed_a REPLICA IDENTITY FULL;
CREATE TABLE shop.mixed_b PARTITION OF shop.mixed FOR VALUES FROM ('2024-07-01') TO ('2025-01-01');
INSERT INTO shop.nokey VALUES (1); INSERT INTO shop.nothing VALUES (1);
INSERT INTO shop.logs VALUES ('a', '2024-02-01'); INSERT INTO shop.mixed VALUES ('b', '2024-08-01');
"""
KEYED = [("shop", "orders"), ("shop", "full_log"), ("shop", "by_index"), ("shop", "events")]
KEYLESS = [("shop", "nokey"), ("shop", "nothing"), ("shop", "logs"), ("shop", "mixed")]
# The source application's own writes on each keyless table; they must keep working.
SOURCE_WRITES = ["UPDATE shop.nokey SET x = x + 1", "DELETE FROM shop.nothing WHERE id = 99",
                 "UPDATE shop.logs SET line = line || '!'", "DELETE FROM shop.mixed WHERE line = 'zz'"]


@pytest.fixture()
def shop(pg_cluster, pg_db):
    """(superuser autocommit connection, settings) on a database with the shop tables; drops the slot after."""
    with psycopg.connect(pg_cluster.dsn(pg_db), autocommit=True) as conn:
        conn.execute(SCHEMA_SQL)
        settings = settings_for(pg_cluster, pg_db)
        yield conn, settings
        drop_slot_if_exists(conn, settings.replication_slot)


def published(conn: psycopg.Connection, publication: str) -> set[tuple[str, str]]:
    """Relations listed in the publication itself (pg_publication_rel)."""
    rows = conn.execute("SELECT n.nspname, c.relname FROM pg_publication_rel pr JOIN pg_publication p"
                        " ON p.oid = pr.prpubid JOIN pg_class c ON c.oid = pr.prrelid"
                        " JOIN pg_namespace n ON n.oid = c.relnamespace WHERE p.pubname = %s", (publication,))
    return set(rows.fetchall())


def run_source_writes(conn: psycopg.Connection) -> None:
    for statement in SOURCE_WRITES:
        conn.execute(statement)


def fix_until_clean(conn: psycopg.Connection, settings, tables) -> list[CdcProblem]:
    """Run every printed fix in order; returns the problems that were fixed."""
    problems = publication_problems(conn, settings, tables)
    for problem in problems:
        run_fix(conn, problem)
    assert publication_problems(conn, settings, tables) == []
    return problems


# ---------------------------------------------------------------- point 3: keyless tables

def test_ensure_leaves_keyless_tables_out_so_the_source_keeps_working(shop):
    conn, settings = shop
    creating = replace(settings, create_slot_and_publication=True)
    done = ensure_slot_and_publication(conn, creating, KEYED + KEYLESS)
    assert done[0] == f"created publication '{settings.publication}' for 4 table(s)"
    assert done[1].startswith("left shop.logs, shop.mixed, shop.nokey, shop.nothing out of publication")
    assert published(conn, settings.publication) == set(KEYED)
    run_source_writes(conn)  # today: "cannot update table ... because it does not have a replica identity"
    ensure_slot_and_publication(conn, creating, KEYLESS)  # an existing publication: still left out
    assert published(conn, settings.publication) == set(KEYED)
    run_source_writes(conn)


def test_discover_offers_cdc_only_where_changes_carry_a_row_identity(shop):
    conn, settings = shop
    streams = {(s["namespace"], s["name"]): s for s in discover_catalog(conn, ["shop"])["streams"]}
    assert sorted(streams) == sorted(KEYED + KEYLESS)
    for key in KEYED:
        assert "cdc" in streams[key]["supported_sync_modes"], key
        assert "cdc_unsupported" not in streams[key]["x-olake"], key
    for key in KEYLESS:
        assert streams[key]["supported_sync_modes"][0] == "full_refresh", key
        assert "cdc" not in streams[key]["supported_sync_modes"], key
    assert streams[("shop", "nokey")]["x-olake"]["cdc_unsupported"] == (
        'no primary key (REPLICA IDENTITY DEFAULT); for cdc run: ALTER TABLE "shop"."nokey" REPLICA IDENTITY FULL;')
    assert streams[("shop", "mixed")]["x-olake"]["cdc_unsupported"] == (
        'partition shop.mixed_b has no primary key (REPLICA IDENTITY DEFAULT); for cdc run: '
        'ALTER TABLE "shop"."mixed_b" REPLICA IDENTITY FULL;')


def test_keyless_selected_tables_are_problems_whose_fix_enables_cdc(shop):
    conn, settings = shop
    pub = settings.publication
    conn.execute(f'CREATE PUBLICATION "{pub}" FOR TABLE shop.orders')
    problems = publication_problems(conn, settings, KEYLESS)
    assert [(p.what.split(":")[0], p.fix_sql) for p in problems] == [
        ("table shop.nokey cannot use cdc", 'ALTER TABLE "shop"."nokey" REPLICA IDENTITY FULL;\n'
                                            f'ALTER PUBLICATION "{pub}" ADD TABLE "shop"."nokey";'),
        ("table shop.nothing cannot use cdc", 'ALTER TABLE "shop"."nothing" REPLICA IDENTITY FULL;\n'
                                              f'ALTER PUBLICATION "{pub}" ADD TABLE "shop"."nothing";'),
        ("table shop.logs cannot use cdc", 'ALTER TABLE "shop"."logs" REPLICA IDENTITY FULL;\n'
                                           'ALTER TABLE "shop"."logs_a" REPLICA IDENTITY FULL;\n'
                                           f'ALTER PUBLICATION "{pub}" ADD TABLE "shop"."logs";'),
        ("table shop.mixed cannot use cdc", 'ALTER TABLE "shop"."mixed_b" REPLICA IDENTITY FULL;\n'
                                            f'ALTER PUBLICATION "{pub}" ADD TABLE "shop"."mixed";')]
    assert "REPLICA IDENTITY NOTHING" in problems[1].what
    assert "copy it with full_refresh" in problems[0].what
    fix_until_clean(conn, settings, KEYLESS)
    run_source_writes(conn)  # the fixes keep the source working, and the tables are now published
    assert {("shop", "nokey"), ("shop", "nothing"), ("shop", "logs"), ("shop", "mixed")} <= published(conn, pub)
    streams = {s["name"]: s for s in discover_catalog(conn, ["shop"])["streams"]}
    assert all("cdc" in streams[name]["supported_sync_modes"] for _, name in KEYLESS)


def test_read_refuses_a_keyless_cdc_stream_with_a_config_error_naming_table_and_fix(shop):
    conn, settings = shop
    creating = replace(settings, create_slot_and_publication=True)
    ensure_slot_and_publication(conn, creating, KEYED + [("shop", "nokey")])
    require_publication_ready(conn, settings, KEYED)  # the keyed ones are ready: no error
    with pytest.raises(ConfigError) as raised:
        require_publication_ready(conn, settings, KEYED + [("shop", "nokey")])
    message = raised.value.message
    assert "\n" not in message
    assert message.startswith("postgres: change capture cannot start, 1 problem(s): table shop.nokey cannot "
                              "use cdc: no primary key (REPLICA IDENTITY DEFAULT)")
    assert message.endswith('(fix: ALTER TABLE "shop"."nokey" REPLICA IDENTITY FULL; ALTER PUBLICATION '
                            f'"{settings.publication}" ADD TABLE "shop"."nokey";)')


def test_check_notes_keyless_tables_and_reports_published_ones_as_problems(shop):
    conn, settings = shop
    pub = settings.publication
    conn.execute(f'CREATE PUBLICATION "{pub}" FOR TABLE shop.orders, shop.full_log, shop.by_index, shop.events')
    conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (settings.replication_slot,))
    tables = KEYED + KEYLESS
    assert cdc_problems(conn, settings, tables) == []  # unpublished keyless tables do not fail check
    [note] = [n for n in cdc_notes(conn, settings, tables) if "cannot use cdc" in n]
    assert note.splitlines() == [  # a heading, then one line per table with its fix
        "4 table(s) cannot use cdc (left out of the publication; full_refresh still works) until they get a "
        "primary key or REPLICA IDENTITY FULL:",
        '  shop.nokey (no primary key (REPLICA IDENTITY DEFAULT)) (fix: ALTER TABLE "shop"."nokey" REPLICA '
        f'IDENTITY FULL; ALTER PUBLICATION "{pub}" ADD TABLE "shop"."nokey";)',
        '  shop.nothing (REPLICA IDENTITY NOTHING) (fix: ALTER TABLE "shop"."nothing" REPLICA IDENTITY FULL; '
        f'ALTER PUBLICATION "{pub}" ADD TABLE "shop"."nothing";)',
        '  shop.logs (no primary key (REPLICA IDENTITY DEFAULT)) (fix: ALTER TABLE "shop"."logs" REPLICA IDENTITY '
        f'FULL; ALTER TABLE "shop"."logs_a" REPLICA IDENTITY FULL; ALTER PUBLICATION "{pub}" ADD TABLE "shop"."logs";)',
        '  shop.mixed (partition shop.mixed_b has no primary key (REPLICA IDENTITY DEFAULT)) (fix: ALTER TABLE '
        f'"shop"."mixed_b" REPLICA IDENTITY FULL; ALTER PUBLICATION "{pub}" ADD TABLE "shop"."mixed";)']
    conn.execute(f'ALTER PUBLICATION "{pub}" ADD TABLE shop.nokey')  # published by hand: the source breaks
    with pytest.raises(psycopg.errors.ObjectNotInPrerequisiteState):
        conn.execute("UPDATE shop.nokey SET x = x + 1")
    [problem] = cdc_problems(conn, settings, tables)
    assert problem.what.startswith("table shop.nokey cannot use cdc: no primary key (REPLICA IDENTITY DEFAULT)"
                                   "; it is published, so PostgreSQL rejects UPDATE and DELETE on it now")
    assert problem.fix_sql == 'ALTER TABLE "shop"."nokey" REPLICA IDENTITY FULL;'
    run_fix(conn, problem)
    assert cdc_problems(conn, settings, tables) == []
    run_source_writes(conn)


# ---------------------------------------------------------------- point 2: tables outside the publication

def test_missing_publication_is_created_for_keyed_tables_only(shop):
    conn, settings = shop
    pub = settings.publication
    problems = fix_until_clean(conn, settings, KEYED + [("shop", "nokey")])
    assert problems[0] == CdcProblem(
        f"publication '{pub}' does not exist in this database",
        f'CREATE PUBLICATION "{pub}" FOR TABLE "shop"."orders", "shop"."full_log", "shop"."by_index", '
        '"shop"."events";')
    assert problems[1].what.startswith("table shop.nokey cannot use cdc")
    run_source_writes(conn)


@pytest.mark.parametrize("via_root", [True, False])
def test_partitioned_table_is_covered_by_its_root_or_by_every_leaf(shop, via_root):
    conn, settings = shop
    pub, events = settings.publication, [("shop", "events")]
    conn.execute(f'CREATE PUBLICATION "{pub}" FOR TABLE shop.events_2024h1, shop.events_2025'
                 f" WITH (publish_via_partition_root = {str(via_root).lower()})")
    [problem] = publication_problems(conn, settings, events)  # events_2024h2 is not published
    assert problem == CdcProblem(f"publication '{pub}' does not cover shop.events",
                                 f'ALTER PUBLICATION "{pub}" ADD TABLE "shop"."events";')
    run_fix(conn, problem)  # the root, next to some of its leaves
    assert publication_problems(conn, settings, events) == []
    conn.execute(f'ALTER PUBLICATION "{pub}" DROP TABLE shop.events')
    assert publication_problems(conn, settings, events) == [problem]
    conn.execute(f'ALTER PUBLICATION "{pub}" ADD TABLE shop.events_2024h2')
    assert publication_problems(conn, settings, events) == []  # every leaf, at any depth
    conn.execute(f'ALTER PUBLICATION "{pub}" DROP TABLE shop.events_2024h1, shop.events_2024h2; '
                 f'ALTER PUBLICATION "{pub}" ADD TABLE shop.events_2024')
    assert publication_problems(conn, settings, events) == []  # an intermediate parent covers its leaves


def test_publish_actions_and_unpublished_tables_are_fixed_by_ensure_and_by_the_printed_sql(shop):
    conn, settings = shop
    pub = settings.publication
    conn.execute(f"CREATE PUBLICATION \"{pub}\" FOR TABLE shop.orders WITH (publish = 'insert, delete')")
    problems = publication_problems(conn, settings, KEYED)
    assert problems == [
        CdcProblem(f"publication '{pub}' does not cover shop.full_log, shop.by_index, shop.events",
                   f'ALTER PUBLICATION "{pub}" ADD TABLE "shop"."full_log", "shop"."by_index", "shop"."events";'),
        CdcProblem(f"publication '{pub}' does not publish update, truncate, so those changes would be lost",
                   f"ALTER PUBLICATION \"{pub}\" SET (publish = 'insert, update, delete, truncate');")]
    fix_until_clean(conn, settings, KEYED)
    conn.execute(f"ALTER PUBLICATION \"{pub}\" SET (publish = 'insert'); ALTER PUBLICATION \"{pub}\" "
                 "DROP TABLE shop.by_index")
    creating = replace(settings, create_slot_and_publication=True)
    assert ensure_slot_and_publication(conn, creating, KEYED)[:2] == [
        f"added shop.by_index to publication '{pub}'",
        f"set publication '{pub}' to publish insert, update, delete, truncate"]
    assert publication_problems(conn, settings, KEYED) == []


def test_without_publication_name_only_keyless_tables_are_reported(shop):
    conn, settings = shop
    problems = publication_problems(conn, replace(settings, publication=None), KEYED + [("shop", "nokey")])
    assert [p.fix_sql for p in problems] == ['ALTER TABLE "shop"."nokey" REPLICA IDENTITY FULL;']


def test_partition_roots_maps_every_partition_at_any_depth_to_its_root(shop):
    conn, _ = shop
    assert partition_roots(conn, [("shop", "events"), ("shop", "orders")]) == {
        ("shop", "events_2024"): ("shop", "events"), ("shop", "events_2024h1"): ("shop", "events"),
        ("shop", "events_2024h2"): ("shop", "events"), ("shop", "events_2025"): ("shop", "events")}


def test_partitioned_table_without_partitions_is_judged_on_itself(shop):
    conn, settings = shop
    pub = settings.publication
    conn.execute("CREATE TABLE shop.empty_parent (id int PRIMARY KEY) PARTITION BY RANGE (id);"
                 f'CREATE PUBLICATION "{pub}" FOR TABLE shop.orders')
    [problem] = publication_problems(conn, settings, [("shop", "empty_parent")])
    assert problem == CdcProblem(f"publication '{pub}' does not cover shop.empty_parent",
                                 f'ALTER PUBLICATION "{pub}" ADD TABLE "shop"."empty_parent";')
    fix_until_clean(conn, settings, [("shop", "empty_parent")])


def test_membership_rows_tell_a_table_that_stayed_published_from_one_that_left(shop):
    """publication_members and Membership.gap on partitions at any depth, schemas and FOR ALL TABLES."""
    conn, settings = shop
    pub = settings.publication
    events, orders = (conn.execute(f"SELECT '{t}'::regclass::oid").fetchone()[0]
                      for t in ("shop.events", "shop.orders"))

    def members():
        return publication_members(conn, pub, [events, orders])

    assert members()[events].gap(None) == "left"  # no publication at all
    conn.execute(f'CREATE PUBLICATION "{pub}" FOR TABLE shop.events, shop.orders')
    seen = members()
    assert len(seen[events].leaves) == 3 and len(seen[events].rows()) == 1  # one row publishes every leaf
    conn.execute("CREATE TABLE shop.events_2026 PARTITION OF shop.events"
                 " FOR VALUES FROM ('2026-01-01') TO ('2027-01-01')")
    conn.execute(f'ALTER PUBLICATION "{pub}" ADD TABLE shop.events_2025')  # a second row, next to the root's
    assert members()[events].gap(seen[events].rows()) is None  # the new leaf is published by the old row
    both = members()[events].rows()
    conn.execute(f'ALTER PUBLICATION "{pub}" DROP TABLE shop.events_2025')
    assert members()[events].gap(both) is None  # a redundant row went; every leaf stayed published
    conn.execute(f'ALTER PUBLICATION "{pub}" DROP TABLE shop.events, shop.orders')
    assert members()[events].gap(seen[events].rows()) == "left"
    conn.execute(f'ALTER PUBLICATION "{pub}" ADD TABLE shop.events_2024, shop.events_2025, shop.events_2026')
    assert members()[events].gap(seen[events].rows()) == "rejoined"
    conn.execute(f'ALTER PUBLICATION "{pub}" ADD TABLES IN SCHEMA shop')
    in_schema = members()
    assert in_schema[orders].gap(seen[orders].rows()) == "rejoined" and in_schema[orders].gap(None) is None
    assert [r.split(":")[0] for r in in_schema[orders].rows()] == ["schema"]
    conn.execute(f'DROP PUBLICATION "{pub}"; CREATE PUBLICATION "{pub}" FOR ALL TABLES')
    assert [r.split(":")[0] for r in members()[orders].rows()] == ["all"]
    assert members()[orders].gap(in_schema[orders].rows()) == "rejoined"
