"""State: seed examples round-trip, merging is idempotent and commutative, saves are atomic."""

from __future__ import annotations

import itertools
import json
import os
from pathlib import Path

import pytest

from olake_cli.core.errors import StateError
from olake_cli.core.state import (
    Chunk, FileStateStore, State, StreamState, finish_full_load_if_done, load_state, merge_chunks,
    merge_state, parse_state, state_to_json,
)
from tests.support.states import stream_state

OID_1 = "66ffcf79d9249bef96de3611"
OID_2 = "67ffcf79d9249bef96de3611"

# The examples of seeds/002, rewritten as valid JSON (no comments or trailing commas; the
# "sync_type": {...} typo of "example 2" is its stream_state).
SEED_FULL_LOAD = {"level": "global", "version": "v1", "streams": [
    {"sync_type": "full-load", "stream_name": "stream_6", "stream_namespace": "otter_db",
     "stream_state": {"cursor_field": OID_1, "chunks": [
         {"status": "succeed", "min": OID_1, "max": OID_1},
         {"status": "failed", "min": OID_1, "max": OID_1}]}}]}
SEED_RECEIVED = {"level": "global", "version": "v1", "streams": [
    {"sync_type": "incremental", "stream_name": "stream_1", "stream_namespace": "otter_db",
     "stream_state": {"cursor_field": OID_1}},
    {"sync_type": "incremental", "stream_name": "stream_2", "stream_namespace": "otter_db",
     "stream_state": {"cursor_field": OID_2}}]}
SEED_STREAM_1 = {"level": "stream", "version": "v1", "streams": [SEED_RECEIVED["streams"][0]]}
SEED_STREAM_3_CHUNKS = {"level": "global", "version": "v1", "streams": [
    {"sync_type": "full-load", "stream_name": "stream_3", "stream_namespace": "otter_db",
     "stream_state": {"cursor_field": OID_2, "chunks": [
         {"status": "succeed", "min": OID_1, "max": OID_1},
         {"status": "failed", "min": OID_1, "max": OID_1}]}}]}
SEED_STREAM_3_DONE = {"level": "stream", "version": "v1", "streams": [
    {"sync_type": "incremental", "stream_name": "stream_3", "stream_namespace": "otter_db",
     "stream_state": {"cursor_field": OID_1}}]}
SEED_FINAL = {"level": "global", "version": "v1", "streams": [
    *SEED_RECEIVED["streams"],
    {"sync_type": "incremental", "stream_name": "stream_3", "stream_namespace": "otter_db",
     "stream_state": {"cursor_field": OID_2}}]}
SEEDS = [SEED_FULL_LOAD, SEED_RECEIVED, SEED_STREAM_1, SEED_STREAM_3_CHUNKS, SEED_STREAM_3_DONE, SEED_FINAL]


def full_load(name: str, chunks: list[tuple[str, object, object]], cursor: object = "0/16B3748",
              **extra: object) -> StreamState:
    return stream_state("full-load", name, "public", cursor, [Chunk(*c) for c in chunks], **extra)


@pytest.mark.parametrize("seed", SEEDS)
def test_seed_examples_round_trip_exactly(seed: dict) -> None:
    state = parse_state(json.loads(json.dumps(seed)))
    assert state.to_dict() == seed
    assert json.dumps(state.to_dict()) == json.dumps(seed)  # same key order too


def test_seed_parallel_run_split_and_merge_back() -> None:
    received = parse_state(SEED_RECEIVED)
    workers = received.split()
    assert [w.to_dict() for w in workers][0] == SEED_STREAM_1
    assert all(w.level == "stream" and len(w.streams) == 1 for w in workers)
    stream_3 = parse_state(SEED_STREAM_3_CHUNKS).streams[0]
    stream_3.chunks = [Chunk("succeed", c.min, c.max) for c in stream_3.chunks]
    stream_3 = finish_full_load_if_done(stream_3, "incremental")
    merged = received
    for update in [*reversed(workers), State("stream", "v1", [stream_3])]:
        merged = merge_state(merged, update)
    assert merged.to_dict() == SEED_FINAL


