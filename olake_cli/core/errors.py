"""A small tree of picklable exceptions; each knows its Airbyte ``failure_type``."""

from __future__ import annotations

import traceback
from collections.abc import Callable


class OlakeError(Exception):
    """Base of every error olake reports; ``failure_type`` (and ``internal_message``, technical detail
    for programs, not printed as text) go into the TRACE message."""

    failure_type = "system_error"
    internal_message: str | None = None
    stack_trace: str | None = None  # where another library's exception was raised (a task's, say)

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __reduce__(self):  # picklable across Spark executors, with what was set after construction
        return (type(self), (self.message,), self.__dict__)

    def __str__(self) -> str:
        return self.message


class ConfigError(OlakeError):
    """The user's input (config, catalog, state, arguments) is wrong; retrying will not help."""

    failure_type = "config_error"


class StateError(ConfigError):
    """The state file is unreadable or does not follow the state schema."""


class ProtocolError(ConfigError):
    """A line on stdin is not a valid protocol message."""


class CatalogError(ConfigError):
    """The catalog names an unknown stream or contradicts the source."""


class SourceError(OlakeError):
    """The source failed while being read."""


class DestinationError(OlakeError):
    """The destination failed while being written."""


class ConnectionFailed(ConfigError):
    """A server could not be reached or refused the credentials."""


class ServerUnreachable(ConnectionFailed):
    """A server did not answer or refused connections (down, restarting, a network cut): the config may be
    right, and trying again later may work."""

    failure_type = "transient_error"


class TransientError(OlakeError):
    """A failure that may go away on retry (network blip, serialization failure)."""

    failure_type = "transient_error"


class RunLockedError(OlakeError):
    """Another olake run holds the state file or the destination; this run would trample on it."""

    failure_type = "transient_error"


class SnapshotLostError(OlakeError):
    """The snapshot a full load reads under is gone (a server restart, a lost connection): retrying
    the chunk cannot help, a new run resumes the load."""

    failure_type = "transient_error"


class SourceChangedError(OlakeError):
    """A table or collection being loaded was (or is about to be) altered, rewritten, dropped or renamed
    by another session. The run stops at once (no further chunk starts, the snapshot is released),
    committed chunks are kept, and the next run resumes, restarts or refuses the stream's load."""

    failure_type = "transient_error"


class SchemaDrift(SourceError):
    """A chunk or change met values the stream's column types cannot hold; ``json_schema`` is the
    stream's schema widened to hold them (the read pipeline goes on with it, see core/schema_drift)."""

    def __init__(self, message: str, json_schema: dict) -> None:
        super().__init__(message)
        self.json_schema = json_schema

    def __reduce__(self):
        return (type(self), (self.message, self.json_schema))


class PositionLostError(ConfigError):
    """A change-log position is no longer available (dropped slot, rolled-over oplog)."""


class UpstreamError(OlakeError):
    """The program feeding ``write`` reported an error; keeps that error's failure type, and its message
    as the internal message (the reader has printed it already)."""

    def __init__(self, message: str, failure_type: str = "system_error", reader_message: str = "") -> None:
        super().__init__(message)
        self.failure_type = failure_type
        self.reader_message = reader_message
        self.internal_message = f"the reader's error: {reader_message}"

    def __reduce__(self):
        return (type(self), (self.message, self.failure_type, self.reader_message))


def from_library(where: str, exc: BaseException, scrub: Callable[[str], str] = str) -> SourceError:
    """A SourceError for another library's exception met at ``where`` (``where: Type: text``), carrying
    the stack where it was raised; ``scrub`` takes secrets out of both."""
    error = SourceError(scrub(f"{where}: {type(exc).__name__}: {exc}"))
    error.stack_trace = scrub("".join(traceback.format_exception(exc)))
    return error
