"""``olake state show`` and ``olake state reset`` on real state files, through the real command."""

from __future__ import annotations

import json

from tests.support.cli import messages, run_olake
from tests.test_bad_input import assert_one_error

STATE = {"level": "global", "version": "v1", "streams": [
    {"sync_type": "full-load", "stream_name": "orders", "stream_namespace": "public",
     "stream_state": {"cursor_field": "0/16B3748", "load_id": "abc",
                      "chunks": [{"status": "succeed", "min": None, "max": "5"},
                                 {"status": "pending", "min": "5", "max": None}]}},
    {"sync_type": "cdc", "stream_name": "users", "stream_namespace": "public",
     "stream_state": {"cursor_field": "0/1700000", "op_seq": 0}}]}


def test_show_prints_a_table_on_stdout_and_the_state_message_with_json(tmp_path):
    path = tmp_path / "st.json"
    path.write_text(json.dumps(STATE))
    shown = run_olake("state", "show", str(path))  # stdout is a pipe, as in `olake state show st.json | less`
    assert shown.returncode == 0 and shown.stderr == b"", shown.stderr
    lines = shown.stdout.decode().splitlines()
    assert lines[0].split() == ["stream", "sync", "type", "position", "chunks", "done", "load", "phase"]
    assert lines[1].split() == ["public.orders", "full-load", "0/16B3748", "1/2", "abc", "FULL_LOAD"]
    assert lines[2].split() == ["public.users", "cdc", "0/1700000", "-", "-", "SYNC"]
    assert len(lines) == 3
    as_json = run_olake("state", "show", str(path), "--json")
    assert messages(as_json.stdout) == [{"type": "STATE", "state": STATE}]


def test_show_and_reset_of_a_missing_file_fail_with_one_line(tmp_path):
    missing = tmp_path / "nope.json"
    for args in (["show", str(missing)], ["show", str(missing), "--json"],
                 ["reset", str(missing), "--stream", "public.orders"]):
        result = run_olake("state", *args)
        assert_one_error(result, "config_error", f"state file '{missing}' does not exist",
                         f"a run with --state {missing} creates it")
        assert not missing.exists()


def test_reset_marks_a_stream_to_load_anew_atomically_and_refuses_an_unknown_one(tmp_path):
    path = tmp_path / "st.json"
    path.write_text(json.dumps(STATE))
    before = path.read_bytes()
    bad = run_olake("state", "reset", str(path), "--stream", "public.nope")
    assert bad.returncode != 0 and b"has no stream 'public.nope'" in bad.stderr
    assert path.read_bytes() == before
    good = run_olake("state", "reset", str(path), "--stream", "public.orders")
    assert good.returncode == 0, good.stderr
    # the stream is kept as a mark to load anew, which a sync honours over the destination's record
    orders, users = json.loads(path.read_text())["streams"]
    assert users == STATE["streams"][1]
    assert orders == {"sync_type": "full-load", "stream_name": "orders", "stream_namespace": "public",
                      "stream_state": {"cursor_field": None, "chunks": []}}
