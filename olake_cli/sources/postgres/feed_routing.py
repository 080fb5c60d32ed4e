"""Which stream each relation of a pgoutput change feed belongs to, and what its changes need from its
Relation message (columns, key flags), computed once per relation version."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from olake_cli.sources.postgres.feed_runs import ColumnInfo
from olake_cli.sources.postgres.pgoutput import Relation


@dataclass(frozen=True)
class FeedRouting:
    """What the feed needs to know about the streams it serves.

    ``roots`` maps a leaf partition (schema, table) to its root stream (changes of leaves are reported
    under the root, whatever ``publish_via_partition_root`` says); ``relations`` maps the oid of a captured
    table or partition to its stream and whether it is a partition: oids route first, so a change made
    under another name (renamed and back) still reaches its stream; ``keys`` gives each stream's primary
    key, so an update that changes it is reported as a delete of the old key followed by the update;
    ``find_root`` (following) places a relation neither oid nor name does: the stream of the captured
    table it is a partition of now (one created or attached since the routing was made), or None.
    """

    roots: dict[tuple[str, str], tuple[str, str]] = field(default_factory=dict)
    keys: dict[tuple[str, str], tuple[str, ...]] = field(default_factory=dict)
    skip_origins: frozenset[str] | str = frozenset()  # drop transactions replicated from these ("*": any)
    relations: dict[int, tuple[tuple[str, str], bool]] = field(default_factory=dict)
    find_root: Callable[[int], tuple[str, str] | None] | None = None

    def skips(self, origin: str) -> bool:
        """Whether a transaction carrying an Origin message with this name is left out."""
        return self.skip_origins == "*" or origin in self.skip_origins


class RelationView:
    """What events need from a Relation message, computed once per relation version."""

    __slots__ = ("namespace", "name", "partition", "names", "columns", "key_flags", "stream_key")

    def __init__(self, rel: Relation, routing: FeedRouting) -> None:
        known = routing.relations.get(rel.oid)
        if known is None:
            root = routing.roots.get((rel.namespace, rel.name))
            if root is None and routing.find_root is not None:
                root = routing.find_root(rel.oid)
            known = (root, True) if root is not None else ((rel.namespace, rel.name), False)
        (self.namespace, self.name), is_partition = known
        self.partition = f"{rel.namespace}.{rel.name}" if is_partition else None
        self.names = rel.column_names
        self.columns: list[ColumnInfo] = [(c.name, c.type_oid, c.typmod) for c in rel.columns]
        self.key_flags = tuple(c.is_key for c in rel.columns)
        self.stream_key = routing.keys.get((self.namespace, self.name), ())
