"""The standing fault harness: SIGKILL the reader, the writer or both at seeded random moments,
resume from the state file each time, and check that the destination equals the source.

For ``read | write`` and for ``sync`` to Parquet, a ``cdc`` stream goes through its full load and
then change capture while a writer keeps changing the source. Kills land at the destination's
named commit steps (``core/faults.py``: staged, manifest-written, renamed, swapped, state-saved,
each after a random number of passes) and at random times in the reader, the writer or both. After
the schedule, clean runs catch up and the current view (newest version per key, deletes applied)
must equal the source table value by value; the harness prints the kills survived, the rows lost
and the physical duplicates.

    bash scripts/test.sh -m fault_harness                          # only the harness, short schedule
    OLAKE_FAULT_SCHEDULE=long OLAKE_FAULT_SEED=7 bash scripts/test.sh -m fault_harness -s

The short schedule (the suite's) makes at least 12 kills per path; the long one 60. The seed is
printed, so a failure can be replayed.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import time
from collections import Counter
from dataclasses import dataclass, field

import psycopg
import pyarrow.compute as pc
import pytest

from tests.support.cdc import discover_catalog, make_accounts
from tests.support.cli import olake_cmd, olake_env, write_json
from tests.support.verify import assert_table_matches, latest_versions, read_parquet

pytestmark = pytest.mark.fault_harness

LONG = os.environ.get("OLAKE_FAULT_SCHEDULE", "short") == "long"
KILLS = 60 if LONG else 12
SEED = int(os.environ.get("OLAKE_FAULT_SEED", "20261124"))
COMMIT_STEPS = ("staged", "manifest-written", "renamed", "swapped", "state-saved")
ROWS = 6_000


@dataclass
class Tally:
    """What one path's schedule did."""

    kills: int = 0
    runs: int = 0
    kinds: Counter = field(default_factory=Counter)


def _change_source(dsn: str, rng: random.Random, next_id: list[int]) -> None:
    """A few transactions of inserts, updates and deletes."""
    with psycopg.connect(dsn, autocommit=False) as conn:
        for _ in range(rng.randint(1, 4)):
            first = next_id[0]
            count = rng.randint(50, 400)
            conn.execute("INSERT INTO acct SELECT g, g / 10.0, 'n ' || g FROM generate_series(%s::int, %s::int) g",
                         (first, first + count - 1))
            next_id[0] += count
            low = rng.randint(1, next_id[0])
            conn.execute("UPDATE acct SET balance = balance + 1, note = note || '+' WHERE id BETWEEN %s AND %s",
                         (low, low + rng.randint(10, 300)))
            low = rng.randint(1, next_id[0])
            conn.execute("DELETE FROM acct WHERE id BETWEEN %s AND %s", (low, low + rng.randint(1, 60)))
            conn.commit()


def _run(path: str, src: str, dst: str, cat: str, state: str, kill: tuple | None) -> bool:
    """One run with one fault (or none); True if a process died by SIGKILL."""
    env = dict(olake_env(), OLAKE_CDC_CHECKPOINT_EVERY="200")
    if kill and kill[0] == "step":
        env.update(OLAKE_TEST_CRASH_AT=kill[1], OLAKE_TEST_CRASH_AFTER=str(kill[2]))
    if path == "sync":
        procs = [subprocess.Popen(olake_cmd("sync", "--source", src, "--destination", dst, "--catalog", cat,
                                            "--state", state), env=env, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL, start_new_session=True)]
    else:
        reader = subprocess.Popen(olake_cmd("read", "--config", src, "--catalog", cat, "--state", state), env=env,
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, start_new_session=True)
        writer = subprocess.Popen(olake_cmd("write", "--config", dst, "--state", state), env=env,
                                  stdin=reader.stdout, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                  start_new_session=True)
        reader.stdout.close()
        procs = [reader, writer]
    if kill and kill[0] == "timer":
        _, delay, victims = kill
        deadline = time.monotonic() + delay
        while time.monotonic() < deadline and any(p.poll() is None for p in procs):
            time.sleep(0.02)
        for index in victims:
            if index < len(procs) and procs[index].poll() is None:
                os.killpg(procs[index].pid, signal.SIGKILL)  # the process and its Spark children
    codes = [p.wait(timeout=600) for p in procs]
    for p in procs:  # a killed driver's JVM and workers must not outlive it
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return -signal.SIGKILL in codes


def _fault(rng: random.Random, path: str) -> tuple:
    if rng.random() < 0.5:
        return ("step", rng.choice(COMMIT_STEPS), rng.randint(0, 3))
    victims = [(0,), (1,), (0, 1)][rng.randrange(3)] if path == "pipe" else (0,)
    return ("timer", rng.uniform(0.3, 4.0), victims)


@pytest.mark.parametrize("path", ["pipe", "sync"])
def test_kills_at_random_points_lose_nothing(pg_cluster, pg_db, tmp_path, path):
    rng = random.Random(f"{SEED}-{path}")
    print(f"\nfault harness: seed {SEED}, path {path}, schedule {'long' if LONG else 'short'}")
    dsn = pg_cluster.dsn(pg_db)
    make_accounts(dsn, "acct", ROWS)
    src = write_json(tmp_path / "src.json", pg_cluster.source_config(
        pg_db, replication_slot=f"harness_{path}", publication=f"harness_{path}_pub",
        create_slot_and_publication=True, chunk_rows=1_500, max_parallel=1))
    dst = write_json(tmp_path / "dst.json", {"type": "parquet", "path": str(tmp_path / "out"), "rows_per_file": 700})
    catalog = discover_catalog(src, tmp_path / "cat.json", {"acct": "cdc"}, only={"acct"})
    cat, state = str(tmp_path / "cat.json"), str(tmp_path / "state.json")
    tally, next_id = Tally(), [ROWS + 1]
    while tally.kills < KILLS and tally.runs < KILLS * 4:
        fault = _fault(rng, path)
        tally.runs += 1
        if _run(path, src, dst, cat, state, fault):
            tally.kills += 1
            tally.kinds[fault[1] if fault[0] == "step" else f"timer{list(fault[2])}"] += 1
        _change_source(dsn, rng, next_id)
        if os.path.exists(state):
            json.loads(open(state).read())  # whatever a kill left is a whole, valid file
    for _ in range(2):  # catch up without faults: the last changes, then nothing left
        assert not _run(path, src, dst, cat, state, None)
    data = read_parquet(str(tmp_path / "out" / "public" / "acct"))
    schema = next(s for s in catalog["streams"] if s["name"] == "acct")["json_schema"]
    current = latest_versions(data, ["id"]).select(list(schema["properties"]))
    with psycopg.connect(dsn) as conn:
        source_ids = {row[0] for row in conn.execute("SELECT id FROM acct")}
        lost = len(source_ids - set(current.column("id").to_pylist()))
        pairs = Counter(zip(data.column("id").to_pylist(), data.column("_olake_op_id").to_pylist()))
        duplicates = sum(n - 1 for n in pairs.values() if n > 1)
        changes = pc.sum(pc.not_equal(data.column("_olake_op"), "r")).as_py() or 0
        print(f"fault harness [{path}]: {tally.kills} kills survived in {tally.runs} runs "
              f"({dict(tally.kinds)}); rows lost: {lost}; physical duplicates: {duplicates} "
              f"(of {data.num_rows} rows, {changes} change rows)")
        assert tally.kills >= KILLS, f"only {tally.kills} kills landed in {tally.runs} runs"
        assert lost == 0
        assert_table_matches(conn, "public", "acct", schema, current)
