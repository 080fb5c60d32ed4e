"""The write use case: consume protocol lines, buffer records, commit, then echo and persist STATE.

Records are checked on arrival, a batch at a time (runs in ``read``'s layout by ``record_block``, other
lines gathered per stream and decoded together): a value of the wrong type stops the run at once,
naming its line, stream and column. The input must end properly (``core.input_end``): one cut short
by a reader that died commits what its STATEs covered and then fails.
"""

from __future__ import annotations

from collections import deque
from concurrent.futures import Future
from typing import Any, BinaryIO
from collections.abc import Callable, Iterable

import orjson

from olake_cli.core import messages
from olake_cli.core.catalog import Catalog, parse_catalog
from olake_cli.core.codec.decode import decode_rows
from olake_cli.core.contracts import BackgroundCommits, Destination, RunSummary
from olake_cli.core.errors import (CatalogError, DestinationError, OlakeError, ProtocolError, TransientError,
                                   UpstreamError)
from olake_cli.core.faults import crash_point
from olake_cli.core.input_end import InputEnd, committed_text
from olake_cli.core.interrupts import signals_held
from olake_cli.core.opid import OpId
from olake_cli.core.record_block import BlockDecoder
from olake_cli.core.record_lines import record_prefix
from olake_cli.core.row_hooks import RowHooks, catalog_hooks
from olake_cli.core.row_metadata import COMMIT_TS, OP, OP_ID
from olake_cli.core.schema_change import SchemaDiff, compare_columns
from olake_cli.core.schema_drift import apply_to_catalog, changed_columns, column_type, explained
from olake_cli.core.state import FileStateStore, State, parse_state
from olake_cli.core.validation import validate_message
from olake_cli.pipeline.airbyte_input import AirbyteStreams, is_airbyte_state
from olake_cli.pipeline.in_process import ChangeTable
from olake_cli.pipeline.stdin_runs import RunReader, blocks_of
from olake_cli.pipeline.stream_buffer import StreamBuffers

BATCH_ROWS = 20_000  # line-path records decoded (and so checked) together
COMMITS_AHEAD = 2  # commits a destination may have under way while the input goes on


