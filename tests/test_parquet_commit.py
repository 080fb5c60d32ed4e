"""The Parquet destination commits data together with its state (real ``olake write`` runs, real files).

The protocol lines are what a reader sends (CATALOG, a STATE opening a load, records, a STATE per
chunk); the runs are killed at every step of a commit with OLAKE_TEST_CRASH_AT (core/faults.py).
"""

from __future__ import annotations

import json
import os

import duckdb
import pyarrow as pa
import pyarrow.dataset as ds
import pytest

from olake_cli.core.path_names import decode_name, encode_name

from tests.support.cli import messages, run_olake, trace_errors, write_json
from tests.support.protocol_lines import (CHUNKS_1, CHUNKS_2, COLUMNS, catalog, full_load, record, rows, state,
                                          write)


def visible(folder) -> list[tuple]:
    """What a reader of the documented folder sees: (id, v) rows, sorted."""
    if not os.path.exists(folder):
        return []
    table = ds.dataset(str(folder), format="parquet").to_table(columns=["id", "v"])
    return sorted(zip(table.column("id").to_pylist(), table.column("v").to_pylist()))


def hidden_leftovers(stream_parent) -> list[str]:
    """Files or folders besides the live load, its manifest and the symlink."""
    found = []
    for dirpath, _dirnames, filenames in os.walk(stream_parent):
        found += [os.path.join(dirpath, n) for n in filenames if n.startswith(("_", ".")) and
                  not n.endswith(".manifest.json")]
    return found


@pytest.fixture()
def dst(tmp_path) -> str:
    return write_json(tmp_path / "dst.json", {"type": "parquet", "path": str(tmp_path / "out")})


# (step, times the step is let through (opening rolls forward too), the load a reader sees after the kill)
KILLS = [("staged", 3, "L1"), ("manifest-written", 3, "L1"), ("renamed", 4, "L1"), ("swapped", 0, "L2"),
         ("state-saved", 2, "L1")]


@pytest.mark.parametrize("step,after,seen_load", KILLS)
def test_kill_at_each_step_of_a_load_replacement(dst, tmp_path, step, after, seen_load):
    out, state_file = tmp_path / "out" / "public" / "t", tmp_path / "st.json"
    loads = {"L1": rows("L1", range(80)), "L2": rows("L2", range(130))}
    assert write(dst, full_load("L1", CHUNKS_1), state_file).returncode == 0
    assert visible(out) == loads["L1"]
    # load L2 replaces L1; the kill lands in the commit of its last chunk (or the state save before it)
    killed = write(dst, full_load("L2", CHUNKS_2), state_file, crash_at=step, crash_after=after)
    assert killed.returncode == -9, killed.stderr.decode()
    assert visible(out) == loads[seen_load], "a reader must see one whole load, never a mix or nothing"

    # the next run resumes from the state file, as the reader would
    saved = json.loads(state_file.read_text())["streams"][0]["stream_state"]
    done = sum(c["status"] == "succeed" for c in saved.get("chunks") or [])
    assert saved["load_id"] == "L2" and done == 2
    again = write(dst, full_load("L2", CHUNKS_2, done=done), state_file)
    assert again.returncode == 0, again.stderr.decode()
    assert visible(out) == rows("L2", range(130)), "rows lost or duplicated after the resumed run"
    # the replaced load's folder goes at the stream's next commit (a reader may still be in it)
    assert write(dst, [catalog(), state("L2", None)], state_file).returncode == 0
    assert sorted(os.listdir(out.parent)) == [".t%.L2", ".t.manifest.json", "t"]
    assert hidden_leftovers(out.parent) == []


def test_kill_before_the_manifest_of_a_replayed_chunk_never_duplicates(dst, tmp_path):
    """A chunk committed in the manifest but not in the state file is replayed: same names, no copies."""
    out, state_file = tmp_path / "out" / "public" / "t", tmp_path / "st.json"
    killed = write(dst, full_load("L1", CHUNKS_2), state_file, crash_at="manifest-written", crash_after=2)
    assert killed.returncode == -9
    saved = json.loads(state_file.read_text())["streams"][0]["stream_state"]
    assert [c["status"] for c in saved["chunks"]] == ["succeed", "pending", "pending"]
    assert visible(out) == rows("L1", range(50)), "a first load shows the chunks committed so far"
    assert write(dst, full_load("L1", CHUNKS_2, done=1), state_file).returncode == 0
    assert visible(out) == rows("L1", range(130))


def test_rows_no_state_covers_never_become_live(dst, tmp_path):
    out = tmp_path / "out" / "public" / "t"
    lines = full_load("L1", CHUNKS_1)
    uncovered = lines[:-1]  # the reader died before the last chunk's STATE
    result = write(dst, uncovered, ended=False)
    assert result.returncode != 0
    assert b"the reading side stopped early" in result.stderr and b"after the last one are not" in result.stderr
    assert visible(out) == rows("L1", range(40))
    assert write(dst, lines).returncode == 0
    assert visible(out) == rows("L1", range(80))
    assert hidden_leftovers(out.parent) == []


