"""The source conformance suite: the same cases over every source, the counterpart of the destination
conformance suite (tests/test_destination_conformance.py).

A new source passes this suite: add its adapter to tests/support/source_conformance.py (create a table or
collection with rows, change it with every kind of change it has, read its current rows as texts, its
config, where a STATE stands) and its name to ``SOURCES``. Each case runs ``olake sync`` (bounded, and
``--follow`` stopped with SIGTERM) into one cheap destination, Parquet, read back with the documented
current-table query and compared with the source value by value:

- every change kind the source has (PostgreSQL: insert, update, delete, a key-changing update, TRUNCATE;
  MongoDB: insert, update, replace, delete, some in multi-document transactions; DynamoDB: put, put over
  an item, update, delete), read by a bounded run, then by a following one;
- a checkpoint at every safe point: with OLAKE_CDC_CHECKPOINT_EVERY=1 each transaction (PostgreSQL), each
  cluster time (MongoDB) ends in a STATE, DynamoDB's reads each end in one, and the STATEs' positions only
  go forward;
- stopped at any moment: SIGTERM at seeded moments while a writer changes the source, and a restart each
  time; at the end the destination equals the source, no change missing and none written twice; all
  along, a source that keeps its log for olake (a PostgreSQL slot) never lets it go past the lowest
  position the destination has committed;
- a log kept by time (MongoDB's oplog, DynamoDB Streams) has nothing to release: the capture does not
  offer ``ReleasesLog``.
"""

from __future__ import annotations

import random
import signal
import threading
import time

import pytest

from olake_cli.core.follow import ReleasesLog
from olake_cli.core.opid import OpId
from tests.support.follow import stop, wait_until
from tests.support.source_conformance import DynamoAdapter, MongoAdapter, PostgresAdapter, Run, SourceAdapter, Writer

SOURCES = ["postgres", "mongodb", "dynamodb"]
ROWS = 60
STOPS = 3  # SIGTERMs while the writer runs
SEED = 11


@pytest.fixture(params=SOURCES)
def source(request) -> SourceAdapter:
    """A fresh table or collection of each source, on the session's server."""
    if request.param == "postgres":
        adapter = PostgresAdapter(request.getfixturevalue("pg_cluster"), request.getfixturevalue("pg_db"))
    elif request.param == "mongodb":
        adapter = MongoAdapter(request.getfixturevalue("mongo_server").uri, request.getfixturevalue("mongo_db"))
    else:
        adapter = DynamoAdapter(request.getfixturevalue("moto_server"), request.getfixturevalue("dynamo_table"))
    yield adapter
    adapter.cleanup()


def _stopped(run: Run, proc) -> None:
    """SIGTERM ends the following run within 10 s, with exit 0 and its last line saying so."""
    took = stop(proc, signal.SIGTERM)
    text = run.log.read_text()
    assert proc.returncode == 0 and took < 10, text[-3000:]
    assert "stopped by SIGTERM" in text.splitlines()[-1] and "Traceback" not in text, text[-3000:]


def assert_checkpoints_at_safe_points(adapter: SourceAdapter, states: list[dict], ops: list[OpId],
                                      after: OpId | None) -> OpId:
    """The positions of ``states`` (a run's STATEs, in order) only go forward, and each transaction of the
    changes ``ops`` above ``after`` ends in one: a STATE at or after its last change and before the next
    transaction's first. Returns the last position."""
    positions = [p for p in map(adapter.position, states) if p is not None]
    assert positions and positions == sorted(positions), f"a STATE's position went back: {positions}"
    groups: dict[object, list[OpId]] = {}
    for op in sorted(set(ops)):
        if after is None or op > after:
            groups.setdefault(adapter.transaction_of(op), []).append(op)
    spans = sorted((group[0], group[-1]) for group in groups.values())
    assert spans, "the run read changes"
    for (_, last), (following, _) in zip(spans, [*spans[1:], (None, None)]):
        assert any(last <= p and (following is None or p < following) for p in positions), \
            f"no STATE after the transaction ending at {last} and before the next at {following}: {positions}"
    return positions[-1]


class ReleaseWatch(threading.Thread):
    """While a following run goes on, samples how far the source let its log go, then (after it) the
    position the destination has committed: the first never passes the second (``passed`` lists the
    samples where it did; ``released`` every position the log was let go to)."""

    def __init__(self, run: Run) -> None:
        super().__init__(daemon=True)
        self.run_, self.stop_event, self.passed = run, threading.Event(), []
        self.released: set[int] = set()

    def run(self) -> None:
        adapter = self.run_.adapter
        while not self.stop_event.wait(0.05):
            released = adapter.released()
            committed = self.run_.committed()  # read after: at least as new as what was released
            position = None if committed is None else adapter.position(committed)
            if released is None or position is None:
                continue
            self.released.add(released)
            if released > position.commit:
                self.passed.append((released, position))

    def stop(self) -> None:
        """Stop sampling."""
        self.stop_event.set()
        self.join(timeout=30)


def test_every_change_kind_following_then_bounded_with_a_checkpoint_at_every_safe_point(source, tmp_path,
                                                                                        monkeypatch):
    monkeypatch.setenv("OLAKE_CDC_CHECKPOINT_EVERY", "1")
    source.create(ROWS)
    run = Run(source, tmp_path)
    run.discover()
    proc, out = run.follow()  # the load, then following
    source.every_kind(seed=1)
    wait_until(run.converged, "the destination equals the source", run=proc)
    _stopped(run, proc)
    assert source.lake_rows(run.root) == source.rows()
    after = assert_checkpoints_at_safe_points(source, run.states(out), source.change_ops(run.root), None)

    source.every_kind(seed=2)
    states = run.bounded()
    assert source.lake_rows(run.root) == source.rows()
    assert_checkpoints_at_safe_points(source, states, source.change_ops(run.root), after)


def test_stopped_at_any_moment_and_restarted_loses_and_doubles_nothing(source, tmp_path):
    source.create(ROWS)
    run = Run(source, tmp_path)
    run.discover()
    rng, writer, watch = random.Random(SEED), Writer(source, seed=SEED), ReleaseWatch(run)
    writer.start()
    watch.start()
    try:
        proc, _ = run.follow()  # the load, with the writer under way, then following
        for _ in range(STOPS):
            time.sleep(rng.uniform(0.0, 2.0))
            _stopped(run, proc)
            proc, _ = run.follow()
        time.sleep(0.5)
    finally:
        writer.stop()
    assert writer.transactions > 50
    wait_until(run.converged, "the destination equals the source", run=proc)
    _stopped(run, proc)
    watch.stop()
    assert source.lake_rows(run.root) == source.rows()
    ops = source.change_ops(run.root)
    assert len(ops) == len(set(ops)), "a change written twice"
    assert not watch.passed, f"the log went past what the destination committed: {watch.passed[:5]}"
    assert len(watch.released) > STOPS or not source.keeps_log, "the log was let go as commits were made"


def test_only_a_log_kept_for_olake_is_released(source, tmp_path):
    """A PostgreSQL slot is let go as the destination commits (sampled in the case above); MongoDB's
    oplog and DynamoDB Streams keep changes by time, so their captures have nothing to release."""
    run = Run(source, tmp_path)
    source.create(1)
    run.discover()
    assert isinstance(run.capture(), ReleasesLog) == source.keeps_log
