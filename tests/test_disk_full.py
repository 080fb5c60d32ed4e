"""The destination's disk fills up in the middle of a run (a real, size-limited tmpfs mount).

The run must fail with one line naming the path and the OS error, the state file must name only
what was committed before, the rows of that commit must stay readable, and a rerun after space
returns must finish with every row exactly once.
"""

from __future__ import annotations

import json
import os
import subprocess
import uuid

import orjson
import pyarrow.dataset as ds
import pytest

from tests.support.cli import messages, run_olake, with_stream_ends, write_json

SCHEMA = {"type": "object", "properties": {
    "id": {"type": "integer", "x-olake-type": "int64"},
    "blob": {"type": ["null", "string"], "x-olake-type": "string"}}}
FIRST, SECOND = 2_000, 40_000


@pytest.fixture()
def small_disk(tmp_path):
    mount = tmp_path / "disk"
    mount.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(mount)],
                      capture_output=True).returncode != 0:
        pytest.skip("mounting a size-limited tmpfs needs root (CI runs as root)")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def _state(cursor: str) -> bytes:
    state = {"level": "global", "version": "v1", "streams": [
        {"sync_type": "incremental", "stream_name": "big", "stream_namespace": "n",
         "stream_state": {"cursor_field": cursor}}]}
    return orjson.dumps({"type": "STATE", "state": state}) + b"\n"


def _records(first: int, count: int) -> bytes:
    return b"".join(orjson.dumps({"type": "RECORD", "record": {
        "stream": "big", "namespace": "n", "emitted_at": 1,
        "data": {"id": i, "blob": uuid.UUID(int=i * 7919 + 1).hex * 4}}}) + b"\n" for i in range(first, first + count))


def test_disk_full_mid_run_fails_cleanly_and_the_rerun_completes(small_disk, tmp_path):
    stream = {"name": "big", "namespace": "n", "json_schema": SCHEMA, "supported_sync_modes": ["incremental"],
              "sync_mode": "incremental", "cursor_field": ["id"], "source_defined_primary_key": [["id"]]}
    stdin = (orjson.dumps({"type": "CATALOG", "catalog": {"streams": [stream]}}) + b"\n"
             + _records(0, FIRST) + _state("1") + _records(FIRST, SECOND) + _state("2"))
    state = tmp_path / "state.json"
    config = write_json(tmp_path / "dst.json", {"type": "parquet", "path": str(small_disk / "lake"),
                                                "compression": "none", "rows_per_file": 5_000})
    failed = run_olake("write", "--config", config, "--state", str(state), stdin=stdin)
    stderr = failed.stderr.decode()
    errors = [line for line in stderr.splitlines() if line.startswith("olake: error")]
    assert failed.returncode != 0 and len(errors) == 1, stderr[-2000:]
    assert "No space left on device" in errors[0] and str(small_disk) in errors[0], errors
    assert "Traceback" not in stderr
    assert [m["type"] for m in messages(failed.stdout)] == ["STATE", "TRACE"]
    assert json.loads(state.read_text())["streams"][0]["stream_state"]["cursor_field"] == "1"
    folder = str(small_disk / "lake" / "n" / "big")
    assert ds.dataset(folder).count_rows() == FIRST  # the first commit, whole and readable

    subprocess.run(["mount", "-o", "remount,size=64m", str(small_disk)], check=True)
    rerun = run_olake("write", "--config", config, "--state", str(state), stdin=with_stream_ends(stdin))
    assert rerun.returncode == 0, rerun.stderr.decode()[-2000:]
    ids = ds.dataset(folder).to_table(columns=["id"]).column("id").to_pylist()
    assert sorted(ids) == list(range(FIRST + SECOND))  # every row exactly once
    assert json.loads(state.read_text())["streams"][0]["stream_state"]["cursor_field"] == "2"
    leftovers = [n for _, _, names in os.walk(small_disk) for n in names if n.startswith(("_tmp-", "_spill-"))]
    assert not leftovers, leftovers  # nothing half-written stays behind
