"""What a change read costs the server when only tables outside the publication changed (issue 22, item 1).

The server decodes every transaction from the slot's restart_lsn and spills one larger than
``logical_decoding_work_mem`` to disk, published or not. The run says how much WAL that is before it
waits, tells its progress while it waits, and raises the reading session's memory
(``logical_decoding_work_mem_mb``) so that such a transaction stays in memory. The spill counter of
``pg_stat_replication_slots`` shows the setting's effect without timing anything.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Callable

import psycopg
import pytest

from olake_cli.core.catalog import parse_catalog
from olake_cli.core.state import State
from olake_cli.sources.postgres.capture import PostgresChangeCapture
from olake_cli.sources.postgres.connection import PostgresSettings
from olake_cli.sources.postgres.lsn import format_lsn, parse_lsn
from olake_cli.sources.postgres.slot_catch_up import CATCH_UP_BYTES
from tests.support.cli import messages, olake_cmd, olake_env, write_json
from tests.support.states import stream_state

UNRELATED_ROWS = 60_000  # about 10 MB in the server's reorder buffer: spilled at 1MB, not at 64MB
BIG_UNRELATED_ROWS = 150_000  # about 25 MB of WAL, past the slot's catch-up threshold
DECODES = re.compile(r"^change capture: reading slot '(\w+)' up to [0-9A-F]+/[0-9A-F]+; the server decodes "
                     r"([\d.]+) MB of WAL from the slot's restart_lsn [0-9A-F]+/[0-9A-F]+"
                     r".*, with logical_decoding_work_mem (\w+)$")
PROGRESS = re.compile(r"^change capture: the server is still decoding slot '(\w+)' \([\d.]+ s( so far: .*)?\)$")


@pytest.fixture()
def unrelated_change(pg_cluster, pg_db):
    """A captured table, a slot positioned before one big transaction on a table outside the publication
    and three captured inserts after it; the database's own logical_decoding_work_mem is 1MB (a small
    server's setting). Returns (config, position, stream); the slot is dropped afterwards."""
    slot = f"slot_{pg_db}"
    with psycopg.connect(pg_cluster.dsn(pg_db), autocommit=True) as conn:
        conn.execute(f"ALTER DATABASE {pg_db} SET logical_decoding_work_mem = '1MB'")
        conn.execute("CREATE TABLE captured (id int PRIMARY KEY, v text)")
        conn.execute("CREATE TABLE other (id int PRIMARY KEY, v text)")
        conn.execute(f"CREATE PUBLICATION {slot}_pub FOR TABLE captured")
        position = conn.execute("SELECT lsn FROM pg_create_logical_replication_slot(%s, 'pgoutput')",
                                (slot,)).fetchone()[0]
        conn.execute(f"INSERT INTO other SELECT g, md5(g::text) FROM generate_series(1, {UNRELATED_ROWS}) g")
        conn.execute("INSERT INTO captured VALUES (1, 'a'), (2, 'b'), (3, 'c')")
    config = pg_cluster.source_config(pg_db, replication_slot=slot, publication=f"{slot}_pub")
    stream = {"name": "captured", "namespace": "public", "sync_mode": "cdc", "primary_key": [["id"]],
              "json_schema": {"type": "object", "properties": {
                  "id": {"type": ["null", "integer"], "x-olake-type": "int32", "x-pg-type": "integer"},
                  "v": {"type": ["null", "string"], "x-olake-type": "string", "x-pg-type": "text"}}}}
    yield config, str(position), stream
    with psycopg.connect(pg_cluster.dsn(pg_db), autocommit=True) as conn:
        conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))


def decodes_line(lines: list[str]) -> re.Match:
    """The one line saying what the server decodes (the slot's retained WAL is told before it)."""
    found = [m for m in map(DECODES.match, lines) if m]
    assert len(found) == 1, lines
    return found[0]


