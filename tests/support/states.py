"""Stream states for tests, built from their on-disk keys (through the one conversion, ``from_dict``)."""

from __future__ import annotations

from typing import Any

from olake_cli.core.state import Chunk, StreamState


def stream_state(sync_type: str, name: str, namespace: str | None, cursor: Any = None,
                 chunks: list[Chunk] | None = None, **keys: Any) -> StreamState:
    """The stream state whose ``stream_state`` object holds ``cursor``, ``chunks`` and ``keys``."""
    inner: dict[str, Any] = {"cursor_field": cursor}
    if chunks is not None:
        inner["chunks"] = [c.to_dict() for c in chunks]
    inner.update(keys)
    return StreamState.from_dict({"sync_type": sync_type, "stream_name": name, "stream_namespace": namespace,
                                  "stream_state": inner})
