"""A table taken out of the publication and put back: the changes of that window were never published.

``ALTER PUBLICATION ... DROP TABLE``, writes, then the table back in the publication (by hand, or by olake
itself with ``create_slot_and_publication``). The stream has lost its position: with ``on_position_lost:
fail`` the run stops with a config_error saying why and acknowledges nothing; with ``resync`` it loads
the stream anew and the destination equals the source. Real commands (``read | write`` and ``sync``)
into Parquet and Iceberg; the in-process test covers a table that leaves and comes back during a run.
"""

from __future__ import annotations

import json

import psycopg
import pytest

from olake_cli.core.catalog import parse_catalog
from olake_cli.core.errors import PositionLostError
from olake_cli.core.state import State
from olake_cli.sources.postgres.capture import PostgresChangeCapture
from olake_cli.sources.postgres.connection import PostgresSettings
from olake_cli.sources.postgres.source import PostgresSource
from tests.support.cdc import make_accounts
from tests.support.cli import read_into_write, run_olake, trace_errors, write_json
from tests.support.matrix import cases
from tests.support.states import stream_state
from tests.test_e2e_cdc_key_toast import Lake

WHILE_OUT = ["UPDATE acct SET balance = balance + 1, note = 'while out' WHERE id BETWEEN 1 AND 12",
             "DELETE FROM acct WHERE id BETWEEN 101 AND 110",
             "INSERT INTO acct VALUES (5000, 1, 'inserted while out')"]
NEVER_PUBLISHED = b"were never published"


def _failing_run(lake: Lake, mode: str, src: str):
    """One run expected to fail: (exit codes, the TRACE errors olake printed)."""
    if mode == "pipe":
        result = read_into_write(["--config", src, "--catalog", str(lake.catalog_path), "--state", str(lake.state)],
                                 ["--config", lake.dst, "--state", str(lake.state)])
        return (result.read_code, result.write_code), trace_errors(result.write_stdout)
    result = run_olake("sync", "--source", src, "--destination", lake.dst, "--catalog", str(lake.catalog_path),
                       "--state", str(lake.state))
    return (result.returncode,), trace_errors(result.stdout)


# the lost position is the source's: by default both paths and both ways back, into Parquet (a re-sync's
# replacement in each destination is the conformance suite's); OLAKE_TEST_ALL_PATHS=1 adds Iceberg
@pytest.mark.parametrize("mode,destination,back", cases(
    [("pipe", "parquet", "by hand"), ("sync", "parquet", "by olake"), ("pipe", "iceberg", "by olake"),
     ("sync", "iceberg", "by hand")], [("pipe", "parquet", "by hand"), ("sync", "parquet", "by olake")]))
def test_changes_made_out_of_the_publication_fail_or_resync(pg_cluster, pg_db, tmp_path, mode, destination, back):
    lake = Lake(pg_cluster, pg_db, tmp_path, f"slot_pubgap_{mode}_{destination}", destination)
    publication = f"{lake.slot}_pub"
    make_accounts(lake.dsn, "acct", 300)
    make_accounts(lake.dsn, "other", 50)
    lake.discover({"acct": "cdc", "other": "cdc"})
    lake.run(mode)
    [entry] = [s for s in json.loads(lake.state.read_text())["streams"] if s["stream_name"] == "acct"]
    assert [row.split(":")[0] for row in entry["stream_state"]["publication_rows"]] == ["table"]
    lake.execute(f"ALTER PUBLICATION {publication} DROP TABLE acct", *WHILE_OUT)
    if back == "by hand":
        lake.execute(f"ALTER PUBLICATION {publication} ADD TABLE acct")
    lake.execute("UPDATE acct SET note = 'after' WHERE id = 200", "UPDATE other SET note = 'after' WHERE id = 7")

    src_fail = write_json(tmp_path / "src_fail.json",
                          {**json.loads(open(lake.src).read()), "on_position_lost": "fail"})
    before = lake.state.read_bytes()
    codes, errors = _failing_run(lake, mode, src_fail)
    assert all(code != 0 for code in codes) and errors, codes
    error = errors[0]["trace"]["error"]  # write's TRACE carries the reader's message as internal_message
    message = error["internal_message"] if mode == "pipe" else error["message"]
    assert error["failure_type"] == "config_error"
    assert "public.acct" in message and NEVER_PUBLISHED.decode() in message and "on_position_lost" in message, message
    assert lake.state.read_bytes() == before

    stderr = lake.run(mode)
    assert b"public.acct: change position lost" in stderr and NEVER_PUBLISHED in stderr, stderr.decode()[-3000:]
    assert b"public.acct: full load" in stderr and b"public.other: full load" not in stderr
    assert (f"added public.acct to publication '{publication}'".encode() in stderr) == (back == "by olake")
    lake.assert_current("acct")
    lake.assert_current("other")
    lake.execute("UPDATE acct SET note = 'later' WHERE id BETWEEN 20 AND 30")  # captured as usual again
    assert NEVER_PUBLISHED not in lake.run(mode)
    lake.assert_current("acct")
    lake.drop_slot()


def test_table_out_of_the_publication_during_a_run(pg_cluster, pg_db):
    """The table leaves and comes back after the run's preflight, before its changes are read: ``fail``
    raises before anything is read, ``resync`` marks the stream for a new load and reads nothing of it."""
    dsn, slot = pg_cluster.dsn(pg_db), "slot_pubgap_run"
    make_accounts(dsn, "acct_run", 100)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"CREATE PUBLICATION {slot}_pub FOR TABLE acct_run")
        conn.execute(f"SELECT pg_create_logical_replication_slot('{slot}', 'pgoutput')")
        position = conn.execute("SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s",
                                (slot,)).fetchone()[0]
    config = pg_cluster.source_config(pg_db, replication_slot=slot, publication=f"{slot}_pub")
    stream = parse_catalog(PostgresSource(config).discover()).find("public", "acct_run")
    stream.sync_mode = "cdc"
    runs = {}
    for on_position_lost in ("fail", "resync"):
        settings = PostgresSettings.from_config({**config, "on_position_lost": on_position_lost})
        state = State(streams=[stream_state("cdc", "acct_run", "public", position, None, op_seq=0)])
        runs[on_position_lost] = PostgresChangeCapture(settings, [stream], lambda line: None), state
        runs[on_position_lost][0].preflight(state)
    with psycopg.connect(dsn, autocommit=True) as conn:
        for statement in (f"ALTER PUBLICATION {slot}_pub DROP TABLE acct_run", "DELETE FROM acct_run WHERE id <= 10",
                          f"ALTER PUBLICATION {slot}_pub ADD TABLE acct_run"):
            conn.execute(statement)
    capture, state = runs["fail"]
    with pytest.raises(PositionLostError, match="public.acct_run.*joined it again.*were never published"):
        next(capture.read([stream], state))
    capture, state = runs["resync"]
    batches = list(capture.read([stream], state))
    assert "were never published" in batches[0].resync[("public", "acct_run")]
    assert not any(batch.runs for batch in batches)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"SELECT pg_drop_replication_slot('{slot}')")
