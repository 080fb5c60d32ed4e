"""The change phase of ``read``: a source's change batches become RECORD lines and checkpoints.

Source-neutral: the capture yields runs of changes in log order with their operation ids, and
positions it alone can serialise. Here, changes at or below a stream's committed position are dropped
with one mask per run (a run that resumes inside a transaction replays exactly the rest, seeds/000),
each run's RECORD lines are laid out column by column, widened schemas are announced before the rows
that need them, and after each checkpoint every captured stream's state moves to it. Given a
``tables`` hand-off (``sync``), the capture may give typed runs, which go on as change tables in
their place among the lines, with no JSON in between.

Following (``--follow``, ``core.follow``), the capture reads until the stop request; a transient failure
of the source (connection lost or refused, server restarting) is logged and the capture is opened again
after a backoff (``core.follow.Backoff``), resuming after the last change emitted; failures that go on
for ten minutes without a change read in between end the run. What a run checks at its start, the
capture looks at again while it follows: a stream it gives up (a lost position: re-synced, with a line
saying why) or a table it finds changed under it (renamed or dropped: SourceChangedError) ends the run's
reading, and the run starts again in the same process (:class:`StartAgain`), where its start checks
decide: a re-synced stream is loaded anew beside the others' change capture (``load_beside``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import AbstractContextManager, closing

import orjson
import pyarrow.compute as pc

from olake_cli.core import messages
from olake_cli.core.catalog import CatalogStream
from olake_cli.core.contracts import ChangeBatch, ChangeCapture, FollowingCapture, SourceBacklog
from olake_cli.core.errors import ConfigError, ConnectionFailed, SourceChangedError, TransientError
from olake_cli.core.follow import Backoff, Follow
from olake_cli.core.record_lines import encode_change_lines
from olake_cli.core.resync import resync_marker
from olake_cli.core.schema_drift import record_in_state
from olake_cli.core.state import State, StreamState
from olake_cli.pipeline.in_process import ChangeTable
from olake_cli.pipeline.live_discovery import StreamsChanged
from olake_cli.pipeline.follow_runtime import retry_pause
from olake_cli.pipeline.load_beside import LoadBeside
from olake_cli.pipeline.log_release import CommitRelay
from olake_cli.pipeline.progress import REPLAYED


def capturing(streams: list[CatalogStream], state: State) -> list[CatalogStream]:
    """The streams whose state is in the ``cdc`` phase: those the change phase reads."""
    return [s for s in streams if (state.find(s.namespace, s.name) or _NONE).sync_type == "cdc"]


def run_change_phase(capture: ChangeCapture, streams: list[CatalogStream], state: State,
                     out: messages.MessageWriter, log: Callable[[str], None],
                     counted: Callable[[tuple, dict[str, int], int], None] = lambda key, counts, replayed: None,
                     tables: Callable[[ChangeTable], None] | None = None, follow: Follow | None = None, *,
                     beside: LoadBeside | None, lock: AbstractContextManager) -> None:
    """Read the capture's changes for the :func:`capturing` streams, and emit them; ``counted`` is told
    each stream's emitted changes by kind, and how many of them replay what its load holds; ``tables``
    takes typed changes, after what ``out`` got before; ``follow`` keeps reading until its stop request,
    with the streams of the loads ``beside`` it added as they end; each batch is emitted under ``lock``."""
    active = {s.key: s for s in capturing(streams, state)}
    if not active:
        return
    started = time.monotonic()
    emitter = _ChangeEmitter(capture, active, state, out, log, counted, tables)
    if follow is None:
        for batch in capture.read(list(active.values()), state, typed=tables is not None):
            emitter.emit(batch)
    else:
        _follow(require_following(capture), emitter, follow, log, beside, lock)
    elapsed = max(time.monotonic() - started, 1e-6)
    replayed = f", of which {emitter.replayed} {REPLAYED}" if emitter.replayed else ""
    log(f"change capture: {emitter.emitted} change(s){replayed} in {elapsed:.1f}s "
        f"({emitter.emitted / elapsed:,.0f}/s)")


_NONE = StreamState("", "", None)


def require_following(capture: ChangeCapture) -> FollowingCapture:
    """The capture, if it can follow its log (``--follow``); a ConfigError otherwise."""
    if not isinstance(capture, FollowingCapture):
        raise ConfigError("--follow: this source's change capture reads bounded runs only; run it without "
                          "--follow (from cron, for example)")
    return capture


class StartAgain(StreamsChanged):
    """A following run's change capture gave up streams, or found a table changed under it: the run starts
    again at once (``follow_runtime``), and its start checks decide what follows."""


def _follow(capture: FollowingCapture, emitter: _ChangeEmitter, follow: Follow, log: Callable[[str], None],
            beside: LoadBeside | None, lock: AbstractContextManager) -> None:
    """Emit the capture's changes until the stop request, opening it again after a transient failure,
    and with the streams of the loads ``beside`` added once they end (see ``load_beside``). From here on
    SIGTERM and SIGINT ask it to stop (during the loads before, they interrupt the run)."""
    from olake_cli.pipeline.follow_status import FollowStatus

    follow.stoppable.set()  # a stop request now ends the run at its next checkpoint
    status = FollowStatus(follow.metrics_port, log, capture.backlog_bytes if isinstance(capture, SourceBacklog)
                          else None, lambda state: _lowest_position(capture, emitter.active, state),
                          follow.commit_interval_s)
    log(f"following the change log: a commit every {follow.commit_interval_s:g}s; SIGTERM or Ctrl-C "
        f"commits what was read and stops")
    emitter.status = status
    try:
        with CommitRelay(follow.committed, status, capture, log):
            _follow_until_stopped(capture, emitter, follow, log, beside, lock)
    finally:
        status.close()


def _follow_until_stopped(capture: FollowingCapture, emitter: _ChangeEmitter, follow: Follow,
                          log: Callable[[str], None], beside: LoadBeside | None, lock: AbstractContextManager) -> None:
    """The loop of :func:`_follow`: read, retry, add the streams loaded beside, start the run again."""
    while not follow.stop.is_set():
        reading = follow if beside is None else beside.until_loaded(follow)
        try:
            _emit_until_resync(capture, emitter, reading, lock, follow.retries, log)
        except SourceChangedError as exc:
            log(f"change capture: {exc}; the run starts again, and its start checks decide "
                f"(--follow keeps running)")
            raise StartAgain() from None
        except (TransientError, ConnectionFailed) as exc:
            if not retry_pause(exc, follow.retries, follow.stop, log, "change capture", "trying again"):
                return
            continue
        if beside is None or follow.stop.is_set() or (joined := beside.joined()) is None:
            return
        beside = None
        with lock:
            emitter.add(joined)


def _emit_until_resync(capture: FollowingCapture, emitter: _ChangeEmitter, reading: Follow,
                       lock: AbstractContextManager, backoff: Backoff, log: Callable[[str], None]) -> None:
    """Emit the capture's batches until ``reading``'s stop request; StartAgain after a batch that re-syncs
    streams (they are loaded anew beside the others when the run starts again)."""
    with closing(capture.follow(list(emitter.active.values()), emitter.state, reading,
                                typed=emitter.tables is not None)) as batches:
        for batch in batches:
            resynced = [emitter.active[key].label for key in batch.resync if key in emitter.active]
            with lock:
                emitter.emit(batch)
            backoff.succeeded()
            if resynced:
                log(f"change capture: the run starts again to load {', '.join(resynced)} anew beside the other "
                    f"streams (--follow keeps running)")
                raise StartAgain()


def _lowest_position(capture: ChangeCapture, active: dict[tuple, CatalogStream], state: State):
    """The lowest operation id the followed streams hold in ``state`` (None: none holds one)."""
    ops = [capture.position_op(p) for key in active
           if (p := capture.position_of(state.find(*key))) is not None]
    return min(ops, default=None)


class _ChangeEmitter:
    """Writes change batches as protocol messages, keeping each stream's committed position."""

    def __init__(self, capture: ChangeCapture, active: dict[tuple, CatalogStream], state: State,
                 out: messages.MessageWriter, log: Callable[[str], None],
                 counted: Callable[[tuple, dict[str, int], int], None],
                 tables: Callable[[ChangeTable], None] | None) -> None:
        self.capture, self.active, self.state, self.out, self.log = capture, active, state, out, log
        self.counted, self.tables = counted, tables
        self.emitted = self.replayed = 0  # changes emitted, and of those replays of a load
        self.positions = {k: self._op_of(state.find(*k)) for k in active}
        self.emitted_upto: dict[tuple, object] = {}  # the last change emitted per stream (a reopened capture)
        self.status = None  # following: a FollowStatus, told of changes and checkpoints
        self.newest_commit_us = 0  # the newest source commit among the changes emitted
        self.prefixes = {k: _record_prefix(s) for k, s in active.items()}

    def add(self, streams: list[CatalogStream]) -> None:
        """Follow these streams too, from their positions in the state (their loads just ended)."""
        streams = [s for s in streams if s.key not in self.active]
        for stream in streams:
            self.active[stream.key] = stream
            self.positions[stream.key] = self._op_of(self.state.find(*stream.key))
            self.prefixes[stream.key] = _record_prefix(stream)
        if streams:
            self.log(f"change capture: {', '.join(s.label for s in streams)} joined after loading beside the "
                     f"others; the change log is read again from the lowest committed position")

    def _op_of(self, ss: StreamState | None):
        position = self.capture.position_of(ss)
        return None if position is None else self.capture.position_op(position)

    def emit(self, batch: ChangeBatch) -> None:
        """Announce widened streams, write the batch's new changes, apply resyncs and its checkpoint."""
        for stream in batch.widened:
            self.active[stream.key] = stream
            self.out.write(messages.catalog_message({"streams": [stream.to_dict()]}))
        emitted_at = str(int(time.time() * 1000)).encode()
        blocks = []
        for run in batch.runs:
            held = self.positions.get(run.stream, _GONE)
            if held is _GONE:
                continue
            run = run.after(max(held, self.emitted_upto.get(run.stream, held), key=_op_rank))
            self.emitted += len(run)
            if len(run):
                self.emitted_upto[run.stream] = run.last_op()
                if self.status is not None:
                    self.newest_commit_us = max(self.newest_commit_us, pc.max(run.commit_ts).as_py() or 0)
                    self.status.counted(self.active[run.stream].label, run.op_counts())
                replayed = run.replay_count()
                self.replayed += replayed
                self.counted(run.stream, run.op_counts(), replayed)
            if run.typed and run.data and len(run):  # (a truncate has no data: it goes as a line)
                if blocks:
                    self.out.write_raw(b"".join(blocks))
                    blocks = []
                self.tables(ChangeTable(run.stream, run.table(self.active[run.stream].json_schema), run.warnings))
            else:
                blocks.append(encode_change_lines(run, self.prefixes[run.stream] + emitted_at + b',"data":'))
        if blocks:
            self.out.write_raw(b"".join(blocks))
        for key, reason in batch.resync.items():
            self._resync(key, reason)
        if batch.position is not None:
            self._checkpoint(batch.position)
        if batch.position is not None or batch.resync:
            self.out.flush()  # the writer commits as soon as the state arrives

    def _resync(self, key: tuple, reason: str) -> None:
        """Stop capturing a stream and mark it for a fresh full load on the next run (the destination
        keeps its contents until that load replaces them)."""
        stream = self.active.pop(key, None)
        self.positions.pop(key, None)
        if stream is None:
            return
        ss = record_in_state(resync_marker(stream.name, stream.namespace, stream.sync_mode, stream.columns), stream)
        self.state.upsert(ss)
        self.out.write(messages.state_message(State(level="stream", streams=[ss])))
        self.log(f"{stream.label}: {reason}")

    def _checkpoint(self, position) -> None:
        op = self.capture.position_op(position)
        if self.status is not None:
            self.status.checkpointed(op, self.newest_commit_us / 1e6 if self.newest_commit_us else None)
        for key in self.active:
            held = self.positions.get(key)
            if held is None or held < op:
                ss = self.capture.with_position(self.state.find(*key), position)
                self.state.upsert(ss)
                self.out.write(messages.state_message(State(level="stream", streams=[ss])))
                self.positions[key] = op


_GONE = object()


def _op_rank(op):
    """Orders operation ids with None (no position) first."""
    return (0, 0, 0) if op is None else (1, op.commit, op.seq)


def _record_prefix(stream: CatalogStream) -> bytes:
    """The bytes every RECORD line of ``stream`` starts with, up to its emitted_at value."""
    head = orjson.dumps({"type": "RECORD", "record": {"stream": stream.name, "namespace": stream.namespace,
                                                      "emitted_at": 0}})
    return head[: head.rindex(b"0}}")]
