"""``olake state show`` and ``olake state reset`` on real state files, through the real command."""

from __future__ import annotations

import json

from tests.support.cli import messages, run_olake

STATE = {"level": "global", "version": "v1", "streams": [
    {"sync_type": "full-load", "stream_name": "orders", "stream_namespace": "public",
     "stream_state": {"cursor_field": "0/16B3748", "load_id": "abc",
                      "chunks": [{"status": "succeed", "min": None, "max": "5"},
                                 {"status": "pending", "min": "5", "max": None}]}},
    {"sync_type": "cdc", "stream_name": "users", "stream_namespace": "public",
     "stream_state": {"cursor_field": "0/1700000", "op_seq": 0}}]}


def test_show_prints_a_table_on_stderr_and_the_state_message_with_json(tmp_path):
    path = tmp_path / "st.json"
    path.write_text(json.dumps(STATE))
    shown = run_olake("state", "show", str(path))
    assert shown.returncode == 0 and shown.stdout == b""
    lines = shown.stderr.decode().splitlines()
    assert lines[0].split() == ["stream", "sync", "type", "position", "chunks", "done", "load", "phase"]
    assert lines[1].split() == ["public.orders", "full-load", "0/16B3748", "1/2", "abc", "FULL_LOAD"]
    assert lines[2].split() == ["public.users", "cdc", "0/1700000", "-", "-", "SYNC"]
    as_json = run_olake("state", "show", str(path), "--json")
    assert messages(as_json.stdout) == [{"type": "STATE", "state": STATE}]


def test_reset_forgets_a_stream_atomically_and_refuses_an_unknown_one(tmp_path):
    path = tmp_path / "st.json"
    path.write_text(json.dumps(STATE))
    before = path.read_bytes()
    bad = run_olake("state", "reset", str(path), "--stream", "public.nope")
    assert bad.returncode != 0 and b"has no stream 'public.nope'" in bad.stderr
    assert path.read_bytes() == before
    good = run_olake("state", "reset", str(path), "--stream", "public.orders")
    assert good.returncode == 0, good.stderr
    assert [s["stream_name"] for s in json.loads(path.read_text())["streams"]] == ["users"]
