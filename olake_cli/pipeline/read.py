"""The read use case: plan on the driver, scan chunks in parallel tasks, emit records and states in order.

Per selected stream the state decides the work: a new or resumed full load (chunks planned in the
source's read session), an incremental pass (cursor range), or change capture (after the full load, in
the same run). Written against ``core.contracts`` only: no source or destination is named here.
"""

from __future__ import annotations

import itertools
import threading
import uuid
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import replace
from typing import Any

from olake_cli.core import messages
from olake_cli.core.catalog import Catalog, CatalogStream
from olake_cli.core.errors import ConfigError, OlakeError, SchemaDrift, SnapshotLostError, SourceChangedError
from olake_cli.core.follow import Follow
from olake_cli.core.pipeline_identity import PipelineIdentity
from olake_cli.core.contracts import ChangeCapture, ChunkRunner, ChunkSink, ReadSession, Source
from olake_cli.core.schema_drift import (apply_to_catalog, changed_columns, column_type, needs_reload,
                                         record_in_state, widened)
from olake_cli.core.state import Chunk, State, StreamState, finish_full_load_if_done
from olake_cli.pipeline.changes import capturing, require_following, run_change_phase
from olake_cli.pipeline.chunk_job import ChunkJob, in_threads, run_chunk_job
from olake_cli.pipeline.load_beside import LoadBeside
from olake_cli.pipeline.progress import LineView, Progress, ProgressView
from olake_cli.pipeline.stream_statuses import StreamStatuses
from olake_cli.pipeline.stream_work import (NEXT_SYNC_TYPE, StreamRun, column_types, decide_work, pass_op_id,
                                            reload_note)

_NO_STATE = StreamState("", "", None)


