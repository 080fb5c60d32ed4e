"""The write use case: consume protocol lines, buffer records, commit, then echo and persist STATE."""

from __future__ import annotations

from typing import Any, BinaryIO, Callable

import orjson

from olake_cli.core import messages
from olake_cli.core.catalog import Catalog, parse_catalog
from olake_cli.core.errors import CatalogError, OlakeError, ProtocolError, UpstreamError
from olake_cli.core.faults import crash_point
from olake_cli.core.record_block import BlockDecoder
from olake_cli.core.record_lines import record_prefix
from olake_cli.core.row_hooks import RowHooks, catalog_hooks
from olake_cli.core.schema_change import SchemaDiff, compare_columns, olake_type_of
from olake_cli.core.state import FileStateStore, parse_state
from olake_cli.core.validation import validate_message


class WritePipeline:
    """Drives a destination from a stream of protocol messages (``olake write``)."""

    def __init__(self, destination, catalog: Catalog | None, state_store: FileStateStore | None,
                 out: messages.MessageWriter, log: Callable[[str], None], rows_by_tasks: Callable[[], int] = int,
                 pass_traces: bool = False) -> None:
        self.destination, self.catalog, self.store = destination, catalog, state_store
        self.out, self.log = out, log
        self.keys: set[tuple] = set()
        self.prefixes: dict[bytes, tuple[tuple, BlockDecoder]] = {}  # record_prefix -> stream, decoder
        self.hooks: dict[tuple, RowHooks] = {}  # streams with a row filter or transform
        self.upstream_error: tuple[str, str] | None = None
        self.records = 0
        self.states = 0
        self.known_state = state_store.load() if state_store is not None else None
        self.rows_by_tasks = rows_by_tasks  # sync: rows the Spark tasks wrote themselves
        self.pass_traces = pass_traces  # sync: the reader's ESTIMATE and STREAM_STATUS traces go on to stdout
        if catalog is not None:
            self._adopt(catalog)

    def run(self, stdin: BinaryIO) -> None:
        """Process every line of ``stdin``; raise on the first bad line (naming its number).

        Runs of RECORD lines of one stream in ``read``'s own layout are decoded a block at a time
        (``core.record_block``); every other line, and every line of a run the block decoder
        refuses, goes through ``_line`` one at a time.
        """
        runs = _RunReader(stdin, self._on_run, self._line)
        runs.prefixes = self.prefixes
        runs.read_all()
        lineno = runs.lineno
        if self.destination.has_uncommitted():
            self.log("records after the last STATE were not committed (no STATE covers them)")
        by_tasks = self.rows_by_tasks()
        tasks = f" (plus {by_tasks} row(s) written by the Spark tasks)" if by_tasks else ""
        self.log(f"wrote {self.records} record(s){tasks}, committed {self.states} state(s) from {lineno} line(s)")
        if hasattr(self.destination, "summary"):
            self.log(self.destination.summary())
        if self.upstream_error:
            message, failure_type = self.upstream_error
            raise UpstreamError(f"the reading side failed: {message}", failure_type)

    def _on_run(self, prefix: bytes, lines: bytes, first_lineno: int) -> None:
        """A run of RECORD lines of one stream: decoded as one block, or line by line if refused."""
        key, decoder = self.prefixes[prefix]
        warnings: list[str] = []
        table = decoder.decode(lines, warnings)
        if table is None:
            for offset, line in enumerate(lines.splitlines(keepends=True)):
                self._line(line, first_lineno + offset)
            return
        self.records += table.num_rows
        if key in self.hooks:
            table = self.hooks[key].apply(table)
        if table.num_rows:
            self.destination.add_table(key, table, warnings)

    def _line(self, line: bytes, lineno: int) -> None:
        """One line: a well-formed RECORD of a known stream takes a short path, others full validation."""
        try:
            msg = orjson.loads(line)
        except orjson.JSONDecodeError:
            msg = None
        record = msg.get("record") if type(msg) is dict and msg.get("type") == "RECORD" else None
        if type(record) is dict:
            data, key = record.get("data"), (record.get("namespace"), record.get("stream"))
            if type(data) is dict and key in self.keys:
                self._add(key, data)
                return
        if line.strip():
            self._handle(self._parse(line, lineno), lineno)

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
        if kind == "RECORD":
            record = msg["record"]
            key = (record.get("namespace"), record["stream"])
            if self.catalog is None:
                raise ProtocolError(f"stdin line {lineno}: RECORD before any CATALOG message; "
                                    f"give --catalog or let the reader send its CATALOG first")
            if key not in self.keys:
                raise ProtocolError(f"stdin line {lineno}: record for unknown stream "
                                    f"'{key[0]}.{key[1]}' (not in the catalog)")
            self._add(key, record["data"])
        elif kind == "STATE":
            self._commit_state(msg)
        elif kind == "CATALOG":
            self._on_catalog(parse_catalog(msg, what=f"stdin line {lineno}"))
        elif kind == "TRACE" and msg["trace"]["type"] != "ERROR":
            if self.pass_traces:  # after the STATEs before it, so COMPLETE follows the stream's last commit
                self.out.write(msg)
        elif kind == "TRACE":
            error = msg["trace"].get("error") or {}
            self.upstream_error = (error.get("message", "unknown error"), error.get("failure_type", "system_error"))
            self.log(f"upstream error: {self.upstream_error[0]}")
        elif kind == "LOG":
            self.log(f"upstream {msg['log']['level']}: {msg['log']['message']}")

    def _add(self, key: tuple, data: dict) -> None:
        """One record to the destination (through the stream's row filter and transform, if any)."""
        self.records += 1
        hooks = self.hooks.get(key)
        if hooks is None or data.get("_olake_op") == "t":
            self.destination.add(key, data)
        else:
            table = hooks.apply(hooks.record_table(data))
            if table.num_rows:
                self.destination.add_table(key, table, [])

    def _commit_state(self, msg: dict[str, Any]) -> None:
        state = parse_state(msg["state"], what="STATE message")
        self.destination.commit(state)  # the rows before it become live with it (manifest)
        if self.store is not None:
            self.store.merge_and_save(state)
            crash_point("state-saved")
        self.out.write(msg)
        self.out.flush()
        self.states += 1

    def _on_catalog(self, incoming: Catalog) -> None:
        """Adopt the first catalog; later ones (or the reader's against --catalog) may only widen types."""
        if self.catalog is None:
            self._adopt(incoming)
            return
        for stream in incoming.streams:
            mine = self.catalog.find(stream.namespace, stream.name)
            if mine is None:
                raise CatalogError(f"catalog: stream '{stream.namespace}.{stream.name}' from the reader "
                                   f"is not in --catalog")
            diff = compare_columns(mine.json_schema.get("properties", {}), _olake_types(stream))
            if diff.added or diff.dropped or diff.incompatible:
                raise CatalogError(f"catalog: the reader's schema of '{stream.namespace}.{stream.name}' "
                                   f"differs from the one in use: {_describe(diff)} (run discover again)")
            if diff.widened:
                self.destination.widen(stream)
                self.catalog.streams[self.catalog.streams.index(mine)] = stream
                self._add_prefix(stream)
                self.hooks.update(catalog_hooks(Catalog([stream])))
                changes = ", ".join(f"'{c}' {old} -> {new}" for c, (old, new) in diff.widened.items())
                self.log(f"{stream.label}: column(s) widened: {changes}; later files use the wider type")

    def _add_prefix(self, stream) -> None:
        self.prefixes[record_prefix(stream.namespace, stream.name)] = (
            stream.key, BlockDecoder(stream.json_schema, stream.namespace))

    def _adopt(self, catalog: Catalog) -> None:
        self.catalog = catalog
        self.destination.open(catalog)
        self.keys = {s.key for s in catalog.streams}
        self.hooks = catalog_hooks(catalog)
        self.prefixes.clear()
        for stream in catalog.streams:
            self._add_prefix(stream)
        if self.known_state is not None:
            self.destination.observe_state(self.known_state)  # which load the first records belong to


