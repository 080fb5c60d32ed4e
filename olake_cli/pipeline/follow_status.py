"""What a run that follows its change log reports while it runs: Prometheus metrics (``--metrics-port``,
served by prometheus_client) and, when stderr is not a terminal, one status line every STATUS_EVERY_S.

Served with ``/healthz`` and ``/readyz`` (``service_endpoints``). Every metric carries the labels
``pipeline`` (the state file, else the destination config, of the run) and ``destination`` (the
destination's type and config file; ``stdout`` for ``read``).

Metrics (one registry per run):

- ``olake_changes_total{stream,op}``: changes captured and handed to the destination;
- ``olake_commits_total`` and ``olake_last_commit_timestamp_seconds``: states the destination committed;
- ``olake_lag_seconds``: from the source's commit of the newest change in the last destination commit to
  that commit;
- ``olake_source_backlog_bytes``: what the source keeps for the pipeline (PostgreSQL: the slot's retained WAL),
  asked every BACKLOG_EVERY_S;
- ``olake_retries_total`` and ``olake_errors_total{error}``: transient failures met and retried;
- ``olake_streams_left_out{stream}``: 1 while a stream found by discovery is left out because it cannot be
  read (``live_discovery``), 0 once it joined or went.
"""

from __future__ import annotations

import sys
import threading
import time
from collections import deque
from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge

from olake_cli.core.errors import ConfigError
from olake_cli.core.opid import OpId
from olake_cli.core.state import State
from olake_cli.core.validation import env_seconds

STATUS_EVERY_S = env_seconds("OLAKE_STATUS_EVERY_S", 60.0)  # (tests make it short)
BACKLOG_EVERY_S = 15.0
READY_BOUND_MIN_S = 60.0  # not ready once a checkpoint waits this long (or 3 commit intervals) for its commit
_IDENTITY = ("pipeline", "destination")


class _Metrics:
    """The process's metrics (one set, served once: a run started again after a failure adds to them)."""

    def __init__(self) -> None:
        self.registry = registry = CollectorRegistry()
        self.served: int | None = None  # the port they are served on
        self.host = "127.0.0.1"  # the address they are served on (--metrics-host)
        self.retried_count = 0  # transient failures retried (the status line's count)
        self.identity = ("", "")  # the values of the pipeline and destination labels (:meth:`identify`)
        self.readiness: Callable[[], str | None] = lambda: "the run has not reached its change phase yet"
        self._changes = Counter("olake_changes", "Changes captured and handed to the destination",
                                [*_IDENTITY, "stream", "op"], registry=registry)
        self._commits = Counter("olake_commits", "States the destination committed", _IDENTITY, registry=registry)
        self._last_commit = Gauge("olake_last_commit_timestamp_seconds", "When the destination last committed",
                                  _IDENTITY, registry=registry)
        self._lag = Gauge("olake_lag_seconds", "Source commit to destination commit of the newest change in the "
                          "last commit", _IDENTITY, registry=registry)
        self._backlog = Gauge("olake_source_backlog_bytes", "What the source keeps for this pipeline (PostgreSQL: "
                              "the replication slot's retained WAL)", _IDENTITY, registry=registry)
        self._retries = Counter("olake_retries", "Transient failures retried", _IDENTITY, registry=registry)
        self._errors = Counter("olake_errors", "Failures met, by error", [*_IDENTITY, "error"], registry=registry)
        self._left_out = Gauge("olake_streams_left_out", "1 while a stream found by discovery is left out because "
                               "it cannot be read (the log says why and the fix)", [*_IDENTITY, "stream"],
                               registry=registry)
        self._left_out_now: set[str] = set()

    def identify(self, pipeline: str, destination: str) -> None:
        """Set the values of every metric's ``pipeline`` and ``destination`` labels."""
        self.identity = (pipeline, destination)

    def changes(self, stream: str, op: str, count: int) -> None:
        """Count changes of ``stream`` handed to the destination."""
        self._changes.labels(*self.identity, stream, op).inc(count)

    def committed(self, now: float, lag: float | None) -> None:
        """The destination committed at ``now`` (epoch seconds), with the lag of its newest change."""
        self._commits.labels(*self.identity).inc()
        self._last_commit.labels(*self.identity).set(now)
        if lag is not None:
            self._lag.labels(*self.identity).set(lag)

    def backlog(self, value: int) -> None:
        """What the source keeps for the pipeline now, in bytes."""
        self._backlog.labels(*self.identity).set(value)

    def retried(self, error: str) -> None:
        """A transient failure (``error``: its kind), retried."""
        self._retries.labels(*self.identity).inc()
        self.retried_count += 1
        self._errors.labels(*self.identity, error).inc()

    def left_out(self, streams: set[str]) -> None:
        """The streams a discovery left out now (labels); those left out before and not now go to 0."""
        for stream in self._left_out_now | streams:
            self._left_out.labels(*self.identity, stream).set(1 if stream in streams else 0)
        self._left_out_now = set(streams)

    def serve(self, port: int, log: Callable[[str], None]) -> None:
        """Serve the metrics, ``/healthz`` and ``/readyz`` on ``port`` (once per process)."""
        from olake_cli.pipeline.service_endpoints import serve_endpoints

        if self.served is not None:
            return
        try:
            serve_endpoints(self.host, port, self.registry, lambda: self.readiness())
        except OSError as exc:
            raise ConfigError(f"--metrics-host {self.host} --metrics-port {port}: cannot serve metrics there "
                              f"({exc.strerror})") from None
        self.served = port
        log(f"metrics on http://{f'[{self.host}]' if ':' in self.host else self.host}:{port}/metrics "
            f"(and /healthz, /readyz)")


