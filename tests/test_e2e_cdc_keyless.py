"""Keyless tables never break the source, end to end (issue 7, point 3), in ``read | write`` (and ``sync``
with OLAKE_TEST_ALL_PATHS=1).

With create_slot_and_publication, olake publishes only the tables that carry a row identity: the
source application's own UPDATE and DELETE on a keyless table keep working, and the keyless table is
still copied (full_refresh), value by value.
"""

from __future__ import annotations

import psycopg
import pytest

from tests.support.cdc import make_accounts
from tests.support.verify import assert_table_matches, read_parquet
from tests.support.matrix import cases
from tests.test_e2e_cdc_stitching import MODES, Setup

AUDIT = ("CREATE TABLE audit (at int, what text, amount numeric(8,2))",
         "INSERT INTO audit SELECT g, 'w' || g, g / 4.0 FROM generate_series(1, 200) g")


def published_tables(dsn: str, publication: str) -> list[tuple[str, str]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute("SELECT schemaname, tablename FROM pg_publication_tables WHERE pubname = %s"
                            " ORDER BY 1, 2", (publication,)).fetchall()


@pytest.mark.parametrize("mode", cases(MODES, ["pipe"]))  # OLAKE_TEST_ALL_PATHS=1: sync as well
def test_keyless_table_stays_out_of_the_publication_and_the_source_keeps_working(pg_cluster, pg_db, tmp_path,
                                                                                  mode):
    setup = Setup(pg_cluster, pg_db, tmp_path, f"slot_keyless_{mode}")
    make_accounts(setup.dsn, "acct", 300)
    setup.execute(*AUDIT)
    setup.discover({"acct": "cdc", "audit": "full_refresh"})
    streams = {s["name"]: s for s in setup.catalog["streams"]}
    assert streams["audit"]["supported_sync_modes"] == ["full_refresh", "incremental"]
    assert "cdc" in streams["acct"]["supported_sync_modes"]
    setup.run(mode)
    assert published_tables(setup.dsn, f"{setup.slot}_pub") == [("public", "acct")]
    audit_copy = read_parquet(str(setup.out / "public" / "audit"))
    with psycopg.connect(setup.dsn, autocommit=True) as conn:  # the keyless table, copied value by value
        schema = streams["audit"]["json_schema"]
        assert_table_matches(conn, "public", "audit", schema, audit_copy.select(list(schema["properties"])))
    # Before the fix these failed: "cannot update table "audit" because it does not have a replica identity
    # and publishes updates".
    setup.execute("UPDATE audit SET what = what || '!' WHERE at <= 50", "DELETE FROM audit WHERE at > 190",
                  "UPDATE acct SET balance = balance + 1, note = 'changed' WHERE id <= 30",
                  "DELETE FROM acct WHERE id > 290", "INSERT INTO acct VALUES (1000, 5, 'new')")
    stderr = setup.run(mode)
    assert b"change capture:" in stderr
    setup.assert_current("acct")
    setup.drop_slot()
