"""pgoutput v1 decoding (hand-built messages and real server output) and LSN / OpId helpers."""

from __future__ import annotations

import pickle
import struct
import time

import psycopg
import pytest

from olake_cli.core.errors import SourceError, StateError
from olake_cli.core.opid import OpId
from olake_cli.sources.postgres.lsn import format_lsn, parse_lsn
from olake_cli.sources.postgres.pgoutput import (UNCHANGED_TOAST, Begin, Column, Commit, Delete, Insert,
                                                 LogicalMessage, Origin, Relation, RelationCache, Truncate,
                                                 Type, Update, decode, decode_tuple)

PG_EPOCH_US = 946_684_800_000_000


def cstr(text: str) -> bytes:
    return text.encode() + b"\0"


def tuple_data(*values: object) -> bytes:
    """Encode TupleData: None -> 'n', UNCHANGED_TOAST -> 'u', str -> 't'."""
    out = struct.pack(">H", len(values))
    for value in values:
        if value is None:
            out += b"n"
        elif value is UNCHANGED_TOAST:
            out += b"u"
        else:
            raw = value.encode()
            out += b"t" + struct.pack(">I", len(raw)) + raw
    return out


# ---------------------------------------------------------------- LSN and OpId

def test_lsn_parse_and_format_round_trip() -> None:
    assert parse_lsn("16/B374D848") == (0x16 << 32) | 0xB374D848
    assert parse_lsn("0/0") == 0
    assert parse_lsn("ffffffff/ffffffff") == 2**64 - 1
    assert format_lsn(0x16_B374D848) == "16/B374D848"
    assert format_lsn(0x1_00000000) == "1/0"
    for value in (0, 1, 0x16B3748, 2**32 - 1, 2**32, 2**53 + 1, 2**64 - 1):
        assert parse_lsn(format_lsn(value)) == value


@pytest.mark.parametrize("bad", ["", "16", "16/", "/1", "1/2/3", "G/0", " 1/0", "1_0/0", "123456789/0", 5])
def test_lsn_parse_rejects_garbage(bad: object) -> None:
    with pytest.raises(StateError):
        parse_lsn(bad)  # type: ignore[arg-type]


def test_format_lsn_rejects_out_of_range() -> None:
    with pytest.raises(ValueError):
        format_lsn(-1)
    with pytest.raises(ValueError):
        format_lsn(2**64)


def test_op_id_order_json_and_key() -> None:
    ids = [OpId(5, 2), OpId(2**64 - 1, 1), OpId(5, 10), OpId(0x16B3748, 1), OpId(5, 1)]
    ordered = sorted(ids)
    assert ordered == [OpId(5, 1), OpId(5, 2), OpId(5, 10), OpId(0x16B3748, 1), OpId(2**64 - 1, 1)]
    assert sorted(ids, key=OpId.to_key) == ordered  # string order of keys == OpId order
    assert OpId(5, 10).to_key() == "0000000000000005000000000000000A"
    big = OpId(2**64 - 1, 2**63 + 7)
    assert big.to_json() == [2**64 - 1, 2**63 + 7]
    assert OpId.from_json(big.to_json()) == big
    assert OpId.from_json(big.to_key()) == big
    assert OpId.from_key(big.to_key()) == big
    assert str(OpId(0x16B3748, 3)) == "16B3748#3"
    assert pickle.loads(pickle.dumps(big)) == big


@pytest.mark.parametrize("bad", [[1], [1, 2, 3], [1.0, 2], [-1, 2], [2**64, 1], ["1", "2"], [True, 1], None,
                                 "abc", "0000000000000005000000000000000a"])
def test_op_id_from_json_rejects_garbage(bad: object) -> None:
    with pytest.raises(StateError):
        OpId.from_json(bad)


# ---------------------------------------------------------------- hand-built messages

def test_begin_and_commit_convert_timestamps_to_unix_microseconds() -> None:
    pg_ts = 757_382_400_123_456  # 2024-01-01T00:00:00.123456Z in PostgreSQL-epoch microseconds
    begin = decode(b"B" + struct.pack(">QqI", 0x1_2345_6789, pg_ts, 771))
    assert begin == Begin(final_lsn=0x1_2345_6789, commit_ts_us=1_704_067_200_123_456, xid=771)
    commit = decode(b"C" + struct.pack(">BQQq", 0, 0x1_2345_6789, 0x1_2345_67B9, pg_ts))
    assert commit == Commit(commit_lsn=0x1_2345_6789, end_lsn=0x1_2345_67B9,
                            commit_ts_us=1_704_067_200_123_456, flags=0)
    before_epoch = decode(b"B" + struct.pack(">QqI", 1, -1, 1))
    assert before_epoch.commit_ts_us == PG_EPOCH_US - 1


