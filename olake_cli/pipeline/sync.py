"""``olake sync``: the read and write use cases in one process, joined by an in-memory pipe.

Full-load chunks take the fast path: each Spark task converts its Arrow batches to the destination
types and writes its own file, and only the chunk's STATE crosses the pipe. Changes of a source that
gives typed runs cross it as tables (``in_process``), in their place among the lines. Everything else
(incremental passes, other changes) flows as protocol lines exactly as in ``read | write``, so the
two paths share every rule about states, load ids and commits.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from olake_cli.core.catalog import Catalog
from olake_cli.core.contracts import ChunkRunner, ChunkSink, Destination, Source
from olake_cli.core.follow import Follow
from olake_cli.core.messages import MessageWriter, now_ms
from olake_cli.core.pipeline_identity import PipelineIdentity
from olake_cli.core.state import FileStateStore, State
from olake_cli.pipeline.following import Following
from olake_cli.pipeline.in_process import InProcessPipe, TeePipe
from olake_cli.pipeline.lane_journal import Journal, LaneRetries
from olake_cli.pipeline.progress import ProgressView
from olake_cli.pipeline.read import ReadPipeline
from olake_cli.pipeline.write import WritePipeline


@dataclass
class WriterLane:
    """One destination of a sync: its writer's state file, stdout, commit hook and replay floors."""

    destination: Destination
    store: FileStateStore | None
    out: MessageWriter
    on_committed: Callable[[State], None] = lambda state: None
    floors: dict[tuple, str] = field(default_factory=dict)  # filled before its first CATALOG (``fan_out``)
    name: str = "the destination"
    floors_now: Callable[[Destination], dict[tuple, str]] = lambda destination: {}  # from what it holds now
    renew: Callable[[], Destination] | None = None  # a new connector of the destination, for a retry


def run_in_process(source: Source, destination: Destination, catalog: Catalog, state: State,
                   store: FileStateStore | None, sink: ChunkSink | None, runner: ChunkRunner, out: MessageWriter,
                   log: Callable[[str], None], view: ProgressView | None = None, clock: Callable[[], int] = now_ms,
                   on_source_open: Callable[[], None] = lambda: None, pipeline: PipelineIdentity | None = None,
                   following: Following | None = None) -> None:
    """Run ReadPipeline into a pipe drained by WritePipeline in a thread; re-raise the first failure.

    The reader's STREAM_STATUS and ESTIMATE traces cross the pipe and are passed on to ``out`` in order;
    ``clock`` (epoch milliseconds) is the reader's, for the operation ids of incremental passes;
    ``on_source_open`` runs once the source is open and checked, before anything reaches the destination;
    ``pipeline`` is what the reader's change capture claims its change log for; ``following`` keeps
    the change capture running, told of every state the writer commits.
    """
    lane = WriterLane(destination, store, out, following.committed if following else lambda state: None)
    run_lanes(source, [lane], catalog, state, sink, runner, log, view, clock, on_source_open, pipeline,
              following and following.follow)


def run_lanes(source: Source, lanes: list[WriterLane], catalog: Catalog, state: State, sink: ChunkSink | None,
              runner: ChunkRunner, log: Callable[[str], None], view: ProgressView | None = None,
              clock: Callable[[], int] = now_ms, on_source_open: Callable[[], None] = lambda: None,
              pipeline: PipelineIdentity | None = None, follow: Follow | None = None) -> None:
    """:func:`run_in_process` into one writer per lane, each fed every message (``pipeline.fan_out``); the
    first writer's failure stops the reader, the other writers commit what they were given."""
    pipes = [InProcessPipe() for _ in lanes]
    tee = pipes[0] if len(pipes) == 1 else TeePipe(pipes)
    failures: list[BaseException] = []
    reader = ReadPipeline(source, catalog, state, MessageWriter(tee), runner, log, sink=sink, view=view,
                          clock=clock, on_source_open=on_source_open, tables=tee.put_table, pipeline=pipeline,
                          follow=follow)

    def drain(lane: WriterLane, pipe: InProcessPipe) -> None:
        try:
            _write_lane(lane, pipe, catalog, reader, log, follow if len(lanes) > 1 else None)
        except BaseException as exc:  # reported after the reader stops
            if len(lanes) > 1:
                log(f"{lane.name}: {exc}")
            failures.append(exc)
            if follow is not None:  # a reader following an idle log would not notice the pipe close
                follow.stop.set()
        finally:
            pipe.stop_reading()  # a reader still writing then gets BrokenPipeError instead of blocking

    writers = [threading.Thread(target=drain, args=(lane, pipe), name=f"olake-write-{i}", daemon=True)
               for i, (lane, pipe) in enumerate(zip(lanes, pipes))]
    for writer in writers:
        writer.start()
    try:
        reader.run()
    except BrokenPipeError:
        if not failures:
            raise
    finally:
        for pipe in pipes:
            try:
                pipe.close()
            except BrokenPipeError:
                pass
        for writer in writers:
            writer.join()
    if failures:
        raise failures[0]


def _write_lane(lane: WriterLane, pipe: InProcessPipe, catalog: Catalog, reader: ReadPipeline,
                log: Callable[[str], None], follow: Follow | None) -> None:
    """One lane's writer over its pipe; with ``follow`` (one of several destinations), retried from its
    journal after a transient failure of its destination (``lane_journal``)."""
    def writer(on_state: Callable[[], None] = lambda: None, after: Callable[[], None] = lambda: None):
        # its own copy: the reader may widen its streams' schemas, which the writer must see arrive
        return WritePipeline(lane.destination, copy.deepcopy(catalog), lane.store, lane.out, log,
                             rows_by_tasks=lambda: reader.rows_by_tasks, pass_traces=True,
                             on_committed=lambda state: (lane.on_committed(state), after()),
                             floors=lane.floors, on_state=on_state)

    if follow is None:
        writer().run_items(pipe.items())
        return
    journal = Journal(pipe)
    def reopened(replayed_states: int) -> None:
        lane.destination = lane.renew() if lane.renew is not None else lane.destination  # new connections
        lane.floors.update(lane.floors_now(lane.destination))
        lane.out.pass_over(replayed_states)

    retries = LaneRetries(lane.name, journal, follow, log, reopened)
    journal.start()
    retries.run(lambda items: writer(retries.state_taken, retries.committed).run_items(items))