def spilled_bytes(dsn: str, slot: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute("SELECT spill_bytes FROM pg_stat_replication_slots WHERE slot_name = %s",
                            (slot,)).fetchone()[0]


def read_in_process(config: dict, position: str, stream: dict,
                    heard: Callable[[str], None] = lambda line: None) -> tuple[list[str], list[tuple], str]:
    """One change read as ``read`` does it: the lines logged (``heard`` hears each as it comes), the
    (op, id, v) of each change and the position its last checkpoint gives the stream (what the
    destination commits)."""
    settings = PostgresSettings.from_config(config)
    catalog_stream = parse_catalog({"streams": [stream]}).streams[0]
    state = State(streams=[stream_state("cdc", "captured", "public", position, None, op_seq=0)])
    lines: list[str] = []
    capture = PostgresChangeCapture(settings, [catalog_stream], lambda line: (lines.append(line), heard(line)))
    capture.preflight(state)
    changes = []
    for batch in capture.read([catalog_stream], state):
        for run in batch.runs:
            changes += [(op, int(key), json.loads(v)) for op, key, v in
                        zip(run.op.to_pylist(), run.data["id"].to_pylist(), run.data["v"].to_pylist())]
        position = format_lsn(batch.position.commit) if batch.position is not None else position
    return lines, changes, position


def test_the_feed_session_spills_at_the_small_setting_and_not_at_the_configured_one(pg_cluster, pg_db,
                                                                                    unrelated_change):
    """The same WAL, read twice: at the database's 1MB the big unrelated transaction is spilled to disk, at
    the default logical_decoding_work_mem_mb (256) it is not; both reads give the three captured rows."""
    config, position, stream = unrelated_change
    dsn, slot = pg_cluster.dsn(pg_db), config["replication_slot"]
    results = {}
    for mb in (1, None):
        before = spilled_bytes(dsn, slot)
        lines, changes, _ = read_in_process({**config, **({"logical_decoding_work_mem_mb": mb} if mb else {})},
                                            position, stream)
        results[mb] = lines, changes, spilled_bytes(dsn, slot) - before
    assert results[1][1] == results[None][1] == [("c", 1, "a"), ("c", 2, "b"), ("c", 3, "c")]
    assert results[1][2] > 0, "the database's 1MB must spill the unrelated transaction"
    assert results[None][2] == 0, "the default 256MB must keep it in memory"
    assert decodes_line(results[1][0]).group(3) == "1MB"
    assert decodes_line(results[None][0]).group(3) == "256MB"


def slot_positions(dsn: str, slot: str) -> tuple[int, int]:
    """The slot's (restart_lsn, confirmed_flush_lsn)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT restart_lsn::text, confirmed_flush_lsn::text FROM pg_replication_slots"
                           " WHERE slot_name = %s", (slot,)).fetchone()
    return parse_lsn(row[0]), parse_lsn(row[1])


def test_the_pass_after_one_that_read_past_a_big_unrelated_transaction_does_not_decode_it_again(
        pg_cluster, pg_db, unrelated_change):
    """A bigger unrelated transaction (past the catch-up threshold), a running-xacts record after it (a
    checkpoint) and a captured row. The first pass decodes and spills the unrelated transactions and
    commits a position past them. The second starts by moving the slot there in fast-forward: the server
    spills nothing, restart_lsn is past the unrelated transactions, and the slot is confirmed exactly
    where the first pass's state was, no further. A third pass gives just the row written after."""
    config, position, stream = unrelated_change
    config = {**config, "logical_decoding_work_mem_mb": 1}
    dsn, slot = pg_cluster.dsn(pg_db), config["replication_slot"]
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("ALTER TABLE other SET (autovacuum_enabled = false)")  # no transaction of its own running
        conn.execute(f"INSERT INTO other SELECT g, md5(g::text) FROM generate_series({UNRELATED_ROWS + 1}, "
                     f"{UNRELATED_ROWS + BIG_UNRELATED_ROWS}) g")
        unrelated_end = parse_lsn(conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()[0])
        conn.execute("CHECKPOINT")  # logs a running-xacts record: a point restart_lsn may move to
        conn.execute("INSERT INTO captured VALUES (4, 'd')")
    assert unrelated_end - slot_positions(dsn, slot)[0] > CATCH_UP_BYTES
    spilled = spilled_bytes(dsn, slot)
    _, changes, first = read_in_process(config, position, stream)
    assert changes == [("c", 1, "a"), ("c", 2, "b"), ("c", 3, "c"), ("c", 4, "d")]
    assert spilled_bytes(dsn, slot) > spilled, "the first pass must decode and spill the unrelated transactions"
    assert parse_lsn(first) > unrelated_end
    spilled = spilled_bytes(dsn, slot)
    _, changes, second = read_in_process(config, first, stream)
    assert changes == []
    assert spilled_bytes(dsn, slot) == spilled, "the second pass decoded the unrelated transactions again"
    restart, confirmed = slot_positions(dsn, slot)
    assert unrelated_end < restart <= confirmed == parse_lsn(first)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO captured VALUES (5, 'e')")
    assert read_in_process(config, second, stream)[1] == [("c", 5, "e")]


def test_the_catch_up_goes_past_a_big_transaction_with_a_restart_point_inside_it(pg_cluster, pg_db,
                                                                                 unrelated_change):
    """Running-xacts records (checkpoints from another session) before the big unrelated transaction, while
    it is open and after it. Past the confirmed position the server keeps only the first restart point it
    meets, so one advance leaves restart_lsn before the transaction; the catch-up's second goes past."""
    config, position, stream = unrelated_change
    config = {**config, "logical_decoding_work_mem_mb": 1}
    dsn, slot = pg_cluster.dsn(pg_db), config["replication_slot"]
    half = UNRELATED_ROWS + BIG_UNRELATED_ROWS // 2
    with psycopg.connect(dsn, autocommit=True) as other, psycopg.connect(dsn) as conn:
        other.execute("ALTER TABLE other SET (autovacuum_enabled = false)")
        other.execute("CHECKPOINT")  # the first restart point past the confirmed position
        conn.execute(f"INSERT INTO other SELECT g, md5(g::text) FROM generate_series({UNRELATED_ROWS + 1}, {half}) g")
        other.execute("CHECKPOINT")  # a restart point inside the open transaction
        conn.execute(f"INSERT INTO other SELECT g, md5(g::text) FROM generate_series({half + 1}, "
                     f"{UNRELATED_ROWS + BIG_UNRELATED_ROWS}) g")
        conn.commit()
        unrelated_end = parse_lsn(other.execute("SELECT pg_current_wal_lsn()::text").fetchone()[0])
        other.execute("CHECKPOINT")  # and one after it
    _, changes, first = read_in_process(config, position, stream)
    assert changes == [("c", 1, "a"), ("c", 2, "b"), ("c", 3, "c")]
    spilled = spilled_bytes(dsn, slot)
    assert read_in_process(config, first, stream)[1] == []
    assert spilled_bytes(dsn, slot) == spilled, "the second pass decoded the unrelated transaction again"
    assert slot_positions(dsn, slot)[0] > unrelated_end


def test_a_pass_ends_where_the_server_said_it_had_sent_everything_past_a_record_logged_while_it_read(
        pg_cluster, pg_db, unrelated_change):
    """A running-xacts record written after the pass took its bound (a checkpoint as the read starts; the
    background writer logs one every 15 s while the server decodes a big transaction): the read ends at
    the server's position past it, not at the bound, so the next pass moves restart_lsn past the
    unrelated transactions and decodes none of them again."""
    config, position, stream = unrelated_change
    config = {**config, "logical_decoding_work_mem_mb": 1}
    dsn, slot = pg_cluster.dsn(pg_db), config["replication_slot"]
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("ALTER TABLE other SET (autovacuum_enabled = false)")
        conn.execute(f"INSERT INTO other SELECT g, md5(g::text) FROM generate_series({UNRELATED_ROWS + 1}, "
                     f"{UNRELATED_ROWS + BIG_UNRELATED_ROWS}) g")
        unrelated_end = parse_lsn(conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()[0])

        def checkpoint_once_bound(line: str) -> None:
            if DECODES.match(line):  # logged once the bound is taken, before the read
                conn.execute("CHECKPOINT")
        lines, changes, first = read_in_process(config, position, stream, checkpoint_once_bound)
    bound = parse_lsn(re.search(r"up to ([0-9A-F]+/[0-9A-F]+)", decodes_line(lines).string).group(1))
    assert changes == [("c", 1, "a"), ("c", 2, "b"), ("c", 3, "c")]
    assert parse_lsn(first) > bound > unrelated_end
    spilled = spilled_bytes(dsn, slot)
    assert read_in_process(config, first, stream)[1] == []
    assert spilled_bytes(dsn, slot) == spilled, "the second pass decoded the unrelated transactions again"
    restart, confirmed = slot_positions(dsn, slot)
    assert unrelated_end < restart <= confirmed == parse_lsn(first)


def test_a_higher_server_setting_is_kept(pg_cluster, pg_db, unrelated_change):
    config, position, stream = unrelated_change
    with psycopg.connect(pg_cluster.dsn(pg_db), autocommit=True) as conn:
        conn.execute(f"ALTER DATABASE {pg_db} SET logical_decoding_work_mem = '300MB'")
    lines, _, _ = read_in_process({**config, "logical_decoding_work_mem_mb": 64}, position, stream)
    assert decodes_line(lines).group(3) == "300MB"


def test_read_says_how_much_wal_the_server_decodes_and_tells_progress_while_it_waits(unrelated_change, tmp_path):
    """``olake read`` past the big unrelated transaction: before the read, the WAL to decode; while the server
    decodes (progress every 0.05 s here), how long, what it decoded and spilled; then the three changes."""
    config, position, stream = unrelated_change
    src = write_json(tmp_path / "src.json", {**config, "logical_decoding_work_mem_mb": 1})
    catalog = write_json(tmp_path / "catalog.json", {"streams": [stream]})
    state = write_json(tmp_path / "state.json", {"level": "global", "version": "v1", "streams": [
        {"sync_type": "cdc", "stream_name": "captured", "stream_namespace": "public",
         "stream_state": {"cursor_field": position, "op_seq": 0}}]})
    result = subprocess.run(olake_cmd("read", "--config", src, "--catalog", catalog, "--state", state),
                            capture_output=True, timeout=300,
                            env={**olake_env(), "OLAKE_CDC_PROGRESS_EVERY": "0.05"})
    stderr = result.stderr.decode()
    assert result.returncode == 0, stderr
    lines = [line.removeprefix("olake: ") for line in stderr.splitlines()]
    decodes = [m for m in map(DECODES.match, lines) if m]
    assert len(decodes) == 1, stderr
    assert decodes[0].group(1) == config["replication_slot"] and float(decodes[0].group(2)) >= 5.0
    progress = [m for m in map(PROGRESS.match, lines) if m]
    assert progress, stderr
    assert lines.index(decodes[0].string) < lines.index(progress[0].string)
    records = [m["record"]["data"] for m in messages(result.stdout) if m["type"] == "RECORD"]
    assert [(r["_olake_op"], r["id"]) for r in records] == [("c", 1), ("c", 2), ("c", 3)]


def test_format_kb_prints_settings_as_postgres_does():
    from olake_cli.sources.postgres import decoding

    assert [decoding.format_kb(kb) for kb in (1024, 65536, 1048576, 1536)] == ["1MB", "64MB", "1GB", "1536kB"]
