"""``olake check`` (and ``discover``) against real servers, good and broken connections."""

from __future__ import annotations

import os
import pty
import re
import subprocess
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from tests.support.cli import messages, olake_cmd, olake_env, run_olake, write_json
from tests.support.pgcluster import free_port
from tests.test_bad_input import assert_one_error

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "postgres" / "demo.sql"
DEMO_DB = "demo_check"
LIMITED_USER = "limited"
LIMITED_PASSWORD = "lim-Pa55-word"


@pytest.fixture(scope="module")
def demo_db(pg_cluster) -> str:
    """The demo fixture, plus role ``limited`` that may read every shop table except shop.orders."""
    from tests.support.pgcluster import create_database

    create_database(pg_cluster, DEMO_DB)
    with psycopg.connect(pg_cluster.dsn(DEMO_DB), autocommit=True) as conn:
        conn.execute(FIXTURE.read_text())
        exists = conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (LIMITED_USER,)).fetchone()
        role = sql.Identifier(LIMITED_USER)
        if not exists:
            conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(role))
        conn.execute(sql.SQL("ALTER ROLE {} LOGIN PASSWORD {}").format(role, sql.Literal(LIMITED_PASSWORD)))
        conn.execute(sql.SQL("GRANT CONNECT ON DATABASE {} TO {}").format(sql.Identifier(DEMO_DB), role))
        conn.execute(sql.SQL("GRANT USAGE ON SCHEMA shop TO {}").format(role))
        conn.execute(sql.SQL("GRANT SELECT ON ALL TABLES IN SCHEMA shop TO {}").format(role))
        conn.execute(sql.SQL("REVOKE SELECT ON shop.orders FROM {}").format(role))
    return DEMO_DB


def source_config(pg_cluster, tmp_path: Path, **changes: object) -> str:
    """A postgres source config file for the demo database with ``changes`` applied."""
    config = pg_cluster.source_config(DEMO_DB, schemas=["shop", "public"])
    config.update(changes)
    return write_json(tmp_path / "src.json", config)


