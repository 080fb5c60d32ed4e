"""The connector seams: what the pipelines need from a source and a destination.

Data moves one way: a :class:`Source` opens a :class:`ReadSession` (one consistent view of the
source for the run) on the driver, which plans full loads into chunks; each chunk becomes a picklable
:class:`ChunkReader` that runs inside a Spark task and yields Arrow record batches; change capture is
a :class:`ChangeCapture` yielding :class:`ChangeBatch` values in log order. A :class:`Destination`
commits each stream's rows together with its state: the pipeline's stream buffer (``pipeline/stream_buffer``)
gathers the rows and hands them over as one :class:`CommitBatch` per stream and STATE. Positions are
opaque outside their source: the capture serialises them into a stream state and reads back the
operation id they cover.

Optional abilities are small ``runtime_checkable`` Protocols (the *capabilities*), which the pipelines
test with ``isinstance``; tests/test_capabilities.py lists which connector offers which.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable
from collections.abc import Callable, Generator, Iterable, Iterator

from olake_cli.core.change_runs import ChangeRun
from olake_cli.core.opid import OpId

if TYPE_CHECKING:
    from concurrent.futures import Future

    import pyarrow as pa

    from olake_cli.core.catalog import Catalog, CatalogStream
    from olake_cli.core.follow import Follow
    from olake_cli.core.pipeline_identity import PipelineIdentity
    from olake_cli.core.state import State, StreamState

Log = Callable[[str], None]
StreamKey = tuple  # (namespace, name)


@runtime_checkable
class ChunkReader(Protocol):
    """One chunk (or one incremental range) of one stream; small and picklable, runs in a task."""

    def read_batches(self) -> Iterator[pa.RecordBatch]:
        """The chunk's rows as Arrow batches whose columns are the stream's ``json_schema`` properties.

        Errors are raised as :class:`~olake_cli.core.errors.OlakeError` with secrets removed.
        """
        ...


@runtime_checkable
class WireColumnsReader(Protocol):
    """A chunk reader that gives some columns' wire values itself: columns it scans in their own text
    form (PostgreSQL's multi-dimensional arrays), or whose driver encodes some values its own way
    (dates and timestamps outside years 1..9999); those values are used as they are."""

    def wire_columns(self, batch: pa.RecordBatch) -> dict[str, list] | None:
        """Column -> wire values for the rows of ``batch`` (None: no such column in it)."""
        ...


@runtime_checkable
class ResumableReader(Protocol):
    """A chunk reader that may stop before its chunk ends, so that a long chunk commits its progress (a
    DynamoDB scan segment). The pipeline then records the chunk as done and appends a new chunk holding
    the rest to the load, so chunk numbers keep the order they were added in (bounds must sort the same
    way: the state's merge sorts chunks by bounds)."""

    def resume_point(self) -> Any:
        """After its batches: None when it read the whole chunk, else where the rest begins."""
        ...

    def rest_of_chunk(self, resume_point: Any, number: int) -> tuple[Any, Any]:
        """The bounds ``(min, max)`` of chunk ``number``, holding the rest from ``resume_point``."""
        ...


@dataclass
class FullLoadPlan:
    """A new full load: chunk bounds (exact, JSON-serialisable), what they refer to (the state's
    ``chunk_column``), the source's own keys to record in its state (``StreamState.source``), and
    about how many rows it will read (None: the planner does not know)."""

    bounds: list[tuple[Any, Any]]
    chunk_column: str | list[str] | None = None
    source: dict[str, Any] = field(default_factory=dict)
    row_estimate: int | None = None


class ReadSession(Protocol):
    """The source as one run sees it (for PostgreSQL: one exported snapshot shared by every chunk)."""

    warnings: list[str]

    def key_columns(self, stream: CatalogStream) -> tuple[str, ...]:
        """The stream's primary key columns (named in errors about a value)."""
        ...

    def plan_full_load(self, stream: CatalogStream) -> FullLoadPlan:
        """Chunks for a new full load of ``stream``."""
        ...

    def resume_blocker(self, stream: CatalogStream, previous: StreamState) -> str | None:
        """Why an unfinished full load cannot resume (its chunks no longer mean the same rows), or None."""
        ...

    def chunk_reader(self, stream: CatalogStream, load: StreamState, index: int) -> ChunkReader:
        """The reader of chunk ``index`` of the load whose state is ``load``."""
        ...

    def max_cursor(self, stream: CatalogStream) -> Any:
        """The largest finite value of the incremental cursor now (None: none yet)."""
        ...

    def incremental_reader(self, stream: CatalogStream, after: Any, upto: Any) -> ChunkReader:
        """The rows of an incremental pass: ``after <= cursor <= upto`` (``after`` None: from the start)."""
        ...


@dataclass
class ChangeBatch:
    """Changes in log order (runs of one stream's changes, see ``core.change_runs``), and what the
    pipeline must do around them.

    ``widened`` streams are announced (new CATALOG) before the changes; ``position``, when set, is a
    checkpoint after them: resuming from it replays nothing of this batch or earlier ones. Streams
    in ``resync`` stop receiving changes and are loaded anew on the next run (with the reason).
    """

    runs: list[ChangeRun] = field(default_factory=list)
    position: Any = None
    widened: list[CatalogStream] = field(default_factory=list)
    resync: dict[StreamKey, str] = field(default_factory=dict)


class ChangeCapture(Protocol):
    """A source's change log for the run's ``cdc`` streams."""

    def preflight(self, state: State, pipeline: PipelineIdentity | None = None) -> None:
        """Verify the setup; drop from ``state`` the streams whose position is lost (or raise). A change
        log only one reader may move is claimed for ``pipeline`` (another pipeline's is refused)."""
        ...

    def start_position(self) -> Any:
        """The position captured before any full load of this run (serialisable into a state)."""
        ...

    def load_marks(self, session: ReadSession) -> dict[str, Any]:
        """Keys recorded with a ``cdc`` stream's new full load (how the load and the log are stitched)."""
        ...

    def position_op(self, position: Any) -> OpId:
        """The operation id a position covers (every change at or below it precedes it)."""
        ...

    def position_of(self, stream_state: StreamState | None) -> Any:
        """The change position a stream state holds, or None (a state of another kind)."""
        ...

    def with_position(self, stream_state: StreamState, position: Any) -> StreamState:
        """A copy of ``stream_state`` positioned at ``position``."""
        ...

    def read(self, streams: list[CatalogStream], state: State, typed: bool = False) -> Iterator[ChangeBatch]:
        """Changes after the streams' committed positions up to the log's end at the call, in order;
        ``typed`` allows typed runs (``ChangeRun.typed``), which a source may give or not."""
        ...


@runtime_checkable
class FollowingCapture(Protocol):
    """A change capture that can follow its log (``--follow``); TransientError when it loses the log."""

    def follow(self, streams: list[CatalogStream], state: State, follow: Follow,
               typed: bool = False) -> Iterator[ChangeBatch]:
        """As ``read`` without an end, on ``follow``'s cadence until its stop request (see ``core.follow``)."""
        ...


@runtime_checkable
class SourceBacklog(Protocol):
    """A change capture that can say how many bytes of its log the source keeps for the pipeline."""

    def backlog_bytes(self) -> int | None:
        """Bytes kept now (None: unknown)."""
        ...


@runtime_checkable
class FollowCadence(Protocol):
    """A destination's default seconds between commits of a run that follows its change log."""
    follow_commit_interval_s: float


class Source(Protocol):
    """A system olake reads from."""

    def check(self) -> str:
        """Connect and verify what reading needs; a success text, or an OlakeError saying what to fix.

        Either text may span lines: what was checked, then one line per finding; a line indented by two
        spaces is an item of the line above (one problem with its fix). See cli/check_view.
        """
        ...

    def discover(self) -> dict[str, Any]:
        """The catalog of every stream the config makes visible."""
        ...

    def open_session(self, streams: list[CatalogStream], log: Log) -> AbstractContextManager[ReadSession]:
        """A read session for the selected streams (validated against the live source)."""
        ...

    def change_capture(self, streams: list[CatalogStream], log: Log) -> ChangeCapture:
        """The change capture for the run's ``cdc`` streams."""
        ...


@runtime_checkable
class SlotOwner(Protocol):
    """A source whose change log is kept for one pipeline (a PostgreSQL replication slot)."""

    def drop_slot(self, claim_only: bool = False) -> list[str]:
        """Remove the change log the config names (only what olake would have created) and its claim;
        with ``claim_only`` just the claim. One line per thing done."""
        ...


class ChunkSink(Protocol):
    """Picklable: writes one full-load chunk from inside a task (``olake sync``)."""

    writes_local_files: bool  # False: its tasks write over the network, so any Spark master may run them

    def write(self, namespace: str | None, stream: str, load_id: str | None, chunk_index: int,
              load_op_key: str | None, json_schema: dict, batches: Iterable[tuple[pa.RecordBatch, dict | None]],
              key_columns: tuple[str, ...] = ()) -> tuple[int, list[str]]:
        """Convert and stage one chunk's (batch, wire columns) pairs as the scan yields them;
        (rows, warnings). Visible once committed."""
        ...


@runtime_checkable
class BinaryCopyReader(Protocol):
    """A chunk reader that can also hand over its rows in PostgreSQL's binary COPY format, untouched."""

    def copy_rows(self, casts: tuple[tuple[str, str], ...]) -> Iterator[bytes]:
        """The chunk's rows as binary COPY data (header to trailer, in blocks): for each ``(column, type)``
        of ``casts``, the column cast to that SQL type, in that order; the same errors as ``read_batches``."""
        ...


@runtime_checkable
class BinaryCopySink(Protocol):
    """A chunk sink that can take a chunk as binary COPY data (a database of the same kind, which then
    receives every value exactly as the source holds it, with no conversion in between)."""

    def copy_casts(self, namespace: str | None, stream: str) -> tuple[tuple[str, str], ...] | None:
        """The ``(column, SQL type)`` casts a :class:`BinaryCopyReader` must apply for the stream's table,
        or None when its chunks must arrive as Arrow batches through ``write``."""
        ...

    def write_copy(self, namespace: str | None, stream: str, load_id: str | None, chunk_index: int,
                   blocks: Iterable[bytes]) -> tuple[int, list[str]]:
        """Like ``write``, for rows in binary COPY data; (rows, warnings)."""
        ...


@dataclass
class CommitBatch:
    """One stream's share of a commit, as the pipeline's stream buffer hands it to the destination.

    Rows are Arrow tables of the stream's destination types followed by the ``_olake_*`` columns of
    ``core.row_metadata.STORED_NAMES`` (full-load rows rank at ``op_key``). The destination makes them durable
    and visible together with ``merged`` as the stream's committed state, and records ``watermark`` (the
    highest operation id applied) where it keeps one: the buffer drops changes at or below it as replays.
    """

    state: StreamState  # the STATE's own stream state, or a re-sync marker (``core.resync``)
    marker: bool  # ``state`` is a re-sync marker: it names no load, the stream's contents stay
    merged: dict  # the stream state the destination holds after this commit
    load_id: str  # the load the rows belong to
    new_load: bool  # that load is not the one the destination committed last
    newly_done: list[int]  # chunks of the load this commit marks done that the destination did not hold
    load: pa.Table | None  # full-load rows not handed over yet (``SpillingTarget.put_load``)
    load_replayed: bool  # the full-load rows were of chunks the destination holds: those put are dropped
    changes: pa.Table | None  # changes (and incremental rows) in arrival order, replays dropped
    truncated: bool  # the source emptied the stream before these changes: its contents go first
    op_key: str | None  # the operation id the load's rows rank at (``load_op_key``)
    base_watermark: str | None  # the highest operation id applied before the changes (after the load)
    watermark: str | None  # ... and after them
    truncated_at: int | None = None  # the source commit time of that truncate (µs since 1970), when known


class StreamTarget(Protocol):
    """One stream of an opened destination, as the pipeline's stream buffer sees it between commits."""

    committed: dict | None  # when opened: the stream state the destination holds (None: nothing)
    watermark: str | None  # when opened: the highest operation id applied (None: none, or none kept)
    holder: str  # what holds the rows, in log lines: "... of a chunk the table already holds"


@runtime_checkable
class SpillingTarget(Protocol):
    """A stream target that takes full-load rows ahead of their commit (invisible files until it), so a
    long load never waits in memory."""

    spill_rows: int  # rows handed to ``put_load`` at a time

    def put_load(self, table: pa.Table, load_id: str) -> None:
        """Take full-load rows of load ``load_id`` ahead of their commit."""
        ...

    def discard(self, load_id: str, truncated: bool) -> None:
        """Forget what was put since the last commit: rows of a load the destination lost, or rows before
        a source TRUNCATE (``truncated``: the rows of ``load_id`` that follow replace the stream's contents)."""
        ...


@runtime_checkable
class ChangeAppender(Protocol):
    """A spilling target that stores changes as rows appended in order (Parquet): it takes them ahead of
    their commit as well, and the rows gathered before a widening in the schema they came in."""

    def put_changes(self, table: pa.Table, load_id: str) -> None:
        """Take changes ahead of their commit (invisible until it)."""
        ...


class Destination(Protocol):
    """A system olake writes to; rows become visible only together with the state that covers them."""

    def check(self) -> str:
        """Verify what writing needs; a success text, or an OlakeError saying what to fix."""
        ...

    def open(self, catalog: Catalog) -> None:
        """Prepare the streams (and finish or undo a commit a killed run left halfway); idempotent."""
        ...

    def stream_target(self, key: StreamKey) -> StreamTarget | None:
        """An opened stream's target (None: the stream was not opened)."""
        ...

    def widen(self, stream: CatalogStream) -> None:
        """Later rows of ``stream`` follow its new, wider schema (rows gathered before are converted)."""
        ...

    def commit(self, batches: list[CommitBatch]) -> None:
        """Make each batch durable and visible with its stream state, one stream at a time, in order."""
        ...

    def committed_state(self, stream: CatalogStream) -> dict | None:
        """The last stream state committed with the stream's data (``state recover``), or None."""
        ...

    def chunk_sink(self) -> ChunkSink | None:
        """A sink for tasks that write full-load chunks themselves, or None (rows go through the pipe)."""
        ...

    def lock_path(self) -> str:
        """The lock file runs writing into this destination take (``core.locks``): one writer at a time."""
        ...


@runtime_checkable
class BackgroundCommits(Protocol):
    """A destination that makes its commits on a thread of its own while the input goes on."""

    def begin_commit(self, batches: list[CommitBatch], on_commit: Callable[[], None]) -> Future:
        """``commit`` made on the destination's thread, which then calls ``on_commit``; commits are made
        in the order begun, none after a failure; the Future is done after ``on_commit`` returns."""
        ...


@runtime_checkable
class RunSummary(Protocol):
    """A destination that reports what a run did beyond counting records (applied changes, conflicts)."""

    def summary(self) -> str:
        """One line, logged when ``write`` ends."""
        ...


class ChunkRunner(Protocol):
    """Runs chunk jobs as parallel tasks (``engine``), yielding results as they finish."""

    spool: Any  # where tasks spool their lines (``shared.spool.Spool``)

    def run(self, func: Callable[[Any], Any], tasks: Iterable[Any]) -> Generator[Any, None, None]:
        """``func(task)`` for every task, in completion order (closing it cancels the tasks in flight)."""
        ...

    def expect_load(self, rows: int | None) -> None:
        """A full load of about ``rows`` rows (None: unknown) is planned; the engine may start now."""
        ...

    def close(self) -> None:
        """Stop the engine and remove what the run left."""
        ...
