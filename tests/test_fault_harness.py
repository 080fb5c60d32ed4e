"""The standing fault harness: SIGKILL the reader, the writer or both at seeded random moments,
resume from the state file each time, and check that the destination equals the source.

Paths: ``read | write`` and ``sync``, each to Parquet and to Iceberg (embedded catalog); ``sync`` to
Parquet in a bucket of moto's S3 server (the tasks write the chunk objects, the driver PUTs the
manifest: kills between the objects and the manifest, at the manifest, and in change commits); ``sync``
to PostgreSQL, whose tasks pass the source's binary COPY data through (kills in the middle of a
chunk's COPY, ``postgres-copy-block``, and after a chunk's commit in its task). A ``cdc`` stream goes
through full loads and change capture while the source keeps changing. The
schedule runs in rounds: kills aimed at a full load (a random moment after one of its state writes,
while the next chunk's tasks run; a named step of a chunk's destination commit; the state write), then
kills aimed at change capture (a random time within a change run; a named step of a change batch's
commit; the state write), then ``olake state reset`` so the next round's load replaces the stream's
contents. Named steps are the crash points of ``core/faults.py``, after a random number of passes, the
least-hit step of the phase first; a step reached in a Spark task stops its worker there and the
harness SIGKILLs the whole run at that moment (tests/support/kills.py). Each run aims at the least-hit
phase it can reach. After the schedule, clean runs catch up and the current table (Parquet: newest
version per key, deletes applied, read through the manifest in a bucket, where no object may be left
that no manifest lists; Iceberg: the table's live rows; PostgreSQL: the target table) must equal the
source table value by value. Each path prints the kills survived per phase and per fault, the runs,
the rows lost and the physical duplicates; ``schedule.log`` and one stderr log per run stay in the
test's tmp folder.

    bash scripts/test.sh tests/test_fault_harness.py -s            # the short schedule (the suite's)
    OLAKE_TEST_LONG=1 OLAKE_FAULT_SEED=7 bash scripts/test.sh -m fault_harness -s

The short schedule runs three paths (``read | write`` into Parquet, ``sync`` into Iceberg and into
PostgreSQL) with one round each: each load phase and each change phase once, at least 6 kills.
``OLAKE_TEST_ALL_PATHS=1`` runs every path with that schedule; ``OLAKE_TEST_LONG=1`` runs every path
with 60 kills, and adds ``read | write`` into the bucket (tests/support/matrix.py). The bucket's own
kills are also in tests/test_object_storage.py. The seed is printed, so a failure can be replayed.
"""

from __future__ import annotations

import itertools
import json
import os
import random
import signal
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from collections.abc import Callable

import psycopg
import pyarrow as pa
import pytest

from tests.support.cdc import discover_catalog, make_accounts
from tests.support.cli import olake_env, run_olake, write_json
from tests.support.current_view import iceberg_rows
from tests.support.kills import kill_run, start_run, wait_for_state_write, wait_run
from tests.support.matrix import LONG, cases
from tests.support.object_store import create_bucket, parquet_config, parquet_rows, unlisted_objects
from tests.support.pg_compare import assert_same_rows, columns_of
from tests.support.verify import assert_table_matches, latest_versions, read_parquet

pytestmark = pytest.mark.fault_harness

# per round: kills aimed at one full load, then at change capture (the short schedule: each change phase once)
LOAD_KILLS, CHANGE_KILLS = 2, (5 if LONG else 3)
# (kills, kills per round aimed at the full load); the short schedule: one round, each phase once
KILLS = (60, LOAD_KILLS) if LONG else (6, 3)
SEED = int(os.environ.get("OLAKE_FAULT_SEED", "20261124"))
ROWS = 6_000
LOAD_PHASES = ("full load", "chunk commit", "state write")
CHANGE_PHASES = ("change capture", "destination commit", "state write")
_buckets = itertools.count()


@dataclass(frozen=True)
class Current:
    """What a destination holds once the schedule's catch-up runs are done."""

    ids: set
    duplicates: int
    stored: str  # what the duplicates are counted among
    assert_equal: Callable[[str, dict], None]  # (source dsn, the stream's schema): fails unless equal


@dataclass(frozen=True)
class Destination:
    """One destination under test: where it writes, its commit steps, and how to read its current table."""

    config: Callable[[Any, Path], dict]  # (place, root folder)
    load_steps: tuple[str, ...]  # crash points of a full-load chunk's commit, tried in this order
    change_steps: tuple[str, ...]  # crash points of a change batch's commit
    current: Callable[[Any, Path], Current]
    place: Callable[[Any], Any] = lambda request: None  # what it writes into, from the test's fixtures
    task_steps: frozenset[str] = frozenset()  # steps reached inside Spark tasks
    chunking: str = "ctid"  # the source's chunk_strategy


