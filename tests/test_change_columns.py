"""Change capture a run at a time, against pgoutput from a real server.

The feed decodes runs of messages column by column (``pgoutput_columns``), ``RunRecords`` turns
them into JSON-text columns and ``encode_change_lines`` lays out the RECORD lines; ``sync`` asks for
typed runs instead, and every run read here is also checked to give, typed, exactly the table that
decoding its RECORD lines gives (``record_block``). Checked here: every
type of the pgtext fixture gives the full-load wire values; NULLs, unchanged TOAST values (left out
and listed, or filled from a REPLICA IDENTITY FULL old row), key updates (a delete of the old key
first), key-only deletes, truncates and operation ids; rows at or below a position are dropped.
"""

from __future__ import annotations

import numpy as np
import orjson
import psycopg
import pytest

from olake_cli.core.catalog import CatalogStream
from olake_cli.core.errors import SourceError
from olake_cli.core.opid import OpId
from olake_cli.core.record_lines import encode_change_lines
from olake_cli.sources.postgres.change_feed import FeedRouting, current_wal_lsn, read_changes
from olake_cli.sources.postgres.pgoutput import decode
from olake_cli.sources.postgres.pgoutput_columns import decode_run
from olake_cli.sources.postgres.run_records import RunRecords
from tests.support.change_tables import assert_typed_run_decodes_alike
from tests.test_pgtext import (PUBLICATION, ROWS, assert_same_wire, create_every, full_load_rows, scan_session,
                               table_schema)

HEAD = b'{"type":"RECORD","record":{"stream":"t","emitted_at":1,"data":'
METADATA = ("_olake_op", "_olake_op_id", "_olake_commit_ts")


def change_records(dsn: str, slot: str, publication: str, table: str, keys: tuple, run_rows: int = 1000,
                   above: OpId | None = None) -> tuple[list[dict], list]:
    """The slot's changes of ``table`` as record data (through runs), and the per-row events."""
    _, json_schema = table_schema(dsn, table)
    stream = CatalogStream.from_dict({"name": table, "namespace": "public", "json_schema": json_schema,
                                      "supported_sync_modes": ["cdc"]})
    records, typed, events = RunRecords(stream, keys), RunRecords(stream, keys, typed=True), []
    lines = []
    with psycopg.connect(dsn, autocommit=True) as conn:
        scan_session(conn)
        routing = FeedRouting(keys={("public", table): keys})
        with read_changes(conn, slot, publication, current_wal_lsn(conn), routing=routing, run_rows=run_rows) as feed:
            for run in (r for r in feed.runs() if r.relation.name == table):
                events += run.events()
                keep = np.ones(len(run), bool)
                json_run = records.change_run(run, keep).after(above)
                assert_typed_run_decodes_alike(typed.change_run(run, keep).after(above), json_run, json_schema)
                lines += encode_change_lines(json_run, HEAD).splitlines()
    return [orjson.loads(line)["record"]["data"] for line in lines], events


def test_every_type_through_runs_gives_the_full_load_wire_values(pg_cluster, pg_db):
    dsn = pg_cluster.dsn(pg_db)
    slot = f"slot_{pg_db}"
    create_every(dsn, with_slot=slot)
    try:
        data, events = change_records(dsn, slot, PUBLICATION, "every", ("id",), run_rows=2)
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
    expected = full_load_rows(pg_cluster, pg_db)
    assert len(data) == len(expected) == len(ROWS)
    for index, (want, got, event) in enumerate(zip(expected, data, events)):
        assert [got.pop(k) for k in METADATA] == ["c", list(event.op_id), event.commit_ts_us]
        assert_same_wire(want, got, f"row {index + 1}")


