"""Change-log positions: PostgreSQL LSNs and the operation identifier (OpId) every CDC event carries.

Representations, chosen so state files stay exact and readable:

* An LSN is an ``int`` in memory (0 .. 2**64-1). In JSON (state ``cursor_field`` and friends) it is
  the PostgreSQL text form ``"16/B374D848"`` (:func:`format_lsn` / :func:`parse_lsn`), never a bare
  number, so tools that read JSON numbers as doubles cannot round it.
* An :class:`OpId` is ``(commit_lsn, seq)``: the commit LSN of the event's transaction and its
  1-based position inside that transaction (seeds/000, 001: two u64s, strictly increasing over a
  change stream). ``to_json()`` gives ``[commit_lsn, seq]`` as JSON integers (orjson and Python
  keep u64 exact); ``to_key()`` gives 32 upper-case hex digits whose *string* order equals the
  OpId order, for destinations that store the identifier in a column and recover ``max()`` of it.
"""

from __future__ import annotations

import re
from typing import Any, NamedTuple

from olake_cli.core.errors import StateError

U64_MAX = (1 << 64) - 1
_LSN_RE = re.compile(r"([0-9A-Fa-f]{1,8})/([0-9A-Fa-f]{1,8})")
_KEY_RE = re.compile(r"[0-9A-F]{32}")


def parse_lsn(text: str) -> int:
    """Parse a PostgreSQL LSN such as ``"16/B374D848"`` into an integer."""
    match = _LSN_RE.fullmatch(text) if isinstance(text, str) else None
    if match is None:
        raise StateError(f"invalid LSN {text!r}; expected hexadecimal 'XXXXXXXX/XXXXXXXX'")
    return (int(match.group(1), 16) << 32) | int(match.group(2), 16)


def format_lsn(lsn: int) -> str:
    """Format an integer LSN the way PostgreSQL prints it (``"16/B374D848"``)."""
    if not 0 <= lsn <= U64_MAX:
        raise ValueError(f"LSN out of range: {lsn}")
    return f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"


class OpId(NamedTuple):
    """Operation identifier of one change: (commit LSN of its transaction, 1-based sequence in it)."""

    commit_lsn: int
    seq: int

    def to_json(self) -> list[int]:
        """JSON form ``[commit_lsn, seq]`` (two exact integers)."""
        return [self.commit_lsn, self.seq]

    @classmethod
    def from_json(cls, value: Any) -> OpId:
        """Inverse of :meth:`to_json`; also accepts the :meth:`to_key` string form."""
        if isinstance(value, str):
            return cls.from_key(value)
        if (isinstance(value, (list, tuple)) and len(value) == 2
                and all(type(v) is int and 0 <= v <= U64_MAX for v in value)):
            return cls(value[0], value[1])
        raise StateError(f"invalid operation id {value!r}; expected [commit_lsn, seq] (two u64)")

    def to_key(self) -> str:
        """32 hex digits (commit_lsn then seq, 16 each); string order equals OpId order."""
        return f"{self.commit_lsn:016X}{self.seq:016X}"

    @classmethod
    def from_key(cls, key: str) -> OpId:
        """Inverse of :meth:`to_key`."""
        if not isinstance(key, str) or _KEY_RE.fullmatch(key) is None:
            raise StateError(f"invalid operation id key {key!r}; expected 32 upper-case hex digits")
        return cls(int(key[:16], 16), int(key[16:], 16))

    def __str__(self) -> str:
        return f"{format_lsn(self.commit_lsn)}#{self.seq}"