def test_relation_with_key_flags_typmods_and_non_ascii_names() -> None:
    body = (struct.pack(">I", 16390) + cstr("sales") + cstr("Ordérs") + b"f" + struct.pack(">H", 3)
            + b"\x01" + cstr("id") + struct.pack(">Ii", 20, -1)
            + b"\x00" + cstr("code") + struct.pack(">Ii", 1043, 24)
            + b"\x01" + cstr("region") + struct.pack(">Ii", 25, -1))
    rel = decode(b"R" + body)
    assert rel == Relation(16390, "sales", "Ordérs", "f", (Column("id", 20, -1, True),
                                                          Column("code", 1043, 24, False),
                                                          Column("region", 25, -1, True)))
    assert rel.column_names == ("id", "code", "region")
    assert rel.key_names == ("id", "region")
    cache = RelationCache()
    cache.remember(rel)
    cache.remember(decode(b"Y" + struct.pack(">I", 70000) + cstr("public") + cstr("mood")))
    assert cache.relation(16390) is rel
    assert cache.types[70000] == Type(70000, "public", "mood")
    with pytest.raises(SourceError, match="before its Relation"):
        cache.relation(1)


def test_insert_text_null_toast_and_multibyte_values() -> None:
    msg = decode(b"I" + struct.pack(">I", 42) + b"N" + tuple_data("1", None, "", "日本語 é", UNCHANGED_TOAST))
    assert msg == Insert(42, ("1", None, "", "日本語 é", UNCHANGED_TOAST))
    assert msg.new[4] is UNCHANGED_TOAST and msg.new[1] is None


def test_decode_tuple_returns_end_position() -> None:
    data = b"xx" + tuple_data("ab", None) + b"N"
    values, end = decode_tuple(data, 2)
    assert values == ["ab", None]
    assert data[end:] == b"N"


def test_update_without_old_with_key_and_with_full_old_tuple() -> None:
    new = tuple_data("2", "b", UNCHANGED_TOAST)
    plain = decode(b"U" + struct.pack(">I", 7) + b"N" + new)
    assert plain == Update(7, None, None, ("2", "b", UNCHANGED_TOAST))
    keyed = decode(b"U" + struct.pack(">I", 7) + b"K" + tuple_data("1", None, None) + b"N" + new)
    assert keyed == Update(7, ("1", None, None), "K", ("2", "b", UNCHANGED_TOAST))
    full = decode(b"U" + struct.pack(">I", 7) + b"O" + tuple_data("1", "a", "long") + b"N" + new)
    assert full == Update(7, ("1", "a", "long"), "O", ("2", "b", UNCHANGED_TOAST))


def test_delete_with_key_and_full_old_tuple() -> None:
    assert decode(b"D" + struct.pack(">I", 9) + b"K" + tuple_data("5", None)) == Delete(9, ("5", None), "K")
    assert decode(b"D" + struct.pack(">I", 9) + b"O" + tuple_data("5", "x")) == Delete(9, ("5", "x"), "O")


def test_truncate_origin_and_logical_message() -> None:
    trunc = decode(b"T" + struct.pack(">IB", 2, 3) + struct.pack(">II", 100, 200))
    assert trunc == Truncate((100, 200), cascade=True, restart_identity=True)
    plain = decode(b"T" + struct.pack(">IB", 1, 0) + struct.pack(">I", 100))
    assert plain == Truncate((100,), cascade=False, restart_identity=False)
    assert decode(b"O" + struct.pack(">Q", 77) + cstr("node_a")) == Origin(77, "node_a")
    lm = decode(b"M" + struct.pack(">BQ", 1, 99) + cstr("olake") + struct.pack(">I", 3) + b"abc")
    assert lm == LogicalMessage(True, 99, "olake", b"abc")


