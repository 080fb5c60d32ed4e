"""Splits ``write``'s input into runs of one stream's RECORD lines in ``read``'s layout, and single lines."""

from __future__ import annotations

from typing import Any, BinaryIO
from collections.abc import Callable, Iterable, Iterator

import orjson


def blocks_of(stdin: BinaryIO) -> Iterator[bytes]:
    """The bytes of ``stdin`` as they arrive, in blocks of up to 1 MiB."""
    read = getattr(stdin, "read1", stdin.read)
    while True:
        data = read(1 << 20)
        if not data:
            return
        yield data


class RunReader:
    """Splits the input into runs of one stream's RECORD lines (by ``record_prefix``) and single lines.

    A run grows until another kind of line, a size limit or the end of input; it is never held
    back waiting for input, because only a STATE line (which ends the run first) commits rows. The
    input is blocks of bytes, and, from ``sync``'s in-process pipe, other items between them (typed
    changes), handed to ``on_item`` in their place.
    """

    RUN_BYTES = 1 << 24

    def __init__(self, blocks: Iterable[Any], on_run: Callable[[bytes, bytes, int], None],
                 on_line: Callable[[bytes, int], None], on_item: Callable[[Any], None] = lambda item: None) -> None:
        self.blocks, self.on_run, self.on_line, self.on_item = blocks, on_run, on_line, on_item
        self.prefixes: dict[bytes, Any] = {}
        self.lineno = 0  # lines handed on so far
        self.run_prefix: bytes | None = None
        self.run_parts: list[bytes] = []
        self.run_size = self.run_lines = 0
        self.cut = False  # the input ended inside a line (left out)

    def read_all(self) -> None:
        """Read the input to its end, handing on every run, line and item in order."""
        tail = b""
        for data in self.blocks:
            if not isinstance(data, bytes):
                if tail:  # a line cut short before an item: only a broken writer leaves one
                    self._lines(tail)
                    tail = b""
                self._flush()
                self.on_item(data)
                continue
            cut = data.rfind(b"\n") + 1
            if cut == 0:
                tail += data
                continue
            self._lines(tail + data[:cut])
            tail = data[cut:]
        if tail and _whole_json(tail):  # a last line without its newline
            self._lines(tail)
        elif tail:  # the input ended inside a line: its writer stopped while writing it
            self.cut = True
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


def _whole_json(line: bytes) -> bool:
    try:
        orjson.loads(line)
    except orjson.JSONDecodeError:
        return False
    return True
