"""Exactly once into PostgreSQL across SIGKILL: ``write`` or ``sync`` killed at seeded moments while a
writer keeps running ``UPDATE t SET v = v + 1`` in many small transactions; after the reruns every
row's ``v`` equals the source's, so no transaction was applied twice or lost.

Faults: a named step of the destination's commit (``postgres-before-commit``, ``postgres-committed``,
a Spark task's ``postgres-chunk-committed``, the state file's ``state-saved``), after a random number
of passes, or a random moment of the run. The process group is killed (the driver with its Spark JVM
and workers). The short schedule (the suite's) makes 3 kills through ``read | write`` (``sync`` into
PostgreSQL is killed at the same steps by tests/test_fault_harness.py); the long one 15 per path, through
both (``OLAKE_TEST_ALL_PATHS=1``: both paths, short schedule; tests/support/matrix.py):

    OLAKE_TEST_LONG=1 OLAKE_PG_KILL_SEED=7 bash scripts/test.sh tests/test_pg_destination_kills.py -s

A load resumed after a kill reads its remaining chunks in a new snapshot: over ctid ranges, a row
updated since an earlier chunk committed has moved to the table's last pages, so the last chunk brings
a key the target already holds; it replaces that key's row (the resumed ctid load below, by ``sync`` and
by ``read | write``).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import time
from pathlib import Path

import psycopg
import pytest

from tests.support.writer_thread import WriterThread
from tests.support.cdc import discover_catalog
from tests.support.cli import olake_cmd, olake_env, read_into_write, run_olake, write_json
from tests.support.matrix import LONG, cases
from tests.support.pg_compare import assert_same_rows, table_texts
from tests.support.pgcluster import create_database

KILLS = 15 if LONG else 3
SEED = int(os.environ.get("OLAKE_PG_KILL_SEED", "20261201"))
ROWS = 3000
STEPS = {"pipe": ("postgres-before-commit", "postgres-committed", "state-saved"),
         "sync": ("postgres-before-commit", "postgres-committed", "postgres-chunk-committed", "state-saved")}


class Incrementer(WriterThread):
    """Runs ``UPDATE t SET v = v + 1`` on a few random rows per transaction until stopped."""

    def __init__(self, dsn: str, seed: int) -> None:
        super().__init__(seed)
        self.dsn = dsn

    def write(self) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            while not self.stop_event.is_set():
                first = self.rng.randint(1, ROWS)
                conn.execute("UPDATE t SET v = v + 1 WHERE id BETWEEN %s AND %s", (first, first + 4))
                self.transactions += 1
                time.sleep(0.01)


def _run(path: str, args: dict, fault: tuple | None, log: Path) -> bool:
    """One run of ``read | write`` or ``sync`` with at most one fault; whether it was killed."""
    env = olake_env()
    if fault and fault[0] == "step":
        env.update(OLAKE_TEST_CRASH_AT=fault[1], OLAKE_TEST_CRASH_AFTER=str(fault[2]))
    with open(log, "ab") as err:
        common = dict(env=env, stderr=err, start_new_session=True)
        if path == "sync":
            procs = [subprocess.Popen(olake_cmd("sync", "--source", args["src"], "--destination", args["dst"],
                                                "--catalog", args["cat"], "--state", args["state"]),
                                      stdout=subprocess.DEVNULL, **common)]
        else:
            reader = subprocess.Popen(olake_cmd("read", "--config", args["src"], "--catalog", args["cat"],
                                                "--state", args["state"]), stdout=subprocess.PIPE, **common)
            writer = subprocess.Popen(olake_cmd("write", "--config", args["dst"], "--state", args["state"]),
                                      stdin=reader.stdout, stdout=subprocess.DEVNULL, **common)
            reader.stdout.close()
            procs = [writer, reader]
    deadline = time.monotonic() + (fault[1] if fault and fault[0] == "time" else 600)
    while procs[0].poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    killed = procs[0].poll() is None
    if killed:
        os.killpg(procs[0].pid, signal.SIGKILL)
    for proc in procs:
        proc.wait(timeout=120)
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # a killed driver's JVM and workers must not outlive it
        except ProcessLookupError:
            pass
    return killed or procs[0].returncode in (-signal.SIGKILL, 137)


def _fault(path: str, rng: random.Random, loading: bool) -> tuple:
    """A named commit step after 0-3 passes, or a random moment of the run."""
    steps = [s for s in STEPS[path] if loading or s != "postgres-chunk-committed"]
    if rng.random() < 0.35:
        return ("time", rng.uniform(3.0, 12.0))
    return ("step", rng.choice(steps), rng.randint(0, 3))


@pytest.mark.parametrize("path", cases(["pipe", "sync"], ["pipe"]))
def test_sigkill_at_any_moment_applies_every_transaction_exactly_once(pg_cluster, pg_db, pg_target, target_db,
                                                                       tmp_path, path):
    rng = random.Random(f"{SEED}-{path}")
    source = pg_cluster.dsn(pg_db)
    with psycopg.connect(source, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY, v bigint NOT NULL, pad text)")
        conn.execute(f"INSERT INTO t SELECT g, 0, repeat('p', 50) FROM generate_series(1, {ROWS}) g")
    slot = f"kill_{path}"
    args = {"src": write_json(tmp_path / "src.json", pg_cluster.source_config(
                pg_db, replication_slot=slot, publication=f"{slot}_pub", create_slot_and_publication=True,
                chunk_rows=500, chunk_strategy="primary_key")),
            "dst": write_json(tmp_path / "dst.json", pg_target.destination_config(target_db)),
            "cat": str(tmp_path / "cat.json"), "state": str(tmp_path / "state.json")}
    discover_catalog(args["src"], tmp_path / "cat.json", {"t": "cdc"})
    writer = Incrementer(source, rng.randint(0, 10**6))
    writer.start()
    kills, runs, log = [], 0, tmp_path / "runs.log"
    try:
        while len(kills) < KILLS and runs < KILLS * 4:
            fault = _fault(path, rng, loading=runs == 0 or not Path(args["state"]).exists())
            runs += 1
            if _run(path, args, fault, log):
                kills.append(fault)
    finally:
        writer.stop()
    assert not _run(path, args, None, log), "a clean run completes"
    assert not _run(path, args, None, log), "a second clean run completes (nothing left to apply)"
    print(f"pg kills [{path}]: seed {SEED}, {len(kills)} kills in {runs} runs ({kills}), "
          f"{writer.transactions} source transactions")
    assert len(kills) == KILLS, f"only {len(kills)} kills landed in {runs} runs"
    assert_same_rows(source, ("public", "t"), pg_target.dsn(target_db), ("public", "t"), ["id", "v", "pad"])
    with psycopg.connect(source, autocommit=True) as conn:
        conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))


@pytest.fixture(scope="module", params=["sync", "pipe"])
def resumed_ctid_load(request, pg_cluster, pg_target, tmp_path_factory) -> dict:
    """``sync`` (the tasks pass the source's binary COPY data through) or ``read | write`` of a 2,000-row
    table in ctid chunks, SIGKILLed at its second state write (chunk 0 committed in the target); 20 rows of
    chunk 0 are then updated at the source, their new versions landing on the table's last pages (the last
    chunk's open-ended range); the rerun resumes the load in a new snapshot. Run once per path."""
    mode = request.param
    tmp = tmp_path_factory.mktemp(f"ctid-resume-{mode}")
    source_db, target_db = f"ctid_src_{mode}_{os.getpid()}", f"ctid_dst_{mode}_{os.getpid()}"
    create_database(pg_cluster, source_db)
    create_database(pg_target, target_db)
    source = pg_cluster.dsn(source_db)
    with psycopg.connect(source, autocommit=True) as conn:
        conn.execute("CREATE TABLE r (id int PRIMARY KEY, v int NOT NULL, pad text)")
        conn.execute("INSERT INTO r SELECT g, 0, repeat('p', 100) FROM generate_series(1, 2000) g")
    src = write_json(tmp / "src.json", pg_cluster.source_config(source_db, chunk_rows=500, max_parallel=1))
    dst = write_json(tmp / "dst.json", pg_target.destination_config(target_db))
    discover_catalog(src, tmp / "cat.json", {})
    state = tmp / "state.json"

    def run(crash: dict[str, str]) -> tuple[int, str]:
        if mode == "sync":
            done = run_olake("sync", "--source", src, "--destination", dst, "--catalog", str(tmp / "cat.json"),
                             "--state", str(state), env=crash)
            return done.returncode, done.stderr.decode()
        with pytest.MonkeyPatch.context() as patch:
            for name, value in crash.items():
                patch.setenv(name, value)
            piped = read_into_write(["--config", src, "--catalog", str(tmp / "cat.json"), "--state", str(state)],
                                    ["--config", dst, "--state", str(state)])
        return piped.write_code or piped.read_code, piped.write_stderr.decode()

    killed, stderr = run({"OLAKE_TEST_CRASH_AT": "state-saved", "OLAKE_TEST_CRASH_AFTER": "1"})
    assert killed == -9, stderr[-3000:]
    chunks = json.loads(state.read_text())["streams"][0]["stream_state"]["chunks"]
    assert [c["status"] for c in chunks][:2] == ["succeed", "pending"] and chunks[-1]["max"] is None, chunks
    with psycopg.connect(source, autocommit=True) as conn:
        conn.execute("UPDATE r SET v = 1 WHERE id <= 20")
        moved = conn.execute("SELECT min((ctid::text::point)[0]) FROM r WHERE id <= 20").fetchone()[0]
    assert moved >= int(chunks[-1]["min"].strip("()").split(",")[0]), "the updated rows are in the last chunk"
    code, stderr = run({})
    return {"code": code, "stderr": stderr, "source": table_texts(source, "public", "r", ["id", "v", "pad"]),
            "target": table_texts(pg_target.dsn(target_db), "public", "r", ["id", "v", "pad"])}


def test_a_resumed_ctid_load_never_ends_well_with_rows_missing(resumed_ctid_load):
    """The rerun either fails, with one line, or leaves the target equal to the source: it never exits
    0 while rows are missing (the last chunk's COPY meets a key chunk 0 committed; that unique violation
    was taken for another attempt's chunk mark, and the whole chunk was dropped as done)."""
    run = resumed_ctid_load
    missing = sorted(set(run["source"]) - set(run["target"]))
    errors = [line for line in run["stderr"].splitlines() if line.startswith("olake: error")]
    assert run["code"] != 0 or not missing, f"exit 0 with {len(missing)} row(s) missing, e.g. {missing[:3]}"
    assert run["code"] == 0 or (len(errors) == 1 and "public.r" in errors[0]), run["stderr"][-3000:]


def test_a_resumed_ctid_load_converges(resumed_ctid_load):
    """The rerun completes and the target equals the source, the updated rows in their new version: a chunk
    of a load an earlier run began replaces the rows of its keys."""
    run = resumed_ctid_load
    assert run["code"] == 0, run["stderr"][-3000:]
    assert run["target"] == run["source"]