class ReadPipeline:
    """Runs ``olake read`` for one source, catalog and state, writing protocol messages to ``out``."""

    def __init__(self, source: Source, catalog: Catalog, state: State, out: messages.MessageWriter,
                 runner: ChunkRunner, log: Callable[[str], None], sink: ChunkSink | None = None,
                 view: ProgressView | None = None,
                 clock: Callable[[], int] = messages.now_ms, on_source_open: Callable[[], None] = lambda: None,
                 tables: Callable[[Any], None] | None = None, pipeline: PipelineIdentity | None = None,
                 follow: Follow | None = None) -> None:
        self.source, self.catalog, self.state, self.out = source, catalog, state, out
        self.runner, self.log = runner, log
        self.sink = sink  # sync: full-load chunks are written by the tasks themselves
        self.errors: list[OlakeError] = []
        self.clock = clock  # epoch milliseconds: the operation ids of incremental passes start from it
        self.capture: ChangeCapture | None = None
        self.rows_by_tasks = 0  # sync: rows the tasks wrote to the destination themselves
        self.progress = Progress(view or LineView(log))
        self.statuses = StreamStatuses(out)
        self.lock = threading.RLock()  # loads beside a following change phase: one writer at a time
        self.lost: set[tuple] = set()  # streams whose state this run dropped (a lost position or load)
        self.on_source_open = on_source_open  # sync: locks and opens the destination, once the source is open
        self.tables = tables  # sync: takes typed changes (pipeline.in_process) in their place among the lines
        self.pipeline = pipeline  # what claims a change log only one reader may move (a replication slot)
        self.follow = follow  # --follow: the change phase runs until the stop request
        apply_to_catalog(catalog, state)  # columns a source widened in earlier runs

    def run(self) -> None:
        """Emit the CATALOG, every selected stream's records with a STATE after each chunk, a final STATE;
        a TRACE STREAM_STATUS as each stream starts and ends (and an ESTIMATE of each new full load).

        The source is opened and its change capture checked before the CATALOG and ``on_source_open``:
        a source that fails leaves the destination untouched.
        """
        streams = self.catalog.selected_streams()
        session = self.source.open_session(streams, self.log)
        for warning in session.warnings:
            self.log(warning)
        cdc_streams = [s for s in streams if s.sync_mode == "cdc"]
        held = {ss.key for ss in self.state.streams}
        if self.follow is not None and not cdc_streams:
            raise ConfigError("--follow needs at least one selected stream with sync_mode 'cdc' (nothing else is followed)")
        if cdc_streams:
            self.capture = self.source.change_capture(cdc_streams, self.log)
            if self.follow is not None:
                require_following(self.capture)
            self.capture.preflight(self.state, self.pipeline)  # may reset lost streams: before planning
        self.on_source_open()  # sync: may drop streams whose load the destination lost
        self.lost = held - {ss.key for ss in self.state.streams}
        self.out.write(messages.catalog_message(Catalog(streams).to_dict()))
        try:
            self._run_streams(streams, session)
        except Exception:
            self.statuses.end(self.catalog.selected_streams(), "INCOMPLETE")
            raise
        finally:
            self.progress.run_finished({s.label: (self.state.find(s.namespace, s.name) or _NO_STATE).position_text()
                                        for s in streams})

    def _run_streams(self, streams: list[CatalogStream], session: ReadSession) -> None:
        """Full loads and incremental passes, then change capture (following: beside it when streams are
        already in change capture, see ``load_beside``); a final STATE; raise the first error."""
        cdc_streams = [s for s in streams if s.sync_mode == "cdc"]
        beside = None
        with ExitStack() as opened:
            opened.enter_context(session)
            runs = [self._prepare(stream, session) for stream in streams]
            if (self.follow is not None and capturing(cdc_streams, self.state) and any(r.jobs for r in runs)):
                beside = LoadBeside(lambda cancel: self._scan_all(runs, session, cancel), opened.pop_all(),
                                    lambda: self._joining(cdc_streams), self.lock)
                self.log("full load(s) beside the change capture of the streams that have loaded")
                beside.start()
            else:
                self._scan_all(runs, session)
        try:
            if self.capture is not None and not self.errors:
                cdc_streams = self._current(cdc_streams)
                labels = {s.key: s.label for s in cdc_streams}
                self.progress.capture_started(s.label for s in capturing(cdc_streams, self.state))
                run_change_phase(self.capture, cdc_streams, self.state, self.out, self.log,
                                 lambda key, counts, replayed: self.progress.changes(labels[key], counts, replayed),
                                 self.tables, self.follow, beside=beside, lock=self.lock)
        finally:
            if beside is not None:
                beside.finish(stopping=self.follow.requested.is_set())
        self.out.write(messages.state_message(self.state))
        self.out.flush()
        if self.errors:
            raise self.errors[0]
        self.statuses.end(self.catalog.selected_streams(), "COMPLETE")

    def _prepare(self, stream: CatalogStream, session: ReadSession) -> StreamRun:
        previous = self.state.find(stream.namespace, stream.name)
        decision = decide_work(stream, previous)
        self.statuses.set(stream, "STARTED")
        if decision == "continue":
            self._publish(previous)  # the writer learns which load the coming records belong to
            if stream.sync_mode == "cdc":
                return StreamRun(stream, previous, kind="cdc")
            return self._prepare_incremental(stream, session, previous)
        if decision == "new" and self._skips_load(stream):
            return self._start_at_current_position(stream)
        if decision == "resume":
            blocker = session.resume_blocker(stream, previous)
            if blocker is not None:
                self.log(f"{stream.label}: {blocker}; loading it anew")
                decision = "new"
        if decision == "resume":
            ss = previous
            self.log(f"{stream.label}: resuming full load, "
                     f"{sum(c.status != 'succeed' for c in ss.chunks)} of {len(ss.chunks)} chunk(s) left")
        else:
            if (note := reload_note(stream, previous)) is not None:
                self.log(f"{stream.label}: {note}")
            ss, estimate = self._new_load(stream, session)
            if previous is not None:
                ss.pass_op_id = previous.pass_op_id  # later passes still rank above
        self._publish(ss)
        if ss.chunks == []:
            # the source plans no load (DynamoDB's init_sync: skip): the destination first commits the
            # empty load (else the next state would continue a load it never held), then the stream moves on
            ss = finish_full_load_if_done(ss, NEXT_SYNC_TYPE[stream.sync_mode])
            self._publish(ss)
        run = StreamRun(stream, ss, row_estimate=estimate if decision == "new" else None)
        for index, chunk in enumerate(ss.chunks or []):  # none when the load had nothing to do
            if chunk.status != "succeed":
                run.jobs.append(self._job(stream, session, index, session.chunk_reader(stream, ss, index)))
        if run.jobs:  # Spark, when the loads need it, starts while the driver plans the other streams
            self.runner.expect_load(run.row_estimate)
        planned = len(ss.chunks or [])
        self.progress.stream_started(stream.label, planned, run.row_estimate, done=planned - len(run.jobs))
        return run

    def _skips_load(self, stream: CatalogStream) -> bool:
        """Whether a ``cdc`` stream starts at the current position: ``skip_initial_load``, no state at all,
        and none dropped in this run (a lost position, or a load the destination lost, loads it in full)."""
        return (stream.skip_initial_load and self.capture is not None and stream.key not in self.lost
                and self.state.find(stream.namespace, stream.name) is None)

    def _start_at_current_position(self, stream: CatalogStream) -> StreamRun:
        """A ``cdc`` stream with ``skip_initial_load`` and no state: change capture from the position
        captured now, without a full load (the destination already holds a copy)."""
        ss = StreamState(sync_type="cdc", stream_name=stream.name, stream_namespace=stream.namespace,
                         cursor_field=None, chunks=[],
                         sync_mode=stream.sync_mode, columns=stream.columns, column_types=column_types(stream))
        ss = self.capture.with_position(ss, self.capture.start_position())
        self.log(f"{stream.label}: skip_initial_load: change capture starts at the current position, "
                 f"without a full load")
        self._publish(ss)
        return StreamRun(stream, ss, kind="cdc")

    def _new_load(self, stream: CatalogStream, session: ReadSession) -> tuple[StreamState, int | None]:
        """The state of a fresh full load (chunks planned in the session, the position before it) and
        the planner's row estimate, also emitted as a TRACE ESTIMATE."""
        plan = session.plan_full_load(stream)
        if plan.row_estimate is not None:
            self.out.write(messages.trace_estimate(stream.name, stream.namespace, plan.row_estimate))
        ss = StreamState(sync_type="full-load", stream_name=stream.name, stream_namespace=stream.namespace,
                         cursor_field=None, chunks=[Chunk("pending", lo, hi) for lo, hi in plan.bounds],
                         chunk_column=plan.chunk_column, load_id=uuid.uuid4().hex[:12], sync_mode=stream.sync_mode,
                         columns=stream.columns, column_types=column_types(stream), source=dict(plan.source))
        ss = record_in_state(ss, stream)
        if stream.sync_mode == "incremental":
            ss.cursor_column = stream.cursor_column
            ss.cursor_field = session.max_cursor(stream) if stream.cursor_column else None
        if stream.sync_mode == "cdc" and self.capture is not None:
            # the load's rows rank at the position captured before it; see the capture's load_marks
            start = self.capture.start_position()
            ss = self.capture.with_position(ss, start)
            ss.source.update(self.capture.load_marks(session))
            ss.load_op_key = self.capture.position_op(start).to_key()
        rows = "" if plan.row_estimate is None else f", about {plan.row_estimate} rows"
        self.log(f"{stream.label}: full load in {len(ss.chunks)} chunk(s){rows}")
        return ss, plan.row_estimate

    def _prepare_incremental(self, stream: CatalogStream, session: ReadSession, previous: StreamState) -> StreamRun:
        cursor = stream.cursor_column
        upto = session.max_cursor(stream)
        run = StreamRun(stream, previous, kind="incremental", upto=upto,
                        next_position=previous.cursor_field if upto is None else upto,
                        op_id=pass_op_id(previous, self.clock()))
        lookback = f" (look-back {stream.cursor_lookback})" if stream.cursor_lookback is not None else ""
        if upto is None:
            self.log(f"{stream.label}: incremental on '{cursor}': no finite cursor value yet; "
                     f"reading rows whose cursor is NaN or infinite")
        else:
            self.log(f"{stream.label}: incremental on '{cursor}' from {previous.cursor_field!r}{lookback} "
                     f"up to {upto!r}")
        run.jobs.append(self._incremental_job(run, session))
        self.progress.stream_started(stream.label, 1)
        return run

    def _incremental_job(self, run: StreamRun, session: ReadSession) -> ChunkJob:
        """The job of an incremental pass from the run's saved cursor up to ``run.upto``."""
        after = run.state.cursor_field if run.upto is not None else None
        reader = session.incremental_reader(run.stream, after, run.upto)
        return self._job(run.stream, session, 0, reader, {"_olake_op_id": run.op_id})

    def _job(self, stream: CatalogStream, session: ReadSession, index: int, reader,
             extra_data: dict[str, Any] | None = None) -> ChunkJob:
        return ChunkJob(stream=stream.name, namespace=stream.namespace, chunk_index=index, reader=reader,
                        json_schema=stream.json_schema, key_columns=session.key_columns(stream),
                        extra_data=extra_data, spool=self.runner.spool)

    def _joining(self, cdc_streams: list[CatalogStream]) -> list[CatalogStream] | None:
        """After loads beside the change phase: the streams in change capture now (None: a load failed)."""
        if self.errors:
            return None
        joined = capturing(self._current(cdc_streams), self.state)
        self.progress.capture_started(s.label for s in joined)
        return joined

    def _current(self, streams: list[CatalogStream]) -> list[CatalogStream]:
        """These streams as the catalog holds them now (with any drift of the scans)."""
        current = {s.key: s for s in self.catalog.streams}
        return [current[s.key] for s in streams]

    def _scan_all(self, runs: list[StreamRun], session: ReadSession, cancel: threading.Event | None = None) -> None:
        """Scan every run's jobs; streams whose schema drifted are announced wider and read again; once
        ``cancel`` is set, no further chunk is taken on (the loads resume in the next run)."""
        while runs and not (cancel is not None and cancel.is_set()):
            drifted = self._scan_round(runs, session, cancel)
            with self.lock:
                runs = [self._after_drift(run, found, session) for run, found in drifted.values() if not run.failed]

    def _scan_round(self, runs: list[StreamRun], session: ReadSession,
                    cancel: threading.Event | None) -> dict[tuple, tuple[StreamRun, list]]:
        """Run the jobs, emitting each chunk's rows and state (under the run's lock); returns the results
        that met schema drift (stream key -> its run and those results); their chunks stay pending."""
        by_key = {(r.stream.namespace, r.stream.name): r for r in runs}
        jobs = [self._with_sink(run, job) for run in runs if run.kind == "full" for job in run.jobs]
        passes = [job for run in runs if run.kind == "incremental" for job in run.jobs]
        pending = {key: len(run.jobs) for key, run in by_key.items()}
        drifted: dict[tuple, tuple[StreamRun, list]] = {}
        # Full-load chunks are Spark tasks; an incremental pass is one range read on the driver, so a
        # run with no full load never starts a JVM. A chunk whose task stopped early (the reader's
        # resume_point) leaves its rest to a new chunk, scanned in the next batch.
        while jobs or passes:
            scans = self.runner.run(run_chunk_job, jobs)
            results = itertools.chain(scans, in_threads(run_chunk_job, passes))
            jobs, passes = [], []
            for result in results:
                run = by_key[(result.namespace, result.stream)]
                pending[run.stream.key] -= 1
                if isinstance(result.error, SchemaDrift):
                    drifted.setdefault(run.stream.key, (run, []))[1].append(result)
                    continue
                with self.lock:
                    if cancel is not None and cancel.is_set():  # (set under the lock: nothing is written after)
                        scans.close()
                        return {}
                    rest = self._take_result(run, result, session)
                if rest is not None:
                    jobs.append(self._with_sink(run, rest))
                    pending[run.stream.key] += 1
                if not pending[run.stream.key] and run.stream.key not in drifted:
                    with self.lock:
                        self.progress.stream_finished(run.stream.label, complete=not run.failed)
                        self.statuses.loaded(run.stream, run.failed)
                if isinstance(result.error, (SourceChangedError, SnapshotLostError)):  # later chunks would fail too
                    scans.close()  # no further chunk starts; those in flight are cancelled
                    return drifted
        return drifted

    def _take_result(self, run: StreamRun, result, session: ReadSession) -> ChunkJob | None:
        """Emit a finished chunk (or record its error) and its state; the job of the chunk's rest, if any."""
        if result.error is not None:
            self.errors.append(result.error)
            run.failed = True
            self.log(f"{run.stream.label}: chunk {result.chunk_index} failed: {result.error}")
        else:
            result.emit(self.out.write_raw)
            for warning in result.warnings:
                self.log(f"{run.stream.label}: {warning}")
        self.progress.chunk_done(run.stream.label, result.chunk_index + 1, result.rows, result.seconds)
        if result.error is None and self._tasks_write(run):
            self.rows_by_tasks += result.rows
        rest = self._after_task(run, result, session)
        if result.error is None:
            self.statuses.running(run.stream)
        return rest

    def _after_drift(self, run: StreamRun, found: list, session: ReadSession) -> StreamRun:
        """Announce the stream widened to hold what its chunks met (a CATALOG before any row that needs
        it) and read it again: the drifting chunks when every change is in place, else the whole
        stream as a new load (a column's type is replaced; see core/schema_drift)."""
        before = run.stream
        properties = dict(before.json_schema.get("properties", {}))
        for result in found:  # two chunks that widened one column differently: the next round settles it
            for name, prop in result.error.json_schema.get("properties", {}).items():
                if properties.get(name) == before.json_schema["properties"].get(name):
                    properties[name] = prop
        stream = widened(before, {"properties": properties})
        self.catalog.streams = [stream if s.key == stream.key else s for s in self.catalog.streams]
        self.out.write(messages.catalog_message({"streams": [stream.to_dict()]}))
        changes = ", ".join(f"'{name}' {column_type(before, name)} -> {column_type(stream, name)}"
                            for name in changed_columns(before, stream))
        if needs_reload(before, stream):
            self.log(f"{stream.label}: schema drift: {changes}; the stream is loaded anew with the new type(s)")
            ss, estimate = self._new_load(stream, session)
            ss.pass_op_id = run.state.pass_op_id  # later passes still rank above
            again = StreamRun(stream, ss, row_estimate=estimate, drifted=True)
            indexes: list[int] = list(range(len(ss.chunks)))
            self.progress.stream_started(stream.label, len(indexes), estimate)
        else:  # the same load goes on: its tallies too (the chunks read again were not counted)
            self.log(f"{stream.label}: schema drift: {changes}; {len(found)} chunk(s) are read again")
            ss = record_in_state(run.state, stream)
            again = replace(run, stream=stream, state=ss, jobs=[], drifted=True)
            indexes = [result.chunk_index for result in found]
        self._publish(ss)
        if again.kind == "incremental":
            again.jobs = [self._incremental_job(again, session)]
        else:
            again.jobs = [self._job(stream, session, i, session.chunk_reader(stream, ss, i)) for i in indexes]
        return again

    def _tasks_write(self, run: StreamRun) -> bool:
        """Whether the stream's tasks write their rows to the destination themselves (sync, full load);
        a stream with a row filter or transform, or whose schema drifted in this run, goes through
        the writer."""
        return (self.sink is not None and run.kind == "full" and not run.drifted
                and not (run.stream.row_filter or run.stream.transform))

    def _with_sink(self, run: StreamRun, job: ChunkJob) -> ChunkJob:
        """For sync: full-load tasks write their own files under the stream's load id."""
        if not self._tasks_write(run):
            return job
        return replace(job, sink=self.sink, load_id=run.state.load_id, load_op_key=run.state.load_op_key)

    def _after_task(self, run: StreamRun, result, session: ReadSession) -> ChunkJob | None:
        if run.kind == "incremental":
            if result.error is None:
                ss = run.state.copy()
                ss.cursor_field = run.next_position
                ss.pass_op_id = run.op_id
                run.state = ss
                self._publish(ss)
            return None
        run.state.chunks[result.chunk_index].status = "failed" if result.error else "succeed"
        rest = None
        if result.error is None and result.resume_point is not None:
            rest = self._rest_of_chunk(run, result, session)
        run.state = finish_full_load_if_done(run.state, NEXT_SYNC_TYPE[run.stream.sync_mode])
        self._publish(run.state)
        return rest

    def _rest_of_chunk(self, run: StreamRun, result, session: ReadSession) -> ChunkJob:
        """A chunk whose task stopped early counts as done up to its resume point; the rest becomes a
        new pending chunk of the load (published with it) and its job."""
        done = next(job for job in run.jobs if job.chunk_index == result.chunk_index)
        number = len(run.state.chunks)
        run.state.chunks.append(Chunk("pending", *done.reader.rest_of_chunk(result.resume_point, number)))
        rest = replace(done, chunk_index=number, reader=session.chunk_reader(run.stream, run.state, number))
        run.jobs.append(rest)
        self.progress.chunk_added(run.stream.label)
        return rest

    def _publish(self, ss: StreamState) -> None:
        """Record a stream's new state and emit it (stream level) after the records before it."""
        self.state.upsert(ss)
        self.out.write(messages.state_message(State(level="stream", streams=[ss])))
        self.out.flush()  # the writer commits as soon as the state arrives, not when a buffer fills
