"""DynamoDB INIT_SYNC killed mid-scan and resumed from its segments' positions, then Streams, in the
fault harness's style; and a killed INIT_SYNC resumed after its position left the safe zone.

The standing harness (test_fault_harness.py) drives a PostgreSQL source; DynamoDB has its own short
schedule here, per path (``sync`` into Parquet; ``read | write`` into Iceberg with ``OLAKE_TEST_LONG=1``,
as tests/test_e2e_dynamodb.py kills that path's INIT_SYNC at a state write by default): a kill at a named crash
point of a commit (``core/faults.py``) after a seeded number of passes while the scan's chunks are
pending, then SIGKILL at a seeded random moment after the next run's first state write (in a pipe, of
the reader, the writer or both), with items put, updated and deleted after each. A clean run then
finishes INIT_SYNC (resuming inside its segments) and reads the stream, and the current table must equal
the DynamoDB table value by value (nothing lost) with no key stored twice at one operation id (nothing
doubled). ``OLAKE_FAULT_SEED`` replays a schedule; each run's stderr stays in the test's tmp folder.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest

from olake_cli.pipeline.progress import REPLAYED
from tests.support.cli import olake_cmd, olake_env, write_json
from tests.support.current_view import iceberg_rows
from tests.support.dynamo import (NAMESPACE, ItemWriter, age_position, assert_equals_table, discovered_catalog,
                                  dynamo_source, first_schema, parquet_current, seed_accounts)
from tests.support.kills import wait_for_state_write
from tests.support.matrix import LONG
from tests.support.verify import read_parquet

SEED = int(os.environ.get("OLAKE_FAULT_SEED", "20261124"))
ITEMS = 240
CASES = {  # path, destination config, crash points of its commits
    "sync-parquet": ("sync", lambda root: {"type": "parquet", "path": str(root)},
                     ("staged", "manifest-written", "renamed", "state-saved")),
    "pipe-iceberg": ("pipe", lambda root: {"type": "iceberg", "path": str(root)},
                     ("iceberg-files-written", "iceberg-committed", "state-saved")),
}


def _start(path: str, files: tuple[str, str, str, str], env: dict, log: Path) -> list[subprocess.Popen]:
    """``olake sync`` or ``olake read | olake write``, each process in its own group (stderr to ``log``)."""
    src, dst, catalog, state = files
    with open(log, "ab") as err:
        quiet = dict(env=env, stderr=err, start_new_session=True)
        if path == "sync":
            return [subprocess.Popen(olake_cmd("sync", "--source", src, "--destination", dst, "--catalog", catalog,
                                               "--state", state), stdout=subprocess.DEVNULL, **quiet)]
        reader = subprocess.Popen(olake_cmd("read", "--config", src, "--catalog", catalog, "--state", state),
                                  stdout=subprocess.PIPE, **quiet)
        writer = subprocess.Popen(olake_cmd("write", "--config", dst, "--state", state), stdin=reader.stdout,
                                  stdout=subprocess.DEVNULL, **quiet)
    reader.stdout.close()
    return [reader, writer]


def _run(path: str, files: tuple[str, str, str, str], fault: tuple | None, log: Path) -> list[int]:
    """One run with one fault (or none): ``("step", crash point, passes)`` or ``("timer", seconds after the
    state file's next write, victims)``; the exit codes of its processes."""
    env = olake_env()
    if fault and fault[0] == "step":
        env.update(OLAKE_TEST_CRASH_AT=fault[1], OLAKE_TEST_CRASH_AFTER=str(fault[2]))
    procs = _start(path, files, env, log)
    if fault and fault[0] == "timer":
        wait_for_state_write(files[3], procs)
        deadline = time.monotonic() + fault[1]
        while time.monotonic() < deadline and any(p.poll() is None for p in procs):
            time.sleep(0.02)
        for index in fault[2]:
            if index < len(procs) and procs[index].poll() is None:
                os.killpg(procs[index].pid, signal.SIGKILL)  # the process and its Spark children
    codes = [p.wait(timeout=600) for p in procs]
    for p in procs:  # a killed driver's JVM and workers must not outlive it
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return codes


def _load(state: Path) -> dict | None:
    """The stream's state in the state file (None before the first write)."""
    return json.loads(state.read_text())["streams"][0] if state.exists() else None


def _pending(state: Path) -> int | None:
    """Chunks of the stream's INIT_SYNC not done yet (None: no INIT_SYNC under way)."""
    entry = _load(state)
    if entry is None:
        return 0
    if entry["sync_type"] != "full-load":
        return None
    return sum(c["status"] != "succeed" for c in entry["stream_state"]["chunks"])


def _doubled(rows: list[dict]) -> int:
    """Rows stored twice: the same key at the same operation id (a chunk or a change applied twice)."""
    pairs = Counter((row["pk"], str(row["sk"]), row["_olake_op_id"]) for row in rows)
    return sum(n - 1 for n in pairs.values() if n > 1)


@pytest.mark.parametrize("case", sorted(CASES) if LONG else ["sync-parquet"])
def test_killed_init_sync_resumes_from_its_segments_then_streams(moto_server, dynamo_table, tmp_path, case):
    path, dest_config, steps = CASES[case]
    rng = random.Random(f"{SEED}-{case}")
    seed_accounts(moto_server, dynamo_table, ITEMS)
    src = dynamo_source(tmp_path, moto_server, dynamo_table, checkpoint_items=20, page_items=20)  # 12+ chunks
    catalog = discovered_catalog(tmp_path, src, "cdc")
    root, state = tmp_path / "out", tmp_path / "state.json"
    files = (src, write_json(tmp_path / "dst.json", dest_config(root)), str(catalog), str(state))
    writer = ItemWriter(moto_server, dynamo_table, ITEMS, seed=rng.randrange(1000))
    faults = [("step", rng.choice(steps), rng.randint(2, 4)),  # the state file holds a finished chunk by then
              ("timer", rng.uniform(0.0, 1.5), rng.choice([(0,), (1,), (0, 1)]) if path == "pipe" else (0,))]
    print(f"\ndynamodb kills [{case}]: seed {SEED}, faults {faults}")
    for number, fault in enumerate(faults, 1):
        pending = _pending(state)
        codes = _run(path, files, fault, tmp_path / f"run{number}.log")
        print(f"run {number}: chunks pending {pending} -> {_pending(state)}, exit {codes}")
        if number == 1:  # the crash point lands in the scan: committed chunks, others pending, inside a segment
            assert -signal.SIGKILL in codes and _pending(state), (tmp_path / "run1.log").read_text()[-3000:]
            chunks = _load(state)["stream_state"]["chunks"]
            assert any(c["status"] == "succeed" for c in chunks)
            assert any(c["status"] != "succeed" and c["min"][2] is not None for c in chunks), chunks
        for _ in range(15):
            writer.change()

    pending = _pending(state)  # the timer's kill may land after the scan, in Streams
    assert _run(path, files, None, tmp_path / "rest.log") == [0] * (1 if path == "sync" else 2)
    rest = (tmp_path / "rest.log").read_text()  # the rest of INIT_SYNC, then Streams: the changes made meanwhile
    assert ("resuming full load" in rest) == bool(pending) and "INIT_SYNC: parallel scan" not in rest, rest[-3000:]
    assert _load(state)["sync_type"] == "cdc" and writer.ops == 30

    schema = first_schema(catalog)
    if path == "sync":
        stored = read_parquet(str(root / NAMESPACE / dynamo_table)).to_pylist()
        current = parquet_current(root, dynamo_table)
    else:
        stored = current = iceberg_rows(root, NAMESPACE, dynamo_table).to_pylist()
        assert len({(row["pk"], str(row["sk"])) for row in current}) == len(current)  # one live row per key
    assert _doubled(stored) == 0
    assert_equals_table(current, moto_server, dynamo_table, schema)


def test_a_killed_init_sync_resumed_beyond_the_safe_zone_runs_init_sync_again(moto_server, dynamo_table, tmp_path):
    """The start position a killed INIT_SYNC keeps ages; resumed past ``safe_zone_hours`` (moto never trims
    records: the stored time is moved back, in the state file and the destination's record) the scan's rows
    and the position cannot be trusted together,
    so the table runs INIT_SYNC anew, saying why. The run's report counts the Streams records made
    before that INIT_SYNC as replays of it."""
    items = 60
    seed_accounts(moto_server, dynamo_table, items)
    src = dynamo_source(tmp_path, moto_server, dynamo_table, checkpoint_items=10, page_items=10)
    catalog = discovered_catalog(tmp_path, src, "cdc")
    root, state = tmp_path / "lake", tmp_path / "state.json"
    files = (src, write_json(tmp_path / "lake.json", {"type": "parquet", "path": str(root)}), str(catalog), str(state))
    assert -signal.SIGKILL in _run("sync", files, ("step", "state-saved", 2), tmp_path / "killed.log")
    assert _pending(state)
    stream_state = age_position(state, root, dynamo_table, 21)

    assert _run("sync", files, None, tmp_path / "again.log") == [0]
    log = (tmp_path / "again.log").read_text()
    label = f"{NAMESPACE}.{dynamo_table}"
    lost = next(line for line in log.splitlines() if "change position lost" in line)
    assert lost.startswith(f"olake: {label}: change position lost: the stored position is 22.") and lost.endswith(
        " hours old, beyond safe_zone_hours = 20 (DynamoDB Streams keep records for 24 hours); re-syncing with a "
        "fresh full load (on_position_lost = resync)"), lost
    assert "resuming full load" not in log
    after = _load(state)
    assert after["sync_type"] == "cdc" and after["stream_state"]["load_id"] != stream_state["load_id"]
    summary = next(line for line in log.splitlines() if "summary:" in line)
    assert summary.startswith(f"olake: summary: {label}: {items} rows loaded (") and (
        f"changes: {items} inserted, 0 updated, 0 deleted, of which {items} {REPLAYED};") in summary, summary
    assert _doubled(read_parquet(str(root / NAMESPACE / dynamo_table)).to_pylist()) == 0
    assert_equals_table(parquet_current(root, dynamo_table), moto_server, dynamo_table, first_schema(catalog))
