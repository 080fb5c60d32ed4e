"""The connector seams: what the pipelines need from a source and a destination.

Data moves one way: a :class:`Source` opens a :class:`ReadSession` (one consistent view of the
source for the run) on the driver, which plans full loads into chunks; each chunk becomes a picklable
:class:`ChunkReader` that runs inside a Spark task and yields Arrow record batches; change capture is
a :class:`ChangeCapture` yielding :class:`ChangeBatch` values in log order. A :class:`Destination`
buffers records and commits them together with a state. Positions are opaque outside their source:
the capture serialises them into a stream state and reads back the operation id they cover.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Protocol, runtime_checkable

from olake_cli.core.change_runs import ChangeRun
from olake_cli.core.opid import OpId

if TYPE_CHECKING:
    import pyarrow as pa

    from olake_cli.core.catalog import Catalog, CatalogStream
    from olake_cli.core.pipeline_identity import PipelineIdentity
    from olake_cli.core.state import State, StreamState

Log = Callable[[str], None]
StreamKey = tuple  # (namespace, name)


@runtime_checkable
class ChunkReader(Protocol):
    """One chunk (or one incremental range) of one stream; small and picklable, runs in a task."""

    def read_batches(self) -> Iterator["pa.RecordBatch"]:
        """The chunk's rows as Arrow batches whose columns are the stream's ``json_schema`` properties.

        Errors are raised as :class:`~olake_cli.core.errors.OlakeError` with secrets removed. A reader
        may also offer ``wire_columns(batch) -> dict[column, wire values] | None`` for columns it scans
        in its own text form (PostgreSQL's multi-dimensional arrays); those values are used as they are.

        A reader that may stop before its chunk ends (so that a long chunk commits its progress: a
        DynamoDB scan segment) also offers ``resume_point() -> Any`` (after its batches: None when it read
        the whole chunk, else where the rest begins) and ``rest_of_chunk(resume_point, number) ->
        (min, max)``: the bounds of chunk ``number`` holding that rest. The pipeline then records the
        chunk as done and appends the new chunk to the load, so chunk numbers keep the order they were
        added in (bounds must sort the same way: the state's merge sorts chunks by bounds).
        """
        ...


@dataclass
class FullLoadPlan:
    """A new full load: chunk bounds (exact, JSON-serialisable), keys to record in its state, and
    about how many rows it will read (None: the planner does not know)."""

    bounds: list[tuple[Any, Any]]
    extra: dict[str, Any] = field(default_factory=dict)
    row_estimate: int | None = None


class ReadSession(Protocol):
    """The source as one run sees it (for PostgreSQL: one exported snapshot shared by every chunk)."""

    warnings: list[str]

    def key_columns(self, stream: "CatalogStream") -> tuple[str, ...]:
        """The stream's primary key columns (named in errors about a value)."""
        ...

    def plan_full_load(self, stream: "CatalogStream") -> FullLoadPlan:
        """Chunks for a new full load of ``stream``."""
        ...

    def resume_blocker(self, stream: "CatalogStream", previous: "StreamState") -> str | None:
        """Why an unfinished full load cannot resume (its chunks no longer mean the same rows), or None."""
        ...

    def chunk_reader(self, stream: "CatalogStream", load: "StreamState", index: int) -> ChunkReader:
        """The reader of chunk ``index`` of the load whose state is ``load``."""
        ...

    def max_cursor(self, stream: "CatalogStream") -> Any:
        """The largest finite value of the incremental cursor now (None: none yet)."""
        ...

    def incremental_reader(self, stream: "CatalogStream", after: Any, upto: Any) -> ChunkReader:
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
    widened: list["CatalogStream"] = field(default_factory=list)
    resync: dict[StreamKey, str] = field(default_factory=dict)


class ChangeCapture(Protocol):
    """A source's change log for the run's ``cdc`` streams."""

    def preflight(self, state: "State", pipeline: "PipelineIdentity | None" = None) -> None:
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

    def position_of(self, stream_state: "StreamState | None") -> Any:
        """The change position a stream state holds, or None (a state of another kind)."""
        ...

    def with_position(self, stream_state: "StreamState", position: Any) -> "StreamState":
        """A copy of ``stream_state`` positioned at ``position``."""
        ...

    def read(self, streams: list["CatalogStream"], state: "State", typed: bool = False) -> Iterator[ChangeBatch]:
        """Changes after the streams' committed positions up to the log's end at the call, in order;
        ``typed`` allows typed runs (``ChangeRun.typed``), which a source may give or not."""
        ...


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

    def open_session(self, streams: list["CatalogStream"], log: Log) -> AbstractContextManager[ReadSession]:
        """A read session for the selected streams (validated against the live source)."""
        ...

    def change_capture(self, streams: list["CatalogStream"], log: Log) -> ChangeCapture:
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
    """Picklable: writes one full-load chunk from inside a task (``olake sync``).

    A sink whose tasks write over the network rather than into local files sets ``writes_local_files``
    to False, so any Spark master may run them.
    """

    def write(self, namespace: str | None, stream: str, load_id: str | None, chunk_index: int,
              load_op_key: str | None, json_schema: dict, batches: Iterable[tuple["pa.RecordBatch", dict | None]],
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


class Destination(Protocol):
    """A system olake writes to; rows become visible only together with the state that covers them.

    A destination may also offer ``summary() -> str``: what the run did beyond counting records (the
    PostgreSQL destination's applied changes and conflicts), logged when ``write`` ends; and
    ``begin_commit(state, on_commit) -> concurrent.futures.Future``: ``commit`` made on a thread of its
    own while the input goes on, which calls ``on_commit(committed_state)`` once the commit is made (in
    the order begun; none after a failure), the Future done after it returns.
    """

    def open(self, catalog: "Catalog") -> None:
        """Prepare the streams (and finish or undo a commit a killed run left halfway)."""
        ...

    def add(self, key: StreamKey, data: dict[str, Any]) -> None:
        """Buffer one record's data."""
        ...

    def add_table(self, key: StreamKey, table: "pa.Table", warnings: list[str]) -> None:
        """Buffer full-load rows already decoded to the stream's destination types, after any
        record added before (``warnings``: the decoder's, to report once per stream)."""
        ...

    def widen(self, stream: "CatalogStream") -> None:
        """Later records of ``stream`` follow its new, wider schema."""
        ...

    def observe_state(self, state: "State") -> None:
        """Learn which load the records that follow belong to."""
        ...

    def commit(self, state: "State") -> "State":
        """Make every buffered record of the streams ``state`` names durable and visible, with it;
        returns ``state`` itself, or (when the destination no longer holds the data of a load ``state``
        continues) a copy in which that stream is a re-sync marker (``core.resync``), its records dropped."""
        ...

    def has_uncommitted(self) -> bool:
        """Whether records arrived that no state covers."""
        ...

    def committed_state(self, stream: "CatalogStream") -> dict | None:
        """The last stream state committed with the stream's data (``state recover``), or None."""
        ...

    def chunk_sink(self) -> ChunkSink | None:
        """A sink for tasks that write full-load chunks themselves, or None (rows go through ``add``)."""
        ...

    def lock_path(self) -> str:
        """The lock file runs writing into this destination take (``core.locks``): one writer at a time."""
        ...
