"""Schemas, one-line validation errors, JSON file loading, protocol messages and their writer."""

from __future__ import annotations

import io
import json
import threading
from pathlib import Path

import orjson
import pytest

from olake_cli.core.errors import ConfigError, ProtocolError
from olake_cli.core.messages import (
    MessageWriter, catalog_message, connection_status, dumps, log_message, record_message,
    spec_message, state_message, trace_error,
)
from olake_cli.core.state import parse_state
from olake_cli.core.validation import (
    apply_defaults, load_json_file, load_schema, schema_dir, validate, validate_message,
)

REPO = Path(__file__).resolve().parents[1]
SCHEMA_FILES = sorted(p.name for p in schema_dir().glob("*.schema.json"))
PG_CONFIG = {"type": "postgres", "host": "db.local", "database": "shop", "username": "olake"}


def test_top_level_schemas_dir_is_the_package_dir() -> None:
    """One schema per registered connector, plus the catalog, message and state schemas, and the Kafka
    envelope (the value of every message olake writes to a topic)."""
    assert (REPO / "schemas").resolve() == schema_dir()
    from olake_cli.core.registry import DESTINATIONS, SOURCES

    connectors = {f"{e.schema}.schema.json" for e in (*SOURCES.values(), *DESTINATIONS.values())}
    assert SCHEMA_FILES == sorted(connectors | {"catalog.schema.json", "message.schema.json", "state.schema.json",
                                                "kafka-envelope.schema.json"})


def _properties_without_description(node: object, path: str = "") -> list[str]:
    """Property definitions lacking a description (if/then/else only add constraints)."""
    missing = []
    if isinstance(node, dict):
        node = {k: v for k, v in node.items() if k not in ("if", "then", "else")}
        for name, prop in node.get("properties", {}).items():
            if not (isinstance(prop, dict) and prop.get("description")):
                missing.append(f"{path}/{name}")
        for key, value in node.items():
            missing += _properties_without_description(value, f"{path}/{key}")
    elif isinstance(node, list):
        for index, item in enumerate(node):
            missing += _properties_without_description(item, f"{path}/{index}")
    return missing


@pytest.mark.parametrize("name", SCHEMA_FILES)
def test_schema_files_are_documented(name: str) -> None:
    schema = load_schema(name)
    assert schema["$id"] == name
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["title"] and schema["description"]
    assert _properties_without_description(schema) == []


@pytest.mark.parametrize("config, expected", [
    ({**PG_CONFIG, "port": "abc"}, "config.json: field 'port': 'abc' is not of type 'integer'"),
    ({k: v for k, v in PG_CONFIG.items() if k != "host"}, "config.json: missing required field 'host'"),
    ({**PG_CONFIG, "sslmode": "maybe"}, "config.json: field 'sslmode': 'maybe' is not one of 'disable', "
                                        "'allow', 'prefer', 'require', 'verify-ca', 'verify-full'"),
    ({**PG_CONFIG, "type": "mysql"}, "config.json: field 'type': expected 'postgres', found 'mysql'"),
    ({**PG_CONFIG, "chunk_rows": 0}, "config.json: field 'chunk_rows': 0 is less than the minimum of 1"),
    ({**PG_CONFIG, "schemas": ["public", 7]}, "config.json: field 'schemas[1]': 7 is not of type 'string'"),
    ({**PG_CONFIG, "logical_decoding_work_mem_mb": "1GB"},
     "config.json: field 'logical_decoding_work_mem_mb': '1GB' is not of type 'integer'"),
    ({**PG_CONFIG, "logical_decoding_work_mem_mb": 0},
     "config.json: field 'logical_decoding_work_mem_mb': 0 is less than the minimum of 1"),
    ({**PG_CONFIG, "logical_decoding_work_mem_mb": 65536},
     "config.json: field 'logical_decoding_work_mem_mb': 65536 is greater than the maximum of 4096"),
    ([PG_CONFIG], "config.json: expected a JSON object, found an array"),
])
def test_validation_errors_are_one_line_naming_the_field(config: object, expected: str) -> None:
    with pytest.raises(ConfigError) as info:
        validate(config, "source-postgres", "config.json")
    assert info.value.message == expected
    assert info.value.failure_type == "config_error"


