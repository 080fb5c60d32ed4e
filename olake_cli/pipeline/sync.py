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

from olake_cli.core.catalog import Catalog
from olake_cli.core.contracts import ChunkRunner, ChunkSink, Destination, Source
from olake_cli.core.messages import MessageWriter, now_ms
from olake_cli.core.pipeline_identity import PipelineIdentity
from olake_cli.core.state import FileStateStore, State
from olake_cli.pipeline.following import Following
from olake_cli.pipeline.in_process import InProcessPipe
from olake_cli.pipeline.progress import ProgressView
from olake_cli.pipeline.read import ReadPipeline
from olake_cli.pipeline.write import WritePipeline


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
    pipe = InProcessPipe()
    failures: list[BaseException] = []
    reader = ReadPipeline(source, catalog, state, MessageWriter(pipe), runner, log, sink=sink, view=view,
                          clock=clock, on_source_open=on_source_open, tables=pipe.put_table, pipeline=pipeline,
                          follow=following and following.follow)

    def drain() -> None:
        try:
            # its own copy: the reader may widen its streams' schemas, which the writer must see arrive
            WritePipeline(destination, copy.deepcopy(catalog), store, out, log,
                          rows_by_tasks=lambda: reader.rows_by_tasks, pass_traces=True,
                          on_committed=following.committed if following else lambda state: None).run_items(pipe.items())
        except BaseException as exc:  # reported after the reader stops
            failures.append(exc)
            if following is not None:  # a reader following an idle log would not notice the pipe close
                following.follow.stop.set()
        finally:
            pipe.stop_reading()  # a reader still writing then gets BrokenPipeError instead of blocking

    writer = threading.Thread(target=drain, name="olake-write", daemon=True)
    writer.start()
    try:
        reader.run()
    except BrokenPipeError:
        if not failures:
            raise
    finally:
        try:
            pipe.close()
        except BrokenPipeError:
            pass
        writer.join()
    if failures:
        raise failures[0]
