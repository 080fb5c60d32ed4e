"""The Kafka envelope (shared/kafka/envelope.py) and topic names (shared/kafka/client.py), without a broker:
rows of every wire type go into messages and come back exactly through the decoder ``olake write`` uses."""

from __future__ import annotations

import pyarrow as pa
import pytest

from olake_cli.core import row_metadata
from olake_cli.core.codec.decode import decode_rows
from olake_cli.core.errors import ConfigError, ProtocolError
from olake_cli.shared.kafka import envelope
from olake_cli.shared.kafka.client import KafkaSettings

TYPES = {"id": "int64", "b": "bool", "f": "float64", "d": "decimal(20,4)", "n": "numeric", "s": "string",
         "u": "uuid", "j": "json", "y": "bytes", "dt": "date", "t": "time", "ts": "timestamp",
         "tz": "timestamptz", "iv": "interval", "a": "array<int32>", "at": "array<array<string>>"}
SCHEMA = {"type": "object", "properties": {c: {"type": ["null", "string"], "x-olake-type": t}
                                           for c, t in TYPES.items()}}
ROWS = [
    {"id": 9223372036854775807, "b": True, "f": "NaN", "d": "-1234567890123456.5000", "n": "NaN",
     "s": 'q"\\\n\x00ü\U0001F600', "u": "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", "j": '{"a": [1, 2.50]}',
     "y": "AP8A3q2+7wA=", "dt": "0044-03-15 BC", "t": "24:00:00.000000", "ts": "294247-01-10T04:00:54.775806",
     "tz": "infinity", "iv": {"months": -1, "days": 2, "microseconds": -3},
     "a": [1, None, -2147483648], "at": [["a", None], ["", "NULL"]]},
    {"id": -9223372036854775808, "b": False, "f": "-Infinity", "d": "0.0000", "n": "1e-30",
     "s": "", "u": None, "j": "null", "y": "", "dt": "10000-01-01", "t": "00:00:00.000000",
     "ts": "0001-01-01T00:00:00.000000", "tz": "2024-02-29T06:34:56.123456+00:00",
     "iv": {"months": 0, "days": 0, "microseconds": 0}, "a": [], "at": []},
    {"id": 3, **{c: None for c in TYPES if c != "id"}},
]


def stored_table(rows: list[dict], ops: list[str], op_ids: list[str | None], toast: list | None = None) -> pa.Table:
    """Rows as the stream buffer hands them to a destination: destination types, stored _olake_ columns."""
    table, _ = decode_rows(rows, SCHEMA)
    n = table.num_rows
    meta = [pa.array(ops), pa.array(op_ids, pa.string()), pa.array([1_700_000_000_000_001] * n, pa.int64())
            .cast(pa.timestamp("us", tz="UTC")), pa.nulls(n, pa.timestamp("us", tz="UTC")),
            pa.array(toast or [None] * n, pa.list_(pa.string()))]
    for name, column in zip(row_metadata.STORED_NAMES, meta):
        table = table.append_column(name, column)
    return table


@pytest.mark.parametrize("fmt", envelope.FORMATS)
def test_rows_of_every_type_come_back_exactly_through_the_record_decoder(fmt):
    table = stored_table(ROWS, ["r", "r", "r"], [None, None, None])
    ref = envelope.stream_ref("public", "t")
    messages = list(envelope.table_messages(table, SCHEMA, ("id",), ref, "L1", fmt))
    assert len(messages) == 3
    decoded = [envelope.decode_envelope(value, fmt, f"t[0]@{i}") for i, (_, value) in enumerate(messages)]
    assert [envelope.decode_key(key, fmt, "k") for key, _ in messages] == [{"id": r["id"]} for r in ROWS]
    assert [e["after"] for e in decoded] == ROWS  # the RECORD wire form itself
    back, _ = decode_rows([e["after"] for e in decoded], SCHEMA)
    others = [c for c in TYPES if c != "f"]  # (Arrow's equals takes NaN for unequal to itself)
    assert back.select(others).equals(table.select(others))
    assert {(e["op"], e["load_id"], e["op_id"], e["key"]["id"]) for e in decoded} == \
        {("r", "L1", None, r["id"]) for r in ROWS}
    assert decoded[0]["commit_ts"] == "2023-11-14T22:13:20.000001+00:00"
    assert decoded[0]["stream"] == {"namespace": "public", "name": "t"}


def test_a_delete_is_followed_by_a_tombstone_and_unchanged_toast_columns_are_left_out():
    key_op = "0000000000000010" + "0000000000000001"
    rows = [dict(ROWS[2], id=3), dict(ROWS[0], id=4)]
    table = stored_table(rows, ["d", "u"], [key_op, key_op[:-1] + "2"], [None, ["s", "j"]])
    messages = list(envelope.table_messages(table, SCHEMA, ("id",), envelope.stream_ref(None, "t"), None, "json"))
    assert [(k, v is None) for k, v in messages] == [(b'{"id":3}', False), (b'{"id":3}', True), (b'{"id":4}', False)]
    delete = envelope.decode_envelope(messages[0][1], "json", "w")
    assert (delete["op"], delete["after"], delete["key"], delete["op_id"]) == ("d", None, {"id": 3}, key_op)
    update = envelope.decode_envelope(messages[2][1], "json", "w")
    assert update["toast_unchanged"] == ["s", "j"] and "s" not in update["after"] and "j" not in update["after"]
    assert "toast_unchanged" not in delete


