"""A value that cannot be carried (``BadValue``, raised at its index in a column) and the error that
names where it is (``value_error``: the stream, the column and the row's key)."""

from __future__ import annotations


class BadValue(ValueError):
    """A value (at ``index`` of its column) that cannot be carried; the caller names stream and row."""

    def __init__(self, index: int, detail: str) -> None:
        super().__init__(detail)
        self.index, self.detail = index, detail


def value_error(error_type: type, stream: str | None, column: str, key: dict | None,
                index: int | None, detail: str) -> Exception:
    """An ``error_type`` naming the stream, the column and the row's key (or its index)."""
    parts = [f"stream {stream!r}"] if stream else []
    parts.append(f"column {column!r}")
    if key:
        parts.append("row with key " + ", ".join(f"{k}={v!r}" for k, v in key.items()))
    elif index is not None:
        parts.append(f"row {index + 1} of the batch")
    return error_type(", ".join(parts) + f": {detail}")
