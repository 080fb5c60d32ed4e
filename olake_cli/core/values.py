"""Values with a meaning beyond SQL: shared by sources, the pipeline and the codecs."""

from __future__ import annotations


class _UnchangedToast:
    """Type of :data:`UNCHANGED_TOAST`; a singleton that survives pickling."""

    _instance: _UnchangedToast | None = None

    def __new__(cls) -> _UnchangedToast:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "UNCHANGED_TOAST"

    def __reduce__(self) -> str:
        return "UNCHANGED_TOAST"


UNCHANGED_TOAST = _UnchangedToast()
"""An unchanged TOASTed column of an UPDATE: the old value still holds, it was not sent."""