def check_on_terminal(config: str) -> tuple[int, list[str]]:
    """Run ``olake check`` with stdout and stderr on a pseudo-terminal; (exit status, lines shown)."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(olake_cmd("check", "--config", config), stdin=subprocess.DEVNULL, stdout=slave,
                            stderr=slave, env=olake_env())
    os.close(slave)
    shown = b""
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the process closed the terminal
            break
        if not data:
            break
        shown += data
    os.close(master)
    return proc.wait(timeout=60), shown.decode().replace("\r\n", "\n").splitlines()


def connection_statuses(stdout: bytes) -> list[dict]:
    return [m["connectionStatus"] for m in messages(stdout) if m["type"] == "CONNECTION_STATUS"]


def assert_check_failed(result, *needles: str, secrets: tuple[str, ...] = (),
                        failure_type: str = "config_error") -> str:
    """check failed: CONNECTION_STATUS FAILED then the TRACE, with the same message."""
    line = assert_one_error(result, failure_type, *needles, secrets=secrets)
    out = messages(result.stdout)
    assert [m["type"] for m in out] == ["CONNECTION_STATUS", "TRACE"]
    status = out[0]["connectionStatus"]
    assert status["status"] == "FAILED"
    assert status["message"] == out[1]["trace"]["error"]["message"]
    return line


def test_check_source_succeeds(pg_cluster, demo_db, tmp_path):
    result = run_olake("check", "--config", source_config(pg_cluster, tmp_path))
    assert result.returncode == 0, result.stderr.decode()
    out = messages(result.stdout)
    assert [m["type"] for m in out] == ["CONNECTION_STATUS"]
    status = out[0]["connectionStatus"]
    assert status["status"] == "SUCCEEDED"
    assert f"{pg_cluster.superuser}@{pg_cluster.host}:{pg_cluster.port}/{DEMO_DB}" in status["message"]
    assert "9 table(s)" in status["message"]
    assert pg_cluster.password not in result.stdout.decode() + result.stderr.decode()


def test_check_closed_port(pg_cluster, tmp_path):
    port = free_port()
    result = run_olake("check", "--config", source_config(pg_cluster, tmp_path, port=port))
    assert_check_failed(result, f"127.0.0.1:{port}", "nothing accepts connections", "'port'",
                        secrets=(pg_cluster.password,), failure_type="transient_error")  # it may come up


def test_discover_closed_port(pg_cluster, tmp_path):
    port = free_port()
    result = run_olake("discover", "--config", source_config(pg_cluster, tmp_path, port=port))
    assert_one_error(result, "transient_error", f"127.0.0.1:{port}", "nothing accepts connections",
                     secrets=(pg_cluster.password,))
    assert [m["type"] for m in messages(result.stdout)] == ["TRACE"]


def test_check_unknown_host(pg_cluster, tmp_path):
    result = run_olake("check", "--config", source_config(pg_cluster, tmp_path, host="no-such-host.invalid"))
    assert_check_failed(result, "unknown host 'no-such-host.invalid'", "'host'",
                        secrets=(pg_cluster.password,))


def test_discover_unknown_host(pg_cluster, tmp_path):
    result = run_olake("discover", "--config", source_config(pg_cluster, tmp_path, host="no-such-host.invalid"))
    assert_one_error(result, "config_error", "unknown host 'no-such-host.invalid'", secrets=(pg_cluster.password,))


def test_check_wrong_password(pg_cluster, demo_db, tmp_path):
    wrong = "Wr0ng-Pa55-xyz"
    result = run_olake("check", "--config", source_config(pg_cluster, tmp_path, password=wrong))
    assert_check_failed(result, f"wrong username or password for user '{pg_cluster.superuser}'",
                        secrets=(wrong, pg_cluster.password))


@pytest.mark.parametrize("password, host, expected", [
    ("x", "nonexistent.invalid", "unknown host 'nonexistent.invalid'; check 'host'"),
    ("o", "127.0.0.1", "nothing accepts connections at 127.0.0.1:"),
    ("127", "127.0.0.1", "nothing accepts connections at 127.0.0.1:"),
])
def test_check_prints_words_that_contain_the_password_unchanged(pg_cluster, tmp_path, password, host, expected):
    """A short password hides nothing but itself: the host and the words around it read as they are."""
    result = run_olake("check", "--config", source_config(pg_cluster, tmp_path, host=host, port=free_port(),
                                                          password=password))
    assert_check_failed(result, expected, secrets=(pg_cluster.password, "***"),
                        failure_type="transient_error" if "nothing accepts" in expected else "config_error")


def test_check_wrong_password_equal_to_the_user_name_still_names_the_user(pg_cluster, demo_db, tmp_path):
    user = pg_cluster.superuser
    result = run_olake("check", "--config", source_config(pg_cluster, tmp_path, password=user))
    line = assert_check_failed(result, f"wrong username or password for user '{user}'",
                               f'password authentication failed for user "{user}"')
    assert "***" not in line


def test_check_wrong_database(pg_cluster, tmp_path):
    result = run_olake("check", "--config", source_config(pg_cluster, tmp_path, database="no_such_db"))
    assert_check_failed(result, "database 'no_such_db' does not exist", f"127.0.0.1:{pg_cluster.port}",
                        secrets=(pg_cluster.password,))


def test_check_missing_schema(pg_cluster, demo_db, tmp_path):
    result = run_olake("check", "--config", source_config(pg_cluster, tmp_path, schemas=["shop", "nope"]))
    assert_check_failed(result, "schema(s) nope do not exist", f"'{DEMO_DB}'", "'schemas'",
                        secrets=(pg_cluster.password,))


def test_check_user_without_select_names_table_and_grant(pg_cluster, demo_db, tmp_path):
    config = source_config(pg_cluster, tmp_path, username=LIMITED_USER, password=LIMITED_PASSWORD,
                           schemas=["shop"])
    result = run_olake("check", "--config", config)
    line = assert_check_failed(result, f"user '{LIMITED_USER}' lacks SELECT on shop.orders",
                               f'GRANT SELECT ON "shop"."orders" TO "{LIMITED_USER}";',
                               secrets=(LIMITED_PASSWORD, pg_cluster.password))
    assert "shop.customers" not in line and "shop.order_items" not in line


def test_check_limited_user_on_readable_schema_succeeds(pg_cluster, demo_db, tmp_path):
    """Control for the test above: the same role passes once it may read shop.orders."""
    dsn = pg_cluster.dsn(DEMO_DB)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("GRANT SELECT ON shop.orders TO {}").format(sql.Identifier(LIMITED_USER)))
    try:
        config = source_config(pg_cluster, tmp_path, username=LIMITED_USER, password=LIMITED_PASSWORD,
                               schemas=["shop"])
        result = run_olake("check", "--config", config)
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("REVOKE SELECT ON shop.orders FROM {}").format(sql.Identifier(LIMITED_USER)))
    assert result.returncode == 0, result.stderr.decode()
    assert connection_statuses(result.stdout)[0]["status"] == "SUCCEEDED"
    assert "8 table(s)" in connection_statuses(result.stdout)[0]["message"]
    assert LIMITED_PASSWORD not in result.stdout.decode() + result.stderr.decode()


def test_check_parquet_writable_dir(tmp_path):
    target = tmp_path / "new" / "out"
    config = write_json(tmp_path / "dst.json", {"type": "parquet", "path": str(target)})
    result = run_olake("check", "--config", config)
    assert result.returncode == 0, result.stderr.decode()
    assert connection_statuses(result.stdout) == [{"status": "SUCCEEDED",
                                                   "message": f"parquet: '{target}' is writable"}]
    assert target.is_dir() and list(target.iterdir()) == [], "check must leave no file behind"


def test_check_parquet_path_under_a_regular_file(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    target = blocker / "out"
    config = write_json(tmp_path / "dst.json", {"type": "parquet", "path": str(target)})
    result = run_olake("check", "--config", config)
    assert_check_failed(result, f"cannot write into '{target}'", "Not a directory", failure_type="config_error")
    assert blocker.read_text() == "not a directory"


def test_check_names_keyless_tables_with_the_sql_and_fails_once_one_is_published(pg_cluster, demo_db, tmp_path):
    """shop.page_views has no primary key: a note while unpublished, a problem once published by hand.
    The keyed tables qualify and get no advice. On a terminal each finding is one line, printed once."""
    pub, slot = "check keyless", "check_keyless_slot"
    fix = f'ALTER TABLE "shop"."page_views" REPLICA IDENTITY FULL; ALTER PUBLICATION "{pub}" ADD TABLE "shop"."page_views";'
    note = ("note: 1 table(s) cannot use cdc (left out of the publication; full_refresh still works) until they get "
            "a primary key or REPLICA IDENTITY FULL:")
    slot_notes = [f"note: replication slot '{slot}' retains N of WAL on the source",
                  f"note: replication slot '{slot}' is not claimed yet: the first run of change capture claims it for "
                  "its pipeline, and refuses it to any other"]
    with psycopg.connect(pg_cluster.dsn(DEMO_DB), autocommit=True) as conn:
        keyed = [row[0] for row in conn.execute(
            "SELECT format('%I.%I', n.nspname, c.relname) FROM pg_class c JOIN pg_namespace n"
            " ON n.oid = c.relnamespace WHERE n.nspname IN ('shop', 'public') AND c.relkind IN ('r', 'p')"
            " AND NOT c.relispartition AND EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = c.oid"
            " AND i.indisprimary) ORDER BY 1").fetchall()]
        assert len(keyed) == 8
        conn.execute(f'CREATE PUBLICATION "{pub}" FOR TABLE {", ".join(keyed)}')
        conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (slot,))
        try:
            config = source_config(pg_cluster, tmp_path, replication_slot=slot, publication=pub)
            result = run_olake("check", "--config", config)
            assert result.returncode == 0, result.stderr.decode()
            message = connection_statuses(result.stdout)[0]["message"]
            assert _any_size(message).endswith("; change capture ready; " + "; ".join(slot_notes) + "; " + note +
                                               f" shop.page_views (no primary key (REPLICA IDENTITY DEFAULT)) (fix: "
                                               f"{fix})"), message
            assert result.stderr.decode() == f"olake: {message}\n"

            code, shown = check_on_terminal(config)
            assert code == 0
            assert [_any_size(line) for line in shown] == [
                             f"olake: connected to {pg_cluster.superuser}@{pg_cluster.host}:{pg_cluster.port}/"
                             f"{DEMO_DB}; 9 table(s) readable in shop, public",
                             "  change capture ready", *("  " + n for n in slot_notes),
                             "  " + note,
                             f"    - shop.page_views (no primary key (REPLICA IDENTITY DEFAULT)) (fix: {fix})"]

            conn.execute(f'ALTER PUBLICATION "{pub}" ADD TABLE shop.page_views')
            failed = run_olake("check", "--config", config)
            assert_check_failed(failed, "table shop.page_views cannot use cdc: no primary key",
                                "PostgreSQL rejects UPDATE and DELETE on it now",
                                'fix: ALTER TABLE "shop"."page_views" REPLICA IDENTITY FULL;',
                                secrets=(pg_cluster.password,))
            code, shown = check_on_terminal(config)
            assert code == 78  # EX_CONFIG: a config error
            assert shown[0] == "olake: error: postgres: change capture setup breaks the source, 1 problem(s):"
            assert len(shown) == 2 and shown[1].startswith("    - table shop.page_views cannot use cdc: no primary")
            assert shown[1].endswith('(fix: ALTER TABLE "shop"."page_views" REPLICA IDENTITY FULL;)'), shown
        finally:
            conn.execute(f'DROP PUBLICATION IF EXISTS "{pub}"')
            conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))


def _any_size(text: str) -> str:
    """``text`` with the size of the WAL a slot retains as ``N`` (it grows with every write)."""
    return re.sub(r"retains \d+(\.\d)? (bytes|kB|MB|GB) of WAL", "retains N of WAL", text)


def test_check_passes_full_refresh_users_and_says_what_cdc_lacks(pg_cluster, demo_db, tmp_path):
    """A slot and publication named but not created yet: full_refresh works, so check succeeds and
    lists what cdc still needs, each with its SQL."""
    config = source_config(pg_cluster, tmp_path, replication_slot="not_yet_slot", publication="not_yet_pub")
    result = run_olake("check", "--config", config)
    assert result.returncode == 0, result.stderr.decode()
    message = connection_statuses(result.stdout)[0]["message"]
    assert "full_refresh and incremental ready; cdc NOT ready" in message
    assert "replication slot 'not_yet_slot' does not exist" in message
    assert "pg_create_logical_replication_slot('not_yet_slot', 'pgoutput')" in message
    assert "publication 'not_yet_pub' does not exist" in message
    code, shown = check_on_terminal(config)
    assert code == 0 and shown[1] == "  full_refresh and incremental ready; cdc NOT ready, 2 problem(s):", shown
    assert shown[2].startswith("    - replication slot 'not_yet_slot' does not exist; create it in database")
    assert "(fix: SELECT pg_create_logical_replication_slot('not_yet_slot', 'pgoutput')" in shown[2], shown
    assert shown[3].startswith("    - publication 'not_yet_pub' does not exist in this database (fix: CREATE "
                               'PUBLICATION "not_yet_pub" FOR TABLE '), shown
    plain = run_olake("check", "--config", source_config(pg_cluster, tmp_path))
    assert "cdc: not configured" in connection_statuses(plain.stdout)[0]["message"]


def test_check_takes_a_source_config_with_schema_for_schemas_as_a_source(pg_cluster, tmp_path):
    """``"schema"`` next to source-only fields is a source's misspelt ``schemas``: the error names that field
    and the right one, and does not take the file for a destination that lacks ``replication_slot``."""
    config = pg_cluster.source_config("postgres", schema=["public"], replication_slot="olake_slot",
                                      publication="olake_publication")
    result = run_olake("check", "--config", write_json(tmp_path / "src.json", config))
    line = assert_one_error(result, "config_error", "unknown field 'schema'; did you mean 'schemas'?",
                            secrets=(pg_cluster.password,))
    assert "replication_slot" not in line and "publication" not in line, line


def test_check_destination_tests_what_writing_needs_of_a_minimal_postgres_config(pg_target, target_db, tmp_path):
    """A minimal ``postgres`` config (host, port, database, username, password) fits a source and a
    destination alike: ``--config`` checks it as a source and says so, with the command that checks it as
    a destination; ``--destination`` tests what writing needs (a role without privileges fails with the
    GRANTs, and passes once they are run); ``--source`` takes it as a source."""
    role, password = f"bare_{target_db}", "bare-Pa55-word"
    with psycopg.connect(pg_target.dsn(target_db), autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(sql.Identifier(role), sql.Literal(password)))
    dst = write_json(tmp_path / "dst.json", pg_target.destination_config(target_db, username=role, password=password))
    try:
        guessed = run_olake("check", "--config", dst)
        [status] = connection_statuses(guessed.stdout)
        assert guessed.returncode == 0 and status["status"] == "SUCCEEDED", guessed.stderr.decode()
        assert f"checked as a source; it fits a destination too: olake check --destination {dst}" \
            in status["message"], status
        line = assert_check_failed(run_olake("check", "--destination", dst), "postgres destination",
                                   f'GRANT CREATE ON DATABASE "{target_db}" TO "{role}";', secrets=(password,))
        with psycopg.connect(pg_target.dsn(target_db), autocommit=True) as conn:
            for grant in re.findall(r"GRANT [^;]+;", line):
                conn.execute(grant)
        passed = run_olake("check", "--destination", dst)
        [status] = connection_statuses(passed.stdout)
        assert passed.returncode == 0 and "every privilege writing needs is granted" in status["message"], status
        assert "checked as" not in status["message"], "the side was given"
        as_source = run_olake("check", "--source", dst)
        assert as_source.returncode == 0 and "0 table(s)" in connection_statuses(as_source.stdout)[0]["message"]
        with psycopg.connect(pg_target.dsn(target_db), autocommit=True) as conn:
            conn.execute(sql.SQL("REVOKE CONNECT ON DATABASE {} FROM PUBLIC").format(sql.Identifier(target_db)))
        assert_check_failed(run_olake("check", "--destination", dst), f"user '{role}' may not connect",
                            f'GRANT CONNECT ON DATABASE "{target_db}" TO "{role}";', secrets=(password,))
    finally:
        with psycopg.connect(pg_target.dsn(target_db), autocommit=True) as conn:
            conn.execute(sql.SQL("DROP OWNED BY {0}; DROP ROLE {0}").format(sql.Identifier(role)))


def test_check_takes_exactly_one_config_and_the_side_it_names(tmp_path):
    parquet = write_json(tmp_path / "dst.json", {"type": "parquet", "path": str(tmp_path / "out")})
    checked = run_olake("check", "--destination", parquet)
    assert checked.returncode == 0 and connection_statuses(checked.stdout)[0]["status"] == "SUCCEEDED"
    assert_one_error(run_olake("check", "--source", parquet), "config_error",
                     "type 'parquet' is a destination, but a source config is expected here")
    for args in ((), ("--config", parquet, "--destination", parquet), ("--source", parquet, "--destination", parquet)):
        assert_one_error(run_olake("check", *args), "config_error",
                         "check: give exactly one of --config FILE, --source FILE or --destination FILE")