def test_truncate_empties_the_stream_at_the_commit_after_it(dst, tmp_path):
    out, state_file = tmp_path / "out" / "public" / "t", tmp_path / "st.json"
    cdc = [catalog(mode="cdc"), state("L1", ["pending"], sync_mode="cdc")] + [record(i, "L1") for i in range(10)]
    cdc += [state("L1", None, sync_type="cdc", cursor="0/10", sync_mode="cdc")]
    assert write(dst, cdc, state_file).returncode == 0
    changes = [catalog(mode="cdc"), record(3, "c", _olake_op="u", _olake_op_id=[32, 1]),
               {"type": "RECORD", "record": {"stream": "t", "namespace": "public", "emitted_at": 0,
                                             "data": {"_olake_op": "t", "_olake_op_id": [48, 0]}}},
               record(100, "c", _olake_op="c", _olake_op_id=[64, 1]),
               state("L1", None, sync_type="cdc", cursor="0/40", sync_mode="cdc", op_seq=1)]
    killed = write(dst, changes, state_file, crash_at="staged")
    assert killed.returncode == -9
    assert visible(out) == rows("L1", range(10)), "the truncate is not live before its STATE commits"
    assert write(dst, changes, state_file).returncode == 0
    assert visible(out) == [(100, "c-100")], "rows after the truncate stay, rows before it are gone"
    assert write(dst, [catalog(mode="cdc"), state("L1", None, sync_type="cdc", cursor="0/50",
                                                  sync_mode="cdc")], state_file).returncode == 0
    [folder] = [n for n in os.listdir(out.parent) if n.startswith(".t%.")]
    assert folder.startswith(".t%.L1.t") and os.readlink(out) == folder, "the old files are deleted"


def test_recover_returns_the_committed_state_exactly(dst, tmp_path):
    lines = full_load("L1", CHUNKS_2)
    partial = lines[:lines.index(lines[-1]) - len(CHUNKS_2[-1])]  # two chunks of three committed
    assert partial[-1]["type"] == "STATE" and partial[-1]["state"]["streams"][0]["stream_state"]["chunks"]
    assert write(dst, partial).returncode == 0
    cat = write_json(tmp_path / "cat.json", catalog()["catalog"])
    result = run_olake("state", "recover", "--config", dst, "--catalog", cat)
    assert result.returncode == 0, result.stderr.decode()
    [message] = messages(result.stdout)
    assert message["state"]["streams"] == partial[-1]["state"]["streams"]


def test_names_are_encoded_and_cannot_leave_the_folder(dst, tmp_path):
    for name in ["public", "orders", "Mixed Case", "café"]:
        assert encode_name(name) == name
    for name in ["..", ".", "../../x", "a/b", "a\\b", "_hidden", ".x", "50%", "nul\0byte", "tab\t"]:
        encoded = encode_name(name)
        assert "/" not in encoded and "\0" not in encoded and not encoded.startswith((".", "_"))
        assert decode_name(encoded) == name
    lines = [catalog("../../x", ".."), state("L1", ["pending"], "../../x", ".."), record(1, "L1", "../../x", ".."),
             state("L1", None, "../../x", "..")]
    result = write(dst, lines)
    assert result.returncode == 0, result.stderr.decode()
    assert sorted(os.listdir(tmp_path)) == ["dst.json", "out"], "nothing may be written outside the path"
    assert visible(tmp_path / "out" / "%2E." / "%2E.%2F..%2Fx") == [(1, "L1-1")]


def test_destination_path_that_is_a_file_is_a_config_error(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("keep me")
    dst = write_json(tmp_path / "dst.json", {"type": "parquet", "path": str(blocker)})
    cat = write_json(tmp_path / "cat.json", catalog()["catalog"])
    for result in (write(dst, full_load("L1", CHUNKS_1)), run_olake("check", "--config", dst),
                   run_olake("state", "recover", "--config", dst, "--catalog", cat)):
        assert result.returncode != 0
        [error] = trace_errors(result.stdout)
        assert error["trace"]["error"]["failure_type"] == "config_error"
        stderr = result.stderr.decode().strip().splitlines()
        assert len(stderr) == 1 and "is a file, not a folder" in stderr[0], stderr
    assert blocker.read_text() == "keep me"


def test_widened_column_mid_stream(dst, tmp_path):
    out = tmp_path / "out" / "public" / "t"
    wide = {**COLUMNS, "id": {"type": ["integer", "null"], "x-olake-type": "int64"}}
    lines = [catalog(mode="cdc"), state("L1", ["pending"], cursor="0/1", sync_mode="cdc"),  # a load opens
             state("L1", None, sync_type="cdc", cursor="0/1", sync_mode="cdc"), record(1, "a", _olake_op="c", _olake_op_id=[16, 1]),
             catalog(mode="cdc", columns=wide), record(2**40, "b", _olake_op="c", _olake_op_id=[32, 1]),
             state("L1", None, sync_type="cdc", cursor="0/40", sync_mode="cdc")]
    cat = write_json(tmp_path / "cat.json", catalog(mode="cdc")["catalog"])
    result = write(dst, lines, catalog_file=cat)
    assert result.returncode == 0, result.stderr.decode()
    assert b"'id' int32 -> int64" in result.stderr
    types = {ds.dataset(str(out / f)).schema.field("id").type for f in os.listdir(out)}
    assert types == {pa.int32(), pa.int64()}, "older files keep the narrower type"
    wide_schema = ds.dataset(str(out / sorted(os.listdir(out))[-1])).schema
    table = ds.dataset(str(out), schema=wide_schema).to_table()
    assert sorted(table.column("id").to_pylist()) == [1, 2**40]
    union = duckdb.sql(f"SELECT id FROM read_parquet('{out}/*.parquet', union_by_name = true) ORDER BY id")
    assert union.fetchall() == [(1,), (2**40,)]

    narrowed = {**COLUMNS, "id": {"type": ["integer", "null"], "x-olake-type": "int16"}}
    for columns, words in [(narrowed, "'id' int32 -> int16"), ({"id": COLUMNS["id"]}, "column 'v' dropped")]:
        bad = write(dst, [catalog(mode="cdc"), catalog(mode="cdc", columns=columns)], catalog_file=cat)
        assert bad.returncode != 0
        assert words in trace_errors(bad.stdout)[0]["trace"]["error"]["message"]
