"""pgoutput row changes (Insert, Update, Delete) decoded a run at a time, a column at a time.

A run is a list of consecutive messages for one relation version. Its bytes are joined into one
buffer and every TupleData is walked column by column with numpy over all the run's messages at
once: each column's kind (``t`` text, ``n`` NULL, ``u`` unchanged TOAST) and its text, gathered into
one Arrow string array. No Python object is made per value.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from olake_cli.core.errors import SourceError

TEXT, NULL, TOAST = ord("t"), ord("n"), ord("u")
INSERT, UPDATE, DELETE = ord("I"), ord("U"), ord("D")
KEY_TUPLE, OLD_TUPLE, NEW_TUPLE = ord("K"), ord("O"), ord("N")
ABSENT = 0  # a row without this tuple
_ROW_KIND = np.zeros(256, bool)
_ROW_KIND[[INSERT, UPDATE, DELETE]] = True
_COLUMN_KIND = np.zeros(256, bool)
_COLUMN_KIND[[TEXT, NULL, TOAST, ABSENT]] = True


@dataclass(slots=True)
class TupleColumn:
    """One column of a tuple over a run: kinds (``t``/``n``/``u``, 0 without the tuple) and texts."""

    kinds: np.ndarray  # uint8
    texts: pa.Array  # string, null unless the kind is 't'

    def rows(self, start: int, stop: int | None) -> TupleColumn:
        """The column for rows ``start`` to ``stop``."""
        stop = len(self.kinds) if stop is None else stop
        return TupleColumn(self.kinds[start:stop], self.texts.slice(start, stop - start))

    def take(self, rows: np.ndarray) -> TupleColumn:
        """The column for the given row positions."""
        return TupleColumn(self.kinds[rows], self.texts.take(pa.array(rows)))


@dataclass(slots=True)
class RunTuples:
    """A run's messages decoded: message kind and old-tuple marker per message, both tuples by column."""

    kinds: np.ndarray  # uint8: I, U or D
    old_markers: np.ndarray  # uint8: K, O or 0
    new: list[TupleColumn]
    old: list[TupleColumn]


def decode_run(messages: list[bytes], ncols: int, encoding: str) -> RunTuples:
    """Decode Insert/Update/Delete messages of one relation with ``ncols`` columns."""
    try:
        return _decode_run(messages, ncols, encoding)
    except IndexError:
        raise SourceError("pgoutput: malformed message: truncated tuple data") from None


def _decode_run(messages: list[bytes], ncols: int, encoding: str) -> RunTuples:
    lengths = np.fromiter(map(len, messages), np.int64, len(messages))
    ends = np.cumsum(lengths)
    starts = ends - lengths
    buf = np.frombuffer(b"".join(messages), np.uint8)
    kinds, markers = buf[starts], buf[starts + 5]
    if not _ROW_KIND[kinds].all():
        raise SourceError("pgoutput: a run holds a message that is not a row change")
    has_old = (markers == KEY_TUPLE) | (markers == OLD_TUPLE)
    if ((kinds == DELETE) & ~has_old).any():
        raise SourceError("pgoutput: Delete without 'K' or 'O' tuple")
    old, old_ends = _tuples(buf, np.where(has_old, starts + 6, -1), ncols, ends, encoding)
    has_new = kinds != DELETE
    new_marks = np.where(has_old, old_ends, starts + 5)
    if (buf[new_marks[has_new]] != NEW_TUPLE).any():
        raise SourceError("pgoutput: Insert or Update without 'N' tuple")
    new, _ = _tuples(buf, np.where(has_new, new_marks + 1, -1), ncols, ends, encoding)
    return RunTuples(kinds, np.where(has_old, markers, ABSENT).astype(np.uint8), new, old)


def _tuples(buf: np.ndarray, starts: np.ndarray, ncols: int, ends: np.ndarray,
            encoding: str) -> tuple[list[TupleColumn], np.ndarray]:
    """The TupleData at ``starts`` (-1: none) of every message, by column; and where each one ends."""
    present = starts >= 0
    pos = np.where(present, starts, 0)
    limit = np.where(present, ends, len(buf))
    if present.any() and not (_u16(buf, pos[present]) == ncols).all():
        raise SourceError(f"pgoutput: tuple data with another column count than its relation ({ncols})")
    pos = pos + 2
    columns = []
    for _ in range(ncols):
        if (present & (pos >= limit)).any():
            raise SourceError("pgoutput: malformed message: truncated tuple data")
        kind = np.where(present, buf[np.minimum(pos, len(buf) - 1)], ABSENT).astype(np.uint8)
        unknown = ~_COLUMN_KIND[kind]
        if unknown.any():
            raise SourceError(f"pgoutput: unsupported tuple column kind {chr(int(kind[unknown][0]))!r}")
        is_text = kind == TEXT
        length = np.where(is_text, _u32(buf, np.where(is_text, pos + 1, 0)), 0)
        columns.append(TupleColumn(kind, _gather_texts(buf, pos + 5, length, is_text, encoding)))
        pos = pos + 1 + np.where(is_text, 4 + length, 0)
    if (present & (pos > limit)).any():
        raise SourceError("pgoutput: malformed message: truncated tuple data")
    return columns, pos


def _u16(buf: np.ndarray, at: np.ndarray) -> np.ndarray:
    return (buf[at].astype(np.int64) << 8) | buf[at + 1]


def _u32(buf: np.ndarray, at: np.ndarray) -> np.ndarray:
    return (_u16(buf, at) << 16) | _u16(buf, at + 2)


def _gather_texts(buf: np.ndarray, starts: np.ndarray, lengths: np.ndarray, valid: np.ndarray,
                  encoding: str) -> pa.Array:
    """The byte ranges as one string array (null where not ``valid``), decoded from ``encoding``."""
    offsets = np.zeros(len(lengths) + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    index = np.repeat(starts - offsets[:-1], lengths) + np.arange(offsets[-1])
    validity = pa.py_buffer(np.packbits(valid, bitorder="little"))
    if offsets[-1] >= 2**31:
        raise SourceError("pgoutput: a run of changes holds more than 2 GiB of text")
    raw = pa.BinaryArray.from_buffers(pa.binary(), len(lengths), [validity, pa.py_buffer(offsets.astype(np.int32)),
                                                                   pa.py_buffer(buf[index])])
    try:
        if encoding in ("utf-8", "utf8"):
            return raw.cast(pa.string())  # validates UTF-8
        return pa.array([None if b is None else b.decode(encoding) for b in raw.to_pylist()], pa.string())
    except (pa.ArrowInvalid, UnicodeDecodeError) as exc:
        raise SourceError(f"pgoutput: malformed message: text not in the server encoding ({exc})") from None