def _compare_arrow(table: pa.Table) -> Callable[[str, dict], None]:
    def compare(dsn: str, schema: dict) -> None:
        with psycopg.connect(dsn) as conn:
            assert_table_matches(conn, "public", "acct", schema, table.select(list(schema["properties"])))
    return compare


def _change_rows_current(data: pa.Table) -> Current:
    """Newest version per key (deletes applied); duplicates are rows with a repeated (key, op id)."""
    pairs = Counter(zip(data.column("id").to_pylist(), data.column("_olake_op_id").to_pylist()))
    duplicates = sum(n - 1 for n in pairs.values() if n > 1)
    current = latest_versions(data, ["id"])
    return Current(set(current.column("id").to_pylist()), duplicates, f"of {data.num_rows} stored rows",
                   _compare_arrow(current))


def _parquet_current(place: None, root: Path) -> Current:
    return _change_rows_current(read_parquet(str(root / "public" / "acct")))


def _iceberg_current(place: None, root: Path) -> Current:
    """The table's live rows; duplicates are live rows sharing a key."""
    data = iceberg_rows(root, "public", "acct")
    ids = data.column("id").to_pylist()
    return Current(set(ids), len(ids) - len(set(ids)), f"of {data.num_rows} live rows", _compare_arrow(data))


def _bucket(request) -> tuple[Any, str]:
    server = request.getfixturevalue("moto_server")
    return server, create_bucket(server, f"harness-{os.getpid()}-{next(_buckets)}")


def _s3_current(place: tuple[Any, str], root: Path) -> Current:
    """Read as a reader of the bucket does (the manifest's live files); no object may be left that no
    manifest lists."""
    server, bucket = place
    found = _change_rows_current(parquet_rows(server, f"{bucket}/lake", "public", "acct"))

    def compare(dsn: str, schema: dict) -> None:
        found.assert_equal(dsn, schema)
        assert unlisted_objects(server, bucket, "lake") == [], "objects no manifest lists were left"
    return Current(found.ids, found.duplicates, found.stored, compare)


def _target(request) -> tuple[Any, str]:
    return request.getfixturevalue("pg_target"), request.getfixturevalue("target_db")


def _pg_current(place: tuple[Any, str], root: Path) -> Current:
    """The target table (its primary key admits no duplicate), compared as PostgreSQL's own text."""
    target = place[0].dsn(place[1])
    with psycopg.connect(target) as conn:
        ids = [row[0] for row in conn.execute("SELECT id FROM public.acct")]
    # the pass-through's condition: exactly the source's columns (no _olake_* ones), of built-in types
    assert columns_of(target, "public", "acct") == ["id", "balance", "note"]

    def compare(dsn: str, schema: dict) -> None:
        assert_same_rows(dsn, ("public", "acct"), target, ("public", "acct"), list(schema["properties"]))
    return Current(set(ids), len(ids) - len(set(ids)), f"of {len(ids)} target rows", compare)


DESTINATIONS = {
    "parquet": Destination(lambda place, root: {"type": "parquet", "path": str(root), "rows_per_file": 700},
                           ("staged", "manifest-written", "renamed", "swapped"),
                           ("staged", "manifest-written", "renamed"), _parquet_current),
    "iceberg": Destination(lambda place, root: {"type": "iceberg", "path": str(root), "rows_per_file": 700},
                           ("iceberg-files-written", "iceberg-committed"),
                           ("iceberg-files-written", "iceberg-committed"), _iceberg_current),
    # staged: the data objects are in the bucket, the manifest (the commit point) not yet PUT
    "parquet-s3": Destination(lambda place, root: parquet_config(*place, "lake", rows_per_file=700),
                              ("staged", "manifest-written"), ("staged", "manifest-written"), _s3_current,
                              place=_bucket),
    # sync's tasks COPY each chunk's binary data from the source straight into the target table. Key
    # ranges: a load resumed in a new snapshot over ctid ranges can meet a row a committed chunk already
    # holds (updated since, so moved to the table's last pages), which this destination cannot load yet
    # (tests/test_pg_destination_kills.py, the resumed ctid load)
    "postgres": Destination(lambda place, root: place[0].destination_config(place[1]),
                            ("postgres-copy-block", "postgres-chunk-committed"),
                            ("postgres-before-commit", "postgres-committed"), _pg_current, place=_target,
                            task_steps=frozenset({"postgres-copy-block", "postgres-chunk-committed"}),
                            chunking="primary_key"),
}
# (destination, path)
PATHS = cases([("iceberg", "pipe"), ("iceberg", "sync"), ("parquet", "pipe"), ("parquet", "sync"),
               ("parquet-s3", "sync"), ("postgres", "sync")] + [("parquet-s3", "pipe")] * LONG,
              [("iceberg", "sync"), ("parquet", "pipe"), ("postgres", "sync")])


