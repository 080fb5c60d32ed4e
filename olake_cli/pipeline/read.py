"""The read use case: plan on the driver, scan chunks in parallel tasks, emit records and states in order."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any, Callable

from olake_cli.core import messages
from olake_cli.core.catalog import Catalog, CatalogStream
from olake_cli.core.errors import OlakeError
from olake_cli.core.state import Chunk, State, StreamState, finish_full_load_if_done
from olake_cli.pipeline.progress import Progress

NEXT_SYNC_TYPE = {"full_refresh": "full-load", "incremental": "incremental", "cdc": "cdc"}


@dataclass
class StreamRun:
    """Book-keeping for one stream during a run."""

    stream: CatalogStream
    state: StreamState
    chunk_column: Any = None
    tasks: list[Any] = field(default_factory=list)
    rows: int = 0


def decide_full_load(stream: CatalogStream, previous: StreamState | None) -> str:
    """'resume', 'new' or 'none' (no full load needed: the stream continues incrementally)."""
    if previous is None:
        return "new"
    if previous.sync_type == "full-load":
        if previous.chunks and any(c.status != "succeed" for c in previous.chunks):
            return "resume"
        return "new"
    if previous.sync_type == NEXT_SYNC_TYPE[stream.sync_mode]:
        return "none"
    return "new"


class ReadPipeline:
    """Runs ``olake read`` for one source, catalog and state, writing protocol messages to ``out``."""

    def __init__(self, source, catalog: Catalog, state: State, out: messages.MessageWriter,
                 runner, log: Callable[[str], None]) -> None:
        self.source, self.catalog, self.state, self.out = source, catalog, state, out
        self.runner, self.log = runner, log
        self.errors: list[OlakeError] = []

    def run(self) -> None:
        """Emit the CATALOG, every selected stream's records with a STATE after each chunk, a final STATE."""
        from olake_cli.sources.postgres.connection import connect
        from olake_cli.sources.postgres.snapshot import ExportedSnapshot

        streams = self.catalog.selected_streams()
        self.out.write(messages.catalog_message(Catalog(streams).to_dict()))
        with connect(self.source.settings) as conn:
            tables = self.source.resolve_tables(conn, streams)
        with ExportedSnapshot(self.source.settings) as snap:
            runs = [self._prepare(stream, tables[stream.key], snap) for stream in streams]
            self._scan_all(runs)
        self.out.write(messages.state_message(self.state))
        self.out.flush()
        if self.errors:
            raise self.errors[0]

    def _prepare(self, stream: CatalogStream, info, snap) -> StreamRun:
        previous = self.state.find(stream.namespace, stream.name)
        decision = decide_full_load(stream, previous)
        if decision == "none":
            self.log(f"{stream.namespace}.{stream.name}: full load done earlier; "
                     f"{stream.sync_mode} runs arrive with change capture (not in this build)")
            return StreamRun(stream, previous)
        if decision == "resume":
            chunk_column = previous.extra.get("chunk_column", "ctid")
            ss = previous
            self.log(f"{stream.namespace}.{stream.name}: resuming full load, "
                     f"{sum(c.status != 'succeed' for c in ss.chunks)} of {len(ss.chunks)} chunk(s) left")
        else:
            plan = self.source.plan_full_load(snap.conn, info)
            position = self._position_before_load(stream, info, snap)
            chunk_column = plan.chunk_column
            ss = StreamState(sync_type="full-load", stream_name=stream.name, stream_namespace=stream.namespace,
                             cursor_field=position,
                             chunks=[Chunk("pending", b.min, b.max) for b in plan.bounds],
                             extra={"chunk_column": chunk_column, "load_id": uuid.uuid4().hex[:12]})
            self.log(f"{stream.namespace}.{stream.name}: full load in {len(ss.chunks)} chunk(s)")
        self.state.upsert(ss)
        self.out.write(messages.state_message(State(level="stream", streams=[ss])))
        run = StreamRun(stream, ss, chunk_column)
        for index, chunk in enumerate(ss.chunks):
            if chunk.status != "succeed":
                run.tasks.append(self.source.scan_task(snap.conn, info, stream, index, chunk_column,
                                                       chunk.min, chunk.max, snap.snapshot_id))
        return run

    def _position_before_load(self, stream: CatalogStream, info, snap) -> Any:
        if stream.sync_mode == "incremental" and stream.cursor_column:
            return self.source.max_cursor(snap.conn, info, stream.cursor_column)
        return None

    def _scan_all(self, runs: list[StreamRun]) -> None:
        from olake_cli.sources.postgres.scan import run_scan_task

        by_key = {(r.stream.namespace, r.stream.name): r for r in runs}
        tasks = [task for run in runs for task in run.tasks]
        progress = Progress(self.log, total_chunks=len(tasks))
        for result in self.runner.run(run_scan_task, tasks):
            run = by_key[(result.namespace, result.stream)]
            chunk = run.state.chunks[result.chunk_index]
            if result.error is not None:
                chunk.status = "failed"
                self.errors.append(result.error)
                self.log(f"{result.namespace}.{result.stream}: chunk {result.chunk_index} failed: {result.error}")
            else:
                for blob in result.blobs:
                    self.out.write_raw(blob)
                chunk.status = "succeed"
                run.rows += result.rows
            progress.chunk_done(result.namespace, result.stream, result.rows, result.seconds)
            self._emit_stream_state(run)
        progress.finish()

    def _emit_stream_state(self, run: StreamRun) -> None:
        ss = finish_full_load_if_done(run.state, NEXT_SYNC_TYPE[run.stream.sync_mode])
        run.state = ss
        self.state.upsert(ss)
        self.out.write(messages.state_message(State(level="stream", streams=[ss])))
