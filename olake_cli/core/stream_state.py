"""One stream's entry in the state file as a typed record, and its conversion to and from the file.

The on-disk form is the state controller's (seeds/002, ``schemas/state.schema.json``): ``stream_state``
holds ``cursor_field``, ``chunks`` and flat keys. ``StreamState`` gives every key olake itself reads
a typed field (what a load keeps through its full load, incremental passes or change capture) and
keeps the source's own keys apart in ``source``: positions and identities that only the source
module reads and writes (PostgreSQL's ``op_seq``, MongoDB's ``op_id``, DynamoDB's ``shards``, ...),
and any key another connector added. ``to_dict``/``from_dict`` are the one conversion, for every
``sync_type`` alike (the kinds differ only in which fields are set); a stream entry read from a file
and written back keeps its keys in the order it had, so the file keeps its bytes.
"""

from __future__ import annotations

import copy
from dataclasses import KW_ONLY, dataclass, field
from typing import Any

Bound = Any  # None | str | list[str | None]

# The keys of ``stream_state`` with a field of their own, in the order a new entry writes them.
TYPED_KEYS = ("chunk_column", "load_id", "sync_mode", "columns", "column_types", "schema_drift",
              "cursor_column", "load_op_key", "pass_op_id")
_POSITION_KEYS = ("cursor_field", "chunks")


@dataclass
class Chunk:
    """One full-load range: rows with ``min <= key < max`` (None: unbounded)."""

    status: str
    min: Bound
    max: Bound

    @property
    def bounds(self) -> tuple:
        """Hashable (min, max) identifying the chunk."""
        return (_hashable(self.min), _hashable(self.max))

    def to_dict(self) -> dict:
        """``{"status", "min", "max"}``."""
        return {"status": self.status, "min": copy.deepcopy(self.min), "max": copy.deepcopy(self.max)}

    @classmethod
    def from_dict(cls, obj: dict) -> Chunk:
        """Build from a validated chunk object."""
        return cls(obj["status"], copy.deepcopy(obj["min"]), copy.deepcopy(obj["max"]))


@dataclass
class StreamState:
    """The state of one stream; ``cursor_field`` is a POSITION (cursor value, LSN, resume token).

    None in a typed field means the key is absent from the file (no key of these is ever null).
    """

    sync_type: str
    stream_name: str
    stream_namespace: str | None
    cursor_field: Any = None
    chunks: list[Chunk] | None = None
    _: KW_ONLY
    # what the load keeps, from its start through its incremental passes or change capture
    chunk_column: str | list[str] | None = None  # what the chunk bounds refer to (the planner's)
    load_id: str | None = None  # the destination's files of this load
    sync_mode: str | None = None  # catalog sync mode, columns and types the load began with
    columns: list[str] | None = None
    column_types: dict[str, str | None] | None = None
    schema_drift: dict[str, Any] | None = None  # column -> {"from", "to"}: drift met while copying
    cursor_column: str | None = None  # incremental: the catalog cursor column
    load_op_key: str | None = None  # change capture: where the load's rows rank among the changes
    pass_op_id: list[int] | None = None  # incremental: the operation id of the last pass's rows
    source: dict[str, Any] = field(default_factory=dict)  # the source's own keys, opaque to the rest
    key_order: tuple[str, ...] = field(default=(), repr=False, compare=False)  # as read from a file

    @property
    def key(self) -> tuple[str | None, str]:
        """(namespace, name)."""
        return (self.stream_namespace, self.stream_name)

    @property
    def all_chunks_succeeded(self) -> bool:
        """True when chunks are present and every one succeeded."""
        return self.chunks is not None and all(c.status == "succeed" for c in self.chunks)

    def to_dict(self) -> dict:
        """The stream entry: ``chunks`` only while a full load runs; keys in the order the entry was
        read with, then new ones in seed order (typed keys, then the source's)."""
        inner: dict[str, Any] = {"cursor_field": copy.deepcopy(self.cursor_field)}
        if self.chunks is not None:
            inner["chunks"] = [c.to_dict() for c in self.chunks]
        for key in TYPED_KEYS:
            if getattr(self, key) is not None:
                inner[key] = copy.deepcopy(getattr(self, key))
        inner.update(copy.deepcopy(self.source))
        first = {key: inner[key] for key in self.key_order if key in inner}
        return {"sync_type": self.sync_type, "stream_name": self.stream_name,
                "stream_namespace": self.stream_namespace, "stream_state": {**first, **inner}}

    @classmethod
    def from_dict(cls, obj: dict) -> StreamState:
        """Build from a validated stream entry."""
        inner = obj["stream_state"]
        chunks = inner.get("chunks")
        return cls(
            sync_type=obj["sync_type"], stream_name=obj["stream_name"],
            stream_namespace=obj.get("stream_namespace"),
            cursor_field=copy.deepcopy(inner.get("cursor_field")),
            chunks=None if chunks is None else [Chunk.from_dict(c) for c in chunks],
            **{key: copy.deepcopy(inner[key]) for key in TYPED_KEYS if key in inner},
            source={k: copy.deepcopy(v) for k, v in inner.items() if k not in (*_POSITION_KEYS, *TYPED_KEYS)},
            key_order=tuple(inner),
        )

    def copy(self) -> StreamState:
        """A deep copy."""
        return StreamState.from_dict(self.to_dict())

    def filled_from(self, other: StreamState) -> StreamState:
        """A copy of this state with the load keys it lacks taken from ``other`` (whose keys come first)."""
        filled = self.copy()
        for key in TYPED_KEYS:
            if getattr(filled, key) is None:
                setattr(filled, key, copy.deepcopy(getattr(other, key)))
        filled.source = {**copy.deepcopy(other.source), **filled.source}
        filled.key_order = (*other.to_dict()["stream_state"], *filled.key_order)
        return filled

    def position_text(self, limit: int = 40) -> str | None:
        """The position as people read it (None when there is none), cut to ``limit`` characters."""
        if self.cursor_field is None:
            return None
        text = str(self.cursor_field)
        return text if len(text) <= limit else text[:limit - 3] + "..."


def _hashable(bound: Bound) -> Any:
    return tuple(bound) if isinstance(bound, list) else bound