@dataclass
class Tally:
    """What one path's schedule did (and where the current round stands)."""

    kills: int = 0
    runs: int = 0
    loads: int = 1
    round_load: int = 0
    round_change: int = 0
    change_seconds: float = 2.0  # how long a change capture run lasts, as last seen
    phases: Counter = field(default_factory=Counter)
    kinds: Counter = field(default_factory=Counter)

    def record(self, fault: tuple, killed: bool, pending: int | None, pending_after: int | None,
               seconds: float) -> None:
        """Count one run: the phase its kill landed in, and how long its kind of run lasts."""
        if pending is None and pending_after is None and (not killed or fault[0] == "step"):
            self.change_seconds = seconds  # a whole change capture run, or one up to a commit in it
        if not killed:
            return
        phase = _landed(fault, pending_after is not None)
        self.kills += 1
        self.phases[phase] += 1
        self.kinds[fault[1] if fault[0] == "step" else f"{fault[0]}{list(fault[2])}"] += 1
        if pending_after is not None:
            self.round_load += 1
        else:
            self.round_change += 1


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


def _run(path: str, files: tuple[str, str, str, str], fault: tuple | None, dest: Destination,
         log: Path) -> list[int]:
    """One run with one fault (or none); the exit codes of its processes."""
    env = dict(olake_env(), OLAKE_CDC_CHECKPOINT_EVERY="200")
    in_task = bool(fault) and fault[0] == "step" and fault[1] in dest.task_steps
    if fault and fault[0] == "step":
        env.update(OLAKE_TEST_CRASH_AT=fault[1], OLAKE_TEST_CRASH_AFTER=str(fault[2]))
        if in_task:  # the task's worker stops there; wait_run kills the whole run at that moment
            env.update(OLAKE_TEST_CRASH_SIGNAL="STOP")
    procs = start_run(path, files, env, log)
    if fault and fault[0] in ("timer", "load-timer"):
        kind, delay, victims = fault
        if kind == "load-timer":  # count from the state file's next write: the load's next chunk is running
            wait_for_state_write(files[3], procs)
        deadline = time.monotonic() + delay
        while time.monotonic() < deadline and any(p.poll() is None for p in procs):
            time.sleep(0.02)
        kill_run([procs[index] for index in victims if index < len(procs) and procs[index].poll() is None])
    return wait_run(procs, stop_at_crash_point=in_task)


def _pending_chunks(state: str) -> int | None:
    """Chunks of the stream's full load not yet done (None: no full load under way), from the state file."""
    streams = json.loads(Path(state).read_text())["streams"] if os.path.exists(state) else []
    entry = next((s for s in streams if s["stream_name"] == "acct"), None)  # a kill leaves a whole, valid file
    if entry is None:
        return 0  # a load starts; its chunks are not planned yet
    if entry["sync_type"] != "full-load":
        return None
    return sum(c["status"] != "succeed" for c in entry["stream_state"].get("chunks") or [])


def _least_hit(phases: tuple[str, ...], tally: Tally, rng: random.Random) -> str:
    return min(phases, key=lambda p: (tally.phases[p], rng.random()))


def _least_hit_step(steps: tuple[str, ...], tally: Tally) -> str:
    """The step that has had the fewest kills, the first listed among equals."""
    return min(steps, key=lambda s: tally.kinds[s])


def _fault(rng: random.Random, path: str, dest: Destination, pending: int | None, tally: Tally,
           load_kills: int) -> tuple:
    """A fault aimed at the least-hit phase of this round's part: the full load, or change capture.

    Once a round's full load has had its kills, a run that starts in it is aimed past it: at the n-th
    commit or state write after its remaining chunks, so the load completes and the kill lands in
    change capture of the same run.
    """
    if pending is not None and tally.round_load < load_kills:
        phase, skip = _least_hit(LOAD_PHASES, tally, rng), 0
    else:
        phase = _least_hit(CHANGE_PHASES if pending is None else CHANGE_PHASES[1:], tally, rng)
        skip = pending or 0
    if phase == "state write":
        return ("step", "state-saved", skip + rng.randint(0, 2))
    if phase == "chunk commit":
        step = _least_hit_step(dest.load_steps, tally)
        return ("step", step, 0 if step == "swapped" else rng.randint(0, 2))  # a load swaps once, at its end
    if phase == "destination commit":
        return ("step", _least_hit_step(dest.change_steps, tally), skip + rng.randint(0, 2))
    victims = [(0,), (1,), (0, 1)][rng.randrange(3)] if path == "pipe" else (0,)
    if phase == "full load":
        return ("load-timer", rng.uniform(0.0, 1.5), victims)
    return ("timer", rng.uniform(0.5, 0.95) * tally.change_seconds, victims)