def _olake_types(stream) -> dict[str, str]:
    """Column name -> olake type of a catalog stream (columns without one compare as equal)."""
    props = stream.json_schema.get("properties", {})
    return {name: olake_type_of(prop) or "" for name, prop in props.items()}


def _describe(diff: SchemaDiff) -> str:
    """The column differences that are not widenings, naming each column."""
    parts = [f"column '{c}' added" for c in diff.added] + [f"column '{c}' dropped" for c in diff.dropped]
    parts += [f"column '{c}' {old} -> {new}" for c, (old, new) in diff.incompatible.items()]
    return "; ".join(parts)


class _RunReader:
    """Splits stdin into runs of one stream's RECORD lines (by ``record_prefix``) and single lines.

    A run grows until another kind of line, a size limit or the end of input; it is never held
    back waiting for input, because only a STATE line (which ends the run first) commits rows.
    """

    RUN_BYTES = 1 << 24

    def __init__(self, stdin: BinaryIO, on_run: Callable[[bytes, bytes, int], None],
                 on_line: Callable[[bytes, int], None]) -> None:
        self.stdin, self.on_run, self.on_line = stdin, on_run, on_line
        self.prefixes: dict[bytes, Any] = {}
        self.lineno = 0  # lines handed on so far
        self.run_prefix: bytes | None = None
        self.run_parts: list[bytes] = []
        self.run_size = self.run_lines = 0

    def read_all(self) -> None:
        """Read stdin to its end, handing on every run and line in order."""
        read = getattr(self.stdin, "read1", self.stdin.read)
        tail = b""
        while True:
            data = read(1 << 20)
            if not data:
                break
            cut = data.rfind(b"\n") + 1
            if cut == 0:
                tail += data
                continue
            self._lines(tail + data[:cut])
            tail = data[cut:]
        if tail:
            self._lines(tail)
        self._flush()

    def _lines(self, block: bytes) -> None:
        prefix = self.run_prefix
        if prefix is not None and block.startswith(prefix):
            lines = block.count(b"\n") + (not block.endswith(b"\n"))
            if block.count(b"\n" + prefix) + 1 == lines:  # the whole block continues the run
                self._extend(prefix, block, lines)
                return
        pos, size = 0, len(block)
        while pos < size:
            end = block.find(b"\n", pos) + 1 or size
            if prefix is None or not block.startswith(prefix, pos):
                prefix = next((p for p in self.prefixes if block.startswith(p, pos)), None)
                self._flush()
                if prefix is None:
                    self.lineno += 1
                    self.on_line(block[pos:end], self.lineno)
                    pos = end
                    continue
            self._extend(prefix, block[pos:end], 1)
            pos = end

    def _extend(self, prefix: bytes, lines: bytes, count: int) -> None:
        if prefix != self.run_prefix:
            self._flush()
            self.run_prefix = prefix
        self.run_parts.append(lines)
        self.run_size += len(lines)
        self.run_lines += count
        if self.run_size >= self.RUN_BYTES:
            self._flush()
            self.run_prefix = prefix

    def _flush(self) -> None:
        if self.run_parts:
            first = self.lineno + 1
            self.lineno += self.run_lines
            self.on_run(self.run_prefix, b"".join(self.run_parts), first)
        self.run_prefix, self.run_parts, self.run_size, self.run_lines = None, [], 0, 0
