"""A cdc stream the publication does not fully publish is refused before anything is read."""

from __future__ import annotations

import pytest

from tests.support.cdc import make_accounts
from tests.support.cli import read_into_write, run_olake
from tests.test_e2e_cdc_stitching import Setup


@pytest.mark.parametrize("mode", ["pipe", "sync"])
@pytest.mark.parametrize("publication,expected", [
    ("CREATE PUBLICATION {slot}_pub FOR TABLE other", "acct"),
    ("CREATE PUBLICATION {slot}_pub FOR TABLE acct, other WITH (publish = 'insert, update')", "delete"),
])
def test_table_outside_the_publication_fails_before_reading(pg_cluster, pg_db, tmp_path, mode, publication,
                                                            expected):
    setup = Setup(pg_cluster, pg_db, tmp_path, f"slot_pub_{mode}", create=False)
    make_accounts(setup.dsn, "acct", 50)
    make_accounts(setup.dsn, "other", 50)
    setup.execute(publication.format(slot=setup.slot),
                  f"SELECT pg_create_logical_replication_slot('{setup.slot}', 'pgoutput')")
    setup.discover({"acct": "cdc", "other": "cdc"})
    setup.state.write_text('{"level": "global", "version": "v1", "streams": []}\n')
    before = setup.state.read_bytes()
    read_args = ["--config", setup.src, "--catalog", str(setup.catalog_path), "--state", str(setup.state)]
    if mode == "pipe":
        result = read_into_write(read_args, ["--config", setup.dst, "--state", str(setup.state)])
        code, stderr, stdout = result.read_code, result.read_stderr, result.write_stdout
    else:
        done = run_olake("sync", "--source", setup.src, "--destination", setup.dst, "--catalog",
                         str(setup.catalog_path), "--state", str(setup.state))
        code, stderr, stdout = done.returncode, done.stderr, done.stdout
    assert code != 0
    lines = [line for line in stderr.decode().splitlines() if line.startswith("olake: error:")]
    assert len(lines) == 1 and expected in lines[0] and "ALTER PUBLICATION" in lines[0], stderr.decode()
    assert b'"failure_type":"config_error"' in stdout.replace(b" ", b"")
    assert setup.state.read_bytes() == before
    assert not (setup.out / "public" / "acct").exists() or not any((setup.out / "public" / "acct").iterdir())
    setup.drop_slot()