def test_unknown_field_names_the_closest_valid_one_or_lists_them() -> None:
    with pytest.raises(ConfigError) as info:
        validate({"type": "parquet", "path": "/out", "compresion": "zstd"}, "destination-parquet", "dest.json")
    assert info.value.message == "dest.json: unknown field 'compresion'; did you mean 'compression'?"
    with pytest.raises(ConfigError) as info:
        validate({**PG_CONFIG, "chunk_row": 5}, "source-postgres", "src.json")
    assert info.value.message == "src.json: unknown field 'chunk_row'; did you mean 'chunk_rows'?"
    with pytest.raises(ConfigError) as info:
        validate({"type": "parquet", "path": "/out", "zzz": 1}, "destination-parquet", "dest.json")
    assert info.value.message == ("dest.json: unknown field 'zzz' (allowed: type, path, rows_per_file, compression, "
                                  "max_small_files, shared_path, s3.endpoint, s3.region, s3.access-key-id, s3.secret-access-key, "
                                  "s3.session-token)")


def test_password_value_is_never_echoed() -> None:
    with pytest.raises(ConfigError) as info:
        validate({**PG_CONFIG, "password": 987654321}, "source-postgres", "config.json")
    assert info.value.message == "config.json: field 'password': the value is not of type 'string'"
    assert "987654321" not in str(info.value)


def test_valid_configs_pass_and_defaults_fill_in() -> None:
    validate(PG_CONFIG, "source-postgres", "config.json")
    filled = apply_defaults(PG_CONFIG, "source-postgres")
    assert filled == {**PG_CONFIG, "port": 5432, "password": "", "schemas": ["public"], "sslmode": "prefer",
                      "connect_timeout": 10, "lock_timeout": 5, "chunk_strategy": "ctid", "chunk_rows": 250000,
                      "create_slot_and_publication": False, "on_position_lost": "resync",
                      "slot_wal_warn_bytes": 1 << 30,
                      "logical_decoding_work_mem_mb": 256, "batch_rows": 10000, "max_connections": 8,
                      "in_process_rows": 20_000_000}
    assert "port" not in PG_CONFIG  # a new dict
    filled["schemas"].append("sales")
    assert apply_defaults(PG_CONFIG, "source-postgres")["schemas"] == ["public"]
    dest = apply_defaults({"type": "parquet", "path": "/out", "compression": "gzip"}, "destination-parquet")
    assert dest == {"type": "parquet", "path": "/out", "compression": "gzip", "rows_per_file": 1000000, "shared_path": False,
                    "max_small_files": 32}


@pytest.mark.parametrize("content, expected", [
    (None, "config file '{path}' does not exist"),
    ("", "config file '{path}' is empty"),
    ("{\n  \"host\": \"x\"\n  \"port\": 1}", "config file '{path}' is not valid JSON: "
                                               "Expecting ',' delimiter at line 3 column 3"),
    ("\"just a string\"", "config file '{path}' must contain a JSON object, found a string"),
])
def test_load_json_file_errors(tmp_path: Path, content: str | None, expected: str) -> None:
    path = tmp_path / "config.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(ConfigError) as info:
        load_json_file(path, "config")
    assert info.value.message == expected.format(path=path)