def test_a_batch_with_deletes_built_a_column_at_a_time_equals_one_built_a_row_at_a_time():
    rows = [ROWS[0], dict(ROWS[2], id=5), ROWS[1], dict(ROWS[0], id=6)]
    ops, op_ids = ["c", "d", "u", "d"], [f"{i:032x}" for i in range(1, 5)]
    ref = envelope.stream_ref("public", "t")
    columnar = list(envelope.table_messages(stored_table(rows, ops, op_ids), SCHEMA, ("id",), ref, None, "json"))
    # a last row that leaves a TOASTed value out makes the whole batch go a row at a time
    by_row = list(envelope.table_messages(stored_table([*rows, dict(ROWS[0], id=7)], [*ops, "u"], [*op_ids, "f" * 32],
                                                       [None, None, None, None, ["s"]]),
                                          SCHEMA, ("id",), ref, None, "json"))
    assert columnar == by_row[:-1] and len(columnar) == 6  # two deletes, each with its tombstone
    assert [v is None for _, v in columnar] == [False, False, True, False, False, True]


def test_a_stream_without_key_has_null_keys_and_the_load_marker_is_an_envelope():
    table = stored_table(ROWS[:1], ["r"], [None])
    [(key, value)] = list(envelope.table_messages(table, SCHEMA, (), envelope.stream_ref("s", "t"), "L", "msgpack"))
    assert key is None and envelope.decode_envelope(value, "msgpack", "w")["key"] is None
    key, value = envelope.load_marker(envelope.stream_ref("s", "t"), "L2", "0" * 32, "load", "msgpack")
    marker = envelope.decode_envelope(value, "msgpack", "w")
    assert envelope.decode_key(key, "msgpack", "w") == envelope.MARKER_KEY and envelope.is_marker(marker)
    assert (marker["load_id"], marker["reason"]) == ("L2", "load")


@pytest.mark.parametrize("value, message", [
    (b"not json", "t[1]@7: the value is not JSON"),
    (b'{"v": 1}', "t[1]@7: not olake's envelope: missing required field"),
    (b'{"v":2,"op":"r","after":{},"key":null,"op_id":null,"commit_ts":null,"load_id":null,'
     b'"stream":{"namespace":null,"name":"t"}}', "t[1]@7: not olake's envelope: field 'v': expected 1"),
])
def test_a_value_that_is_not_the_envelope_is_one_line_naming_where(value, message):
    with pytest.raises(ProtocolError) as caught:
        envelope.decode_envelope(value, "json", "t[1]@7")
    assert str(caught.value).startswith(message) and "\n" not in str(caught.value)


def test_topic_names_and_secrets():
    cfg = {"bootstrap_servers": ["b1:9092", "b2:9092"], "sasl_password": "s3cr3t", "sasl_username": "u",
           "producer": {"ssl.key.password": "k3y", "linger.ms": 5}}
    settings = KafkaSettings.from_config(cfg, "producer")
    assert settings.topic_of("public", "a b/c") == "olake.public.a_b_c"
    assert settings.topic_of(None, "t") == "olake.t"
    assert (settings.catalog_topic, settings.state_topic) == ("olake._catalog", "olake._state")
    config = settings.client_config({"acks": "all"})
    assert config["bootstrap.servers"] == "b1:9092,b2:9092" and config["sasl.password"] == "s3cr3t"
    assert config["linger.ms"] == 5 and config["acks"] == "all"
    assert settings.clean("auth s3cr3t failed, key k3y") == "auth *** failed, key ***"
    custom = KafkaSettings.from_config({"bootstrap_servers": "b", "topic_template": "{name}-{bad}"}, "producer")
    with pytest.raises(ConfigError, match="topic_template"):
        custom.topic_of("n", "t")


def test_a_key_has_the_same_bytes_whether_its_row_was_built_a_column_or_a_row_at_a_time():
    keyed = {**SCHEMA, "properties": {**SCHEMA["properties"]}}
    load = stored_table(ROWS, ["r"] * 3, [None] * 3)  # a column at a time
    deletes = stored_table(ROWS, ["d"] * 3, ["0" * 31 + str(i) for i in range(3)])  # a row at a time
    ref = envelope.stream_ref("public", "t")
    for key_columns in (("id",), ("s", "tz", "d")):
        loaded = [k for k, _ in envelope.table_messages(load, keyed, key_columns, ref, "L", "json")]
        deleted = [k for k, v in envelope.table_messages(deletes, keyed, key_columns, ref, None, "json") if v is None]
        assert loaded == deleted and len(set(loaded)) == 3