def test_stream_level_update_replaces_only_its_stream() -> None:
    merged = merge_state(parse_state(SEED_RECEIVED), parse_state(SEED_STREAM_3_DONE))
    assert [s.stream_name for s in merged.streams] == ["stream_1", "stream_2", "stream_3"]
    assert merged.find("otter_db", "stream_3").cursor_field == OID_1
    bumped = StreamState("incremental", "stream_2", "otter_db", "68ffcf79d9249bef96de3611")
    merged = merge_state(merged, State("stream", "v1", [bumped]))
    assert merged.find("otter_db", "stream_2").cursor_field == "68ffcf79d9249bef96de3611"
    assert merged.find("otter_db", "stream_1").cursor_field == OID_1
    assert merged.level == "global"


def test_chunk_merge_is_commutative_and_idempotent_in_any_order() -> None:
    chunks = [("pending", None, "100"), ("succeed", "100", "200"), ("failed", "200", "300"),
              ("pending", "300", None)]
    progress = [("succeed", None, "100"), ("pending", "100", "200"), ("succeed", "200", "300"),
                ("pending", "300", None)]
    replay = [("pending", None, "100"), ("pending", "100", "200"), ("failed", "200", "300"),
              ("pending", "300", None)]
    updates = [State("stream", "v1", [full_load("orders", c)]) for c in (chunks, progress, replay)]
    results = set()
    for order in itertools.permutations(updates):
        merged = State()
        for update in [*order, *order]:  # every update applied twice: replays change nothing
            merged = merge_state(merged, update)
        results.add(json.dumps(merged.to_dict()))
    assert len(results) == 1
    final = json.loads(results.pop())["streams"][0]["stream_state"]["chunks"]
    assert final == [{"status": "succeed", "min": None, "max": "100"},
                     {"status": "succeed", "min": "100", "max": "200"},
                     {"status": "succeed", "min": "200", "max": "300"},
                     {"status": "pending", "min": "300", "max": None}]


def test_chunk_merge_keeps_the_plans_order() -> None:
    """A chunk's index names it (files, commits); MongoDB's type brackets are not in text order."""
    plan = [Chunk("succeed", ["10", "1"], ["10", "9"]), Chunk("pending", ["2", "a"], ["2", "z"]),
            Chunk("pending", ["7", "0"], None)]
    done = [Chunk("succeed", c.min, c.max) for c in plan]
    merged = merge_chunks(plan, done)
    assert [(c.status, c.min) for c in merged] == [("succeed", ["10", "1"]), ("succeed", ["2", "a"]),
                                                   ("succeed", ["7", "0"])]
    extra = merge_chunks([Chunk("succeed", "10", "100")], [Chunk("succeed", "-5", "9")])
    assert [c.min for c in extra] == ["10", "-5"]


def test_full_load_with_new_position_replaces_old_chunks() -> None:
    old = State("global", "v1", [full_load("orders", [("succeed", None, "5")], cursor="0/1")])
    new = State("stream", "v1", [full_load("orders", [("pending", None, None)], cursor="0/2")])
    merged = merge_state(old, new)
    assert merged.to_dict()["streams"][0]["stream_state"] == {
        "cursor_field": "0/2", "chunks": [{"status": "pending", "min": None, "max": None}]}


def test_stale_full_load_after_finish_is_ignored_in_any_order() -> None:
    partial = State("stream", "v1", [full_load("orders", [("pending", None, None)], cursor="0/9")])
    done = State("stream", "v1", [StreamState("cdc", "orders", "public", "0/9")])
    expected = {"sync_type": "cdc", "stream_name": "orders", "stream_namespace": "public",
                "stream_state": {"cursor_field": "0/9"}}
    assert merge_state(merge_state(State(), partial), done).to_dict()["streams"] == [expected]
    assert merge_state(merge_state(State(), done), partial).to_dict()["streams"] == [expected]