@pytest.mark.parametrize("data, match", [
    (b"", "empty"),
    (b"S" + b"\0" * 8, "unsupported message type"),
    (b"B\0\0", "malformed"),
    (b"I" + struct.pack(">I", 1) + b"X" + tuple_data("1"), "without 'N'"),
    (b"I" + struct.pack(">I", 1) + b"N" + struct.pack(">H", 1) + b"b" + struct.pack(">I", 1) + b"x",
     "column kind"),
    (b"I" + struct.pack(">I", 1) + b"N" + struct.pack(">H", 1) + b"t" + struct.pack(">I", 10) + b"abc",
     "truncated"),
    (b"I" + struct.pack(">I", 1) + b"N" + struct.pack(">H", 2) + b"n", "malformed"),
    (b"I" + struct.pack(">I", 1) + b"N" + tuple_data("x")[:-1] + b"\xff", "malformed"),
    (b"D" + struct.pack(">I", 1) + b"N" + tuple_data("1"), "without 'K' or 'O'"),
])
def test_malformed_messages_raise_source_error(data: bytes, match: str) -> None:
    with pytest.raises(SourceError, match=match):
        decode(data)


def test_unchanged_toast_is_a_distinct_picklable_singleton() -> None:
    assert UNCHANGED_TOAST is not None and UNCHANGED_TOAST != ""
    assert pickle.loads(pickle.dumps(UNCHANGED_TOAST)) is UNCHANGED_TOAST
    assert repr(UNCHANGED_TOAST) == "UNCHANGED_TOAST"
    assert type(UNCHANGED_TOAST)() is UNCHANGED_TOAST


# ---------------------------------------------------------------- real server output

def wait_until_flushed(conn: psycopg.Connection) -> None:
    """Logical decoding stops at the flushed WAL; the test cluster runs synchronous_commit=off."""
    target = conn.execute("SELECT pg_current_wal_insert_lsn()").fetchone()[0]
    deadline = time.monotonic() + 10
    while not conn.execute("SELECT pg_current_wal_flush_lsn() >= %s::pg_lsn", (target,)).fetchone()[0]:
        assert time.monotonic() < deadline, "WAL was not flushed within 10 s"
        time.sleep(0.02)


def test_decodes_real_server_messages(pg_cluster, pg_db) -> None:
    """Origin, Type, Relation, Insert, LogicalMessage exactly as PostgreSQL 15 sends them."""
    slot = f"dec_{pg_db}"
    with psycopg.connect(pg_cluster.dsn(pg_db), autocommit=True) as conn:
        conn.execute("CREATE TYPE mood AS ENUM ('sad', 'happy')")
        conn.execute("CREATE TABLE t (id bigint PRIMARY KEY, m mood, note varchar(20), n numeric(10,2))")
        conn.execute("CREATE PUBLICATION pub FOR TABLE t")
        conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (slot,))
        try:
            conn.execute("SELECT pg_replication_origin_create('node_a')")
            conn.execute("SELECT pg_replication_origin_session_setup('node_a')")
            with conn.transaction():
                conn.execute("SELECT pg_replication_origin_xact_setup('0/AB', now())")
                conn.execute("INSERT INTO t VALUES (9007199254740993, 'happy', 'héllo', 12.50)")
                conn.execute("SELECT pg_logical_emit_message(true, 'olake', 'ping')")
            conn.execute("SELECT pg_replication_origin_session_reset()")
            wait_until_flushed(conn)
            rows = conn.execute(
                "SELECT data FROM pg_logical_slot_peek_binary_changes(%s, NULL, NULL, 'proto_version', '1',"
                " 'publication_names', 'pub', 'messages', 'true')", (slot,)).fetchall()
            oid = conn.execute("SELECT 't'::regclass::oid").fetchone()[0]
            mood_oid = conn.execute("SELECT 'mood'::regtype::oid").fetchone()[0]
        finally:
            conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
            conn.execute("SELECT pg_replication_origin_drop('node_a')")
    messages = [decode(bytes(r[0])) for r in rows]
    kinds = [type(m).__name__ for m in messages]
    assert kinds == ["Begin", "Origin", "Type", "Relation", "Insert", "LogicalMessage", "Commit"]
    begin, origin, typ, rel, ins, lm, commit = messages
    assert begin.final_lsn == commit.commit_lsn < commit.end_lsn
    assert origin == Origin(0xAB, "node_a")
    assert typ == Type(mood_oid, "public", "mood")
    assert rel == Relation(oid, "public", "t", "d", (Column("id", 20, -1, True), Column("m", mood_oid, -1, False),
                                                    Column("note", 1043, 24, False),
                                                    Column("n", 1700, (10 << 16 | 2) + 4, False)))
    assert ins == Insert(oid, ("9007199254740993", "happy", "héllo", "12.50"))
    assert lm == LogicalMessage(True, lm.lsn, "olake", b"ping") and lm.lsn > 0
    assert begin.commit_ts_us == commit.commit_ts_us
