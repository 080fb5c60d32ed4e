"""olake's change capture behind ``spark.readStream.format("olake")``, through the source's contracts.

An offset is the stream's olake state (``{"state": StreamState.to_dict(), ...}``: the position the change
capture serialised into it, and the full load's marks), so a query's position lives in Spark's checkpoint;
``ordered`` says whether the position's operation id bounds the changes before it (PostgreSQL,
MongoDB), so that the range can be read again after a restart (DynamoDB's checkpoints rank below its
records: such a range is refused with one line rather than read wrongly).
The first micro-batch is the full load, planned by a keeper process as a batch read is (its read
session, PostgreSQL's exported snapshot, held until every chunk is read); its end is the state
``sync`` records when a load is done (the capture's start position, captured before the load, and the
marks that stitch the changes to it).
Each later batch holds the changes after its start up to its end, as ``capture.read`` gives them from
the start's state (changes the load already holds are left out); ``latestOffset`` reads them ahead and
keeps them until Spark asks for that range (a restarted query asks again and they are read again).
Nothing here moves the source's log: ``commit(end)`` records ``end`` as committed, and the next read
releases the log up to it (a replication slot is confirmed there, never past Spark's checkpoint).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, replace
from typing import Any
from collections.abc import Iterator

import orjson
import pyarrow as pa
import pyarrow.compute as pc

from olake_cli.core.codec.decode import decode_column
from olake_cli.core.codec.types import olake_type_of
from olake_cli.core.errors import ConfigError, SourceChangedError, SourceError
from olake_cli.core.follow import ReleasesLog
from olake_cli.core.row_metadata import OP_ID
from olake_cli.core.state import State, StreamState
from olake_cli.pipeline.spark_scan import (STREAM_FIELDS, ChunkPartition, OlakeBatchScan, ReadOptions, open_stream,
                                          start_keeper)

FORMAT = 'spark.readStream.format("olake")'
START = {"olake": "start"}  # a query without a checkpoint: a full load comes first


@dataclass(frozen=True)
class ChangesPartition:
    """Changes read on the driver, handed to one task."""

    table: pa.Table


@dataclass(frozen=True)
class LoadPartition:
    """One chunk of the stream's load, read as a batch read's chunk (``scan`` lists no chunks)."""

    scan: OlakeBatchScan
    chunk: ChunkPartition


def _log(text: str) -> None:
    print(f"olake: {text}", file=sys.stderr, flush=True)


class OlakeStreamScan:
    """A ``StreamScan``: the full load, then the change capture of one stream."""

    def __init__(self, opts: ReadOptions) -> None:
        self.opts = opts
        self.max_rows = opts.max_rows_per_batch
        self._opened: tuple[Any, Any, Any] | None = None  # source, stream, capture
        self._load: tuple[dict, list[LoadPartition]] | None = None
        self._ahead: dict[tuple[str, str], list[pa.Table]] = {}  # changes read by latest_offset
        self._available_now: tuple[bool, dict | None] = (False, None)  # an availableNow run, and its end

    def _open(self) -> tuple[Any, Any, Any]:
        if self._opened is None:
            source, stream, _ = open_stream(self.opts)
            stream.sync_mode = "cdc"
            self._opened = (source, stream, source.change_capture([stream], _log))
        return self._opened

    def initial_offset(self) -> dict:
        """A new query starts with the stream's full load."""
        return START

    def latest_offset(self, start: dict) -> dict:
        """After ``START``: the load's end; after a position: the position after the changes read from it
        up to the log's end now (at most ``max_rows_per_batch`` of them, to a checkpoint)."""
        if start == START:
            return self._load[0] if self._load is not None else self._plan_load()
        available_now, target = self._available_now
        if target is not None:
            return start  # the run's end is read: no more micro-batches
        end, tables = self._read_changes(start, None, None if available_now else self.max_rows)
        if available_now:
            self._available_now = (True, end)
        self._ahead = {(_key(start), _key(end)): tables} if end != start else {}
        return end

    def prepare_available_now(self) -> None:
        """An availableNow run: after the load (if it is still to come), one micro-batch of the changes
        up to the log's end as it is read (whatever ``max_rows_per_batch`` says), then none."""
        self._available_now = (True, None)

    def partitions(self, start: dict, end: dict) -> list[Any]:
        """The load's chunks, or the changes between two positions."""
        if start == START:
            if self._load is None or self._load[0] != end:
                raise ConfigError(f"{FORMAT}: the query stopped during its initial load, "
                                  "whose snapshot is gone; start it again with a new checkpoint location")
            return list(self._load[1])
        tables = self._ahead.pop((_key(start), _key(end)), None)
        if tables is None:
            _, tables = self._read_changes(start, end)
        return [ChangesPartition(t) for t in tables if t.num_rows]

    def read(self, partition: Any) -> Iterator[pa.Table]:
        """A chunk's rows (ranking at the load's position) or a batch of changes."""
        if isinstance(partition, ChangesPartition):
            yield partition.table
            return
        yield from partition.scan.read(partition.chunk)

    def commit(self, end: dict) -> None:
        """Spark holds everything up to ``end``: the log is released up to it."""
        if end == START:
            return
        if self._load is not None and self._load[0] == end:
            self._load = None
        _, _, capture = self._open()
        if isinstance(capture, ReleasesLog):
            capture.release(State(streams=[StreamState.from_dict(end["state"])]))

    def stop(self) -> None:
        """Nothing is held here (the load's keeper lets its session go once its chunks are read)."""

    def _plan_load(self) -> dict:
        """Plan the full load in a keeper (``spark_keeper``, as a batch read); its end is the stream's
        state once the load is done."""
        scan, done = start_keeper(replace(self.opts, streaming=True))
        end = {"state": done, "ordered": True}
        self._load = (end, [LoadPartition(replace(scan, chunks=[]), chunk) for chunk in scan.chunks])
        return end

    def _read_changes(self, start: dict, end: dict | None, most: int | None = None) -> tuple[dict, list[pa.Table]]:
        """The changes after ``start`` up to ``end`` as tables and ``end``; without ``end``, those of the
        batches the capture gives up to its last checkpoint (to the log's end now, or after about
        ``most`` changes) and the offset there."""
        _, stream, capture = self._open()
        state = State(streams=[StreamState.from_dict(start["state"])])
        capture.preflight(state)
        if state.find(stream.namespace, stream.name) is None:
            raise ConfigError(f'{FORMAT}: {stream.label}: the change log no longer holds the query\'s position; '
                              "start it again with a new checkpoint location")
        if end is not None and not end["ordered"]:
            raise SourceError(f"{FORMAT}: {stream.label}: the query stopped before Spark committed a micro-batch, and "
                              "this source's positions do not tell which changes it held; start the query again "
                              "with a new checkpoint location")
        after = capture.position_op(capture.position_of(state.streams[0]))
        upto = None if end is None else capture.position_op(capture.position_of(StreamState.from_dict(end["state"])))
        tables, kept, rows, position = [], 0, 0, None
        for batch in capture.read([stream], state, typed=True):
            _refuse_changed(batch, stream)
            tables += [_changes(run.after(after), stream.json_schema) for run in batch.runs]
            rows += sum(t.num_rows for t in tables[kept:])
            if batch.position is not None and (upto is None or capture.position_op(batch.position) <= upto):
                position, kept = batch.position, len(tables)  # the changes up to here are behind it
            if upto is None and most and rows >= most and position is not None:
                break
        if end is not None:
            return end, [_upto(t, upto) for t in tables]
        if position is None:
            return start, []
        tables, upto = tables[:kept], capture.position_op(position)
        ordered = all(_upto(t, upto).num_rows == t.num_rows for t in tables)  # can a range be read again?
        return {"state": capture.with_position(state.streams[0], position).to_dict(), "ordered": ordered}, tables