def test_nulls_toast_key_updates_deletes_and_truncates_as_columns(pg_cluster, pg_db):
    dsn = pg_cluster.dsn(pg_db)
    slot = f"slot_{pg_db}"
    big = "".join(chr(0x41 + (i * 7919) % 26) for i in range(20000))
    with psycopg.connect(dsn, autocommit=True) as conn:
        for table in ("plain", "full_t"):
            conn.execute(f"CREATE TABLE {table} (id int8 PRIMARY KEY, big text, n int4, at timestamptz)")
            conn.execute(f"ALTER TABLE {table} ALTER COLUMN big SET STORAGE EXTERNAL")
        conn.execute("ALTER TABLE full_t REPLICA IDENTITY FULL")
        conn.execute(f"CREATE PUBLICATION {PUBLICATION} FOR TABLE plain, full_t")
        conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (slot,))
        for table in ("plain", "full_t"):
            conn.execute(f"INSERT INTO {table} VALUES (1, %s, 1, '2024-02-29 12:34:56.5+00'), "
                         f"(2, NULL, NULL, NULL)", (big,))
            conn.execute(f"UPDATE {table} SET n = 2 WHERE id = 1")  # big arrives unchanged
            conn.execute(f"UPDATE {table} SET id = 3, n = 3 WHERE id = 1")  # a key update
            conn.execute(f"DELETE FROM {table} WHERE id = 2")
            conn.execute(f"TRUNCATE {table}")
        try:
            plain, plain_events = change_records(dsn, slot, PUBLICATION, "plain", ("id",))
            full, _ = change_records(dsn, slot, PUBLICATION, "full_t", ("id",))
            tail, _ = change_records(dsn, slot, PUBLICATION, "plain", ("id",), above=plain_events[2].op_id)
        finally:
            conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
    at = "2024-02-29T12:34:56.500000+00:00"
    inserted = [{"id": 1, "big": big, "n": 1, "at": at}, {"id": 2, "big": None, "n": None, "at": None}]
    expected_plain = [
        *inserted,
        {"id": 1, "n": 2, "at": at, "_olake_toast_unchanged": ["big"]},
        {"id": 1},  # the old key of the key update, deleted first
        {"id": 3, "n": 3, "at": at, "_olake_toast_unchanged": ["big"]},
        {"id": 2},  # a key-only old tuple
        {},  # the truncate
    ]
    expected_full = [  # REPLICA IDENTITY FULL: unchanged values come from the old row, deletes carry it all
        *inserted,
        {"id": 1, "n": 2, "at": at, "big": big},
        {"id": 1, "big": big, "n": 2, "at": at},
        {"id": 3, "n": 3, "at": at, "big": big},
        {"id": 2, "big": None, "n": None, "at": None},
        {},
    ]
    for got, expected in ((plain, expected_plain), (full, expected_full)):
        assert [{k: v for k, v in d.items() if k not in METADATA} for d in got] == expected
        assert [d["_olake_op"] for d in got] == ["c", "c", "u", "d", "u", "d", "t"]
        ids = [tuple(d["_olake_op_id"]) for d in got]
        assert ids == sorted(ids) and len(set(ids)) == len(ids)
    assert [tuple(d["_olake_op_id"]) for d in plain] == [tuple(e.op_id) for e in plain_events]
    assert plain[3]["_olake_op_id"][0] == plain[4]["_olake_op_id"][0]  # one transaction: delete, then update
    assert tail == plain[3:]


def test_run_decoder_agrees_with_the_message_decoder_and_refuses_bad_data(pg_cluster, pg_db):
    dsn = pg_cluster.dsn(pg_db)
    slot = f"slot_{pg_db}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE odd (id int PRIMARY KEY, a int[], note text)")
        conn.execute("ALTER TABLE odd REPLICA IDENTITY FULL")
        conn.execute(f"CREATE PUBLICATION {PUBLICATION} FOR TABLE odd")
        conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (slot,))
        conn.execute("INSERT INTO odd VALUES (1, '{1}', 'ünï \"q\"'), (2, '[0:2]={7,8,9}', NULL)")
        conn.execute("UPDATE odd SET note = 'x', id = 3 WHERE id = 1")
        conn.execute("DELETE FROM odd WHERE id = 3")
        try:
            with pytest.raises(SourceError, match="stream 'public.odd', column 'a', row with key id='2': "
                                                  r".*dimensions \[0:2\] \(a lower bound other than 1\)"):
                change_records(dsn, slot, PUBLICATION, "odd", ("id",))
            messages = [bytes(m) for (m,) in conn.execute(  # the feed waited for the WAL to be flushed
                "SELECT data FROM pg_logical_slot_peek_binary_changes(%s, NULL, NULL, 'proto_version', '1', "
                "'publication_names', %s)", (slot, PUBLICATION))]
        finally:
            conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
    rows = [m for m in messages if m[:1] in (b"I", b"U", b"D")]
    assert [m[:1] for m in rows] == [b"I", b"I", b"U", b"D"]
    tuples = decode_run(rows, 3, "utf-8")
    for index, message in enumerate(decode(m) for m in rows):
        new = getattr(message, "new", None)
        old = getattr(message, "old", None)
        for column in range(3):
            for side, values in ((tuples.new, new), (tuples.old, old)):
                kind, text = side[column].kinds[index], side[column].texts[index].as_py()
                want = None if values is None else values[column]
                assert (kind, text) == ((0, None) if values is None else (ord("n"), None) if want is None
                                        else (ord("t"), want)), (index, column)
    with pytest.raises(SourceError, match="truncated"):
        decode_run([rows[0][:-2]], 3, "utf-8")
    with pytest.raises(SourceError, match="column count"):
        decode_run([rows[0]], 4, "utf-8")