def test_finish_full_load_moves_to_next_sync_type_when_all_chunks_succeeded() -> None:
    stream = full_load("orders", [("succeed", None, "7"), ("succeed", "7", None)], lsn="0/AA")
    done = finish_full_load_if_done(stream, "cdc")
    assert done.to_dict() == {"sync_type": "cdc", "stream_name": "orders", "stream_namespace": "public",
                              "stream_state": {"cursor_field": "0/16B3748", "lsn": "0/AA"}}
    assert stream.sync_type == "full-load" and len(stream.chunks) == 2  # input untouched
    refreshed = finish_full_load_if_done(stream, "full-load")
    assert refreshed.sync_type == "full-load" and refreshed.chunks is None
    unfinished = full_load("orders", [("succeed", None, "7"), ("failed", "7", None)])
    assert finish_full_load_if_done(unfinished, "incremental") is unfinished
    empty_table = full_load("empty", [])
    assert finish_full_load_if_done(empty_table, "incremental").sync_type == "incremental"
    with pytest.raises(ValueError):
        finish_full_load_if_done(stream, "full_refresh")


TRICKY_BOUNDS = [
    ("succeed", None, "9007199254740993"),  # 2^53 + 1: a float would round it
    ("succeed", "9007199254740993", "-170141183460469231731687303715884105728"),
    ("failed", "Ärger 日本 \U0001F600 \"quoted\" \\ back", "ß"),
    ("pending", ["2024-01-01 00:00:00.000001+00", "550e8400-e29b-41d4-a716-446655440000"], [None, "x"]),
    ("pending", "(4294967295,0)", "ObjectId(66ffcf79d9249bef96de3611)"),
]