_METRICS: _Metrics | None = None


def metrics() -> _Metrics:
    """The process's metrics, made on first use."""
    global _METRICS
    if _METRICS is None:
        _METRICS = _Metrics()
    return _METRICS


class FollowStatus:
    """The metrics and status line of one following change phase (thread-safe; :meth:`close` stops its
    thread)."""

    def __init__(self, port: int | None, log: Callable[[str], None], backlog: Callable[[], int | None] | None,
                 position_of: Callable[[State], OpId | None], commit_interval_s: float) -> None:
        self.log, self._backlog, self._position_of = log, backlog, position_of
        self.m = metrics()
        # checkpoints not committed yet: (position, newest source commit in epoch s or None, handed on at)
        self._checkpoints: deque[tuple[OpId, float | None, float]] = deque()
        self._ready_bound_s = max(READY_BOUND_MIN_S, 3 * commit_interval_s)
        self.m.readiness = self._not_ready
        self._counted = self._counted_at_status = 0
        self._last_commit = self._lag = self._backlog_bytes = None  # for the status line
        self._lock, self._stop = threading.Lock(), threading.Event()
        if port is not None:
            self.m.serve(port, log)
        self._thread = threading.Thread(target=self._report, name="olake-follow-status", daemon=True)
        self._thread.start()

    def counted(self, stream: str, counts: dict[str, int]) -> None:
        """Changes of ``stream`` handed to the destination, by kind."""
        for op, count in counts.items():
            self.m.changes(stream, op, count)
            self._counted += count

    def checkpointed(self, position: OpId, newest_commit_s: float | None) -> None:
        """A checkpoint at ``position``; the newest source commit (epoch seconds) of the changes before it
        (None: no change read yet)."""
        with self._lock:
            self._checkpoints.append((position, newest_commit_s, time.monotonic()))

    def committed(self, state: State) -> None:
        """The destination committed ``state``: count it, and measure the lag of its newest change."""
        now = self._last_commit = time.time()
        position = self._position_of(state)
        newest = None
        with self._lock:
            while position is not None and self._checkpoints and self._checkpoints[0][0] <= position:
                newest = self._checkpoints.popleft()[1] or newest
        if newest is not None:
            self._lag = max(0.0, now - newest)
        self.m.committed(now, self._lag if newest is not None else None)

    def _not_ready(self) -> str | None:
        """Why the run is not ready (``/readyz``), or None: a checkpoint waits too long for its commit."""
        with self._lock:
            waiting = time.monotonic() - self._checkpoints[0][2] if self._checkpoints else 0.0
        if waiting > self._ready_bound_s:
            return (f"the destination has not committed a checkpoint handed to it {waiting:.0f}s ago "
                    f"(ready within {self._ready_bound_s:.0f}s)")
        return None

    def close(self) -> None:
        """Stop the status thread and join it (the endpoints are served on until the process ends)."""
        self.m.readiness = lambda: "the run is not following its change log now (loading, or starting again)"
        self._stop.set()
        self._thread.join()

    def _report(self) -> None:
        asked = status_at = time.monotonic()
        self._ask_backlog()
        while not self._stop.wait(1.0):
            now = time.monotonic()
            if now - asked >= BACKLOG_EVERY_S:
                asked = now
                self._ask_backlog()
            if now - status_at >= STATUS_EVERY_S:
                status_at = now
                if not sys.stderr.isatty():
                    self.log(self._status_line())

    def _ask_backlog(self) -> None:
        if self._backlog is None:
            return
        try:
            value = self._backlog()
        except Exception:  # the source is away: the next ask may work; the change phase reports failures
            return
        if value is not None:
            self._backlog_bytes = value
            self.m.backlog(value)

    def _status_line(self) -> str:
        changes, self._counted_at_status = self._counted - self._counted_at_status, self._counted
        parts = [f"following: {changes} change(s) in the last {STATUS_EVERY_S:.0f}s",
                 "nothing committed yet" if self._last_commit is None
                 else f"last commit {time.time() - self._last_commit:.0f}s ago"]
        if self._lag is not None:
            parts.append(f"lag {self._lag:.1f}s")
        if self._backlog_bytes is not None:
            parts.append(f"source backlog {self._backlog_bytes:,} bytes")
        return ", ".join(parts + [f"{self.m.retried_count} retries"])