class WritePipeline:
    """Drives a destination from a stream of protocol messages (``olake write``)."""

    def __init__(self, destination: Destination, catalog: Catalog | None, state_store: FileStateStore | None,
                 out: messages.MessageWriter, log: Callable[[str], None], rows_by_tasks: Callable[[], int] = int,
                 pass_traces: bool = False, before_open: Callable[[], None] = lambda: None,
                 on_committed: Callable[[State], None] = lambda state: None, floors: dict[tuple, str] | None = None,
                 on_state: Callable[[], None] = lambda: None) -> None:
        self.destination, self.catalog, self.store = destination, catalog, state_store
        self.catalog_given = catalog is not None  # --catalog; else the reader's first CATALOG is adopted
        self.out, self.log = out, log
        self.buffers = StreamBuffers(destination, log, floors)  # each stream's rows until a STATE commits them
        self.airbyte = AirbyteStreams(self.buffers, log)  # the streams an Airbyte source feeds
        self.keys: set[tuple] = set()
        self.prefixes: dict[bytes, tuple[tuple, BlockDecoder]] = {}  # record_prefix -> stream, decoder
        self.decoders: dict[tuple, BlockDecoder] = {}
        self.hooks: dict[tuple, RowHooks] = {}  # streams with a row filter or transform
        self.batch: tuple[tuple, list[dict], list[int]] | None = None  # line-path records of one stream
        self.upstream_error: tuple[str, str] | None = None
        self.input_end = InputEnd()
        self.pending: deque[Future] = deque()  # commits under way, oldest first
        self.commit_failed = False
        self.records = 0
        self.states = 0
        self.known_state = state_store.load() if state_store is not None else None
        self.rows_by_tasks = rows_by_tasks  # sync: rows the Spark tasks wrote themselves
        self.pass_traces = pass_traces  # sync: the reader's ESTIMATE and STREAM_STATUS traces go on to stdout
        self.before_open = before_open  # write: takes the destination's lock
        self.on_committed, self.on_state = on_committed, on_state  # sync --follow; a STATE taken (lane_journal)
        self.opened = False  # the destination is opened when the input first needs it, not before
        if catalog is not None:
            self._adopt(catalog)

    def run(self, stdin: BinaryIO) -> None:
        """Process every line of ``stdin``; raise on the first bad line (naming its number), on an
        error the reading side reported, or when the input ended before the reader's final messages.

        Runs of RECORD lines of one stream in ``read``'s own layout are decoded a block at a time
        (``core.record_block``); every other line, and every line of a run the block decoder
        refuses, goes through ``_line`` one at a time.
        """
        self.run_items(blocks_of(stdin))

    def run_items(self, items: Iterable[bytes | ChangeTable]) -> None:
        """:meth:`run` over blocks of input bytes and, between them, change tables (``sync``)."""
        runs = RunReader(items, self._on_run, self._line, self._on_changes)
        runs.prefixes = self.prefixes
        try:
            runs.read_all()
            self._flush_batch()
            self._settle()
        except BaseException:
            self._settle_after_failure()
            raise
        uncommitted = self.opened and self.buffers.has_uncommitted()  # never made live: the errors say so
        by_tasks = self.rows_by_tasks()
        tasks = f" (plus {by_tasks} row(s) written by the chunk tasks)" if by_tasks else ""
        if self.records or self.states or by_tasks:
            self.log(f"wrote {self.records} record(s){tasks}, committed {self.states} state(s) "
                     f"from {runs.lineno} line(s)")
        if self.opened and isinstance(self.destination, RunSummary):
            self.log(self.destination.summary())
        if self.upstream_error:  # the reader printed its error: this line points to it, once
            message, failure_type = self.upstream_error
            raise UpstreamError(f"the reading side failed (the reader's own error line says why); "
                                f"{committed_text(self.states, uncommitted)}", failure_type, message)
        expected = None if self.catalog is None else {s.key: s.label for s in self.catalog.selected_streams()}
        stopped = self.input_end.stopped_early(expected, self.states, uncommitted, runs.cut)
        if stopped is not None:
            raise TransientError(stopped)
        if uncommitted:
            raise ProtocolError("the input ended with records after its last STATE: they were not committed "
                                "(the reading side must end with a STATE covering every record)")

    def _on_run(self, prefix: bytes, lines: bytes, first_lineno: int) -> None:
        """A run of RECORD lines of one stream: decoded as one block, or line by line if refused."""
        self._flush_batch()
        key, decoder = self.prefixes[prefix]
        warnings: list[str] = []
        table = decoder.decode(lines, warnings)
        if table is None:
            for offset, line in enumerate(lines.splitlines(keepends=True)):
                self._line(line, first_lineno + offset)
            self._flush_batch()
            return
        self._open()
        self._add_table(key, table, warnings)

    def _on_changes(self, item: ChangeTable) -> None:
        """Changes decoded by ``sync``'s reader in this process: added as a decoded run would be."""
        self._flush_batch()
        self._open()
        self._add_table(item.stream, item.table, list(item.warnings))

    def _line(self, line: bytes, lineno: int) -> None:
        """One line: a well-formed RECORD of a known stream joins the batch, others get full validation."""
        try:
            msg = orjson.loads(line)
        except orjson.JSONDecodeError:
            msg = None
        record = msg.get("record") if type(msg) is dict and msg.get("type") == "RECORD" else None
        if type(record) is dict:
            data, key = record.get("data"), (record.get("namespace"), record.get("stream"))
            if type(data) is dict and key in self.keys:
                self._add_record(key, data, lineno)
                return
        if line.strip():
            self._flush_batch()
            self._handle(self._parse(line, lineno), lineno)

    def _add_record(self, key: tuple, data: dict, lineno: int) -> None:
        """Gather a line-path record with the others of its stream; decoded when the batch ends."""
        if self.batch is not None and self.batch[0] != key:
            self._flush_batch()
        if self.batch is None:
            self.batch = (key, [], [])
        self.batch[1].append(data)
        self.batch[2].append(lineno)
        if len(self.batch[1]) >= BATCH_ROWS:
            self._flush_batch()

    def _flush_batch(self) -> None:
        """Decode the gathered records (a bad value names its line) and hand them on, truncates apart."""
        if self.batch is None:
            return
        (key, rows, linenos), self.batch = self.batch, None
        self._open()
        start = 0
        for end in [i for i, row in enumerate(rows) if row.get(OP) == "t"] + [len(rows)]:
            if end > start:
                self._add_rows(key, rows[start:end], linenos[start:end])
            if end < len(rows):
                self._truncate(key, rows[end], linenos[end])  # a truncate drops what came before it
            start = end + 1

    def _truncate(self, key: tuple, row: dict, lineno: int) -> None:
        """A truncate record: the stream's rows before it are dropped, and the stream emptied at the commit."""
        try:
            op_key = None if row.get(OP_ID) is None else OpId.from_json(row[OP_ID]).to_key()
        except OlakeError as exc:
            raise ProtocolError(f"stdin line {lineno}: {exc.message}") from None
        commit_ts = row.get(COMMIT_TS)
        self.buffers.truncate(key, op_key, commit_ts if isinstance(commit_ts, int) else None)
        self.records += 1

    def _add_rows(self, key: tuple, rows: list[dict], linenos: list[int]) -> None:
        decoder, warnings = self.decoders[key], []
        try:
            table = decoder.decode_rows(rows, warnings)
        except (ProtocolError, DestinationError):
            raise self._bad_row(key, rows, linenos) from None
        self._add_table(key, table, warnings)

    def _add_table(self, key: tuple, table, warnings: list[str]) -> None:
        """Decoded records to their stream's buffer, through the stream's row filter and transform if any."""
        self.records += table.num_rows
        table = self.airbyte.rows(key, table)
        if key in self.hooks:
            table = self.hooks[key].apply(table)
        if table.num_rows:
            self.buffers.add(key, table, warnings)

    def _bad_row(self, key: tuple, rows: list[dict], linenos: list[int]) -> OlakeError:
        """The error of the first row of a batch that failed to decode, naming its line, stream and column."""
        decoder, low, high = self.decoders[key], 0, len(rows)
        while high - low > 1:  # rows[low:high] holds the first bad row
            middle = (low + high) // 2
            try:
                decoder.decode_rows(rows[low:middle], [])
                low = middle
            except (ProtocolError, DestinationError):
                high = middle
        stream = self.catalog.find(*key)
        try:
            decode_rows(rows[low:high], stream.json_schema, all_nullable=True, stream=stream.label,
                        key_columns=tuple(stream.primary_key_columns))
        except DestinationError as exc:  # names the stream, the column and the row's key itself
            return DestinationError(f"stdin line {linenos[low]}: {exc.message}")
        except ProtocolError as exc:
            return ProtocolError(f"stdin line {linenos[low]}: stream '{stream.label}', {exc.message}")
        return ProtocolError(f"stdin line {linenos[low]}: stream '{stream.label}': a value does not fit its column")

    def _parse(self, line: bytes, lineno: int) -> dict[str, Any]:
        try:
            msg = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            hint = " (truncated line?)" if not line.endswith(b"\n") else ""
            raise ProtocolError(f"stdin line {lineno}: not valid JSON{hint}: {exc}") from None
        try:
            validate_message(msg, what=f"stdin line {lineno}")
        except OlakeError as exc:
            raise ProtocolError(exc.message) from None
        return msg

    def _handle(self, msg: dict[str, Any], lineno: int) -> None:
        kind = msg["type"]
        if kind == "RECORD":  # a valid RECORD of a known stream took the short path in ``_line``
            record = msg["record"]
            if self.catalog is None:
                raise ProtocolError(f"stdin line {lineno}: RECORD before any CATALOG message: give --catalog (an "
                                    f"Airbyte source sends none: the ConfiguredCatalog it reads with)")
            raise ProtocolError(f"stdin line {lineno}: record for unknown stream "
                                f"'{record.get('namespace')}.{record['stream']}' (not in the catalog)")
        if kind == "STATE":
            self._commit_state(msg)
        elif kind == "CATALOG":
            self._on_catalog(parse_catalog(msg, what=f"stdin line {lineno}"))
        elif kind == "TRACE" and msg["trace"]["type"] != "ERROR":
            if msg["trace"]["type"] == "STREAM_STATUS":
                status = msg["trace"]["stream_status"]
                self.input_end.status(status["stream_descriptor"], status["status"])
            if self.pass_traces:  # after the STATEs before it, so COMPLETE follows the stream's last commit
                self._settle()
                self.out.write(msg)
        elif kind == "TRACE":
            error = msg["trace"].get("error") or {}
            self.upstream_error = (error.get("message", "unknown error"), error.get("failure_type", "system_error"))
        elif kind == "LOG":
            self.log(f"upstream {msg['log']['level']}: {msg['log']['message']}")

    def _commit_state(self, msg: dict[str, Any]) -> None:
        """Commit the rows before a STATE with it, merge it into --state, echo it: as one step that an
        interrupt waits for, so a commit is made, saved and acknowledged, or not begun.

        A destination that commits in the background (``BackgroundCommits``) does so while the input goes
        on, at most :data:`COMMITS_AHEAD` commits ahead; its thread saves and echoes each STATE once its
        commit is made, in order, and the first failure stops the run here."""
        state = msg["state"]
        given = self.airbyte.olake_state(state) if is_airbyte_state(state) else parse_state(state, what="STATE message")
        self._open()
        self.on_state()
        if not isinstance(self.destination, BackgroundCommits):
            with signals_held():
                state, batches = self.buffers.take(given)
                self.destination.commit(batches)
                self._acknowledge(state, msg, given)
            return
        state, batches = self.buffers.take(given)
        self.pending.append(self.destination.begin_commit(batches, lambda: self._acknowledge(state, msg, given)))
        while self.pending and (len(self.pending) > COMMITS_AHEAD or self.pending[0].done()):
            self._settle_one()

    def _acknowledge(self, state: State, msg: dict[str, Any], given: State) -> None:
        """A commit the destination made of ``state`` (for the STATE ``msg`` gave as ``given``): merged
        into --state and echoed."""
        if state is not given:  # a stream whose data the destination lost is marked to load anew
            msg = messages.state_message(state)
        if self.store is not None:
            self.store.merge_and_save(state)
            crash_point("state-saved")
        self.on_committed(state)
        self.out.write(msg)
        self.out.flush()
        self.states += 1

    def _settle_one(self) -> None:
        """Wait for the oldest commit under way (an interrupt waits for it); raise its failure."""
        future = self.pending.popleft()
        with signals_held():
            self.commit_failed = future.exception() is not None
            future.result()

    def _settle(self) -> None:
        """Wait until every commit under way is made and acknowledged (only then may this thread write
        to stdout again)."""
        while self.pending:
            self._settle_one()

    def _settle_after_failure(self) -> None:
        """The run fails: wait for every commit under way, each made and acknowledged or refused (none
        is made after one that failed), so the process never ends with one in flight; a failure of a
        commit is logged unless the run failed of a commit already."""
        while self.pending:
            future = self.pending.popleft()
            with signals_held():
                error = future.exception()
            if error is not None and not self.commit_failed:
                self.commit_failed = True
                self.log(f"a commit under way when the run failed did not complete: {error}")

    def _on_catalog(self, incoming: Catalog) -> None:
        """Adopt the first catalog; later ones (or the reader's against --catalog) may only widen types."""
        incoming = self.airbyte.adopt(incoming)
        self.input_end.announce(incoming.streams)
        self._settle()
        if self.catalog is None:
            self._adopt(incoming)
            self._open()
            return
        self._open()
        for stream in incoming.streams:
            mine = self.catalog.find(stream.namespace, stream.name)
            if mine is None and not self.catalog_given:  # a stream the reader found later (--follow)
                self._add_stream(stream)
                continue
            if mine is None:
                raise CatalogError(f"catalog: stream '{stream.namespace}.{stream.name}' from the reader "
                                   f"is not in --catalog")
            diff = compare_columns(mine.json_schema.get("properties", {}), stream.olake_types)
            drift = explained(mine, stream)  # columns the reader's source widened (core/schema_drift)
            diff.added = [c for c in diff.added if c not in drift]
            diff.incompatible = {c: t for c, t in diff.incompatible.items() if c not in drift}
            if diff.added or diff.dropped or diff.incompatible:
                raise CatalogError(f"catalog: the reader's schema of '{stream.namespace}.{stream.name}' "
                                   f"differs from the one in use: {_describe(diff)} (run discover again)")
            changed = list(diff.widened) + [c for c in changed_columns(mine, stream) if c in drift
                                            and c not in diff.widened]
            if changed:
                self.buffers.widen(stream)
                self.catalog.streams[self.catalog.streams.index(mine)] = stream
                self._add_decoder(stream)
                self.hooks.update(catalog_hooks(Catalog([stream])))
                changes = ", ".join(f"'{c}' {column_type(mine, c)} -> {column_type(stream, c)}" for c in changed)
                self.log(f"{stream.label}: column(s) widened: {changes}; later files use the wider type")

    def _add_stream(self, stream) -> None:
        """A stream that a later catalog of the reader adds: opened beside the others."""
        self.catalog.streams.append(stream)
        self.keys.add(stream.key)
        self._add_decoder(stream)
        self.hooks.update(catalog_hooks(Catalog([stream])))
        self.buffers.open(Catalog([stream]))
        self.log(f"{stream.label}: a new stream in the reader's catalog; written from now on")

    def _add_decoder(self, stream) -> None:
        decoder = BlockDecoder(stream.json_schema, stream.namespace)
        self.prefixes[record_prefix(stream.namespace, stream.name)] = (stream.key, decoder)
        self.decoders[stream.key] = decoder

    def _adopt(self, catalog: Catalog) -> None:
        catalog = self.airbyte.adopt(catalog)
        apply_to_catalog(catalog, self.known_state)  # columns the source widened in earlier runs
        self.catalog = catalog
        self.keys = {s.key for s in catalog.streams}
        self.hooks = catalog_hooks(catalog)
        self.prefixes.clear()
        for stream in catalog.streams:
            self._add_decoder(stream)

    def _open(self) -> None:
        """Open the destination on the input's first CATALOG, record or STATE: an input carrying only
        the reader's error (a source that could not be opened) leaves the destination untouched."""
        if self.opened or self.catalog is None:
            return
        self.before_open()
        self.buffers.open(self.catalog)
        if self.known_state is not None:
            self.buffers.observe(self.known_state)  # which load the first records belong to
        self.opened = True


def _describe(diff: SchemaDiff) -> str:
    """The column differences that are not widenings, naming each column."""
    parts = [f"column '{c}' added" for c in diff.added] + [f"column '{c}' dropped" for c in diff.dropped]
    parts += [f"column '{c}' {old} -> {new}" for c, (old, new) in diff.incompatible.items()]
    return "; ".join(parts)