def test_tricky_bounds_survive_save_and_load_byte_exactly(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    state = State("global", "v1", [full_load("t", TRICKY_BOUNDS, cursor={"lsn": "0/1", "n": 2 ** 70})])
    FileStateStore(path).save(state)
    first_bytes = path.read_bytes()
    loaded = load_state(path)
    assert loaded.to_dict() == state.to_dict()
    assert loaded.streams[0].chunks[1].max == "-170141183460469231731687303715884105728"
    assert loaded.streams[0].cursor_field["n"] == 2 ** 70
    FileStateStore(path).save(loaded)
    assert path.read_bytes() == first_bytes
    assert "日本" in first_bytes.decode("utf-8")  # readable, not \\u-escaped


def test_missing_file_is_empty_state_and_empty_object_too(tmp_path: Path) -> None:
    assert load_state(tmp_path / "nope.json").to_dict() == {"level": "global", "version": "v1", "streams": []}
    (tmp_path / "empty_obj.json").write_text("{}")
    assert load_state(tmp_path / "empty_obj.json").streams == []


def test_missing_version_is_migrated_to_v1(tmp_path: Path) -> None:
    path = tmp_path / "old.json"
    path.write_text(json.dumps({"level": "global", "streams": SEED_RECEIVED["streams"]}))
    assert load_state(path).to_dict() == SEED_RECEIVED


@pytest.mark.parametrize("content, expected", [
    ("", "is empty"),
    ("{\"level\": \"global\",\n \"streams\": [}", "not valid JSON: Expecting value at line 2 column 14"),
    ("[1, 2]", "must contain a JSON object, found an array"),
    (json.dumps({"level": "global", "version": "v1", "streams": [
        {"sync_type": "full-load", "stream_name": "s", "stream_namespace": None,
         "stream_state": {"chunks": [{"status": "succeed", "min": 5, "max": None}]}}]}),
     "field 'streams[0].stream_state.chunks[0].min': 5 is not of type 'null' or 'string' or 'array'"),
    (json.dumps({**SEED_RECEIVED, "level": "stream"}), "field 'streams'"),
    (json.dumps({**SEED_RECEIVED, "version": "v7"}), "field 'version': expected 'v1', found 'v7'"),
    (json.dumps({"level": "global", "version": "v1", "streams": [{"stream_name": "x"}]}),
     "missing required field 'streams[0].sync_type'"),
])
def test_bad_state_file_is_a_one_line_state_error_and_stays_untouched(
        tmp_path: Path, content: str, expected: str) -> None:
    path = tmp_path / "state.json"
    path.write_text(content)
    before = (path.read_bytes(), path.stat().st_mtime_ns)
    store = FileStateStore(path)
    with pytest.raises(StateError) as info:
        store.merge_and_save(parse_state(SEED_STREAM_1))
    message = info.value.message
    assert expected in message and str(path) in message and "\n" not in message
    assert (path.read_bytes(), path.stat().st_mtime_ns) == before


def test_crash_during_save_leaves_original_file_intact(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "state.json"
    store = FileStateStore(path)
    store.save(parse_state(SEED_RECEIVED))
    original = path.read_bytes()

    def crash(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", crash)
    with pytest.raises(Exception, match="cannot write state file .*No space left"):
        store.merge_and_save(parse_state(SEED_STREAM_3_DONE))
    monkeypatch.undo()
    assert path.read_bytes() == original
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.json"]  # no temp file left behind


def test_save_refuses_an_invalid_state(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    store = FileStateStore(path)
    store.save(parse_state(SEED_RECEIVED))
    original = path.read_bytes()
    bad = State("global", "v1", [full_load("t", [("succeed", 1, None)])])  # integer bound
    with pytest.raises(StateError, match="chunks\\[0\\].min"):
        store.save(bad)
    assert path.read_bytes() == original


def test_merge_and_save_accumulates_and_keeps_file_mode(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    path.write_bytes(state_to_json(parse_state(SEED_RECEIVED)))
    os.chmod(path, 0o640)
    store = FileStateStore(path)
    returned = store.merge_and_save(parse_state(SEED_STREAM_3_CHUNKS))
    on_disk = json.loads(path.read_text())
    assert on_disk == returned.to_dict()
    assert [s["stream_name"] for s in on_disk["streams"]] == ["stream_1", "stream_2", "stream_3"]
    assert on_disk["streams"][2]["stream_state"]["chunks"][1]["status"] == "failed"
    assert path.stat().st_mode & 0o777 == 0o640
    assert FileStateStore(path).load().to_dict() == on_disk


def test_upsert_and_find() -> None:
    state = parse_state(SEED_RECEIVED)
    state.upsert(StreamState("cdc", "stream_1", "otter_db", "0/5"))
    state.upsert(StreamState("cdc", "stream_9", None, "0/6"))
    assert [(s.stream_name, s.sync_type) for s in state.streams] == [
        ("stream_1", "cdc"), ("stream_2", "incremental"), ("stream_9", "cdc")]
    assert state.find(None, "stream_9").cursor_field == "0/6"
    assert state.find("otter_db", "stream_9") is None


def test_a_state_continues_a_load_only_where_the_destination_holds_it() -> None:
    from olake_cli.core.resync import is_resync_marker, lost_load, marker_replacing

    def entry(sync_type: str, chunks: list[str] | None = None, **extra) -> StreamState:
        listed = None if chunks is None else [Chunk(s, str(i), str(i + 1)) for i, s in enumerate(chunks)]
        return stream_state(sync_type, "t", "ns", "0/1", listed, **extra)

    drift = {"n": {"from": {"type": ["integer"]}, "to": {"type": ["number"]}}}
    cdc = entry("cdc", load_id="L1", sync_mode="cdc", columns=["id", "n"], schema_drift=drift, op_seq=3)
    opened = entry("full-load", ["pending"], load_id="L1")
    resumed, done = entry("full-load", ["succeed", "pending"], load_id="L1"), entry("full-load", load_id="L1")
    marker = marker_replacing(cdc)
    assert is_resync_marker(marker.to_dict())  # the catalog keys of the load it replaces, nothing else
    assert marker.to_dict()["stream_state"] == {"cursor_field": None, "chunks": [], "sync_mode": "cdc",
                                                "columns": ["id", "n"], "schema_drift": drift}
    assert marker.sync_type == "full-load" and marker.cursor_field is None and marker.chunks == []
    assert not any(is_resync_marker(s.to_dict()) for s in (cdc, opened, resumed, done))
    for progressed in (cdc, entry("incremental", load_id="L1"), resumed):  # nothing, or only a marker, holds it
        assert "holds no data of its load" in lost_load(progressed, None)
        assert "marked the stream to load anew" in lost_load(progressed, marker.to_dict())
        assert lost_load(progressed, opened.to_dict()) is None
    for fresh in (opened, done, marker, entry("cdc")):  # a load not begun, a finished copy, no load id
        assert lost_load(fresh, None) is None
