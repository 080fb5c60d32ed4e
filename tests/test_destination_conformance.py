"""The destination conformance suite: the same cases, from the same input, over every destination.

A new destination passes this suite before anything else (CONTRIBUTING.md, "Adding a connector"): add it
to ``DESTINATIONS``. Each case feeds ``olake write`` the protocol input ``olake read`` sends (prepared in
tests/support/conformance.py: deterministic, no source, no Spark), then reads the destination's current
contents back as its users read them (Parquet: the documented current-table query; Iceberg: the table's
live rows; PostgreSQL: the table) and compares them with the expected rows value by value:

- a full load in chunks, then every change kind: insert, update, delete, an update that leaves a large
  (TOASTed) value unsent (from the row the destination holds, and from an earlier version in the same
  batch), a key update (a delete of the old key, then the new key's complete row, as the source sends
  it), and a source TRUNCATE followed by an insert; then the same input again changes nothing, and
  ``olake state recover`` reads back the state ``--state`` holds;
- a re-sync marker keeps the contents until the new load, complete, replaces them in one step;
- a column the source widens mid-stream (a CATALOG with the wider type) holds values only the wider
  type holds;
- a run killed inside a commit, and one killed after it and before the state file: after each kill the
  contents are those of the commits made, never part of one, and a rerun converges.
"""

from __future__ import annotations

import pytest

from olake_cli.core.resync import resync_marker
from tests.support.conformance import Destination, body, catalog, change, full_load, state

DESTINATIONS = ["parquet", "iceberg", "postgres", "kafka"]
# a crash point inside each destination's commit, before the step that makes it visible (core/faults.py)
INSIDE_COMMIT = {"parquet": "staged", "iceberg": "iceberg-files-written", "postgres": "postgres-before-commit",
                 "kafka": "kafka-data-sent"}

LOAD = [{i: (f"v{i}", i, body(i)) for i in range(1, 5)}, {i: (f"v{i}", i, body(i)) for i in range(5, 9)}]
CHANGES = [  # one batch of every kind of change (operation ids above the load's position)
    change("c", 32, 1, id=9, v="v9", n=9, body=body(9)),
    change("u", 32, 2, id=1, v="v1 changed", n=1, body=body(1)),
    change("d", 32, 3, id=2),
    change("u", 32, 4, id=3, v="v3 changed", n=3, _olake_toast_unchanged=["body"]),  # body: the destination's
    change("u", 32, 5, id=5, v="v5", n=5, body=body("5 new")),
    change("u", 32, 6, id=5, v="v5 again", n=5, _olake_toast_unchanged=["body"]),  # body: the version before
    change("d", 32, 7, id=4), change("u", 32, 8, id=40, v="v4", n=4, body=body(4)),  # key 4 moved to 40
]
AFTER_CHANGES = {1: ("v1 changed", 1, body(1)), 3: ("v3 changed", 3, body(3)), 5: ("v5 again", 5, body("5 new")),
                 **{i: LOAD[1][i] for i in (6, 7, 8)}, 9: ("v9", 9, body(9)), 40: ("v4", 4, body(4))}
TRUNCATE = [change("c", 48, 1, id=10, v="v10", n=10, body=body(10)), change("t", 48, 2),
            change("c", 48, 3, id=11, v="v11", n=11, body=body(11))]
AFTER_TRUNCATE = {11: ("v11", 11, body(11))}
# the whole input: commits after the load opens, after each chunk, after the changes, after the truncate
EVERYTHING = [catalog(), *full_load("L1", LOAD), *CHANGES, state("L1", None, "0/20"), *TRUNCATE,
              state("L1", None, "0/30")]


@pytest.fixture(params=DESTINATIONS)
def destination(request, tmp_path) -> Destination:
    """A fresh destination of each kind (PostgreSQL: a database of the target cluster)."""
    if request.param == "kafka":
        return Destination("kafka", tmp_path, kafka=(request.getfixturevalue("kafka_broker"),
                                                     request.getfixturevalue("kafka_prefix")))
    if request.param != "postgres":
        return Destination(request.param, tmp_path)
    return Destination("postgres", tmp_path, request.getfixturevalue("pg_target"),
                       request.getfixturevalue("target_db"))


def test_a_load_every_change_kind_and_the_same_input_again(destination):
    destination.write([catalog(), *full_load("L1", LOAD), *CHANGES, state("L1", None, "0/20")])
    assert destination.rows() == AFTER_CHANGES
    destination.write([catalog(), *TRUNCATE, state("L1", None, "0/30")])
    assert destination.rows() == AFTER_TRUNCATE
    saved = destination.saved()
    destination.write(EVERYTHING, state=False)  # all of it again: the destination's own record says what it holds
    assert destination.rows() == AFTER_TRUNCATE, "the same input twice changes nothing"
    assert destination.recovered() == saved


def test_a_resync_marker_keeps_the_contents_until_the_new_load_replaces_them(destination):
    marker = {"type": "STATE", "state": {"level": "stream", "version": "v1", "streams": [
        resync_marker("docs", "public", "cdc", None).to_dict()]}}
    again = [{i + 100: (f"w{i}", i, body(f"w{i}")) for i in chunk} for chunk in LOAD]
    # a load, a marker, then the new load's first chunk, each committed in turn
    destination.write([catalog(), *full_load("L1", LOAD), marker, *full_load("L2", again, upto=1)])
    if destination.kind == "kafka":  # a log: the new load's marker, then its rows as they commit, replace them
        assert destination.rows() == again[0]
    else:
        assert destination.rows() == {**LOAD[0], **LOAD[1]}, "the old contents stay until the new load is complete"
    destination.write([catalog(), *full_load("L2", again, done=1)])
    assert destination.rows() == {**again[0], **again[1]}


def test_a_column_widened_by_the_source(destination):
    destination.write([catalog(), *full_load("L1", LOAD[:1]), catalog("int64"),
                       change("u", 32, 1, id=1, v="wide", n=2**40, body=body(1)),
                       change("c", 32, 2, id=50, v="wider", n=-2**40 - 1, body=body(50)), state("L1", None, "0/20")])
    assert destination.rows() == {**LOAD[0], 1: ("wide", 2**40, body(1)), 50: ("wider", -2**40 - 1, body(50))}


def test_killed_runs_converge_when_run_again(destination):
    """Killed inside the commit of the changes, then (run again from the start) after that commit and
    before the state file, then run again to the end."""
    for step, made in [(INSIDE_COMMIT[destination.kind], {**LOAD[0], **LOAD[1]}), ("state-saved", AFTER_CHANGES)]:
        killed = destination.write(EVERYTHING, crash_at=step, crash_after=3)  # the fourth commit: the changes
        assert killed.returncode == -9, killed.stderr.decode()[-3000:]
        assert destination.rows() == made, f"killed at {step}: a reader sees the commits made, never part of one"
    destination.write(EVERYTHING)  # a reader replays from its state file, or from earlier
    assert destination.rows() == AFTER_TRUNCATE
    assert destination.recovered() == destination.saved()
