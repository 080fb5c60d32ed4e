"""The follow runtime: the one owner of a following run's loop (Supabase etl's ``Pipeline`` with
``start``/``shutdown``/``wait`` is the model).

A :class:`FollowRuntime` holds what lives as long as the run, across the attempts it makes: its stop
request, its retry clock (:class:`~olake_cli.core.follow.Backoff`), its options and the metrics endpoint.
Each attempt (one run from the destination's record: loads, then the change phase) gets a fresh
:class:`~olake_cli.core.follow.Follow` from :meth:`FollowRuntime.follow`, which the change phase, the
commit relay and the discovery watch share, and whose threads it joins as it ends. An attempt that
failed transiently starts again after a backoff, one that discovery ended starts again at once
(``live_discovery.StreamsChanged``), until a stop request, a permanent failure or RETRY_GIVE_UP_S of
transient ones.

:meth:`FollowRuntime.run` runs the loop in the calling thread (the CLI's main thread, which receives
signals: only ``cli/`` maps SIGTERM and SIGINT onto :meth:`FollowRuntime.take_signal`);
:meth:`FollowRuntime.start` runs it in a thread of its own and :meth:`FollowRuntime.wait` joins it (a
program embedding olake, stopping it with :meth:`FollowRuntime.stop`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from olake_cli.core.errors import ConnectionFailed, TransientError
from olake_cli.core.follow import Backoff, Follow
from olake_cli.core.state import State
from olake_cli.pipeline.live_discovery import StreamsChanged

Attempt = Callable[["FollowRuntime"], None]


class FollowRuntime:
    """One following run: ``start()``/``run()``, ``stop()``, ``wait()``."""

    def __init__(self, attempt: Attempt, log: Callable[[str], None], metrics_port: int | None = None,
                 backoff: Backoff | None = None) -> None:
        self.attempt, self.log, self.metrics_port = attempt, log, metrics_port
        self.backoff = backoff or Backoff()
        self.requested = threading.Event()  # stop() was called
        self._current: Follow | None = None  # the attempt under way
        self._in_backoff = False
        self._thread: threading.Thread | None = None
        self._failure: BaseException | None = None

    def follow(self, commit_interval_s: float, committed: Callable[[], State | None]) -> Follow:
        """The :class:`Follow` of the attempt that begins (stopped at once if a stop came already)."""
        follow = Follow(commit_interval_s, committed=committed, metrics_port=self.metrics_port,
                        retries=self.backoff, requested=self.requested)
        self._current = follow
        if self.requested.is_set():
            follow.stop.set()
        return follow

    def run(self) -> None:
        """The loop, in the calling thread, until the run ends (see the module docstring)."""
        from olake_cli.pipeline.follow_status import metrics

        if self.metrics_port is not None:  # /healthz answers from the start, loads included
            metrics().serve(self.metrics_port, self.log)
        while not self.requested.is_set():
            try:
                self.attempt(self)
                return
            except StreamsChanged:  # start again at once, with what was found
                self.backoff.succeeded()
            except (TransientError, ConnectionFailed) as exc:
                if self.requested.is_set():
                    raise
                self._in_backoff = True
                try:
                    if not retry_pause(exc, self.backoff, self.requested, self.log, "the run failed",
                                       "starting it again"):
                        return
                finally:
                    self._in_backoff = False

    def start(self) -> None:
        """Run the loop in a thread of its own; :meth:`wait` joins it."""
        def guarded() -> None:
            try:
                self.run()
            except BaseException as exc:  # handed to wait()
                self._failure = exc

        self._thread = threading.Thread(target=guarded, name="olake-follow", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Ask the run to end: the change phase at its next checkpoint (what it read is committed first),
        a backoff at once; loads under way are not interrupted by it (:meth:`take_signal`)."""
        self.requested.set()
        if self._current is not None:
            self._current.stop.set()

    def wait(self, timeout: float | None = None) -> bool:
        """Join the loop :meth:`start` began; True once it ended (its failure, if any, raised here)."""
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                return False
        if self._failure is not None:
            raise self._failure
        return True

    def take_signal(self) -> bool:
        """A first SIGTERM or SIGINT (the CLI): taken as :meth:`stop` when the run can end gently (its change
        phase, or a backoff), True; False during loads and start-up, which the signal interrupts instead."""
        current = self._current
        if self._in_backoff or (current is not None and current.stoppable.is_set()):
            self.stop()
            return True
        return False


def retry_pause(exc: Exception, backoff: Backoff, stop: threading.Event, log: Callable[[str], None],
                what: str, again: str) -> bool:
    """The one retry step of a following run after the transient failure ``exc``: count it, say it, wait
    out the backoff's next delay. True to try again; False when ``stop`` was set meanwhile; ``exc`` again
    once failures have gone on for RETRY_GIVE_UP_S."""
    from olake_cli.pipeline.follow_status import metrics

    delay = backoff.failed()
    if delay is None:
        raise exc
    metrics().retried(type(exc).__name__)
    log(f"{what}: {exc}; {again} in {delay:.0f}s (--follow keeps running)")
    return backoff.pause(delay, stop)
