"""The follow runtime (start/stop/wait) and its one retry loop, driven by a fake clock: backoff steps, the give-up time shared by
every level that retries (the capture opened again inside a run, the whole run started again), a stop
during a backoff, and a success starting a new series."""

from __future__ import annotations

import threading

import pytest

from olake_cli.core.errors import ConnectionFailed, TransientError
from olake_cli.core.follow import RETRY_GIVE_UP_S, RETRY_MAX_S, Backoff
from olake_cli.pipeline.follow_runtime import FollowRuntime, retry_pause


class FakeTime:
    """A clock that moves only when the code under test sleeps (``sleep`` may set the stop request at a
    chosen moment)."""

    def __init__(self, stop_at: float | None = None) -> None:
        self.now, self.slept, self.stop_at = 1000.0, [], stop_at

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float, stop: threading.Event) -> bool:
        if self.stop_at is not None and self.now + seconds >= self.stop_at:
            self.now = self.stop_at
            stop.set()
            return True
        self.slept.append(seconds)
        self.now += seconds
        return False


def _backoff(fake: FakeTime) -> Backoff:
    return Backoff(clock=fake.clock, sleep=fake.sleep)


def test_delays_double_to_the_most_and_the_series_gives_up_after_ten_minutes():
    fake = FakeTime()
    backoff, stop, lines = _backoff(fake), threading.Event(), []
    with pytest.raises(TransientError):
        while retry_pause(TransientError("down"), backoff, stop, lines.append, "change capture", "trying again"):
            pass
    assert fake.slept[:7] == [1, 2, 4, 8, 16, RETRY_MAX_S, RETRY_MAX_S]
    assert RETRY_GIVE_UP_S <= sum(fake.slept) <= RETRY_GIVE_UP_S + RETRY_MAX_S
    assert len(lines) == len(fake.slept) and lines[0] == ("change capture: down; trying again in 1s "
                                                          "(--follow keeps running)")


def test_a_stop_during_a_backoff_ends_the_waiting_at_once():
    fake = FakeTime(stop_at=1004.0)
    backoff, stop = _backoff(fake), threading.Event()
    tries = 0
    while retry_pause(ConnectionFailed("refused"), backoff, stop, lambda line: None, "the run failed", "again"):
        tries += 1
    assert tries == 2 and fake.now == 1004.0 and stop.is_set()  # slept 1 and 2, stopped inside the 4
    assert not backoff.pause(1.0, stop)  # a stop already made: no more waiting


def test_a_success_starts_a_new_series():
    fake = FakeTime()
    backoff, stop = _backoff(fake), threading.Event()
    for _ in range(12):  # 1+2+4+8+16+30*7 = 241 s of failures
        assert retry_pause(TransientError("x"), backoff, stop, lambda line: None, "a", "b")
    backoff.succeeded()
    fake.slept.clear()
    for _ in range(5):
        assert retry_pause(TransientError("x"), backoff, stop, lambda line: None, "a", "b")
    assert fake.slept == [1, 2, 4, 8, 16]  # and the give-up clock started again: no early end


def test_a_failure_after_a_quiet_minute_starts_a_new_series():
    """A run that worked for a while since its last try (a long load, say) is not near giving up when it
    fails again."""
    fake = FakeTime()
    backoff = _backoff(fake)
    for _ in range(20):
        backoff.failed()
    fake.now += RETRY_GIVE_UP_S  # the last try has run ten minutes without failing
    assert backoff.failed() == 1


def test_the_capture_and_the_whole_run_retry_on_one_give_up_clock():
    """A source that stays down: the capture inside each run retries a few times, then the run fails and
    is started again; both count on the process's one clock, so the process ends after ten minutes, not
    after ten minutes of each."""
    fake = FakeTime()
    backoff, lines, attempts = _backoff(fake), [], []

    def attempt(runtime: FollowRuntime) -> None:
        attempts.append(fake.now)
        follow = runtime.follow(1.0, lambda: None)
        for _ in range(3):  # the change phase opening its capture again
            if not retry_pause(TransientError("source down"), follow.retries, follow.stop, lines.append,
                               "change capture", "trying again"):
                return
        raise TransientError("source down")

    with pytest.raises(TransientError):
        FollowRuntime(attempt, lines.append, backoff=backoff).run()
    assert len(attempts) > 3
    assert RETRY_GIVE_UP_S <= fake.now - 1000.0 <= RETRY_GIVE_UP_S + RETRY_MAX_S, fake.now
    assert any(line.startswith("the run failed: source down; starting it again in") for line in lines)


def test_the_runtime_stops_when_a_stop_comes_during_its_backoff():
    fake = FakeTime(stop_at=1001.5)
    calls = []

    def attempt(runtime: FollowRuntime) -> None:
        calls.append(fake.now)
        raise ConnectionFailed("refused")

    FollowRuntime(attempt, lambda line: None, backoff=_backoff(fake)).run()  # returns: the stop came while it waited
    assert calls == [1000.0, 1001.0]


def test_start_stop_wait_end_a_following_run_at_its_change_phase():
    """A program embedding olake: start() runs the loop on a thread of its own; stop() ends the attempt's
    change phase (its Follow's stop); wait() joins it. A signal is taken as a stop only once the change
    phase runs (take_signal: False before, during loads)."""
    entered, seen = threading.Event(), []

    def attempt(runtime: FollowRuntime) -> None:
        follow = runtime.follow(1.0, lambda: None)
        seen.append(runtime.take_signal())  # loads: a signal interrupts them instead
        follow.stoppable.set()  # the change phase begins
        entered.set()
        follow.stop.wait(30)
        seen.append(follow.stop.is_set() and follow.requested.is_set())

    runtime = FollowRuntime(attempt, lambda line: None)
    runtime.start()
    assert entered.wait(10)
    assert runtime.take_signal()  # the first signal of the change phase: a stop
    assert runtime.wait(10) and seen == [False, True]


def test_wait_raises_what_ended_the_run():
    def attempt(runtime: FollowRuntime) -> None:
        raise ValueError("a permanent failure")

    runtime = FollowRuntime(attempt, lambda line: None)
    runtime.start()
    with pytest.raises(ValueError, match="a permanent failure"):
        runtime.wait(10)