def test_load_json_file_keeps_big_integers_and_accepts_a_bom(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    path.write_bytes(b"\xef\xbb\xbf" + b'{"n": 123456789012345678901234567890}')
    assert load_json_file(path, "config") == {"n": 123456789012345678901234567890}


def test_every_message_builder_output_is_valid() -> None:
    state = parse_state({"level": "global", "version": "v1", "streams": []})
    messages = [
        record_message("orders", "public", {"id": 1}, emitted_at=5),
        state_message(state), state_message(state.to_dict()),
        log_message("warning", "slow"), trace_error("bad port", "config_error", "ValueError", "tb"),
        catalog_message({"streams": [{"name": "orders", "json_schema": {"type": "object"}}]}),
        connection_status(True), connection_status(False, "refused"),
        spec_message(load_schema("source-postgres"), "https://olake.io"),
    ]
    for msg in messages:
        validate_message(msg)
    assert messages[0] == {"type": "RECORD", "record": {"stream": "orders", "namespace": "public",
                                                       "data": {"id": 1}, "emitted_at": 5}}
    assert messages[3] == {"type": "LOG", "log": {"level": "WARN", "message": "slow"}}
    assert messages[4]["trace"]["error"] == {"message": "bad port", "failure_type": "config_error",
                                             "internal_message": "ValueError", "stack_trace": "tb"}
    assert messages[7]["connectionStatus"] == {"status": "FAILED", "message": "refused"}
    with pytest.raises(ValueError):
        trace_error("x", "fatal_error")


@pytest.mark.parametrize("msg, expected", [
    ([1], "line 3: expected a JSON object, found an array"),
    ({"type": "RECORD", "record": {"stream": "s", "data": [1]}},
     "line 3: RECORD field 'record.data' must be an object, found an array"),
    ({"type": "RECORD", "record": {"stream": 5, "data": {}}},
     "line 3: RECORD field 'record.stream' must be a string, found an integer"),
    ({"type": "RECORD", "record": {"stream": "s", "namespace": 1, "data": {}}},
     "line 3: RECORD field 'record.namespace' must be a string or null, found an integer"),
    ({"type": "RECORD", "data": {}}, "line 3: RECORD field 'record' must be an object, found a null"),
    ({"type": "HELLO"}, "line 3: unknown message type 'HELLO' (expected one of RECORD, STATE, LOG, "
                        "TRACE, CATALOG, CONNECTION_STATUS, SPEC, CONTROL)"),
    ({"type": "STATE", "state": {"level": "planet", "streams": []}},
     "line 3: field 'state.level': 'planet' is not one of 'global', 'stream'"),
    ({"type": "LOG", "log": {"level": "INFO"}}, "line 3: missing required field 'log.message'"),
    ({"type": "CATALOG", "catalog": {"streams": [{"name": "t"}]}},
     "line 3: missing required field 'catalog.streams[0].json_schema'"),
])
def test_bad_messages_are_protocol_errors(msg: object, expected: str) -> None:
    with pytest.raises(ProtocolError) as info:
        validate_message(msg, "line 3")
    assert info.value.message == expected


def test_dumps_is_one_json_line_and_handles_huge_ints() -> None:
    msg = record_message("t", None, {"big": 2 ** 80, "text": "é\n日本"}, emitted_at=1)
    line = dumps(msg)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert json.loads(line) == msg
    assert orjson.loads(dumps(record_message("t", None, {"x": 1}, emitted_at=2))) == {
        "type": "RECORD", "record": {"stream": "t", "namespace": None, "data": {"x": 1}, "emitted_at": 2}}


def test_message_writer_keeps_lines_whole_across_threads() -> None:
    sink = io.BytesIO()
    writer = MessageWriter(sink)
    payload = "x" * 5000

    def emit(thread: int) -> None:
        for i in range(200):
            writer.write(record_message("t", None, {"thread": thread, "i": i, "p": payload}, emitted_at=0))

    threads = [threading.Thread(target=emit, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    writer.write_raw(dumps(log_message("INFO", "a")) + dumps(log_message("INFO", "b")))
    writer.flush()
    lines = sink.getvalue().splitlines()
    records = [json.loads(line)["record"]["data"] for line in lines[:-2]]
    assert sorted((r["thread"], r["i"]) for r in records) == [(t, i) for t in range(4) for i in range(200)]
    assert [json.loads(line)["log"]["message"] for line in lines[-2:]] == ["a", "b"]
