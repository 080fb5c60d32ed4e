"""The operation identifier (OpId) every change carries: two u64s, strictly increasing over a log.

``(commit, seq)``: the position of the change's transaction in its source's log (PostgreSQL: the
commit LSN; MongoDB: the cluster time as ``seconds << 32 | increment``) and the change's 1-based
position inside that transaction (seeds/000, 001). ``to_json()`` gives ``[commit, seq]`` as JSON
integers (orjson and Python keep u64 exact); ``to_key()`` gives 32 upper-case hex digits whose
*string* order equals the OpId order, for destinations that store the identifier in a column and
recover ``max()`` of it.
"""

from __future__ import annotations

import re
from typing import Any, NamedTuple

from olake_cli.core.errors import StateError

U64_MAX = (1 << 64) - 1
_KEY_RE = re.compile(r"[0-9A-F]{32}")


class OpId(NamedTuple):
    """Operation identifier of one change: (commit position of its transaction, 1-based sequence in it)."""

    commit: int
    seq: int

    def to_json(self) -> list[int]:
        """JSON form ``[commit, seq]`` (two exact integers)."""
        return [self.commit, self.seq]

    @classmethod
    def from_json(cls, value: Any) -> OpId:
        """Inverse of :meth:`to_json`; also accepts the :meth:`to_key` string form."""
        if isinstance(value, str):
            return cls.from_key(value)
        if (isinstance(value, (list, tuple)) and len(value) == 2
                and all(type(v) is int and 0 <= v <= U64_MAX for v in value)):
            return cls(value[0], value[1])
        raise StateError(f"invalid operation id {value!r}; expected [commit, seq] (two u64)")

    def to_key(self) -> str:
        """32 hex digits (commit then seq, 16 each); string order equals OpId order."""
        return f"{self.commit:016X}{self.seq:016X}"

    @classmethod
    def from_key(cls, key: str) -> OpId:
        """Inverse of :meth:`to_key`."""
        if not isinstance(key, str) or _KEY_RE.fullmatch(key) is None:
            raise StateError(f"invalid operation id key {key!r}; expected 32 upper-case hex digits")
        return cls(int(key[:16], 16), int(key[16:], 16))

    def __str__(self) -> str:
        return f"{self.commit:X}#{self.seq}"
