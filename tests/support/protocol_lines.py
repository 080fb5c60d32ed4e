"""Protocol lines as ``olake read`` sends them for a two-column stream (a CATALOG, a STATE opening a
load, records, a STATE per chunk), and ``olake write`` runs of them, optionally SIGKILLed at a commit
step (OLAKE_TEST_CRASH_AT, core/faults.py): what the Parquet commit tests feed a destination, local or
in a bucket.
"""

from __future__ import annotations

import json
import subprocess

from tests.support.cli import olake_cmd, olake_env, with_stream_ends

COLUMNS = {"id": {"type": ["integer", "null"], "x-olake-type": "int32"},
           "v": {"type": ["string", "null"], "x-olake-type": "string"}}


def catalog(name="t", namespace="public", mode="full_refresh", columns=None) -> dict:
    """A CATALOG message of one stream."""
    return {"type": "CATALOG", "catalog": {"streams": [{
        "name": name, "namespace": namespace, "sync_mode": mode, "supported_sync_modes": ["full_refresh", "cdc"],
        "json_schema": {"type": "object", "properties": columns or COLUMNS}}]}}


def state(load_id, statuses, name="t", namespace="public", sync_type="full-load", cursor=None, **extra) -> dict:
    """A STATE message of one stream in load ``load_id`` (``statuses``: its chunks', or None: all done)."""
    inner = {"cursor_field": cursor, "load_id": load_id, **extra}
    if statuses is not None:
        inner["chunks"] = [{"status": s, "min": str(i), "max": str(i + 1)} for i, s in enumerate(statuses)]
    return {"type": "STATE", "state": {"level": "stream", "version": "v1", "streams": [{
        "sync_type": sync_type, "stream_name": name, "stream_namespace": namespace, "stream_state": inner}]}}


def record(i, tag, name="t", namespace="public", **meta) -> dict:
    """A RECORD with id ``i`` and value ``<tag>-<i>``."""
    return {"type": "RECORD", "record": {"stream": name, "namespace": namespace, "emitted_at": 0,
                                         "data": {"id": i, "v": f"{tag}-{i}", **meta}}}


def full_load(load_id: str, chunks: list[range], done: int = 0) -> list[dict]:
    """What a reader sends for a full load whose first ``done`` chunks are already done."""
    statuses = ["succeed"] * done + ["pending"] * (len(chunks) - done)
    lines = [catalog(), state(load_id, statuses)]
    for index in range(done, len(chunks)):
        lines += [record(i, load_id) for i in chunks[index]]
        statuses[index] = "succeed"
        lines.append(state(load_id, None if all(s == "succeed" for s in statuses) else list(statuses)))
    return lines


def write(dst: str, lines: list[dict], state_file=None, crash_at=None, crash_after=0, catalog_file=None,
          ended: bool = True):
    """``olake write`` of ``lines`` (ended as ``read`` ends its output, unless not ``ended``)."""
    args = ["write", "--config", dst] + (["--state", str(state_file)] if state_file else [])
    args += ["--catalog", catalog_file] if catalog_file else []
    env = olake_env()
    if crash_at:
        env.update(OLAKE_TEST_CRASH_AT=crash_at, OLAKE_TEST_CRASH_AFTER=str(crash_after))
    stdin = b"".join(json.dumps(m).encode() + b"\n" for m in lines)
    stdin = with_stream_ends(stdin) if ended else stdin
    return subprocess.run(olake_cmd(*args), input=stdin, capture_output=True, env=env, timeout=120)


def rows(load_id: str, ids) -> list[tuple]:
    """The (id, v) rows a load ``load_id`` of ``ids`` holds, sorted."""
    return sorted((i, f"{load_id}-{i}") for i in ids)


CHUNKS_1 = [range(0, 40), range(40, 80)]
CHUNKS_2 = [range(0, 50), range(50, 90), range(90, 130)]