def _landed(fault: tuple, loading_after: bool) -> str:
    """The phase a kill landed in, from the fault and whether the stream's load was still unfinished."""
    if fault[0] == "step":
        return "state write" if fault[1] == "state-saved" else (
            "chunk commit" if loading_after else "destination commit")
    return "full load" if loading_after else "change capture"


def _schedule(rng: random.Random, path: str, dest: Destination, dsn: str, files: tuple[str, str, str, str],
              folder: Path, kills: tuple[int, int]) -> Tally:
    """Runs with one fault each, the source changing between them, until ``kills[0]`` kills have landed
    (``kills[1]`` of each round aimed at its full load)."""
    state = files[3]
    tally, next_id = Tally(), [ROWS + 1]
    while tally.kills < kills[0] and tally.runs < kills[0] * 4:
        pending = _pending_chunks(state)
        if pending is None and tally.round_change >= CHANGE_KILLS:  # a new full load replaces the stream
            assert run_olake("state", "reset", state, "--stream", "public.acct").returncode == 0
            pending, tally.loads, tally.round_load, tally.round_change = 0, tally.loads + 1, 0, 0
        fault = _fault(rng, path, dest, pending, tally, kills[1])
        tally.runs += 1
        started = time.monotonic()
        codes = _run(path, files, fault, dest, folder / f"run{tally.runs:03d}.log")
        pending_after, seconds = _pending_chunks(state), time.monotonic() - started
        tally.record(fault, -signal.SIGKILL in codes, pending, pending_after, seconds)
        with open(folder / "schedule.log", "a") as schedule:  # one line a run, for replaying a failure
            schedule.write(f"run {tally.runs}: chunks pending {pending}, fault {fault}, exit {codes}, "
                           f"{seconds:.1f}s, chunks pending after {pending_after}\n")
        _change_source(dsn, rng, next_id)
    return tally


@pytest.mark.parametrize("dest_name, path", PATHS, ids=[f"{path}-{dest}" for dest, path in PATHS])
def test_kills_at_random_points_lose_nothing(pg_cluster, pg_db, tmp_path, request, dest_name, path):
    dest = DESTINATIONS[dest_name]
    rng = random.Random(f"{SEED}-{dest_name}-{path}")
    label = f"{dest_name} {path}"
    print(f"\nfault harness: seed {SEED}, {label}, schedule {'long' if LONG else 'short'}")
    dsn = pg_cluster.dsn(pg_db)
    make_accounts(dsn, "acct", ROWS)
    slot = f"harness_{dest_name.replace('-', '_')}_{path}"
    src = write_json(tmp_path / "src.json", pg_cluster.source_config(
        pg_db, replication_slot=slot, publication=f"{slot}_pub", create_slot_and_publication=True,
        chunk_rows=1_500, max_parallel=1, chunk_strategy=dest.chunking))
    place = dest.place(request)
    dst = write_json(tmp_path / "dst.json", dest.config(place, tmp_path / "out"))
    catalog = discover_catalog(src, tmp_path / "cat.json", {"acct": "cdc"}, only={"acct"})
    files = (src, dst, str(tmp_path / "cat.json"), str(tmp_path / "state.json"))
    tally = _schedule(rng, path, dest, dsn, files, tmp_path, KILLS)
    for _ in range(2):  # catch up without faults: the last changes, then nothing left
        log = tmp_path / "catch-up.log"
        codes = _run(path, files, None, dest, log)
        assert codes == [0] * len(codes), log.read_text()[-3000:]
    schema = next(s for s in catalog["streams"] if s["name"] == "acct")["json_schema"]
    current = dest.current(place, tmp_path / "out")
    with psycopg.connect(dsn) as conn:
        source_ids = {row[0] for row in conn.execute("SELECT id FROM acct")}
    lost = len(source_ids - current.ids)
    print(f"fault harness [{label}]: {tally.kills} kills survived in {tally.runs} runs and {tally.loads} "
          f"full loads, by phase {dict(tally.phases)}, by fault {dict(tally.kinds)}; rows lost: {lost}; "
          f"physical duplicates: {current.duplicates} ({current.stored}); seed {SEED}")
    assert tally.kills >= KILLS[0], f"only {tally.kills} kills landed in {tally.runs} runs"
    assert lost == 0
    current.assert_equal(dsn, schema)
    with psycopg.connect(dsn, autocommit=True) as conn:  # the slot would keep the cluster's WAL for good
        conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