def _upto(table: pa.Table, upto: Any) -> pa.Table:
    """The changes at or below operation id ``upto`` (the text order of the hex ids is their order)."""
    return table.filter(pc.less_equal(table.column(OP_ID), pa.scalar(upto.to_key(), pa.string())))


def _refuse_changed(batch: Any, stream: Any) -> None:
    """A stream whose columns changed, or that the capture must load anew, stops the query with one line
    (the query's schema is fixed when it starts; started again, it reads on from its checkpoint)."""
    if batch.widened:
        raise SourceChangedError(f"{FORMAT}: {stream.label}: its columns changed; "
                                 "start the query again (from its checkpoint) to read them")
    for reason in batch.resync.values():
        raise SourceChangedError(f"{FORMAT}: {stream.label}: {reason}; the stream "
                                 "must be loaded anew: start the query with a new checkpoint location")


def _changes(run: Any, json_schema: dict) -> pa.Table:
    """A run's changes without those the load already holds, as a table of the stream's columns and the
    ``_olake_*`` columns."""
    keep = pc.invert(run.replayed) if run.replayed is not None else None
    if not run.typed:
        run = _typed(run, json_schema)
    table = run.table(json_schema)
    table = table.set_column(table.schema.get_field_index(STREAM_FIELDS[2].name), STREAM_FIELDS[2],
                             table.column(STREAM_FIELDS[2].name).cast(STREAM_FIELDS[2].type))
    return table if keep is None else table.filter(keep)


def _typed(run: Any, json_schema: dict) -> Any:
    """A run of JSON texts with its data decoded to destination types (a truncate has none)."""
    warnings: list[str] = []
    data = {}
    for name, texts in run.data.items():
        values = [None if t is None else orjson.loads(t) for t in texts.to_pylist()]
        prop = json_schema["properties"].get(name)
        if name == STREAM_FIELDS[3].name:  # the unchanged TOASTed columns
            data[name] = pa.array(values, STREAM_FIELDS[3].type)
        elif prop is not None:
            data[name] = decode_column(values, olake_type_of(prop, name), name, warnings, prop)
    return replace(run, data=data, typed=True)


def _key(offset: dict) -> str:
    return orjson.dumps(offset, option=orjson.OPT_SORT_KEYS).decode()
