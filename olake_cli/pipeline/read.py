"""The read use case: plan on the driver, scan chunks in parallel tasks, emit records and states in order.

Per selected stream the state decides the work: a new or resumed full load (chunks under one exported
snapshot), an incremental pass (cursor range), or change capture (after the full load, in the same run).
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field, replace
from typing import Any, Callable

from olake_cli.core import messages
from olake_cli.core.catalog import Catalog, CatalogStream
from olake_cli.core.errors import OlakeError
from olake_cli.core.position import OpId, format_lsn, parse_lsn
from olake_cli.core.schema_change import INCOMPATIBLE, olake_type_of, type_change
from olake_cli.core.state import Chunk, State, StreamState, finish_full_load_if_done
from olake_cli.pipeline.progress import Progress

NEXT_SYNC_TYPE = {"full_refresh": "full-load", "incremental": "incremental", "cdc": "cdc"}


@dataclass
class StreamRun:
    """Book-keeping for one stream during a run."""

    stream: CatalogStream
    state: StreamState
    kind: str = "full"  # full | incremental | cdc
    next_position: Any = None
    tasks: list[Any] = field(default_factory=list)


def decide_work(stream: CatalogStream, previous: StreamState | None) -> str:
    """'resume', 'new' (full load) or 'continue' (incremental pass / change capture).

    A stream whose sync mode, columns or cursor column changed since its load began is loaded anew:
    its files and its position would not match the catalog any more.
    """
    if previous is None or reload_reason(stream, previous) is not None:
        return "new"
    if previous.sync_type == "full-load":
        if previous.chunks and any(c.status != "succeed" for c in previous.chunks):
            return "resume"
        return "new"
    if previous.sync_type == NEXT_SYNC_TYPE[stream.sync_mode]:
        return "continue"
    return "new"


def reload_reason(stream: CatalogStream, previous: StreamState) -> str | None:
    """Why the catalog no longer matches the load ``previous`` belongs to (None: it still does)."""
    extra = previous.extra or {}
    if (extra.get("sync_mode", stream.sync_mode) != stream.sync_mode
            or extra.get("columns", stream.columns) != stream.columns):
        return "sync mode or columns changed"
    if stream.sync_mode == "incremental" and extra.get("cursor_column", stream.cursor_column) != stream.cursor_column:
        return f"cursor changed from '{extra['cursor_column']}' to '{stream.cursor_column}'"
    current = column_types(stream)
    for name, old in (extra.get("column_types") or {}).items():
        if current.get(name) is not None and type_change(old, current[name]) == INCOMPATIBLE:
            return f"column '{name}' changed type from {old} to {current[name]} in the catalog"
    return None


def column_types(stream: CatalogStream) -> dict[str, str | None]:
    """Column name -> x-olake-type, as recorded with a load (a later widening needs no reload)."""
    return {name: olake_type_of(prop) for name, prop in stream.json_schema.get("properties", {}).items()}


class ReadPipeline:
    """Runs ``olake read`` for one source, catalog and state, writing protocol messages to ``out``."""

    def __init__(self, source, catalog: Catalog, state: State, out: messages.MessageWriter,
                 runner, log: Callable[[str], None], sink: Any = None) -> None:
        self.source, self.catalog, self.state, self.out = source, catalog, state, out
        self.runner, self.log = runner, log
        self.sink = sink  # sync: full-load chunks are written by the tasks themselves
        self.errors: list[OlakeError] = []
        self.run_started_ms = int(time.time() * 1000)

    def run(self) -> None:
        """Emit the CATALOG, every selected stream's records with a STATE after each chunk, a final STATE."""
        from olake_cli.pipeline.cdc import ChangeCapture
        from olake_cli.sources.postgres.connection import connect
        from olake_cli.sources.postgres.snapshot import ExportedSnapshot

        streams = self.catalog.selected_streams()
        with connect(self.source.settings) as conn:
            tables = self.source.resolve_tables(conn, streams)
        for warning in (w for info in tables.values() for w in info.warnings):
            self.log(warning)
        self.out.write(messages.catalog_message(Catalog(streams).to_dict()))
        cdc_streams = [s for s in streams if s.sync_mode == "cdc"]
        capture = ChangeCapture(self.source, cdc_streams, tables, self.state, self.out, self.log) if cdc_streams else None
        if capture is not None:
            capture.preflight()  # may reset streams whose position is lost, so it runs before planning
        with ExportedSnapshot(self.source.settings) as snap:
            runs = [self._prepare(stream, tables[stream.key], snap, capture) for stream in streams]
            self._scan_all(runs)
        if capture is not None and not self.errors:
            capture.run()
        self.out.write(messages.state_message(self.state))
        self.out.flush()
        if self.errors:
            raise self.errors[0]

    def _prepare(self, stream: CatalogStream, info, snap, capture) -> StreamRun:
        previous = self.state.find(stream.namespace, stream.name)
        decision = decide_work(stream, previous)
        if decision == "continue":
            self._publish(previous)  # the writer learns which load the coming records belong to
            if stream.sync_mode == "cdc":
                return StreamRun(stream, previous, kind="cdc")
            return self._prepare_incremental(stream, info, snap, previous)
        if decision == "resume" and not self._same_physical_table(stream, info, snap, previous):
            decision = "new"
        if decision == "resume":
            ss, chunk_column = previous, previous.extra.get("chunk_column", "ctid")
            self.log(f"{stream.label}: resuming full load, "
                     f"{sum(c.status != 'succeed' for c in ss.chunks)} of {len(ss.chunks)} chunk(s) left")
        else:
            reason = previous is not None and (reload_reason(stream, previous) or (
                "sync mode or columns changed" if previous.sync_type != "full-load" else None))
            if reason:
                self.log(f"{stream.label}: {reason} since the last load; loading it anew")
            ss = self._new_load(stream, info, snap, capture)
            chunk_column = ss.extra["chunk_column"]
        self._publish(ss)
        run = StreamRun(stream, ss)
        for index, chunk in enumerate(ss.chunks):
            if chunk.status != "succeed":
                run.tasks.append(self.source.scan_task(snap.conn, info, stream, index, chunk_column,
                                                       chunk.min, chunk.max, snap.snapshot_id))
        return run

    def _new_load(self, stream: CatalogStream, info, snap, capture) -> StreamState:
        """The state of a fresh full load: chunks planned in the snapshot, the position before it."""
        position = self._position_before_load(stream, info, snap, capture)
        plan = self.source.plan_full_load(snap.conn, info)
        chunk_column = plan.chunk_column
        ss = StreamState(sync_type="full-load", stream_name=stream.name, stream_namespace=stream.namespace,
                         cursor_field=position,
                         chunks=[Chunk("pending", b.min, b.max) for b in plan.bounds],
                         extra={"chunk_column": chunk_column, "load_id": uuid.uuid4().hex[:12],
                                "sync_mode": stream.sync_mode, "columns": stream.columns,
                                "column_types": column_types(stream)})
        if stream.sync_mode == "incremental":
            ss.extra["cursor_column"] = stream.cursor_column
        if plan.table_identity is not None:
            ss.extra["table_identity"] = plan.table_identity
        if stream.sync_mode == "cdc":  # see ChangeCapture: how the load and the slot are stitched
            ss.extra.update(snapshot_lsn=position, snapshot_txns=snap.txns,
                            snapshot_upto=format_lsn(snap.lsn_after))
        self.log(f"{stream.label}: full load in {len(ss.chunks)} chunk(s)")
        return ss

    def _same_physical_table(self, stream: CatalogStream, info, snap, previous: StreamState) -> bool:
        """Whether a ctid load can resume: the table was not rewritten since its chunks were planned.

        Key-range chunks do not depend on the physical layout and always resume.
        """
        if previous.extra.get("chunk_column", "ctid") != "ctid":
            return True
        recorded = previous.extra.get("table_identity")
        if recorded == self.source.table_identity(snap.conn, info):
            return True
        if recorded is None:
            self.log(f"{stream.label}: the state does not record which physical table its ctid chunks "
                     f"refer to (written by an older olake); loading it anew")
            return False
        self.log(f"{stream.label}: the table was rewritten since its full load began (VACUUM FULL, CLUSTER, "
                 f"a rewriting ALTER TABLE or a partition change), so its ctid chunks no longer name the "
                 f"same rows; loading it anew")
        return False

    def _prepare_incremental(self, stream: CatalogStream, info, snap, previous: StreamState) -> StreamRun:
        cursor = stream.cursor_column
        upto = self.source.max_cursor(snap.conn, info, cursor)
        run = StreamRun(stream, previous, kind="incremental",
                        next_position=previous.cursor_field if upto is None else upto)
        lookback = f" (look-back {stream.cursor_lookback})" if stream.cursor_lookback is not None else ""
        if upto is None:
            self.log(f"{stream.label}: incremental on '{cursor}': no finite cursor value yet; "
                     f"reading rows whose cursor is NaN or infinite")
        else:
            self.log(f"{stream.label}: incremental on '{cursor}' from {previous.cursor_field!r}{lookback} "
                     f"up to {upto!r}")
        after = previous.cursor_field if upto is not None else None
        run.tasks.append(self.source.incremental_task(
            snap.conn, info, stream, cursor, after, upto, snap.snapshot_id,
            extra_data={"_olake_op_id": [self.run_started_ms, 0]}))
        return run

    def _position_before_load(self, stream: CatalogStream, info, snap, capture) -> Any:
        if stream.sync_mode == "incremental" and stream.cursor_column:
            return self.source.max_cursor(snap.conn, info, stream.cursor_column)
        if stream.sync_mode == "cdc" and capture is not None:
            return capture.start_position
        return None

    def _scan_all(self, runs: list[StreamRun]) -> None:
        from olake_cli.sources.postgres.scan import run_scan_task

        by_key = {(r.stream.namespace, r.stream.name): r for r in runs}
        spool_dir = getattr(self.runner, "spool_dir", None)
        tasks = [replace(task, spool_dir=spool_dir, **self._sink_fields(run)) for run in runs for task in run.tasks]
        progress = Progress(self.log, total_chunks=len(tasks))
        for result in self.runner.run(run_scan_task, tasks):
            run = by_key[(result.namespace, result.stream)]
            if result.error is not None:
                self.errors.append(result.error)
                self.log(f"{run.stream.label}: chunk {result.chunk_index} failed: {result.error}")
            else:
                result.emit(self.out.write_raw)
                for warning in result.warnings:
                    self.log(f"{run.stream.label}: {warning}")
            progress.chunk_done(run.stream.label, result.rows, result.seconds)
            self._after_task(run, result)
        progress.finish()

    def _sink_fields(self, run: StreamRun) -> dict[str, Any]:
        """For sync: full-load tasks write their own files under the stream's load id."""
        if self.sink is None or run.kind != "full":
            return {}
        extra = run.state.extra or {}
        lsn = extra.get("snapshot_lsn")
        key = OpId(parse_lsn(lsn), 0).to_key() if lsn else None
        return {"sink": self.sink, "load_id": extra.get("load_id"), "snapshot_key": key}

    def _after_task(self, run: StreamRun, result) -> None:
        if run.kind == "incremental":
            if result.error is None:
                ss = run.state.copy()
                ss.cursor_field = run.next_position
                run.state = ss
                self._publish(ss)
            return
        run.state.chunks[result.chunk_index].status = "failed" if result.error else "succeed"
        run.state = finish_full_load_if_done(run.state, NEXT_SYNC_TYPE[run.stream.sync_mode])
        self._publish(run.state)

    def _publish(self, ss: StreamState) -> None:
        """Record a stream's new state and emit it (stream level) after the records before it."""
        self.state.upsert(ss)
        self.out.write(messages.state_message(State(level="stream", streams=[ss])))
