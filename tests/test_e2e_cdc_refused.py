"""A ``cdc`` stream the publication cannot serve is refused before anything is read (issue 7, points 2
and 3): a table outside the publication, a publication that skips an action, a keyless table forced
to ``cdc``. One config error names each table with the SQL that fixes it; no record is emitted, no
state is written, the slot does not move. After running the printed SQL the same run succeeds."""

from __future__ import annotations

import psycopg
import pytest

from tests.support.cdc import make_accounts
from tests.support.cli import messages, run_olake
from tests.test_bad_input import assert_one_error
from tests.test_e2e_cdc_keyless import AUDIT
from tests.test_e2e_cdc_stitching import MODES, Setup


def confirmed_lsn(dsn: str, slot: str) -> str:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute("SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s",
                            (slot,)).fetchone()[0]


@pytest.mark.parametrize("mode", MODES)
def test_cdc_streams_the_publication_cannot_serve_are_refused_before_reading(pg_cluster, pg_db, tmp_path, mode):
    setup = Setup(pg_cluster, pg_db, tmp_path, f"slot_refuse_{mode}", create=False)
    pub = f"{setup.slot}_pub"
    make_accounts(setup.dsn, "acct", 100)
    make_accounts(setup.dsn, "acct2", 100)
    setup.execute(*AUDIT, f"CREATE PUBLICATION {pub} FOR TABLE acct WITH (publish = 'insert, update, delete')",
                  f"SELECT pg_create_logical_replication_slot('{setup.slot}', 'pgoutput')")
    setup.execute("ALTER TABLE audit ADD PRIMARY KEY (at)")
    setup.discover({"acct": "cdc", "acct2": "cdc", "audit": "cdc"})
    setup.execute("ALTER TABLE audit DROP CONSTRAINT audit_pkey")  # keyless since discover
    before = confirmed_lsn(setup.dsn, setup.slot)
    if mode == "pipe":
        result = run_olake("read", "--config", setup.src, "--catalog", str(setup.catalog_path),
                           "--state", str(setup.state))
    else:
        result = run_olake("sync", "--source", setup.src, "--destination", setup.dst, "--catalog",
                           str(setup.catalog_path), "--state", str(setup.state))
    needles = (f"publication '{pub}' does not cover public.acct2",
               f'ALTER PUBLICATION "{pub}" ADD TABLE "public"."acct2";',
               f"publication '{pub}' does not publish truncate",
               f"ALTER PUBLICATION \"{pub}\" SET (publish = 'insert, update, delete, truncate');",
               "table public.audit cannot use cdc: no primary key (REPLICA IDENTITY DEFAULT)",
               'ALTER TABLE "public"."audit" REPLICA IDENTITY FULL; '
               f'ALTER PUBLICATION "{pub}" ADD TABLE "public"."audit";')
    if mode == "pipe":
        assert_one_error(result, "config_error", *needles, secrets=(pg_cluster.password,))
    else:  # sync's writer side also reports its (empty) summary on stderr before the error line
        [trace] = [m["trace"]["error"] for m in messages(result.stdout) if m["type"] == "TRACE"]
        assert result.returncode != 0 and trace["failure_type"] == "config_error"
        assert result.stderr.decode().splitlines()[-1] == f"olake: error: {trace['message']}"
        assert all(needle in trace["message"] for needle in needles), trace["message"]
    assert [m for m in messages(result.stdout) if m["type"] in ("RECORD", "STATE")] == []
    assert not setup.state.exists()
    assert confirmed_lsn(setup.dsn, setup.slot) == before
    setup.execute(f'ALTER PUBLICATION "{pub}" ADD TABLE "public"."acct2"',
                  f"ALTER PUBLICATION \"{pub}\" SET (publish = 'insert, update, delete, truncate')",
                  'ALTER TABLE "public"."audit" REPLICA IDENTITY FULL',
                  f'ALTER PUBLICATION "{pub}" ADD TABLE "public"."audit"')
    setup.run(mode)
    setup.execute("UPDATE acct2 SET note = 'changed' WHERE id <= 20", "DELETE FROM acct2 WHERE id > 90",
                  "UPDATE audit SET what = 'changed' WHERE at <= 10")
    assert b"change capture:" in setup.run(mode)
    setup.assert_current("acct2")
    setup.drop_slot()
