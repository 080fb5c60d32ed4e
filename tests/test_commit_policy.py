"""The follow runtime's commit policy (``core.follow.CommitPolicy``), with a fake clock: when a checkpoint is
due at a transaction's end, inside a huge transaction and at an idle moment; and that it is the only place
that decides (no source reads the commit interval)."""

from __future__ import annotations

import pathlib

from olake_cli.core.follow import INSIDE_FACTOR, CommitPolicy


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_transactions_end_is_due_after_enough_changes_or_the_interval():
    clock = Clock()
    policy = CommitPolicy(2.0, every=100, idle_s=10.0, clock=clock)
    assert not policy.at_end(0) and not policy.at_end(99)
    assert policy.at_end(100)
    clock.now = 2.0
    assert policy.at_end(1) and not policy.at_end(0)  # nothing pending: never due at an end
    policy.checkpointed()
    assert not policy.at_end(1)


def test_inside_a_transaction_only_after_many_changes():
    policy = CommitPolicy(0.1, every=100, clock=Clock())
    assert not policy.inside(100 * INSIDE_FACTOR - 1) and policy.inside(100 * INSIDE_FACTOR)


def test_an_idle_moment_commits_pending_changes_on_the_interval_and_moves_a_position_less_often():
    clock = Clock()
    policy = CommitPolicy(2.0, every=100, idle_s=10.0, clock=clock)
    clock.now = 2.0
    assert policy.idle(5, moved=False)
    assert not policy.idle(0, moved=True)  # no changes: the position moves only every idle_s
    clock.now = 10.0
    assert policy.idle(0, moved=True) and not policy.idle(0, moved=False)


def test_the_interval_held_between_bounds():
    assert CommitPolicy(0.2).held_between(1, 10) == 1
    assert CommitPolicy(5).held_between(1, 10) == 5
    assert CommitPolicy(60).held_between(1, 10) == 10


def test_no_source_reads_the_commit_interval():
    sources = pathlib.Path(__file__).resolve().parent.parent / "olake_cli" / "sources"
    readers = [str(p) for p in sources.rglob("*.py") if "commit_interval" in p.read_text()]
    assert readers == []
