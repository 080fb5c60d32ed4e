"""The PostgreSQL destination with a user that is not a superuser: ``check`` names every privilege the
writes need as the exact GRANT, and a role holding just those runs ``sync`` and ``read | write`` with
changes (replication origins and the conflict rule included); with one of them revoked, ``check`` fails
naming that one GRANT alone.
"""

from __future__ import annotations

import re
from pathlib import Path

import psycopg
from psycopg import sql

from tests.support.cdc import discover_catalog, make_accounts
from tests.support.cli import messages, read_into_write, run_olake, write_json
from tests.support.pg_compare import assert_same_rows

PASSWORD = "writer-Pa55"
ORIGIN_OID = "pg_replication_origin_oid(text)"


def _check(config: str) -> tuple[bool, str]:
    """(passed, the CONNECTION_STATUS message) of ``olake check``."""
    result = run_olake("check", "--config", config)
    [status] = [m["connectionStatus"] for m in messages(result.stdout) if m["type"] == "CONNECTION_STATUS"]
    assert (result.returncode == 0) == (status["status"] == "SUCCEEDED"), result.stderr.decode()
    assert PASSWORD not in result.stdout.decode() + result.stderr.decode()
    return status["status"] == "SUCCEEDED", status["message"]


def _grants(message: str) -> list[str]:
    return re.findall(r"(?:GRANT|ALTER) [^;]+;", message)


def test_check_prints_every_grant_and_a_role_with_just_those_syncs_changes(pg_cluster, pg_db, pg_target, target_db,
                                                                            tmp_path):
    source_dsn, target_dsn, role = pg_cluster.dsn(pg_db), pg_target.dsn(target_db), f"writer_{target_db}"
    make_accounts(source_dsn, "acct", 300)
    with psycopg.connect(target_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(sql.Identifier(role), sql.Literal(PASSWORD)))
    src = write_json(tmp_path / "src.json", pg_cluster.source_config(
        pg_db, replication_slot=f"slot_{pg_db}", publication=f"pub_{pg_db}", create_slot_and_publication=True))
    dst = write_json(tmp_path / "dst.json", pg_target.destination_config(
        target_db, username=role, password=PASSWORD, schema="copy"))
    try:
        passed, message = _check(dst)
        grants = _grants(message)
        assert not passed and f'GRANT EXECUTE ON FUNCTION {ORIGIN_OID} TO "{role}";' in grants, message
        assert f'GRANT CREATE ON DATABASE "{target_db}" TO "{role}";' in grants, message
        with psycopg.connect(target_dsn, autocommit=True) as conn:
            for grant in grants:
                conn.execute(grant)
        passed, message = _check(dst)
        assert passed and "every privilege writing needs is granted" in message, message

        discover_catalog(src, tmp_path / "cat.json", {"acct": "cdc"}, only={"acct"})
        cat, state = str(tmp_path / "cat.json"), str(tmp_path / "state.json")
        _change(source_dsn, 1)
        result = run_olake("sync", "--source", src, "--destination", dst, "--catalog", cat, "--state", state)
        assert result.returncode == 0, result.stderr.decode()[-3000:]
        assert_same_rows(source_dsn, ("public", "acct"), target_dsn, ("copy", "acct"), ["id", "balance", "note"])
        _change(source_dsn, 2)
        piped = read_into_write(["--config", src, "--catalog", cat, "--state", state],
                                ["--config", dst, "--state", state])
        assert piped.read_code == 0 and piped.write_code == 0, piped.write_stderr.decode()[-3000:]
        assert b"2 updated" in piped.read_stderr, piped.read_stderr.decode()[-2000:]
        assert_same_rows(source_dsn, ("public", "acct"), target_dsn, ("copy", "acct"), ["id", "balance", "note"])

        with psycopg.connect(target_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL(f"REVOKE EXECUTE ON FUNCTION {ORIGIN_OID} FROM {{}}").format(sql.Identifier(role)))
        passed, message = _check(dst)
        assert not passed and _grants(message) == [f'GRANT EXECUTE ON FUNCTION {ORIGIN_OID} TO "{role}";'], message
        assert "EXECUTE on pg_replication_origin_oid" in message, message
    finally:
        with psycopg.connect(source_dsn, autocommit=True) as conn:
            conn.execute("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = %s",
                         (f"slot_{pg_db}",))
        with psycopg.connect(target_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP OWNED BY {0}; DROP ROLE {0}").format(sql.Identifier(role)))


def _change(dsn: str, round_: int) -> None:
    """An insert, two updates and a delete."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO acct VALUES (%s, 1.5, 'new')", (1000 + round_,))
        conn.execute("UPDATE acct SET balance = balance + 1, note = %s WHERE id IN (%s, %s)",
                     (f"round {round_}", 10 * round_, 10 * round_ + 1))
        conn.execute("DELETE FROM acct WHERE id = %s", (100 + round_,))


def test_check_covers_every_server_function_the_writes_call():
    """Every ``pg_*()`` function the destination's SQL calls is one ``check`` tests the privilege of."""
    from olake_cli.destinations.postgres.checks import FUNCTIONS

    package = Path(__file__).resolve().parents[1] / "olake_cli" / "destinations" / "postgres"
    called = set()
    for path in package.glob("*.py"):
        if path.name != "checks.py":
            called |= set(re.findall(r"\b(pg_[a-z_]+)\s*\(", path.read_text()))
    assert called and called <= set(FUNCTIONS), f"not checked: {sorted(called - set(FUNCTIONS))}"
