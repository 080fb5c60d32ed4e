"""A new stream that cannot be read while ``sync --follow`` runs with ``"new_streams": "cdc"`` (PostgreSQL, as a
role with only the documented grants, the publication ``FOR TABLE`` made by an administrator): a table
published without ``GRANT SELECT``, one not in the publication and one without a primary key are each left out
with one line naming it and the SQL that fixes it (what ``check`` says) and an ``olake_streams_left_out`` metric,
while the followed table keeps flowing; once an administrator runs the fixes, a later discovery loads and
follows them. Every table then equals the source value by value, and no stream is announced twice."""

from __future__ import annotations

import re
import socket
import uuid

import psycopg
from psycopg import sql

from tests.support.cdc import discover_catalog
from tests.support.cli import write_json
from tests.support.follow import http_get, start_olake, stop, wait_until
from tests.support.pg_compare import table_texts
from tests.support.verify import latest_versions, read_parquet

COLUMNS = ["id", "v", "note"]
PASSWORD = "pw-left-out"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _run(dsn: str, *statements: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        for statement in statements:
            conn.execute(statement)


def _table(name: str, key: bool = True) -> list[str]:
    return [f"CREATE TABLE {name} (id int {'PRIMARY KEY' if key else 'NOT NULL'}, v bigint NOT NULL, note text)",
            f"INSERT INTO {name} SELECT g, g * 10, 'row ' || g FROM generate_series(1, 30) g"]


def _lake_equals(lake, dsn: str, table: str) -> bool:
    try:
        rows = latest_versions(read_parquet(str(lake / "public" / table)), ["id"])
    except Exception:
        return False  # no file yet
    got = sorted((str(i), str(v), n) for i, v, n in zip(rows["id"].to_pylist(), rows["v"].to_pylist(),
                                                         rows["note"].to_pylist()))
    return got == table_texts(dsn, "public", table, COLUMNS)


def _left_out(port: int) -> dict[str, float]:
    """The ``olake_streams_left_out`` gauge's value by stream."""
    _, body = http_get(port, "/metrics")
    pattern = r'^olake_streams_left_out\{[^}]*stream="([^"]+)"[^}]*\} (\S+)$'
    return {found[1]: float(found[2]) for found in re.finditer(pattern, body, re.M)}


def test_new_streams_that_cannot_be_read_are_left_out_with_their_fix_until_fixed(pg_cluster, pg_db, tmp_path):
    admin = pg_cluster.dsn(pg_db)
    suffix = uuid.uuid4().hex[:8]
    role, slot, pub = f"follower_{suffix}", f"left_{suffix}", f"left_{suffix}_pub"
    quoted = sql.Identifier(role).as_string(None)
    _run(admin, *_table("t"), f"CREATE ROLE {quoted} LOGIN REPLICATION PASSWORD '{PASSWORD}'",
         f"GRANT USAGE ON SCHEMA public TO {quoted}", f"GRANT SELECT ON t TO {quoted}",
         f"CREATE SCHEMA _olake AUTHORIZATION {quoted}", f"CREATE PUBLICATION {pub} FOR TABLE t",
         f"SELECT pg_create_logical_replication_slot('{slot}', 'pgoutput')")
    src = write_json(tmp_path / "src.json", {**pg_cluster.source_config(pg_db, replication_slot=slot, publication=pub),
                                             "username": role, "password": PASSWORD})
    lake = tmp_path / "lake"
    dst = write_json(tmp_path / "dst.json", {"type": "parquet", "path": str(lake)})
    catalog = discover_catalog(src, tmp_path / "cat.json", {"t": "cdc"})
    write_json(tmp_path / "cat.json", {**catalog, "new_streams": "cdc"})
    port, log = _free_port(), tmp_path / "run.log"
    run = start_olake(["sync", "--source", src, "--destination", dst, "--catalog", str(tmp_path / "cat.json"),
                       "--state", str(tmp_path / "state.json"), "--follow", "--commit-interval", "0.5",
                       "--discovery-interval", "1", "--metrics-port", str(port)], log, stdout=open(tmp_path / "out", "wb"))
    try:
        wait_until(lambda: "following the change log" in log.read_text(), "the change phase starts", run=run)
        _run(admin, *_table("nogrant"), f"ALTER PUBLICATION {pub} ADD TABLE nogrant",  # published, not granted
             *_table("unpub"), f"GRANT SELECT ON unpub TO {quoted}",  # granted, not published
             *_table("nokey", key=False), f"GRANT SELECT ON nokey TO {quoted}")  # no key to publish it with
        expected = {
            "public.nogrant": f"GRANT SELECT ON \"public\".\"nogrant\" TO {quoted};",
            "public.unpub": f"ALTER PUBLICATION \"{pub}\" ADD TABLE \"public\".\"unpub\";",
            "public.nokey": f"ALTER TABLE \"public\".\"nokey\" REPLICA IDENTITY FULL; ALTER PUBLICATION \"{pub}\" "
                            f"ADD TABLE \"public\".\"nokey\";",
        }
        wait_until(lambda: all(f"{name}: new stream left out" in log.read_text() for name in expected),
                   "each unreadable new stream is left out", timeout=30, run=run)
        lines = log.read_text().splitlines()
        for name, fix in expected.items():
            [line] = [line for line in lines if f"{name}: new stream left out" in line]
            assert fix in line, line
        assert _left_out(port) == dict.fromkeys(expected, 1.0)
        _run(admin, "UPDATE t SET v = v + 1, note = 'flowing' WHERE id <= 5")  # the others keep flowing
        wait_until(lambda: _lake_equals(lake, admin, "t"), "t's change is copied while the others are left out",
                   run=run)
        assert sum("new stream left out" in line for line in log.read_text().splitlines()) == 3  # said once
        _run(admin, f"GRANT SELECT ON nogrant TO {quoted}")
        wait_until(lambda: _lake_equals(lake, admin, "nogrant"), "a later discovery loads the granted table", run=run)
        _run(admin, f"ALTER PUBLICATION {pub} ADD TABLE unpub", "ALTER TABLE nokey ADD PRIMARY KEY (id)",
             f"ALTER PUBLICATION {pub} ADD TABLE nokey")
        wait_until(lambda: all(f"{name}: new stream found" in log.read_text() for name in expected),
                   "a later discovery finds the fixed streams", timeout=30, run=run)
        _run(admin, "UPDATE nogrant SET note = 'changed' WHERE id = 1", "DELETE FROM unpub WHERE id = 2",
             "INSERT INTO nokey VALUES (31, 310, 'new')", "UPDATE t SET v = 0 WHERE id = 7")
        wait_until(lambda: all(_lake_equals(lake, admin, table) for table in ("t", "nogrant", "unpub", "nokey")),
                   "every table equals the source", run=run)
        assert _left_out(port) == dict.fromkeys(expected, 0.0)
    finally:
        took = stop(run)
    text = log.read_text()
    assert run.returncode == 0 and took < 10, text[-3000:]
    assert "Traceback" not in text and "internal error" not in text, text[-3000:]
    for name in ["public.t", *expected]:  # announced once each, also across the run's restarts
        assert text.count(f"{name}: new stream found") == (name != "public.t"), text[-3000:]


def test_what_olake_adds_to_its_own_publication_is_not_a_reason_to_leave_a_table_out(pg_cluster, pg_db):
    """With ``create_slot_and_publication`` olake adds a new table to the publication itself, as owner of the
    table: only a table it does not own is left out for the publication; without the option both are.
    A table the role may not read is named with its GRANTs (USAGE too where the schema is closed), in any
    sync mode; a view is never named (no ``cdc`` to check)."""
    from olake_cli.core.catalog import CatalogStream
    from olake_cli.sources.postgres.source import PostgresSource

    admin = pg_cluster.dsn(pg_db)
    suffix = uuid.uuid4().hex[:8]
    role, pub = f"owner_{suffix}", f"own_{suffix}_pub"
    quoted = sql.Identifier(role).as_string(None)
    _run(admin, f"CREATE ROLE {quoted} LOGIN REPLICATION PASSWORD '{PASSWORD}'", "CREATE SCHEMA closed",
         f"GRANT USAGE ON SCHEMA public TO {quoted}", *_table("mine"), f"ALTER TABLE mine OWNER TO {quoted}",
         *_table("theirs"), f"GRANT SELECT ON theirs TO {quoted}", *_table("secret"),
         "CREATE TABLE closed.hidden (id int PRIMARY KEY)", "CREATE VIEW v AS SELECT id FROM mine",
         f"GRANT SELECT ON v TO {quoted}", f"CREATE PUBLICATION {pub}", f"ALTER PUBLICATION {pub} OWNER TO {quoted}")
    streams = [CatalogStream(name, schema, {}, sync_mode=mode) for schema, name, mode in
               [("public", "mine", "cdc"), ("public", "theirs", "cdc"), ("public", "secret", "full_refresh"),
                ("closed", "hidden", "cdc"), ("public", "v", "cdc")]]
    config = {**pg_cluster.source_config(pg_db, replication_slot=f"own_{suffix}", publication=pub),
              "username": role, "password": PASSWORD}
    uncovered = (f'publication \'{pub}\' does not cover public.{{}} (fix: ALTER PUBLICATION "{pub}" ADD TABLE '
                 f'"public"."{{}}";)')
    denied = {("public", "secret"): f"user '{role}' lacks SELECT on public.secret; run as an admin: GRANT SELECT "
                                    f'ON "public"."secret" TO {quoted};',
              ("closed", "hidden"): f"user '{role}' lacks SELECT on closed.hidden; run as an admin: GRANT USAGE ON "
                                    f'SCHEMA "closed" TO {quoted}; GRANT SELECT ON "closed"."hidden" TO {quoted};'}
    assert PostgresSource({**config, "create_slot_and_publication": True}).unreadable(streams) == {
        ("public", "theirs"): uncovered.format("theirs", "theirs"), **denied}
    assert PostgresSource(config).unreadable(streams) == {
        ("public", "mine"): uncovered.format("mine", "mine"), ("public", "theirs"): uncovered.format("theirs", "theirs"),
        **denied}
